import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite(.timeLimit(.minutes(3))) struct RedactionTests {
    @Test(arguments: [
        ("https://bob:hunter2@api.example.com/v1?page=2&access_token=abc#x", "https://bob:REDACTED@api.example.com/v1?page=2&access_token=REDACTED#x"),
        ("https://TOKEN@github.com/a.git", "https://REDACTED@github.com/a.git"),
        ("http://h/p#access_token=zz&state=1", "http://h/p#access_token=REDACTED&state=1"),
        ("http://h/p?X-Amz-Signature=1&x=2", "http://h/p?X-Amz-Signature=REDACTED&x=2"),
        ("http://h/p", "http://h/p"),
    ])
    func redactsSecrets(_ pair: (String, String)) {
        #expect(Redaction.redacted(pair.0) == pair.1)
    }

    /// The shapes a plain `&`-splitter and a first-`://` scheme finder get wrong.
    @Test(arguments: [
        // Percent-encoded and differently spelled names are the same name to a server.
        ("http://h/p?access%5Ftoken=S1&%74oken=S2", "http://h/p?access%5Ftoken=REDACTED&%74oken=REDACTED"),
        ("http://h/p?TOKEN=S1&Api-Key=S2&user%5Bpassword%5D=S3&page=2",
         "http://h/p?TOKEN=REDACTED&Api-Key=REDACTED&user%5Bpassword%5D=REDACTED&page=2"),
        ("http://h/p?session_token=S1&client-secret=S2", "http://h/p?session_token=REDACTED&client-secret=REDACTED"),
        // `;` separates pairs too, in the query and in path parameters.
        ("http://h/p?a=1;token=S1;b=2", "http://h/p?a=1;token=REDACTED;b=2"),
        ("http://h/shop;jsessionid=S1/cart?x=1", "http://h/shop;jsessionid=REDACTED/cart?x=1"),
        // IPv6 hosts, ports, `@` outside the authority.
        ("http://u:S1@[::1]:8080/p", "http://u:REDACTED@[::1]:8080/p"),
        ("http://[fe80::1%25eth0]/a@b/c?x=y@z#m@n", "http://[fe80::1%25eth0]/a@b/c?x=y@z#m@n"),
        ("http://h/p?email=a@b.example&token=S1", "http://h/p?email=a@b.example&token=REDACTED"),
        // `@` inside the userinfo, encoded or not; an empty password.
        ("http://u%40x:S1%40y@h/", "http://u%40x:REDACTED@h/"),
        ("http://u:S1@S2@h/", "http://u:REDACTED@h/"),
        ("http://u:@h/", "http://u:REDACTED@h/"),
        // No scheme: a network-path reference, a relative reference, user:password@host.
        ("//u:S1@h/p?token=S2", "//u:REDACTED@h/p?token=REDACTED"),
        ("/p?x=1&token=S1&next=https://h/", "/p?x=1&token=REDACTED&next=https://h/"),
        ("u:S1@h/p", "u:REDACTED@h/p"),
        ("h:8080/p?sig=S1", "h:8080/p?sig=REDACTED"),
        // A URL inside a query value, raw or encoded.
        ("http://h/login?next=https://u:S1@i/", "http://h/login?next=https://u:REDACTED@i/"),
        // An OAuth callback routed in the fragment.
        ("http://h/#/cb?access_token=S1&state=1", "http://h/#/cb?access_token=REDACTED&state=1"),
        // Names that only look like secrets stay.
        ("http://h/p?monkey=1&keys=2&tokens=3&sigma=4&keyboard=5&token", "http://h/p?monkey=1&keys=2&tokens=3&sigma=4&keyboard=5&token"),
    ])
    func hardenedShapes(_ pair: (String, String)) {
        #expect(Redaction.redacted(pair.0) == pair.1)
        #expect(Redaction.redacted(pair.1) == pair.1, "idempotent")
    }

    @Test func anEncodedURLInAQueryValueLosesItsSecrets() {
        let text = Redaction.redacted("http://h/login?next=https%3A%2F%2Fu%3AS1x%40i%2F%3Ftoken%3DS2x&page=2")
        #expect(!text.contains("S1x") && !text.contains("S2x"), "\(text)")
        #expect(text.hasPrefix("http://h/login?next=") && text.hasSuffix("&page=2"), "\(text)")
        #expect(Redaction.redacted(text) == text)
    }

    @Test func aURLIsShownByItsAbsoluteString() throws {
        // A relative URL's `description` is "p?token=… -- http://…"; its absoluteString is whole.
        let base = try #require(URL(string: "http://u:PW@h/a/"))
        let url = try #require(URL(string: "p?token=SEC", relativeTo: base))
        #expect(url.description != url.absoluteString)
        #expect(Redaction.redacted(url) == "http://u:REDACTED@h/a/p?token=REDACTED")
    }

    @Test func headerValues() {
        #expect(Redaction.redacted(headerValue: "Bearer abc", forName: "AUTHORIZATION") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "id=1", forName: "set-cookie") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "Basic xyz", forName: "Proxy-Authorization") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "k123", forName: "X-Api-Key") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "t123", forName: "x-auth-token") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "text/plain", forName: "Content-Type") == "text/plain")
        #expect(Redaction.redacted(headerValue: "13", forName: "Sec-WebSocket-Version") == "13")
        #expect(Redaction.redacted(headerValue: "https://h/next?token=S1", forName: "Location") == "https://h/next?token=REDACTED")
    }

    @Test func urlsInsideFreeText() throws {
        #expect(Redaction.redacted(text: "GET http://u:S1@h/p?token=S2. Then (https://h/?sig=S3), done")
                == "GET http://u:REDACTED@h/p?token=REDACTED. Then (https://h/?sig=REDACTED), done")
        // A message that shows the URL's secrets without the URL around them.
        let url = try #require(URL(string: "http://user:hunter22@h/p?access_token=tok%2Fen99"))
        let text = Redaction.redacted(text: "login user:hunter22 failed; token tok/en99 or tok%2Fen99 refused", mentioning: [url])
        #expect(!text.contains("hunter22") && !text.contains("tok/en99") && !text.contains("tok%2Fen99"), "\(text)")
        #expect(text.contains("login user:REDACTED failed"), "\(text)")
        #expect(Redaction.redacted(text: text, mentioning: [url]) == text)
        // Short values are not hunted in free text: they would wreck the message.
        let short = try #require(URL(string: "http://h/p?key=1"))
        #expect(Redaction.redacted(text: "1 of 1 failed", mentioning: [short]) == "1 of 1 failed")
    }

    @Test func aSecretThatStartsWithThePlaceholderIsStillRedacted() throws {
        let url = try #require(URL(string: "http://u:REDACTEDhunter2@h/p"))
        let text = Redaction.redacted(text: "login with REDACTEDhunter2 refused", mentioning: [url])
        #expect(!text.contains("hunter2"), "\(text)")
        #expect(Redaction.redacted(text: text, mentioning: [url]) == text)
    }
}

