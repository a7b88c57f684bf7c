import Foundation
import FetchKitTesting
import Testing
// Not `@testable`: every payload below is built with its public initialiser, as an app's
// tests would build the error they expect.
import FetchKit

/// An error whose message ends with a full stop, as most system and library messages do.
private struct SentenceError: LocalizedError {
    let message: String
    var errorDescription: String? { message }
}

/// `FetchError` as a value: built, compared and matched from outside the module.
@Suite("FetchError values", .timeLimit(.minutes(3)))
struct ErrorValueTests {
    static let url = URL(string: "https://alice:hunter2@api.example.com/v1/items?sig=abc123")!
    static let otherURL = URL(string: "https://api.example.com/v2/items")!

    /// One error of every case, in the order of ``FetchError/Code/allCases``, each built from
    /// texts that end with a full stop.
    static func oneOfEach(url: URL? = url) -> [FetchError] {
        [
            .invalidRequest(.init(reason: .malformed("a header value has a line break."), url: url)),
            .cancelled(.init(url: url)),
            .timedOut(.init(kind: .idle, interval: 1.5, url: url)),
            .transport(URLError(.timedOut, userInfo: [NSLocalizedDescriptionKey: "The request timed out."])),
            .tls(.init(reason: .untrusted, message: "SSL certificate problem: self-signed certificate", url: url)),
            .unacceptableStatus(.init(statusCode: 503, headers: ["Retry-After": "1"], bodyPrefix: Data("Try later.".utf8), url: url)),
            .responseTooLarge(.init(limit: 10, expectedLength: 20, url: url)),
            .lengthMismatch(.init(expected: 10, received: 5, url: url)),
            .parseFailed(.init(underlying: .init(SentenceError(message: "Unexpected end of input.")), url: url)),
            .dependencyFailed(.init(dependency: "'token'", dependencyError: .init(SentenceError(message: "No token.")))),
            .fileSystem(.init(kind: .writeFailed, path: "/tmp/items.json", code: 5)),
            .redirectFailed(.init(kind: .loop, chain: [url ?? otherURL, otherURL, url ?? otherURL])),
            .invalidResponse(.init(reason: .conflictingContentLength("10, 20"), url: url)),
            .digestMismatch(.init(expected: FileDigest(.sha256, hex: String(repeating: "ab", count: 32)) ?? digest,
                                  actual: digest, byteCount: 10, url: url, path: "/tmp/items.json")),
            .authenticationFailed(.init(reason: .refused(statusCode: 401), generation: 2, url: url)),
            .streamOverflow(.init(limit: 1 << 20, url: url)),
        ]
    }

