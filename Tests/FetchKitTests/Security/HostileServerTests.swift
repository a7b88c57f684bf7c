import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Servers that lie about lengths, never stop, cut encoded bodies short or redirect bodies
/// away: every attack is staged for real on the loopback server, and each ends in a clear
/// error (or the right behaviour), never a crash or unbounded memory.
@Suite("Hostile servers", .timeLimit(.minutes(3)))
struct HostileServerTests {
    // MARK: Lying and endless lengths

    /// `Content-Length: 1 TiB`, a limit above it, and a few bytes: no reservation of the
    /// announced length (it trapped inside `Data.reserveCapacity`), only a length error.
    @Test(arguments: [Int64(1) << 40, Int64(64) << 30])
    func lyingHugeContentLengthIsNotPreallocated(_ announced: Int64) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/huge") { _ in
            .steps([
                .head(status: 200, headers: ["Content-Length": String(announced)]),
                .patternBytes(offset: 0, count: 100),
                .close,
            ])
        }
        let operation = server.operation("/huge")
        operation.configuration.maximumResponseSize = announced * 2
        let error = await outcome(of: operation)
        guard case .lengthMismatch(let mismatch)? = error else {
            Issue.record("expected a length mismatch, got \(String(describing: error))")
            return
        }
        #expect(mismatch.expected == announced)
        #expect(mismatch.received == 100)
    }

    private static let ok = HTTPURLResponse(url: URL(fileURLWithPath: "/"), statusCode: 200, httpVersion: nil, headerFields: nil)!

    @Test func memorySinkReservesABoundedAmountUpFront() throws {
        let sink = MemoryBodySink(limit: Int64(2) << 40)
        try sink.open(response: Self.ok, expectedLength: Int64(1) << 40)
        #expect(sink.capacity <= MemoryBodySink.upfrontReservation)
        let small = MemoryBodySink(limit: 1 << 20)
        try small.open(response: Self.ok, expectedLength: 1000)
        #expect(small.capacity == 1000, "a small truthful length is reserved exactly")
        let limited = MemoryBodySink(limit: 10_000)
        try limited.open(response: Self.ok, expectedLength: 1 << 20)
        #expect(limited.capacity <= 10_000, "never more than the limit")
    }

    /// Growing 16 KiB at a time up to the limit, the buffer never holds more than the limit
    /// (doubling 40 MiB would have reserved 80 MiB for a 64 MiB limit).
    @Test(arguments: [Int64(64) << 20, Int64(48) << 20, Int64(1) << 20 + 12_345])
    func growthNeverReservesPastTheLimit(_ limit: Int64) {
        var capacity = 0
        var count = 0
        var peak = 0
        let chunk = 16 << 10
        while Int64(count + chunk) <= limit {
            if count + chunk > capacity {
                capacity = MemoryBodySink.grownCapacity(current: capacity, needed: count + chunk, limit: Int(limit), expected: nil)
                #expect(capacity >= count + chunk)
            }
            count += chunk
            peak = max(peak, capacity)
        }
        #expect(peak <= Int(limit), "reserved \(peak) for a \(limit)-byte limit")
        #expect(peak >= count)
    }

    @Test func growthStopsAtATruthfulLength() {
        // 10 MiB announced and true: the last step grows to exactly 10 MiB, not 16.
        let expected = 10 << 20
        var capacity = MemoryBodySink.upfrontReservation
        while capacity < expected {
            capacity = MemoryBodySink.grownCapacity(current: capacity, needed: capacity + 1, limit: 512 << 20, expected: expected)
        }
        #expect(capacity == expected)
    }

    @Test func sinkKeepsItsCapacityWithinTheLimitForReal() throws {
        let limit = 3 << 20 + 777
        let sink = MemoryBodySink(limit: Int64(limit))
        try sink.open(response: Self.ok, expectedLength: nil)
        var written = 0
        let chunk = TestResponse.patternBytes(count: 16 << 10)
        while written + chunk.count <= limit {
            try sink.write(chunk)
            written += chunk.count
            #expect(sink.capacity <= limit)
        }
        let body = try #require(try sink.close().data)
        #expect(body.count == written)
        #expect(body.prefix(chunk.count) == chunk)
    }

    /// An endless chunked body ends with the too-large error at the limit.
    ///
    /// The body is paced (16 KiB a millisecond at most): an unpaced one floods the one serial
    /// queue on which FoundationNetworking does every transfer of the process, and, with no
    /// backpressure, the chunks waiting for FetchKit pile up faster than they are handled —
    /// which stalled the other tests of a parallel run for 30 s and more. `fetchkit-bench
    /// endless-body` measures the unpaced case in a process of its own.
    @Test func endlessChunkedBodyStopsAtTheLimit() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/endless") { _ in
            .slowBody(count: .max, chunkSize: 16 << 10, intervalMilliseconds: 1)
        }
        let operation = server.operation("/endless")
        operation.configuration.maximumResponseSize = 2 << 20
        let error = await outcome(of: operation)
        let limit = try #require(error?.sizeLimit, "expected too large, got \(String(describing: error))")
        #expect(limit.limit == 2 << 20)
        #expect(limit.expectedLength == nil)
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 0 }, "the server stops sending")
    }

    // MARK: Conflicting Content-Length

    private static func head(_ lines: [String]) -> Data {
        Data(("HTTP/1.1 200 OK\r\n" + lines.map { $0 + "\r\n" }.joined() + "\r\n").utf8)
    }

    @Test(arguments: [
        ["Content-Length: 10", "Content-Length: 20"],
        ["Content-Length: 10, 20"],
        ["Content-Length: 20", "Content-Length: 10"],
        ["Content-Length: 10, ten"],
    ])
    func conflictingContentLengthsAreAnError(_ lines: [String]) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/conflict") { _ in
            .steps([.write(Self.head(lines)), .patternBytes(offset: 0, count: 20), .close])
        }
        let operation = server.operation("/conflict")
        let error = await outcome(of: operation)
        guard case .invalidResponse(let failure)? = error else {
            Issue.record("\(lines): expected an invalid response, got \(String(describing: error))")
            return
        }
        switch failure.reason {
        case .conflictingContentLength, .invalidContentLength: break
        default: Issue.record("\(lines): \(failure)")
        }
        #expect(failure.description.contains("Content-Length"), "\(failure)")
        #expect(operation.attempts == 1, "the server would answer the same: not retried")
        #expect(operation.parses.current.isEmpty)
    }

    @Test func identicalContentLengthsAreAccepted() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/same") { _ in
            .steps([.write(Self.head(["Content-Length: 10", "Content-Length: 10"])), .patternBytes(offset: 0, count: 10), .close])
        }
        let operation = server.operation("/same")
        try await operation.run()
        #expect(operation.responseBody == TestResponse.patternBytes(count: 10))
    }

    /// libcurl itself refuses a `Content-Length` that does not start with a number: FetchKit
    /// says so as the invalid response it is.
    @Test func malformedContentLengthIsAnError() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/nan") { _ in
            .steps([.write(Self.head(["Content-Length: ten"])), .patternBytes(offset: 0, count: 10), .close])
        }
        let error = await outcome(of: server.operation("/nan"))
        guard case .invalidResponse(let failure)? = error, case .invalidContentLength = failure.reason else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(error?.description.contains("Content-Length") == true, "\(String(describing: error))")
    }

    @Test func contentLengthValuesAreReadStrictly() {
        #expect(ResponseFraming.parseContentLength("10") == .success(10))
        #expect(ResponseFraming.parseContentLength("10, 10") == .success(10))
        #expect(ResponseFraming.parseContentLength(" 0 ") == .success(0))
        #expect(ResponseFraming.parseContentLength("10, 20") == .failure(.conflictingContentLength("10, 20")))
        for bad in ["", "-1", "+5", "1e3", "10,", "0x10", "99999999999999999999", "10;20"] {
            #expect(ResponseFraming.parseContentLength(bad) == .failure(.invalidContentLength(bad)), "\(bad)")
        }
    }

    @Test func aPlainNumberIsReadAlikeOnTheFastPathAndAtItsEdges() {
        #expect(ResponseFraming.parseContentLength("999999999999999999") == .success(999_999_999_999_999_999))
        #expect(ResponseFraming.parseContentLength("9223372036854775807") == .success(Int64.max))
        #expect(ResponseFraming.parseContentLength("0000000000000000000001") == .success(1))
        for bad in ["9223372036854775808", "1 2", "١٢"] {
            #expect(ResponseFraming.parseContentLength(bad) == .failure(.invalidContentLength(bad)), "\(bad)")
        }
    }

    // MARK: Truncated encoded bodies

    private static func response(_ url: String, _ headers: [String: String], status: Int = 200) -> HTTPURLResponse {
        HTTPURLResponse(url: URL(string: url)!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!
    }

    private static func framingProblem(_ response: HTTPURLResponse, method: String = "GET") -> ResponseFraming.Problem? {
        if case .failure(let problem) = ResponseFraming.read(response, method: method) { return problem }
        return nil
    }

    @Test func unframedEncodingIsRecognisedFromTheHead() {
        let gzip = ["Content-Encoding": "gzip"]
        #expect(Self.framingProblem(Self.response("http://a.test/", gzip)) == .unframedEncodedBody(coding: "gzip"))
        #expect(Self.framingProblem(Self.response("http://a.test/", ["Content-Encoding": "identity"])) == nil)
        #expect(Self.framingProblem(Self.response("http://a.test/", ["Content-Encoding": "gzip", "Content-Length": "10"])) == nil)
        #expect(Self.framingProblem(Self.response("http://a.test/", ["Content-Encoding": "gzip", "Transfer-Encoding": "chunked"])) == nil)
        #expect(Self.framingProblem(Self.response("http://a.test/", ["Content-Encoding": "gzip", "Transfer-Encoding": "chunked, gzip"])) != nil)
        #expect(Self.framingProblem(Self.response("http://a.test/", gzip), method: "HEAD") == nil)
        #expect(Self.framingProblem(Self.response("http://a.test/", gzip, status: 204)) == nil)
        #expect(Self.framingProblem(Self.response("http://a.test/", gzip, status: 304)) == nil)
        // Over TLS the exchange may be HTTP/2, whose streams end explicitly; a field that only
        // HTTP/1.x can carry settles it.
        #expect(Self.framingProblem(Self.response("https://a.test/", gzip)) == nil)
        #expect(Self.framingProblem(Self.response("https://a.test/", ["Content-Encoding": "br", "Connection": "close"])) == .unframedEncodedBody(coding: "br"))
    }


    private static let text = Data(String(repeating: "a body worth compressing, ", count: 4_000).utf8)

    /// gzip with neither `Content-Length` nor chunked framing, cut in the middle: libcurl
    /// decodes it and reports success; FetchKit cannot tell complete from cut, and says so.
    @Test(arguments: [true, false])
    func closeDelimitedGzipIsAnError(truncated: Bool) async throws {
        let gzip = Gzip.compress(Self.text)
        let sent = truncated ? gzip.prefix(gzip.count / 2) : gzip
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/gz") { _ in
            .steps([
                .head(status: 200, headers: ["Content-Encoding": "gzip", "Connection": "close"]),
                .write(Data(sent)),
                .close,
            ])
        }
        let operation = server.operation("/gz")
        let error = await outcome(of: operation)
        guard case .invalidResponse(let failure)? = error else {
            Issue.record("expected an invalid response, got \(String(describing: error))")
            return
        }
        #expect(failure.reason == .unframedEncodedBody(coding: "gzip"))
        #expect(failure.description.contains("gzip-encoded body with neither Content-Length nor chunked framing"), "\(failure)")
        #expect(operation.attempts == 1)
        #expect(operation.parses.current.isEmpty)
    }

    @Test func gzipWithContentLengthIsDecoded() async throws {
        let gzip = Gzip.compress(Self.text)
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/gz") { _ in
            TestResponse(status: 200, headers: ["Content-Encoding": "gzip"], body: gzip)
        }
        let operation = server.operation("/gz")
        try await operation.run()
        #expect(operation.responseBody == Self.text)
        #expect(operation.response?.value(forHTTPHeaderField: "Content-Length") == String(gzip.count))
    }

    @Test func chunkedGzipIsDecoded() async throws {
        let gzip = Gzip.compress(Self.text)
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/gz") { _ in
            TestResponse(status: 200, headers: ["Content-Encoding": "gzip", "Transfer-Encoding": "chunked"], body: gzip)
        }
        let operation = server.operation("/gz")
        try await operation.run()
        #expect(operation.responseBody == Self.text)
        #expect(operation.response?.value(forHTTPHeaderField: "Transfer-Encoding")?.lowercased() == "chunked")
    }

    @Test func truncatedChunkedGzipIsAnError() async throws {
        let gzip = Gzip.compress(Self.text)
        let half = gzip.prefix(gzip.count / 2)
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/gz") { _ in
            var chunk = Data((String(half.count, radix: 16) + "\r\n").utf8)
            chunk.append(half)
            chunk.append(Data("\r\n".utf8))
            return .steps([
                .head(status: 200, headers: ["Content-Encoding": "gzip", "Transfer-Encoding": "chunked"]),
                .write(chunk),
                .close,
            ])
        }
        let error = await outcome(of: server.operation("/gz"))
        #expect(error != nil)
    }

    /// A close-delimited body without a content coding is what HTTP/1.0 allows: accepted.
    @Test func closeDelimitedIdentityBodyIsAccepted() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/plain") { _ in
            .steps([.head(status: 200, headers: ["Connection": "close"]), .patternBytes(offset: 0, count: 1000), .close])
        }
        let operation = server.operation("/plain")
        try await operation.run()
        #expect(operation.responseBody == TestResponse.patternBytes(count: 1000))
    }

    // MARK: Redirected bodies

    private func post(_ server: TestServer, status: Int, method: String = "POST", body: Data = Data("name=fetchkit".utf8)) -> RecordingOperation {
        let target = server.url("/echo").absoluteString
        var request = URLRequest(url: server.url("/redirect-to?status=\(status)&url=\(target.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? target)"))
        request.httpMethod = method
        request.httpBody = body
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        return RecordingOperation(request: request)
    }

    @Test(arguments: [307, 308])
    func temporaryAndPermanentRedirectsKeepMethodAndBody(_ status: Int) async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = post(server, status: status)
        try await operation.run()
        let echoed = server.requests("/echo")
        #expect(echoed.count == 1)
        #expect(echoed.first?.method == "POST")
        #expect(echoed.first?.body == Data("name=fetchkit".utf8))
        #expect(echoed.first?.header("Content-Type") == "application/x-www-form-urlencoded")
        #expect(operation.responseBody == Data("name=fetchkit".utf8))
        #expect(operation.response?.url?.path == "/echo")
    }

    @Test func putKeepsItsBodyThrough302() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = post(server, status: 302, method: "PUT")
        try await operation.run()
        let echoed = try #require(server.requests("/echo").first)
        #expect(echoed.method == "PUT")
        #expect(echoed.body == Data("name=fetchkit".utf8))
    }

    @Test(arguments: [301, 302, 303])
    func postBecomesGetWithoutBody(_ status: Int) async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = post(server, status: status)
        try await operation.run()
        let echoed = try #require(server.requests("/echo").first)
        #expect(echoed.method == "GET")
        #expect(echoed.body.isEmpty)
        #expect(echoed.header("Content-Type") == nil)
        #expect(echoed.header("Content-Length") == nil || echoed.header("Content-Length") == "0")
    }

    @Test func headStaysHeadThrough303() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let target = server.url("/json").absoluteString
        var request = URLRequest(url: server.url("/redirect-to?status=303&url=\(target.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? target)"))
        request.httpMethod = "HEAD"
        let operation = RecordingOperation(request: request)
        try await operation.run()
        #expect(server.requests("/json").first?.method == "HEAD")
    }

    @Test func streamBodyCannotFollowA307() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let target = server.url("/echo").absoluteString
        var request = URLRequest(url: server.url("/redirect-to?status=307&url=\(target.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? target)"))
        request.httpMethod = "POST"
        request.httpBodyStream = InputStream(data: Data("streamed".utf8))
        let operation = RecordingOperation(request: request)
        let error = await outcome(of: operation)
        guard case .redirectFailed(let failure)? = error else {
            Issue.record("expected a redirect failure, got \(String(describing: error))")
            return
        }
        #expect(failure.kind == .bodyNotReplayable(307))
        #expect(failure.description.contains("stream"))
        #expect(server.requests("/echo").isEmpty)
    }

    @Test func askedPolicySeesTheBodyItWillResend() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = post(server, status: 307)
        let proposed = Locked<[URLRequest]>([])
        operation.configuration.redirectPolicy = .ask { context in
            proposed.withLock { $0.append(context.proposedRequest) }
            return context.proposedRequest
        }
        try await operation.run()
        #expect(proposed.current.map(\.httpMethod) == ["POST"])
        #expect(proposed.current.map(\.httpBody) == [Data("name=fetchkit".utf8)])
        #expect(server.requests("/echo").first?.body == Data("name=fetchkit".utf8))
    }

    @Test func redirectChainKeepsTheBodyEachTime() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let echo = server.url("/echo").absoluteString
        let second = server.url("/redirect-to?status=308&url=\(echo.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? echo)").absoluteString
        var request = URLRequest(url: server.url("/redirect-to?status=307&url=\(second.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? second)"))
        request.httpMethod = "POST"
        request.httpBody = Data("twice".utf8)
        let operation = RecordingOperation(request: request)
        try await operation.run()
        #expect(server.requests("/redirect-to").map(\.body) == [Data("twice".utf8), Data("twice".utf8)])
        #expect(server.requests("/echo").first?.body == Data("twice".utf8))
        #expect(operation.responseBody == Data("twice".utf8))
    }
}