/// Every description FetchKit makes hides the URL's secrets and still names host and path;
/// the `url` properties keep the full URL.
@Suite("Redacted descriptions", .timeLimit(.minutes(3)))
struct RedactedDescriptionTests {
    static let secrets = ["hunter2secret", "tok3nsecret", "cookiesecret", "sig9secret"]
    static let url = URL(string: "https://bob:hunter2secret@api.example.com/v1/items?page=2&access_token=tok3nsecret")!
    static let next = URL(string: "https://api.example.com/v2/items?X-Amz-Signature=sig9secret")!

    private func expectRedacted(_ text: String, names path: String = "api.example.com/v1/items",
                                sourceLocation: SourceLocation = #_sourceLocation) {
        for secret in Self.secrets {
            #expect(!text.contains(secret), "\(secret) shown in: \(text)", sourceLocation: sourceLocation)
        }
        #expect(text.contains(path), "\(path) missing from: \(text)", sourceLocation: sourceLocation)
    }

    /// An error of the app's that shows the URL, and perhaps a secret of it on its own.
    private struct EchoingError: Error, CustomStringConvertible {
        var bare = true
        var description: String {
            "cannot parse the reply to \(RedactedDescriptionTests.url.absoluteString)" + (bare ? " (token tok3nsecret)" : "")
        }
    }

    static var errors: [FetchError] {
        let body = Data("<p>Unauthorized: \(url.absoluteString)\n Set-Cookie: sid=cookiesecret</p>".utf8)
        let transport = URLError(.cannotConnectToHost, userInfo: [
            NSURLErrorFailingURLErrorKey: url,
            "NSErrorFailingURLStringKey": url.absoluteString,
            NSLocalizedDescriptionKey: "Failed to connect to \(url.absoluteString) as bob:hunter2secret",
        ])
        return [
            .invalidRequest(.init(reason: .malformed("'GE T' is not a valid HTTP method"), url: url)),
            .invalidRequest(.init(reason: .preparationFailed(.init(EchoingError())), url: url)),
            .timedOut(.init(kind: .idle, interval: 1, url: url)),
            .transport(transport),
            .unacceptableStatus(.init(statusCode: 401, headers: ["Set-Cookie": "sid=cookiesecret"], bodyPrefix: body, url: url)),
            .responseTooLarge(.init(limit: 10, expectedLength: 20, url: url)),
            .lengthMismatch(.init(expected: 10, received: 5, url: url)),
            .parseFailed(.init(underlying: .init(EchoingError()), url: url)),
            .dependencyFailed(.init(dependency: "'login'", dependencyError: .init(FetchError.timedOut(.init(kind: .total, interval: 2, url: url))))),
            .dependencyFailed(.init(dependency: "'login'", dependencyError: .init(EchoingError(bare: false)))),
            .redirectFailed(.init(kind: .loop, chain: [url, next, url])),
        ]
    }

