import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// The session's own cookie storing on Linux (`CookieJar`) where FoundationNetworking's
/// header-line path differs or falls short: statuses it withholds, cached responses, joined
/// lines, servers at IP addresses, and the session's configuration.
@Suite("Cookies: edge cases", .timeLimit(.minutes(3)))
struct CookieEdgeTests {
    @Test func joinedSetCookieLinesAreSplitBeforeEachNameNotInADate() {
        #expect(CookieJar.lines(of: "a=1; Path=/") == ["a=1; Path=/"])
        #expect(CookieJar.lines(of: "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/, b=2")
            == ["a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/", "b=2"])
        #expect(CookieJar.lines(of: "sid=abc; Path=/, prefs[lang]=en; Path=/") == ["sid=abc; Path=/", "prefs[lang]=en; Path=/"])
        #expect(CookieJar.lines(of: "a=x,y, b=2") == ["a=x,y", "b=2"], "a comma without a name after it stays")
    }

    @Test func ipAddressesAreToldFromNames() {
        for address in ["127.0.0.1", "10.0.0.1", "::1", "[::1]", "fe80::1"] { #expect(CookieJar.isIPAddress(address), "\(address)") }
        for name in ["localhost", "example.com", "0.0.1.example", "1"] { #expect(!CookieJar.isIPAddress(name), "\(name)") }
    }

    @Test func aRedirectStatusWithoutLocationStillHasItsCookiesStored() async throws {
        // FoundationNetworking delivers neither didReceive response nor a redirect for a
        // 301/302/303/305–308 it does not follow (no Location): the jar stores its cookies when
        // the task ends, as FoundationNetworking's own path stored them from the header lines.
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/nowhere") { _ in
            TestResponse(status: 302, headers: ["Set-Cookie": "sid=nl; Path=/"], body: Data("moved".utf8))
        }
        let (session, storage) = CookieTests.session()
        let operation = server.operation("/nowhere")
        operation.configuration.session = session
        operation.configuration.retryPolicy = .none
        _ = try? await operation.run()
        #expect(storage.cookies?.map(\.name) == ["sid"])
    }

    @Test func aResponseServedFromTheCacheDoesNotSetItsCookiesAgain() async throws {
        // FetchKit caches nothing itself, but a caller's URLCache may hold a response that
        // another URLSession stored (URLCache.shared, a disk cache). FoundationNetworking answers
        // a fresh cached response without libcurl, so its own path never re-reads the cached
        // Set-Cookie; a jar would see the cached response in didReceive response and store its
        // cookies again, rolling back a cookie the server has since replaced. A session with a
        // URL cache keeps FoundationNetworking's path.
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/rotate") { _ in
            TestResponse(status: 200, headers: ["Set-Cookie": "sid=new; Path=/"], body: Data("ok".utf8))
        }
        let cache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, diskPath: nil)
        let page = URLRequest(url: server.url("/page"))
        let cached = try #require(HTTPURLResponse(url: server.url("/page"), statusCode: 200, httpVersion: "HTTP/1.1", headerFields: [
            "Cache-Control": "max-age=600", "Set-Cookie": "sid=old; Path=/", "Content-Length": "4",
        ]))
        cache.storeCachedResponse(CachedURLResponse(response: cached, data: Data("page".utf8)), for: page)
        let configuration = FetchSession.defaultConfiguration()
        let storage = URLSessionConfiguration.ephemeral.httpCookieStorage ?? HTTPCookieStorage.shared
        configuration.httpCookieStorage = storage
        configuration.httpCookieAcceptPolicy = .onlyFromMainDocumentDomain
        configuration.urlCache = cache
        configuration.requestCachePolicy = .useProtocolCachePolicy
        let session = FetchSession(configuration: configuration)
        try await CookieTests.fetch("/rotate", on: server, with: session)
        try await CookieTests.fetch("/page", on: server, with: session)
        #expect(server.requests("/page").isEmpty, "/page came from the cache")
        #expect(storage.cookies?.map(\.value) == ["new"])
    }

    @Test func aCookieWhoseNameIsNoTokenDoesNotSpillIntoTheOneBefore() async throws {
        // Foundation joins the Set-Cookie lines with ", ", and HTTPCookie splits there only
        // before `token=`. A name such as PHP's `prefs[lang]` is no token: unsplit, that line
        // would become attributes of the line before, and `prefs[lang]` would be lost. The jar
        // splits the lines again itself.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        CookieTests.route("/php", on: server, setting: ["sid=abc; Path=/", "prefs[lang]=en; Path=/"])
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/php", on: server, with: session)
        let stored = (storage.cookies ?? []).map { "\($0.name)=\($0.value) path \($0.path)" }.sorted()
        #expect(stored == ["prefs[lang]=en path /", "sid=abc path /"])
        try await CookieTests.fetch("/headers", on: server, with: session)
        let cookie = server.requests("/headers").first?.header("Cookie") ?? ""
        #expect(cookie.contains("sid=abc"), "sent: \(cookie)")
    }

    @Test func aServerAtAnIPAddressCannotSetACookieForOtherAddresses() async throws {
        // RFC 6265 §5.1.3: an IP address domain-matches only itself. HTTPCookie makes
        // `Domain=0.0.1` ".0.0.1", and HTTPCookieStorage's check (a suffix match) would let it in
        // from 127.0.0.1 and hand it out for 10.0.0.1, 192.168.0.1 and so on, as
        // FoundationNetworking's own path did. The jar keeps it for 127.0.0.1 only.
        let server = try TestServer()
        defer { server.shutDown() }
        CookieTests.route("/plant", on: server, setting: ["planted=1; Domain=0.0.1; Path=/", "wide=1; Domain=1; Path=/"])
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/plant", on: server, with: session)
        for other in ["http://10.0.0.1/", "http://192.168.0.1/admin"] {
            let url = try #require(URL(string: other))
            #expect(storage.cookies(for: url)?.map(\.name) ?? [] == [], "sent to \(other)")
        }
    }

    @Test func theSessionsConfigurationIsACopy() {
        // Documented as "A copy of the session's configuration"; corelibs'
        // `URLSession.configuration` is one stored object that every read returns, so the
        // session hands out a copy of its own.
        let configuration = FetchSession.defaultConfiguration()
        configuration.httpCookieAcceptPolicy = .always
        let session = FetchSession(configuration: configuration)
        let first = session.configuration
        let second = session.configuration
        #expect(first !== second, "each read is a copy of its own")
        first.timeoutIntervalForRequest = 1
        #expect(session.configuration.timeoutIntervalForRequest != 1)
    }

    @Test func aLaterReadOfTheSessionsConfigurationLeavesAnEarlierOneAlone() {
        // A getter that wrote the given policy back into corelibs' one stored configuration
        // object would undo a caller's edit to what it got at the next read anywhere.
        let configuration = FetchSession.defaultConfiguration()
        configuration.httpCookieAcceptPolicy = .always
        let session = FetchSession(configuration: configuration)
        let mine = session.configuration
        mine.httpCookieAcceptPolicy = .never
        _ = session.configuration
        #expect(mine.httpCookieAcceptPolicy == .never, "a read elsewhere rewrote it")
    }
}
