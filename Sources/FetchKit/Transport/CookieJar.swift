import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Stores the cookies that responses set, for a ``FetchSession``, in place of
/// FoundationNetworking's own path on Linux.
///
/// When a session's configuration accepts cookies, FoundationNetworking parses every header
/// line of every response for them: it makes the line a `String`, splits it, trims both halves
/// with Foundation character sets and hands the result to `HTTPCookie` — whether or not the line
/// is a `Set-Cookie`. That is about 230,000 instructions for a response of a few headers, a
/// quarter of the CPU of a whole 1 KiB request (`valgrind --tool=callgrind`, raw URLSession and
/// FetchKit alike). A session turns that path off in its `URLSession`'s copy of the
/// configuration (`httpCookieAcceptPolicy = .never`; sending cookies is a separate setting,
/// `httpShouldSetCookies`, and is left alone) and stores them here instead, only from a
/// response that has `Set-Cookie`: into the configuration's cookie storage, for the response's
/// URL, through the same `HTTPCookieStorage.setCookies(_:for:mainDocumentURL:)` call, from every
/// response head — a redirect's before it is followed, so that the next request carries them.
///
/// On Apple platforms URLSession's own handling is kept: the jar is off there.
struct CookieJar: Sendable {
    #if canImport(FoundationNetworking)
    /// Where cookies go, or `nil`: the configuration accepts none.
    private let storage: HTTPCookieStorage?
    #endif

    /// The jar for a session made from `configuration`. On Linux it turns FoundationNetworking's
    /// cookie parsing off in `configuration` (the session's own copy), and takes it over if the
    /// configuration accepts cookies.
    init(takingOverFrom configuration: URLSessionConfiguration) {
        #if canImport(FoundationNetworking)
        storage = configuration.httpCookieAcceptPolicy == .never ? nil : configuration.httpCookieStorage
        configuration.httpCookieAcceptPolicy = .never
        #endif
    }

    /// Stores the cookies that `response` sets, if any (on Linux; URLSession does elsewhere).
    func store(from response: HTTPURLResponse) {
        #if canImport(FoundationNetworking)
        guard let storage, let url = response.url,
              let field = response.value(forHTTPHeaderField: "Set-Cookie")
        else { return }
        let cookies = HTTPCookie.cookies(withResponseHeaderFields: ["Set-Cookie": field], for: url)
        guard !cookies.isEmpty else { return }
        storage.setCookies(cookies, for: url, mainDocumentURL: nil)
        #endif
    }
}