    @Test(arguments: 0..<11)
    func errorDescriptions(_ index: Int) {
        let error = Self.errors[index]
        expectRedacted(error.description)
        expectRedacted(error.localizedDescription)
        expectRedacted(String(describing: error))
        expectRedacted("\(error)")
    }

    @Test func redirectChainsShowEveryHop() {
        let text = FetchError.redirectFailed(.init(kind: .tooMany(1), chain: [Self.url, Self.next])).description
        expectRedacted(text, names: "api.example.com/v2/items?X-Amz-Signature=REDACTED")
        #expect(text.contains("https://bob:REDACTED@api.example.com/v1/items?page=2&access_token=REDACTED"))
    }

    @Test func payloadsKeepTheFullURL() {
        let status = FetchError.StatusFailure(statusCode: 401, headers: ["Set-Cookie": "sid=cookiesecret"], bodyPrefix: Data(), url: Self.url)
        #expect(status.url == Self.url)
        #expect(status.headers["Set-Cookie"] == "sid=cookiesecret")
        #expect(status.redactedHeaders["Set-Cookie"] == "REDACTED")
        #expect(FetchError.Timeout(kind: .idle, interval: 1, url: Self.url).url?.absoluteString.contains("hunter2secret") == true)
        #expect(FetchError.RedirectFailure(kind: .loop, chain: [Self.url]).chain == [Self.url])
        let operation = FetchOperation<Data>(url: Self.url)
        #expect(operation.request?.url == Self.url)
        expectRedacted(operation.description)
        expectRedacted(String(describing: operation))
    }

    /// The real thing: a 401 from a server, with the secrets in the URL FetchKit fetched.
    @Test func aFailedFetchOfASecretURLDescribesItWithoutTheSecrets() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/private/report") { request in
            TestResponse(status: 401, headers: ["Set-Cookie": "sid=cookiesecret"],
                         body: Data("denied for \(request.path)?\(request.query.map { "\($0.key)=\($0.value)" }.joined(separator: "&"))".utf8))
        }
        var components = try #require(URLComponents(url: server.url("/private/report?page=2&access_token=tok3nsecret"), resolvingAgainstBaseURL: false))
        components.user = "bob"
        components.password = "hunter2secret"
        let url = try #require(components.url)
        let operation = FetchOperation<Data>(url: url)
        await #expect(throws: FetchError.self) { try await operation.run() }
        let error = try #require(operation.error)
        #expect(error.statusCode == 401)
        expectRedacted(error.description, names: "127.0.0.1:\(server.baseURL.port ?? 0)/private/report")
        expectRedacted(error.localizedDescription, names: "/private/report")
        expectRedacted(operation.description, names: "/private/report")
        if case .unacceptableStatus(let failure) = error {
            #expect(failure.url?.absoluteString.contains("tok3nsecret") == true, "the payload keeps the full URL")
        }
    }

    /// A refused connection: the system's own message about the URL is redacted too.
    @Test func aTransportFailureOfASecretURL() async throws {
        let closed = try ClosedPort()
        let url = try #require(URL(string: "http://bob:hunter2secret@127.0.0.1:\(closed.port)/private/report?access_token=tok3nsecret"))
        let operation = FetchOperation<Data>(url: url)
        await #expect(throws: FetchError.self) { try await operation.run() }
        withExtendedLifetime(closed) {}
        let error = try #require(operation.error)
        #expect(error.urlError != nil)
        expectRedacted(error.description, names: "/private/report")
        expectRedacted(error.localizedDescription, names: "/private/report")
        #expect(error.urlError?.failingURL == url, "the URLError keeps the full URL")
    }
}

extension RedactionTests {
    @Test(arguments: [
        ("Set-Cookie: sid=abc; Path=/\nnext line", "Set-Cookie: REDACTED\nnext line"),
        (#"{"Authorization": "Bearer abc", "Accept": "*/*"}"#, #"{"Authorization": "REDACTED", "Accept": "*/*"}"#),
        ("cookie='a=b' and more", "cookie='REDACTED' and more"),
        ("X-Cookie-Policy: none; Cookies: many", "X-Cookie-Policy: none; Cookies: many"),
        ("the cookie jar", "the cookie jar"),
    ])
    func sensitiveHeadersWrittenInText(_ pair: (String, String)) {
        #expect(Redaction.redacted(text: pair.0) == pair.1)
        #expect(Redaction.redacted(text: pair.1) == pair.1)
    }
}

/// The example in the DocC article *Hostile input*, as written there.
@Suite("Hostile input article", .timeLimit(.minutes(3)))
struct HostileInputArticleTests {
    @Test func theRedactionExampleIsTrue() {
        let url = URL(string: "https://bob:hunter2@api.example.com/v1/items?page=2&api_key=abc123")
        #expect(url.map(Redaction.redacted) == "https://bob:REDACTED@api.example.com/v1/items?page=2&api_key=REDACTED")
    }
}
