import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// Which stored cookies a request carries: those RFC 6265 §5.4 says, as URLSession sends them on
/// Apple platforms. (FoundationNetworking matches a stored cookie by host alone — a `Secure`
/// cookie went out over plain HTTP, a `Path=/admin` one to every path — and adds none to a
/// redirect's request; on Linux the session's ``CookieJar`` sends them instead.)
@Suite("Cookies sent", .timeLimit(.minutes(3)))
struct CookieSendingTests {
    /// A cookie as the storage would hold it after a response of `host` set it.
    static func cookie(_ name: String, _ value: String, domain: String = "127.0.0.1", path: String = "/",
                       secure: Bool = false, expires: Date? = nil) -> HTTPCookie {
        var properties: [HTTPCookiePropertyKey: Any] = [.name: name, .value: value, .domain: domain, .path: path]
        if secure { properties[.secure] = "TRUE" }
        if let expires { properties[.expires] = expires }
        guard let cookie = HTTPCookie(properties: properties) else {
            preconditionFailure("cookie properties")
        }
        return cookie
    }

    /// The `Cookie` header of each request the server received at `path`.
    static func sent(_ path: String, on server: TestServer) -> [String?] {
        server.requests(path).map { $0.header("Cookie") }
    }

    @Test func aSecureCookieIsNotSentOverPlainHTTP() async throws {
        // A session token the storage holds from an HTTPS login; a plain-HTTP URL of the same
        // host (a link, a redirect) must not carry it in the clear.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (session, storage) = CookieTests.session()
        storage.setCookie(Self.cookie("token", "s3cret", secure: true))
        storage.setCookie(Self.cookie("theme", "dark"))
        try await CookieTests.fetch("/headers", on: server, with: session)
        #expect(Self.sent("/headers", on: server) == ["theme=dark"])
    }

    @Test func aCookieGoesOnlyToItsPath() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/admin/panel") { _ in TestResponse(status: 200, body: Data("ok".utf8)) }
        server.route("/administrator") { _ in TestResponse(status: 200, body: Data("ok".utf8)) }
        let (session, storage) = CookieTests.session()
        storage.setCookie(Self.cookie("admin", "1", path: "/admin"))
        storage.setCookie(Self.cookie("all", "1"))
        try await CookieTests.fetch("/headers", on: server, with: session)
        try await CookieTests.fetch("/admin/panel", on: server, with: session)
        try await CookieTests.fetch("/administrator", on: server, with: session)
        #expect(Self.sent("/headers", on: server) == ["all=1"])
        #expect(Self.sent("/admin/panel", on: server) == ["admin=1; all=1"], "the longer path first (RFC 6265 §5.4)")
        #expect(Self.sent("/administrator", on: server) == ["all=1"], "/admin is not a path prefix of /administrator")
    }

    @Test func aRedirectedRequestCarriesTheCookiesItsResponseSet() async throws {
        // Log in, be redirected, and arrive signed in: the 302's cookie goes with the request
        // that follows it, as on Apple platforms.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/sign-in") { _ in
            TestResponse(status: 302, headers: ["Location": "/headers", "Set-Cookie": "sid=xyz; Path=/"])
        }
        let (session, _) = CookieTests.session()
        try await CookieTests.fetch("/sign-in", on: server, with: session)
        #expect(Self.sent("/headers", on: server) == ["sid=xyz"])
    }

    @Test func aRedirectWithinTheOriginDoesNotCarryCookiesOfThePathItLeft() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/admin/leave") { _ in TestResponse(status: 302, headers: ["Location": "/headers"]) }
        let (session, storage) = CookieTests.session()
        storage.setCookie(Self.cookie("admin", "1", path: "/admin"))
        try await CookieTests.fetch("/admin/leave", on: server, with: session)
        #expect(Self.sent("/admin/leave", on: server) == ["admin=1"])
        #expect(Self.sent("/headers", on: server) == [nil])
    }

    @Test func aRequestThatDoesNotHandleCookiesNeitherSendsNorStoresThem() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        CookieTests.login(on: server)
        let (session, storage) = CookieTests.session()
        storage.setCookie(Self.cookie("theme", "dark"))
        var request = URLRequest(url: server.url("/login"))
        request.httpShouldHandleCookies = false
        try await CookieTests.fetch(request, with: session)
        #expect(Self.sent("/login", on: server) == [nil])
        #expect(storage.cookies?.map(\.name) == ["theme"], "the response's cookies are not stored")
    }

    @Test func aCookieHeaderOfTheRequestStaysWhenNoStoredCookieApplies() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (session, _) = CookieTests.session()
        var request = URLRequest(url: server.url("/headers"))
        request.setValue("mine=1", forHTTPHeaderField: "Cookie")
        try await CookieTests.fetch(request, with: session)
        #expect(Self.sent("/headers", on: server) == ["mine=1"])
    }

    @Test func theMatchFollowsRFC6265() throws {
        let now = Date()
        let url = try #require(URL(string: "https://www.example.com/docs/page"))
        let cookies = [
            Self.cookie("hostOnly", "1", domain: "www.example.com"),
            Self.cookie("parentHostOnly", "0", domain: "example.com"),
            Self.cookie("domain", "1", domain: ".example.com"),
            Self.cookie("otherDomain", "0", domain: ".ample.com"),
            Self.cookie("docs", "1", domain: ".example.com", path: "/docs"),
            Self.cookie("docsSlash", "1", domain: ".example.com", path: "/docs/"),
            Self.cookie("doc", "0", domain: ".example.com", path: "/doc"),
            Self.cookie("secure", "1", domain: "www.example.com", secure: true),
            Self.cookie("expired", "0", domain: "www.example.com", expires: now.addingTimeInterval(-60)),
            Self.cookie("later", "1", domain: "www.example.com", expires: now.addingTimeInterval(3600)),
        ]
        let sent = CookieJar.matching(cookies, for: url, now: now).map(\.name)
        #expect(Set(sent) == ["hostOnly", "domain", "docs", "docsSlash", "secure", "later"])
        #expect(Array(sent.prefix(2)).sorted() == ["docs", "docsSlash"], "longer paths first")
        let plain = try #require(URL(string: "http://www.example.com/docs/page"))
        #expect(!CookieJar.matching(cookies, for: plain, now: now).map(\.name).contains("secure"))
        // An IP address domain-matches only itself (RFC 6265 §5.1.3).
        let address = try #require(URL(string: "http://10.0.0.1/"))
        let ipCookies = [Self.cookie("suffix", "0", domain: ".0.0.1"), Self.cookie("exact", "1", domain: "10.0.0.1")]
        #expect(CookieJar.matching(ipCookies, for: address, now: now).map(\.name) == ["exact"])
    }
}
