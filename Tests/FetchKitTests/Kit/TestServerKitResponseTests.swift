import FetchKit
import FetchKitTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// A plain session's answer (status, header fields, body) to `request`: what a server sent,
/// with no FetchKit policy between.
private func exchange(_ request: URLRequest) async throws -> (status: Int, headers: [String: String], body: Data) {
    let session = URLSession(configuration: .ephemeral)
    defer { session.finishTasksAndInvalidate() }
    let (body, response) = try await session.data(for: request)
    let http = try #require(response as? HTTPURLResponse)
    var headers: [String: String] = [:]
    for (name, value) in http.allHeaderFields {
        if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
    }
    return (http.statusCode, headers, body)
}

private func request(_ url: URL, method: String = "GET", _ fields: [String: String] = [:]) -> URLRequest {
    var request = URLRequest(url: url)
    request.httpMethod = method
    for (name, value) in fields { request.setValue(value, forHTTPHeaderField: name) }
    return request
}

/// The peak resident set of this process (`VmHWM` of /proc/self/status), in bytes; 0 where it
/// cannot be read.
private func peakResidentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
          let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else { return 0 }
    return kilobytes << 10
}

/// FetchKitTesting's byte ranges, HEAD, and the gzip bomb and reset-before-head faults, over
/// loopback.
@Suite("FetchKitTesting: ranges, HEAD and the new faults", .timeLimit(.minutes(1)))
struct TestServerKitResponseTests {
    static let file = TestResponse.patternBytes(count: 1000)
    static let modified = Date(timeIntervalSince1970: 1_780_000_000)   // Thu, 28 May 2026 20:26:40 GMT

