import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// Attacks on the session's cookie sending (`CookieJar.sending`, the redirect path, shared
/// flights): a cookie must reach exactly the requests RFC 6265 §5.4 and URLSession on Apple
/// platforms send it with, and a caller's own `Cookie` header only its own origin.
@Suite("Cookies sent: each reaches exactly the requests RFC 6265 sends it with", .timeLimit(.minutes(3)))
struct CookieSendingAttackTests {
    /// Signals `begun` as each fetch starts (once it has a transfer, its own or a shared one).
    private struct StartSignal: FetchEventMonitor {
        let begun: Countdown
        func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) { begun.signal() }
    }

    @Test func aCallersCookieHeaderDoesNotComeBackAfterACrossOriginRedirect() async throws {
        // A → B → B: the caller's `Cookie` for A is dropped when the chain leaves A, and must
        // stay dropped on B's own redirect (a second port is a second origin).
        let a = try TestServer.standard()
        defer { a.shutDown() }
        let b = try TestServer.standard()
        defer { b.shutDown() }
        let hop = b.url("/hop").absoluteString
        a.route("/start") { _ in TestResponse(status: 302, headers: ["Location": hop]) }
        b.route("/hop") { _ in TestResponse(status: 302, headers: ["Location": "/headers"]) }
        let (session, _) = CookieTests.session()
        var request = URLRequest(url: a.url("/start"))
        request.setValue("token=for-a-only", forHTTPHeaderField: "Cookie")
        try await CookieTests.fetch(request, with: session)
        #expect(CookieSendingTests.sent("/start", on: a) == ["token=for-a-only"])
        #expect(CookieSendingTests.sent("/hop", on: b) == [nil])
        #expect(CookieSendingTests.sent("/headers", on: b) == [nil], "A's cookie must not reach B")
    }

    @Test func aRequestThatDoesNotHandleCookiesDoesNotShareAFlightWithOneThatDoes() async throws {
        // Two otherwise identical GETs: one carries the stored session cookie, the other asked
        // for none. Sharing one transfer would hand the second a signed-in response.
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("/me") { request in
            gate.wait(timeout: 120)
            return .text(request.header("Cookie") == nil ? "anonymous" : "signed in")
        }
        let (session, storage) = CookieTests.session()
        storage.setCookie(CookieSendingTests.cookie("sid", "s3cret"))
        let begun = Countdown(2)
        let queue = makeFetchQueue(coalesces: true, monitors: [StartSignal(begun: begun)])
        let signedIn = server.operation("/me")
        var anonymousRequest = URLRequest(url: server.url("/me"))
        anonymousRequest.httpShouldHandleCookies = false
        let anonymous = RecordingOperation(request: anonymousRequest)
        let completed = Countdown(2)
        for operation in [signedIn, anonymous] {
            operation.configuration.session = session
            queue.enqueue(operation, on: .global) { _ in completed.signal() }
        }
        #expect(await begun.wait())
        gate.open()
        #expect(await completed.wait())
        #expect(signedIn.parses.current == [Data("signed in".utf8)])
        #expect(anonymous.parses.current == [Data("anonymous".utf8)], "its own request, without the cookie")
        #expect(Set(CookieSendingTests.sent("/me", on: server)) == ["sid=s3cret", nil])
    }

    @Test func aCookieWhosePathEndsInASlashGoesToThatDirectory() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/docs/") { _ in .text("ok") }
        let (session, storage) = CookieTests.session()
        storage.setCookie(CookieSendingTests.cookie("docs", "1", path: "/docs/"))
        try await CookieTests.fetch("/docs/", on: server, with: session)
        #expect(CookieSendingTests.sent("/docs/", on: server) == ["docs=1"], "RFC 6265 §5.1.4: identical paths match")
    }

    @Test func aRedirectOfARequestThatDoesNotHandleCookiesNeitherSendsNorStoresThem() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/sign-in") { _ in
            TestResponse(status: 302, headers: ["Location": "/headers", "Set-Cookie": "sid=xyz; Path=/"])
        }
        let (session, storage) = CookieTests.session()
        storage.setCookie(CookieSendingTests.cookie("theme", "dark"))
        var request = URLRequest(url: server.url("/sign-in"))
        request.httpShouldHandleCookies = false
        try await CookieTests.fetch(request, with: session)
        #expect(CookieSendingTests.sent("/sign-in", on: server) == [nil])
        #expect(CookieSendingTests.sent("/headers", on: server) == [nil])
        #expect(storage.cookies?.map(\.name) == ["theme"])
    }

    @Test func aRedirectThatKeepsItsBodyCarriesTheCookiesItsResponseSet() async throws {
        // A 307 keeps the POST body, so the next request goes out in a new task
        // (`Transfer.resend`): it must carry the cookie the 307 set, as a followed one does.
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/post-login") { _ in
            TestResponse(status: 307, headers: ["Location": "/landing", "Set-Cookie": "sid=xyz; Path=/"])
        }
        server.route("/landing") { request in .text(String(decoding: request.body, as: UTF8.self)) }
        let (session, _) = CookieTests.session()
        var request = URLRequest(url: server.url("/post-login"))
        request.httpMethod = "POST"
        request.httpBody = Data("user=me".utf8)
        let operation = RecordingOperation(request: request)
        operation.configuration.session = session
        try await operation.run()
        #expect(operation.parses.current == [Data("user=me".utf8)])
        #expect(CookieSendingTests.sent("/landing", on: server) == ["sid=xyz"])
    }

    @Test func aRetriedAttemptCarriesTheCookiesTheFailedOneSet() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let attempts = Locked(0)
        server.route("/flaky") { _ in
            let attempt = attempts.withLock { count -> Int in
                count += 1
                return count
            }
            return attempt == 1
                ? TestResponse(status: 503, headers: ["Set-Cookie": "sid=xyz; Path=/"], body: Data("busy".utf8))
                : .text("ok")
        }
        let (session, _) = CookieTests.session()
        let operation = server.operation("/flaky")
        operation.configuration.session = session
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: 0, maximumDelay: 0, jitter: 0)
        try await operation.run()
        #expect(CookieSendingTests.sent("/flaky", on: server) == [nil, "sid=xyz"])
    }

    @Test func aCookieOfAnIPv6HostGoesBackToItOnly() throws {
        let url = try #require(URL(string: "http://[::1]:8080/"))
        let set = HTTPCookie.cookies(withResponseHeaderFields: ["Set-Cookie": "sid=1; Path=/"], for: url)
        #expect(set.count == 1)
        #expect(CookieJar.matching(set, for: url, now: Date()).map(\.name) == ["sid"])
        let other = try #require(URL(string: "http://[::2]:8080/"))
        #expect(CookieJar.matching(set, for: other, now: Date()).isEmpty)
    }

    @Test func aCookieSetWithoutAPathGoesOnlyToTheDirectoryOfItsResponse() async throws {
        // RFC 6265 §5.2.4 and §5.1.4: without a `Path`, a cookie's path is the directory of the
        // URL that set it (as on Apple platforms); `HTTPCookie` on Linux makes it `/`.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        CookieTests.route("/admin/login", on: server, setting: ["admin=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly; Secure", "odd=1; Path=relative", "plain=1"])
        server.route("/admin/panel") { _ in .text("ok") }
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/admin/login", on: server, with: session)
        let admin = try #require(storage.cookies?.first { $0.name == "admin" })
        #expect(admin.path == "/admin" && admin.isHTTPOnly && admin.isSecure && admin.expiresDate != nil, "its other attributes kept")
        try await CookieTests.fetch("/admin/panel", on: server, with: session)
        try await CookieTests.fetch("/headers", on: server, with: session)
        let panel = CookieSendingTests.sent("/admin/panel", on: server).map { $0.map { Set($0.components(separatedBy: "; ")) } }
        #expect(panel == [["plain=1", "odd=1"]], "the Secure one not over plain HTTP")
        #expect(CookieSendingTests.sent("/headers", on: server) == [nil], "outside /admin")
    }
}