    /// The SHA-256 of the empty file.
    static let digest = FileDigest(.sha256, hex: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")!

    /// Every kind, reason and optional detail of every case, built from texts that end with a
    /// full stop.
    static func everyVariant() -> [FetchError] {
        let underlying = FetchError.UnderlyingError(SentenceError(message: "The token expired."))
        var errors: [FetchError] = []
        for url in [url, nil] as [URL?] {
            let reasons: [FetchError.InvalidRequest.Reason] = [
                .missing, .unsupportedScheme("ftp"), .unsupportedScheme(nil), .malformed("the method is not a token."),
                .preparationFailed(underlying), .startedBeforeReady, .sessionInvalidated, .alreadyEnqueued,
                .dependencyCycle("'login'"), .trustNotEnforceable("credentials cannot be answered here."),
            ]
            errors += reasons.map { .invalidRequest(.init(reason: $0, url: url)) }
            errors.append(.cancelled(.init(url: url)))
            errors += [FetchError.Timeout.Kind.idle, .total].map { .timedOut(.init(kind: $0, interval: 12, url: url)) }
            errors += [404, 418, 503, 599, 299].map {
                .unacceptableStatus(.init(statusCode: $0, headers: [:], bodyPrefix: Data("Not here.".utf8), url: url))
            }
            errors.append(.unacceptableStatus(.init(statusCode: 500, url: url)))
            errors += [20, nil].map { .responseTooLarge(.init(limit: 10, expectedLength: $0, url: url)) }
            errors.append(.lengthMismatch(.init(expected: 10, received: 5, url: url)))
            errors.append(.parseFailed(.init(underlying: underlying, url: url)))
            errors.append(.invalidResponse(.init(reason: .conflictingContentLength("10, 20"), url: url)))
            errors.append(.invalidResponse(.init(reason: .invalidContentLength("ten."), url: url)))
            errors.append(.invalidResponse(.init(reason: .unframedEncodedBody(coding: "gzip"), url: url)))
            let tlsReasons: [FetchError.TLSFailure.Reason] = [.untrusted, .hostNameMismatch, .expired, .notYetValid, .pinMismatch, .handshakeFailed]
            errors += tlsReasons.map { .tls(.init(reason: $0, message: "SSL certificate problem: self-signed certificate", url: url)) }
        }
        errors.append(.redirectFailed(.init(kind: .insecureRedirect, chain: [url, otherURL])))
        errors += [
            .transport(URLError(.timedOut, userInfo: [NSLocalizedDescriptionKey: "The request timed out."])),
            .transport(URLError(.cannotConnectToHost, userInfo: [
                NSLocalizedDescriptionKey: "Could not connect to the server.", NSURLErrorFailingURLErrorKey: url,
            ])),
            .transport(URLError(.networkConnectionLost, userInfo: [NSLocalizedDescriptionKey: "Recv failure: Connection reset by peer"])),
            .dependencyFailed(.init(dependency: "'token'", dependencyError: underlying)),
            .dependencyFailed(.init(dependency: "'token'", dependencyError: .init(FetchError.cancelled(.init(url: url))))),
            .dependencyFailed(.init(dependency: "'token'", dependencyError: nil)),
            .redirectFailed(.init(kind: .loop, chain: [url, otherURL, url])),
            .redirectFailed(.init(kind: .tooMany(5), chain: [url, otherURL])),
            .redirectFailed(.init(kind: .bodyNotReplayable(307), chain: [url, otherURL])),
        ]
        let kinds: [FetchError.FileFailure.Kind] = [.unwritableDestination, .diskFull, .writeFailed, .moveFailed, .destinationInUse, .unsafePath]
        for kind in kinds {
            errors += [nil, 28].map { .fileSystem(.init(kind: kind, path: "/tmp/items.json", code: $0)) }
        }
        return errors
    }

    // MARK: Equality and codes

    @Test func everyCaseEqualsAnEqualValueAndNoOtherCase() {
        let lhs = Self.oneOfEach()
        let rhs = Self.oneOfEach()
        for (i, left) in lhs.enumerated() {
            for (j, right) in rhs.enumerated() {
                #expect((left == right) == (i == j), "\(left.code) vs \(right.code)")
            }
        }
    }

    @Test func aDifferentDetailMakesADifferentError() {
        let url = Self.url
        let other = Self.otherURL
        let pairs: [(FetchError, FetchError)] = [
            (.invalidRequest(.init(reason: .missing, url: nil)), .invalidRequest(.init(reason: .startedBeforeReady, url: nil))),
            (.invalidRequest(.init(reason: .malformed("a"), url: url)), .invalidRequest(.init(reason: .malformed("a"), url: other))),
            (.cancelled(.init(url: url)), .cancelled(.init(url: other))),
            (.cancelled(.init(url: url)), .cancelled(.init(url: nil))),
            (.timedOut(.init(kind: .idle, interval: 1, url: url)), .timedOut(.init(kind: .total, interval: 1, url: url))),
            (.timedOut(.init(kind: .idle, interval: 1, url: url)), .timedOut(.init(kind: .idle, interval: 2, url: url))),
            (.transport(URLError(.timedOut)), .transport(URLError(.cannotConnectToHost))),
            (.unacceptableStatus(.init(statusCode: 404, url: url)), .unacceptableStatus(.init(statusCode: 410, url: url))),
            (.unacceptableStatus(.init(statusCode: 404, headers: ["A": "1"], url: url)), .unacceptableStatus(.init(statusCode: 404, url: url))),
            (.unacceptableStatus(.init(statusCode: 404, bodyPrefix: Data("x".utf8), url: url)), .unacceptableStatus(.init(statusCode: 404, url: url))),
            (.responseTooLarge(.init(limit: 1, expectedLength: nil, url: url)), .responseTooLarge(.init(limit: 1, expectedLength: 2, url: url))),
            (.lengthMismatch(.init(expected: 10, received: 5, url: url)), .lengthMismatch(.init(expected: 10, received: 6, url: url))),
            (.parseFailed(.init(underlying: .init(SentenceError(message: "a.")), url: url)),
             .parseFailed(.init(underlying: .init(SentenceError(message: "b.")), url: url))),
            (.dependencyFailed(.init(dependency: "'a'", dependencyError: nil)), .dependencyFailed(.init(dependency: "'b'", dependencyError: nil))),
            (.fileSystem(.init(kind: .diskFull, path: "/a", code: 28)), .fileSystem(.init(kind: .diskFull, path: "/a", code: nil))),
            (.redirectFailed(.init(kind: .tooMany(5), chain: [url])), .redirectFailed(.init(kind: .tooMany(6), chain: [url]))),
            (.invalidResponse(.init(reason: .invalidContentLength("x"), url: url)), .invalidResponse(.init(reason: .invalidContentLength("y"), url: url))),
        ]
        for (left, right) in pairs {
            #expect(left != right, "\(left) must differ from \(right)")
            #expect(left == left && right == right)
        }
    }

    @Test func codeNamesEveryCase() {
        #expect(Self.oneOfEach().map(\.code) == FetchError.Code.allCases)
        #expect(Set(FetchError.Code.allCases).count == 16)
        let error: FetchError = .cancelled(.init(url: Self.url))
        #expect(error.code == .cancelled)
        #expect(error.isCancellation)
        // The case still matches without its payload.
        if case .cancelled = error {} else { Issue.record("`if case .cancelled` must match") }
    }

    @Test func underlyingErrorsCompareByDomainCodeAndDescription() {
        typealias Underlying = FetchError.UnderlyingError
        #expect(Underlying(SentenceError(message: "a.")) == Underlying(SentenceError(message: "a.")))
        #expect(Underlying(SentenceError(message: "a.")) != Underlying(SentenceError(message: "b.")))
        #expect(Underlying(URLError(.timedOut)) == Underlying(URLError(.timedOut)))
        #expect(Underlying(URLError(.timedOut)) != Underlying(URLError(.cannotFindHost)))
        let nsError = NSError(domain: "Feed", code: 7, userInfo: [NSLocalizedDescriptionKey: "a."])
        #expect(Underlying(nsError) == Underlying(NSError(domain: "Feed", code: 7, userInfo: [NSLocalizedDescriptionKey: "a."])))
        #expect(Underlying(nsError) != Underlying(NSError(domain: "Feed", code: 8, userInfo: [NSLocalizedDescriptionKey: "a."])))
        #expect(Underlying(nsError) != Underlying(NSError(domain: "Other", code: 7, userInfo: [NSLocalizedDescriptionKey: "a."])))
        // Same text, another type: another domain.
        #expect(Underlying(SentenceError(message: "a.")) != Underlying(NSError(domain: "Feed", code: 7, userInfo: [NSLocalizedDescriptionKey: "a."])))
    }

    @Test func urlErrorsCompareAsURLErrorDoes() {
        let plain = URLError(.timedOut)
        let withURL = URLError(.timedOut, userInfo: [NSURLErrorFailingURLErrorKey: Self.url])
        #expect(FetchError.transport(plain) == .transport(URLError(.timedOut)))
        #expect((FetchError.transport(plain) == .transport(withURL)) == (plain == withURL))
    }

    // MARK: Public initialisers

    @Test func publicInitialisersKeepWhatTheyAreGiven() throws {
        let url = Self.url
        let request = FetchError.InvalidRequest(reason: .unsupportedScheme("ftp"), url: url)
        #expect(request.url == url)
        guard case .unsupportedScheme("ftp") = request.reason else { Issue.record("reason lost"); return }
        #expect(FetchError.Cancellation(url: url).url == url)
        let timeout = FetchError.Timeout(kind: .total, interval: 3, url: url)
        #expect(timeout.kind == .total && timeout.interval == 3 && timeout.url == url)
        let status = FetchError.StatusFailure(statusCode: 429, headers: ["Retry-After": "2"], bodyPrefix: Data("slow down".utf8), url: url)
        #expect(status.statusCode == 429 && status.headers == ["Retry-After": "2"] && status.bodyText == "slow down" && status.url == url)
        let long = FetchError.StatusFailure(statusCode: 500, bodyPrefix: Data(count: FetchError.StatusFailure.bodyPrefixLimit + 10), url: nil)
        #expect(long.bodyPrefix.count == FetchError.StatusFailure.bodyPrefixLimit, "the body prefix keeps its documented bound")
        let size = FetchError.SizeLimit(limit: 1, expectedLength: 2, url: url)
        #expect(size.limit == 1 && size.expectedLength == 2 && size.url == url)
        let length = FetchError.LengthMismatch(expected: 3, received: 2, url: url)
        #expect(length.expected == 3 && length.received == 2 && length.url == url)
        let parse = FetchError.ParseFailure(underlying: .init(SentenceError(message: "x.")), url: url)
        #expect((parse.underlying.error as? SentenceError)?.message == "x." && parse.url == url)
        let dependency = FetchError.DependencyFailure(dependency: "'a'", dependencyError: nil)
        #expect(dependency.dependency == "'a'" && dependency.dependencyWasCancelled)
        let failed = FetchError.DependencyFailure(dependency: "'a'", dependencyError: .init(FetchError.cancelled(.init(url: url))))
        #expect(failed.dependencyWasCancelled)
        let file = FetchError.FileFailure(kind: .diskFull, path: "/tmp/a", code: 28)
        #expect(file.kind == .diskFull && file.path == "/tmp/a" && file.code == 28)
        #expect(FetchError.FileFailure(kind: .moveFailed, path: "/tmp/a").code == nil)
        let redirect = FetchError.RedirectFailure(kind: .tooMany(3), chain: [url])
        #expect(redirect.kind == .tooMany(3) && redirect.chain == [url])
        let response = FetchError.InvalidResponse(reason: .unframedEncodedBody(coding: "br"), url: url)
        #expect(response.reason == .unframedEncodedBody(coding: "br") && response.url == url)
    }

    // MARK: Cancellation names its URL

    @Test func aCancelledFetchNamesItsURLWithThePasswordRedacted() async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.gatedRoute("/held", gate)
        var parts = try #require(URLComponents(url: server.url("/held?sig=s3cr3t-sig"), resolvingAgainstBaseURL: false))
        parts.user = "alice"
        parts.password = "hunter2"
        let url = try #require(parts.url)
        let operation = FetchOperation<Data>(url: url)
        // The Swift task awaiting the fetch is cancelled: the fetch is cancelled, and the call
        // throws FetchError.cancelled, never CancellationError.
        let waiting = Task { await outcome(of: operation) }
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 1 })
        waiting.cancel()
        let error = await waiting.value
        #expect(error == .cancelled(.init(url: url)))
        #expect(error?.code == .cancelled)
        let description = try #require(error?.description)
        #expect(description.contains("127.0.0.1"), "\(description)")
        #expect(description.contains("/held"), "\(description)")
        #expect(!description.contains("hunter2"), "\(description)")
        #expect(!description.contains("s3cr3t-sig"), "\(description)")
        #expect(description.contains("REDACTED"), "\(description)")
    }

    @Test func aTaskCancelledBeforeItAwaitsCancelsTheFetch() async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.gatedRoute("/held", gate)
        let url = server.url("/held")
        let operation = FetchOperation<Data>(url: url)
        let waiting = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await outcome(of: operation)
        }
        #expect(await waiting.value == .cancelled(.init(url: url)))
        #expect(operation.isCancelled)
    }

    @Test func aFetchCancelledBeforeItStartsNamesItsURL() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let url = server.url("/json")
        let operation = FetchOperation<Data>(url: url)
        operation.cancel()
        #expect(await outcome(of: operation) == .cancelled(.init(url: url)))
        #expect(server.counters.requestsReceived == 0)
    }

    // MARK: Messages

    @Test func noDescriptionDoublesItsPunctuation() {
        for error in Self.everyVariant() {
            let text = error.description
            for doubled in ["..", ".;", ". .", ".,", ".:", ". (", "?.", "!."] {
                #expect(!text.contains(doubled), "'\(doubled)' in: \(text)")
            }
            #expect(text.hasSuffix(".") || text.hasSuffix("…"), "not a sentence: \(text)")
            #expect(error.errorDescription == text)
        }
    }

    @Test func noDescriptionShowsThePasswordOfItsURL() {
        for error in Self.everyVariant() {
            #expect(!error.description.contains("hunter2"), "\(error.description)")
            #expect(!error.description.contains("abc123"), "\(error.description)")
        }
    }

    @Test func statusWithoutARegisteredReasonShowsNone() {
        let teapot = FetchError.StatusFailure(statusCode: 418, url: Self.otherURL)
        #expect(teapot.reasonPhrase == nil, "418 is (Unused) in the IANA registry (RFC 9110 §15.5.19)")
        #expect(teapot.description == "https://api.example.com/v2/items answered HTTP 418.")
        #expect(!FetchError.unacceptableStatus(teapot).description.contains("Client Error"))
        #expect(FetchError.StatusFailure(statusCode: 599, url: nil).reasonPhrase == nil)
        #expect(FetchError.StatusFailure(statusCode: 306, url: nil).reasonPhrase == nil)
        let expected: [Int: String] = [
            200: "OK", 304: "Not Modified", 404: "Not Found", 413: "Content Too Large", 421: "Misdirected Request",
            422: "Unprocessable Content", 425: "Too Early", 429: "Too Many Requests", 451: "Unavailable For Legal Reasons",
            503: "Service Unavailable", 511: "Network Authentication Required",
        ]
        for (code, phrase) in expected {
            #expect(FetchError.StatusFailure(statusCode: code, url: nil).reasonPhrase == phrase)
        }
        #expect(FetchError.StatusFailure(statusCode: 404, url: Self.otherURL).description
            == "https://api.example.com/v2/items answered HTTP 404 (Not Found).")
    }

    // MARK: User-Agent

    @Test func fetchKitIdentifiesItselfUnlessTheUserSaysOtherwise() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        #expect(await outcome(of: FetchOperation<Data>(url: server.url("/bytes/1?default"))) == nil)
        var request = URLRequest(url: server.url("/bytes/1?request"))
        request.setValue("Reader/2.1", forHTTPHeaderField: "User-Agent")
        #expect(await outcome(of: FetchOperation<Data>(request: request)) == nil)
        let configuration = FetchSession.defaultConfiguration()
        configuration.httpAdditionalHeaders = ["User-Agent": "Configured/1.0"]
        let session = FetchSession(configuration: configuration)
        defer { session.invalidate() }
        let configured = FetchOperation<Data>(url: server.url("/bytes/1?configuration"))
        configured.configuration.session = session
        #expect(await outcome(of: configured) == nil)

        let agents = Dictionary(server.requests("/bytes/1").map { ($0.path + "?" + $0.query.keys.sorted().joined(separator: "&"), $0.header("User-Agent")) }) { first, _ in first }
        #expect(agents["/bytes/1?default"] == FetchSession.defaultUserAgent)
        #expect(FetchSession.defaultUserAgent.hasPrefix("FetchKit/"))
        #expect(agents["/bytes/1?request"] == "Reader/2.1", "a request's own User-Agent wins")
        #expect(agents["/bytes/1?configuration"] == "Configured/1.0", "a configuration's User-Agent wins")
    }
}
