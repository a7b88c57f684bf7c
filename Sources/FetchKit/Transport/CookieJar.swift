import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
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
/// response head — a redirect's before it is followed, so that the next request carries them,
/// and a redirect status that is not followed when its task ends.
///
/// Where it differs from FoundationNetworking's path:
/// - Foundation joins the response's `Set-Cookie` lines into one value; the jar splits it again
///   before each `name=` that follows a comma, so that a cookie whose name is not a token
///   (`prefs[lang]=en`) is not read as part of the one before it.
/// - A cookie from a server at an IP address is kept only for that address (RFC 6265 §5.1.3:
///   an IP address domain-matches only itself), where `HTTPCookieStorage` would match a
///   `Domain=0.0.1` against every address ending so.
/// - A session whose configuration has a URL cache keeps FoundationNetworking's path: a
///   response answered from the cache reaches the delegate like any other, and must not set
///   its cookies again.
///
/// On Apple platforms URLSession's own handling is kept: the jar is off there.
struct CookieJar: Sendable {
    #if canImport(FoundationNetworking)
    /// Where cookies go, or `nil`: the configuration accepts none, or FoundationNetworking
    /// keeps storing them (a URL cache).
    private let storage: HTTPCookieStorage?
    #endif

    /// The jar for a session made from `configuration`. On Linux it turns FoundationNetworking's
    /// cookie parsing off in `configuration` (the session's own copy) and takes it over, if the
    /// configuration accepts cookies and has no URL cache.
    init(takingOverFrom configuration: URLSessionConfiguration) {
        #if canImport(FoundationNetworking)
        guard configuration.httpCookieAcceptPolicy != .never, configuration.urlCache == nil else {
            storage = nil
            return
        }
        storage = configuration.httpCookieStorage
        configuration.httpCookieAcceptPolicy = .never
        #endif
    }

    /// Stores the cookies that `response` sets, if any (on Linux; URLSession does elsewhere).
    func store(from response: HTTPURLResponse) {
        #if canImport(FoundationNetworking)
        guard let storage, let url = response.url, let host = url.host,
              let field = response.value(forHTTPHeaderField: "Set-Cookie")
        else { return }
        var cookies: [HTTPCookie] = []
        for line in Self.lines(of: field) {
            cookies += HTTPCookie.cookies(withResponseHeaderFields: ["Set-Cookie": line], for: url)
        }
        if Self.isIPAddress(host) {
            cookies.removeAll { $0.domain != host }
        }
        guard !cookies.isEmpty else { return }
        storage.setCookies(cookies, for: url, mainDocumentURL: nil)
        #endif
    }

    /// Stores the cookies of a task's last response if FoundationNetworking withheld its head
    /// from the delegate: a redirect status it did not follow (no `Location`). After a followed
    /// redirect the task's response is the last one, stored as it arrived.
    func storeFromWithheldHead(of task: URLSessionTask) {
        #if canImport(FoundationNetworking)
        guard storage != nil, let response = task.response as? HTTPURLResponse else { return }
        switch response.statusCode {
        case 301...303, 305...308: store(from: response)
        default: return
        }
        #endif
    }

    /// The `Set-Cookie` lines that Foundation joined with commas: split before each `name=`
    /// that follows a comma (a name holds no `;`, `,`, `=` or white space, so the comma in an
    /// `Expires` date, followed by a day number and a space, is not a split).
    static func lines(of field: String) -> [String] {
        let bytes = Array(field.utf8)
        func isNameByte(_ byte: UInt8) -> Bool {
            !(byte == UInt8(ascii: ";") || byte == UInt8(ascii: ",") || byte == UInt8(ascii: "=")
                || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t"))
        }
        var lines: [String] = []
        var start = 0
        var index = 0
        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: ",") else {
                index += 1
                continue
            }
            var name = index + 1
            while name < bytes.count, bytes[name] == UInt8(ascii: " ") || bytes[name] == UInt8(ascii: "\t") { name += 1 }
            var end = name
            while end < bytes.count, isNameByte(bytes[end]) { end += 1 }
            if end > name, end < bytes.count, bytes[end] == UInt8(ascii: "=") {
                lines.append(String(decoding: bytes[start..<index], as: UTF8.self))
                start = name
            }
            index += 1
        }
        lines.append(String(decoding: bytes[start...], as: UTF8.self))
        return lines
    }

    /// Whether `host` is an IPv4 or IPv6 address rather than a name.
    static func isIPAddress(_ host: String) -> Bool {
        var address = in6_addr()
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return inet_pton(AF_INET, bare, &address) == 1 || inet_pton(AF_INET6, bare, &address) == 1
    }
}