extension CookieSendingAttackTests {
    @Test func aCookieDeletedByMaxAgeIsNotSentAgain() async throws {
        // A logout deletes its cookie with `Max-Age=0` (Django sends `expires` in 1970 too).
        // `HTTPCookie` on Linux reads `Max-Age` only for version-1 cookies and then ignores
        // `Expires`: the cookie lived on, with no expiry at all.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        CookieTests.route("/login", on: server, setting: ["sid=abc; Path=/", "csrf=xyz; Path=/", "keep=1; Path=/"])
        CookieTests.route("/logout", on: server, setting: [
            "sid=abc; Max-Age=0; Path=/",
            "csrf=\"\"; expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0; Path=/",
        ])
        CookieTests.route("/remember", on: server, setting: ["token=t; Max-Age=600; Path=/"])
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/login", on: server, with: session)
        try await CookieTests.fetch("/logout", on: server, with: session)
        try await CookieTests.fetch("/headers", on: server, with: session)
        #expect(CookieSendingTests.sent("/headers", on: server) == ["keep=1"])
        try await CookieTests.fetch("/remember", on: server, with: session)
        let token = try #require(storage.cookies?.first { $0.name == "token" })
        let expires = try #require(token.expiresDate, "Max-Age gives an expiry")
        #expect(abs(expires.timeIntervalSinceNow - 600) < 60)
    }
}