    private func rangedServer() throws -> TestServer {
        let server = try TestServer()
        server.route("GET", "/file") { request in
            .ranged(Self.file, for: request, etag: #""v1""#, lastModified: Self.modified)
        }
        return server
    }

    @Test func aRangedAnswerIsWholeWithoutARangeAndPartialWithOne() async throws {
        let server = try rangedServer()
        defer { server.shutDown() }
        let whole = try await exchange(request(server.url("/file")))
        #expect(whole.status == 200 && whole.body == Self.file)
        #expect(whole.headers["accept-ranges"] == "bytes" && whole.headers["etag"] == #""v1""#)
        #expect(whole.headers["last-modified"] == "Thu, 28 May 2026 20:26:40 GMT")
        #expect(whole.headers["content-range"] == nil)

        let part = try await exchange(request(server.url("/file"), ["Range": "bytes=100-199"]))
        #expect(part.status == 206 && part.body == Self.file[100..<200])
        #expect(part.headers["content-range"] == "bytes 100-199/1000" && part.headers["content-length"] == "100")

        let open = try await exchange(request(server.url("/file"), ["Range": "bytes=900-"]))
        #expect(open.status == 206 && open.body == Self.file[900...] && open.headers["content-range"] == "bytes 900-999/1000")

        let suffix = try await exchange(request(server.url("/file"), ["Range": "bytes=-50"]))
        #expect(suffix.status == 206 && suffix.body == Self.file[950...] && suffix.headers["content-range"] == "bytes 950-999/1000")

        // Past the end: nothing to send, and the length to ask within.
        let past = try await exchange(request(server.url("/file"), ["Range": "bytes=1000-"]))
        #expect(past.status == 416 && past.body.isEmpty && past.headers["content-range"] == "bytes */1000")

        // Through FetchKit, as the article's example asks for the rest.
        let rest = try await FetchQueue().fetch(DataFetchOperation(request: request(server.url("/file"), ["Range": "bytes=600-"])))
        #expect(rest == Self.file.suffix(400))

        // Several ranges, or nonsense: a server may send it whole, and this one does.
        let multi = try await exchange(request(server.url("/file"), ["Range": "bytes=0-1,5-6"]))
        #expect(multi.status == 200 && multi.body == Self.file)
    }

    @Test func ifRangeAppliesTheRangeOnlyWhileTheValidatorMatches() async throws {
        let server = try rangedServer()
        defer { server.shutDown() }
        let range = "bytes=500-"
        for (validator, partial) in [(#""v1""#, true), (#""v0""#, false), (#"W/"v1""#, false),
                                     ("Thu, 28 May 2026 20:26:40 GMT", true), ("Thu, 28 May 2026 20:26:41 GMT", false)] {
            let answer = try await exchange(request(server.url("/file"), ["Range": range, "If-Range": validator]))
            #expect(answer.status == (partial ? 206 : 200), "If-Range: \(validator)")
            #expect(answer.body == (partial ? Self.file[500...] : Self.file[...]), "If-Range: \(validator)")
        }
    }

    /// HEAD gets the GET route's head and no body, whatever the route; Range is GET's alone.
    @Test func headIsAnsweredByTheGetRouteWithTheHeadOnly() async throws {
        let server = try rangedServer()
        server.route("GET", "/users/:id") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
        let file = try await exchange(request(server.url("/file"), method: "HEAD", ["Range": "bytes=0-9"]))
        #expect(file.status == 200 && file.body.isEmpty)
        #expect(file.headers["content-length"] == "1000" && file.headers["etag"] == #""v1""#)
        let user = try await exchange(request(server.url("/users/1"), method: "HEAD"))
        #expect(user.status == 200 && user.body.isEmpty)
        #expect(user.headers["content-type"] == "application/json" && user.headers["content-length"] == "24")
        #expect(server.requests.map(\.method) == ["HEAD", "HEAD"])
        #expect(server.requests.last?.parameters == ["id": "1"])

        // A HEAD route of its own wins over the GET route.
        server.route("HEAD", "/users/:id") { _ in .status(204) }
        #expect(try await exchange(request(server.url("/users/1"), method: "HEAD")).status == 204)
        // Another method does not fall to GET: it is unmatched.
        let delete = try await exchange(request(server.url("/users/1"), method: "DELETE"))
        #expect(delete.status == 500)
        withKnownIssue("the DELETE is reported as unmatched") { server.shutDown() }
    }

    /// Without a limit the bomb is what it says: valid gzip (libcurl's zlib checks the CRC and
    /// the length of the trailer) of zeros, sent as a small body.
    @Test func aGzipBombIsValidGzipOfZerosInAThousandthOfTheSize() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        for size in [0, 1, 258, 259, 1000, 4 << 20] {
            server.route("GET", "/bomb/\(size)") { _ in .gzipBomb(inflatedSize: size) }
        }
        for size in [0, 1, 258, 259, 1000, 4 << 20] {
            let body = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/bomb/\(size)")))
            #expect(body == Data(count: size), "inflated \(body.count) bytes of \(size)")
        }
        let raw = try await exchange(request(server.url("/bomb/\(4 << 20)")))
        #expect(raw.headers["content-encoding"] == "gzip")
        let compressed = try #require(raw.headers["content-length"].flatMap { Int($0) })
        #expect(compressed < (4 << 20) / 1000 + 100, "\(compressed) bytes on the wire")
    }

    /// A 1 GiB bomb in about 1 MiB, against a 4 MiB limit: the announced length is under the
    /// limit, so only counting what inflates can stop it — and FetchKit does, at the limit.
    @Test func aGzipBombStopsAtTheSizeLimitWithBoundedMemory() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let inflated = 1 << 30
        let bomb = TestResponse.gzipBomb(inflatedSize: inflated)
        server.route("GET", "/bomb") { _ in bomb }
        let cap: Int64 = 4 << 20
        let operation = DataFetchOperation(url: server.url("/bomb"))
        operation.configuration.maximumResponseSize = cap
        operation.configuration.retryPolicy = .none
        let largest = Locked<Int64>(0)
        operation.onProgress(on: .global, minimumInterval: 0) { progress in
            largest.withLock { $0 = max($0, progress.bytesReceived) }
        }
        let peakBefore = peakResidentBytes()

        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(operation) }

        guard case .responseTooLarge(let limit)? = operation.error else {
            Issue.record("expected responseTooLarge, got \(String(describing: operation.error))")
            return
        }
        #expect(limit.limit == cap)
        #expect(limit.expectedLength.map { $0 < cap } ?? true, "the announced (compressed) length is under the limit")
        #expect(largest.current <= cap, "no more than the limit was taken in")
        #expect(operation.responseBody.map { $0.count <= cap } ?? true)
        // Inflating the whole gigabyte into memory would raise the peak by a gigabyte. The
        // peak is the process's, and the full suite's other tests raise it meanwhile (by
        // 270 MiB once): the bound only tells a gigabyte from them.
        let growth = peakResidentBytes() - peakBefore
        #expect(growth < 768 << 20, "the peak resident set grew by \(growth >> 20) MiB")
    }

    /// RST once the request is read, before any byte of the head: the connection is lost.
    @Test func aResetBeforeTheHeadIsATransportError() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/gone") { _ in .resetBeforeHead }
        let operation = DataFetchOperation(url: server.url("/gone"))
        operation.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(operation) }
        guard case .transport(let underlying)? = operation.error else {
            Issue.record("expected a transport error, got \(String(describing: operation.error))")
            return
        }
        #expect(underlying.code == .networkConnectionLost, "\(underlying)")   // libcurl: "Recv failure: Connection reset by peer"
        #expect(operation.response == nil, "no head came")
        #expect(server.requests.map(\.path) == ["/gone"], "the request was read before the reset")
    }
}
