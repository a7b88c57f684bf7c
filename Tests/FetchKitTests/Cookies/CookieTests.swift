import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// Cookies work as URLSession's do: a response's `Set-Cookie` goes into the session's cookie
/// storage (on Linux FetchKit stores them itself, see `CookieJar`), a redirect's included, and
/// later requests carry them.
@Suite("Cookies", .timeLimit(.minutes(3)))
struct CookieTests {
    /// A session with a cookie storage of its own, in memory.
    static func session(accepting policy: HTTPCookie.AcceptPolicy = .onlyFromMainDocumentDomain) -> (FetchSession, HTTPCookieStorage) {
        let configuration = FetchSession.defaultConfiguration()
        let storage = URLSessionConfiguration.ephemeral.httpCookieStorage ?? HTTPCookieStorage.shared
        configuration.httpCookieStorage = storage
        configuration.httpCookieAcceptPolicy = policy
        return (FetchSession(configuration: configuration), storage)
    }

    /// A route at `path` whose response has one `Set-Cookie` line per cookie.
    static func route(_ path: String, on server: TestServer, setting cookies: [String]) {
        // A TestResponse's header fields are a dictionary: the repeated `Set-Cookie` lines are
        // a hand-written answer.
        let head = "HTTP/1.1 200 OK\r\n" + cookies.map { "Set-Cookie: \($0)\r\n" }.joined() + "Content-Length: 2\r\n\r\n"
        server.route(path) { _ in .steps([.write(head + "ok")]) }
    }

    static func login(on server: TestServer) {
        route("/login", on: server, setting: ["sid=abc; Path=/", "theme=dark; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/"])
    }

    static func fetch(_ path: String, on server: TestServer, with session: FetchSession) async throws {
        try await fetch(URLRequest(url: server.url(path)), with: session)
    }

    static func fetch(_ request: URLRequest, with session: FetchSession) async throws {
        let operation = RecordingOperation(request: request)
        operation.configuration.session = session
        try await operation.run()
    }

    @Test func aResponsesCookiesAreStoredAndSentWithTheNextRequest() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        Self.login(on: server)
        let (session, storage) = Self.session()
        try await Self.fetch("/login", on: server, with: session)
        #expect(Set((storage.cookies ?? []).map(\.name)) == ["sid", "theme"], "both cookies, the one whose date has a comma too")
        try await Self.fetch("/headers", on: server, with: session)
        let cookie = server.requests("/headers").first?.header("Cookie") ?? ""
        #expect(cookie.contains("sid=abc") && cookie.contains("theme=dark"), "sent: \(cookie)")
    }

    @Test func aRedirectsCookiesAreStoredBeforeItIsFollowed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/sign-in") { _ in
            TestResponse(status: 302, headers: ["Location": "/headers", "Set-Cookie": "sid=xyz; Path=/"])
        }
        let (session, storage) = Self.session()
        try await Self.fetch("/sign-in", on: server, with: session)
        #expect(storage.cookies?.map(\.name) == ["sid"], "stored from the redirect's response")
        try await Self.fetch("/headers", on: server, with: session)
        // The redirected request carries it (`CookieSendingTests`), and so does the next task.
        #expect(server.requests("/headers").map { $0.header("Cookie") } == ["sid=xyz", "sid=xyz"])
    }

    @Test func aSetCookieFieldNamedInLowerCaseCounts() async throws {
        // Field names are case-insensitive (RFC 9110 §5.1); FoundationNetworking's own path
        // looked for "Set-Cookie" exactly.
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/lower") { _ in TestResponse(status: 200, headers: ["set-cookie": "lc=1; Path=/"], body: Data("ok".utf8)) }
        let (session, storage) = Self.session()
        try await Self.fetch("/lower", on: server, with: session)
        #expect(storage.cookies?.map(\.name) == ["lc"])
    }

    @Test func aSessionThatRefusesCookiesStoresNoneAndSaysSo() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        Self.login(on: server)
        let (session, storage) = Self.session(accepting: .never)
        try await Self.fetch("/login", on: server, with: session)
        try await Self.fetch("/headers", on: server, with: session)
        #expect(storage.cookies?.isEmpty ?? true)
        #expect(server.requests("/headers").first?.header("Cookie") == nil)
        #expect(session.configuration.httpCookieAcceptPolicy == .never)
    }

    @Test func theSessionsConfigurationSaysThePolicyItWasGiven() {
        let configuration = FetchSession.defaultConfiguration()
        configuration.httpCookieAcceptPolicy = .always
        let session = FetchSession(configuration: configuration)
        #expect(session.configuration.httpCookieAcceptPolicy == .always)
        #expect(configuration.httpCookieAcceptPolicy == .always, "the configuration given is not changed")
    }
}