extension CookieSendingAttackTests {
    @Test func maxAgeIsReadAsRFC6265Says() {
        let now = Date(timeIntervalSince1970: 1_000_000_000)
        #expect(CookieJar.expiringByMaxAge("a=1; Path=/", now: now) == "a=1; Path=/")
        #expect(CookieJar.expiringByMaxAge("a=1; Max-Age=12abc", now: now) == "a=1; Max-Age=12abc", "not delta-seconds: ignored")
        #expect(CookieJar.expiringByMaxAge("a=1; max-age=-1; Path=/", now: now) == "a=1; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(CookieJar.expiringByMaxAge("a=1; Max-Age=60; Expires=Wed, 21 Oct 2037 07:28:00 GMT", now: now)
            == "a=1; Expires=Sun, 09 Sep 2001 01:47:40 GMT", "Max-Age wins")
        #expect(CookieJar.expiringByMaxAge("a=1; Max-Age=99999999999999999999", now: now)
            == "a=1; Expires=Mon, 14 Oct 2002 01:46:40 GMT", "cut to 400 days")
    }
}

extension CookieSendingAttackTests {
    /// What the jar stores from a response of `url` that sets `field`, in a storage of its own.
    /// No loopback server: the hosts are names. The task is never resumed.
    static func stored(from url: URL, setting field: String) throws -> [HTTPCookie] {
        let configuration = FetchSession.defaultConfiguration()
        let storage = URLSessionConfiguration.ephemeral.httpCookieStorage ?? HTTPCookieStorage.shared
        configuration.httpCookieStorage = storage
        configuration.httpCookieAcceptPolicy = .always
        let jar = CookieJar(takingOverFrom: configuration)
        let task = URLSession(configuration: .ephemeral).dataTask(with: url)
        let response = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Set-Cookie": field]))
        jar.store(from: response, of: task)
        return storage.cookies ?? []
    }

    @Test func aCookieForATopLevelDomainOrAnotherSiteIsRefused() throws {
        // RFC 6265 §5.3 steps 5 and 6: a `Domain` must domain-match the host that sets it, and a
        // top-level domain is a public suffix.
        let url = try #require(URL(string: "http://www.example.com/"))
        let kept = try Self.stored(from: url, setting: "tld=1; Domain=com; Path=/, other=1; Domain=bank.example.net; Path=/, "
            + "parent=1; Domain=example.com; Path=/, own=1; Path=/")
        #expect(Set(kept.map(\.name)) == ["parent", "own"])
    }

    @Test(.disabled("needs the public suffix list (RFC 6265 §5.3 step 5), which FetchKit does not carry: a Domain=co.uk cookie from www.example.co.uk is stored as .co.uk and sent to every .co.uk host"))
    func aCookieForAPublicSuffixIsRefused() throws {
        // No loopback server: the hosts are names. The task is never resumed.
        let configuration = FetchSession.defaultConfiguration()
        let storage = URLSessionConfiguration.ephemeral.httpCookieStorage ?? HTTPCookieStorage.shared
        configuration.httpCookieStorage = storage
        configuration.httpCookieAcceptPolicy = .always
        let jar = CookieJar(takingOverFrom: configuration)
        let url = try #require(URL(string: "http://www.example.co.uk/"))
        let task = URLSession(configuration: .ephemeral).dataTask(with: url)
        let response = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: [
            "Set-Cookie": "wide=1; Domain=co.uk; Path=/, tld=1; Domain=uk; Path=/",
        ]))
        jar.store(from: response, of: task)
        let other = try #require(URL(string: "http://bank.co.uk/"))
        #expect(CookieJar.matching(storage.cookies ?? [], for: other, now: Date()).isEmpty)
    }
}
