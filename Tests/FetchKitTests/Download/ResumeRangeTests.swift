import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A resume's `206` must be the rest of the same file: the range it names ends at the file's last
/// byte, and its body is that range, no more. A server that says the right validator and total
/// but sends a shorter range, a longer body, or a range past the end, must not leave a file of
/// the wrong length reported as a success (found by a docs-only review: each left a 150,000,
/// 200,500 or 200,700-byte file for a 200,000-byte object).
@Suite("A resume's range is the rest of the file", .timeLimit(.minutes(3)))
struct ResumeRangeTests {
    enum Lie: String, CaseIterable, CustomTestStringConvertible {
        /// `bytes 100000-149999/200000`, and those 50,000 bytes.
        case shortRange
        /// The right range, a `Content-Length` 500 longer, and 500 bytes more.
        case longerContentLength
        /// The right range, chunked, 700 bytes too long.
        case chunkedPastTheRange
        /// `bytes 100000-200499/200000` (a last byte past the total) and 100,500 bytes.
        case rangePastTheEnd
        /// `bytes 100000-149999/*` (the total not given) and those 50,000 bytes: the first
        /// answer said 200,000.
        case shortRangeOfUnknownTotal
        /// `bytes 50000-199999/200000` and those 150,000 bytes: the rest of the file, from the
        /// wrong place (was taken for a transient error and retried).
        case shiftedStart

        var testDescription: String { rawValue }
    }

    static let length = 200_000
    static let half = 100_000

    private func serve(_ lie: Lie, on server: TestServer) {
        let cut = Locked(true)
        server.route("/object") { request in
            let whole = TestResponse.patternBytes(count: Self.length + 1_000)
            guard request.header("Range") == "bytes=\(Self.half)-" else {
                let headers = ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": String(Self.length)]
                let first = cut.withLock { value -> Bool in defer { value = false }; return value }
                return first ? .steps([.head(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": String(Self.length)]),
                                       .write(whole.prefix(Self.half)), .close])
                    : TestResponse(status: 200, headers: headers, body: whole.prefix(Self.length))
            }
            let contentRange: String
            let body: Data
            switch lie {
            case .shortRange:
                contentRange = "bytes \(Self.half)-149999/\(Self.length)"
                body = whole.subdata(in: Self.half..<150_000)
            case .longerContentLength:
                contentRange = "bytes \(Self.half)-\(Self.length - 1)/\(Self.length)"
                body = whole.subdata(in: Self.half..<(Self.length + 500))
            case .chunkedPastTheRange:
                let bytes = whole.subdata(in: Self.half..<(Self.length + 700))
                var chunked = Data(String(bytes.count, radix: 16).utf8 + Array("\r\n".utf8))
                chunked.append(bytes)
                chunked.append(contentsOf: Array("\r\n0\r\n\r\n".utf8))
                return .steps([.head(status: 206, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes",
                                                            "Content-Range": "bytes \(Self.half)-\(Self.length - 1)/\(Self.length)",
                                                            "Transfer-Encoding": "chunked"]),
                               .write(chunked), .close])
            case .rangePastTheEnd:
                contentRange = "bytes \(Self.half)-\(Self.length + 499)/\(Self.length)"
                body = whole.subdata(in: Self.half..<(Self.length + 500))
            case .shortRangeOfUnknownTotal:
                contentRange = "bytes \(Self.half)-149999/*"
                body = whole.subdata(in: Self.half..<150_000)
            case .shiftedStart:
                contentRange = "bytes 50000-\(Self.length - 1)/\(Self.length)"
                body = whole.subdata(in: 50_000..<Self.length)
            }
            return .steps([.head(status: 206, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Range": contentRange,
                                                        "Content-Length": String(body.count)]),
                           .write(body), .close])
        }
    }

    @Test(arguments: Lie.allCases)
    func aRangeThatIsNotTheRestIsRefusedAndNoWrongFileIsMade(_ lie: Lie) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        serve(lie, on: server)
        let destination = directory.file("object.bin")
        let first = DownloadOperation(url: server.url("/object"), destination: destination)
        first.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await first.run() }
        #expect(DownloadOperation.fileSize(first.partialFileURL) == Int64(Self.half), "half is kept")

        let second = DownloadOperation(url: server.url("/object"), destination: destination)
        second.configuration.retryPolicy = .none
        let error = await #expect(throws: FetchError.self) { try await second.run() }
        guard case .invalidResponse(let failure)? = error, case .rangeMismatch(let problem) = failure.reason else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(!problem.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: destination.path), "no file of the wrong length is made")
        let kept = DownloadOperation.fileSize(second.partialFileURL) ?? 0
        #expect(kept <= Int64(Self.length), "nothing past the file's end was appended: \(kept)")
        #expect(server.requests("/object").last?.header("Range") == "bytes=\(Self.half)-")
    }

    /// A resume answered with a `206` of a new version of the file (another `ETag`) whose range
    /// also starts elsewhere: the change is what is reported, and the partial of the old version
    /// is removed (it was kept, and the answer retried as a transient error).
    @Test func aChangedFileIsDetectedWhateverRangeItNames() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/object") { request in
            let whole = TestResponse.patternBytes(count: Self.length)
            guard request.header("Range") == "bytes=\(Self.half)-" else {
                return .steps([.head(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": String(Self.length)]),
                               .write(whole.prefix(Self.half)), .close])
            }
            let headers = ["ETag": "\"v2\"", "Accept-Ranges": "bytes", "Content-Range": "bytes 0-\(Self.length - 1)/\(Self.length)"]
            return TestResponse(status: 206, headers: headers, body: whole)
        }
        let destination = directory.file("object.bin")
        let first = DownloadOperation(url: server.url("/object"), destination: destination)
        first.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await first.run() }
        #expect(DownloadOperation.fileSize(first.partialFileURL) == Int64(Self.half))
        let second = DownloadOperation(url: server.url("/object"), destination: destination)
        second.configuration.retryPolicy = .none
        second.restartsWhenSourceChanges = false
        let error = await #expect(throws: FetchError.self) { try await second.run() }
        guard case .invalidResponse(let failure)? = error, case .changedWhileResuming = failure.reason else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(DownloadOperation.fileSize(second.partialFileURL) == nil, "the old version's partial is removed")
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(server.requests("/object").count == 2, "not retried")
    }

    /// With the total given (`/200000`) or not (`/*`: the length the first answer gave is the
    /// one checked against).
    @Test(arguments: [String(Self.length), "*"])
    func theRestOfTheFileStillResumes(total: String) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let cut = Locked(true)
        server.route("/object") { request in
            let whole = TestResponse.patternBytes(count: Self.length)
            var headers = ["ETag": "\"v1\"", "Accept-Ranges": "bytes"]
            if request.header("Range") == "bytes=\(Self.half)-" {
                headers["Content-Range"] = "bytes \(Self.half)-\(Self.length - 1)/\(total)"
                return TestResponse(status: 206, headers: headers, body: whole.subdata(in: Self.half..<Self.length))
            }
            headers["Content-Length"] = String(Self.length)
            let first = cut.withLock { value -> Bool in defer { value = false }; return value }
            return first ? .steps([.head(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": String(Self.length)]),
                                   .write(whole.prefix(Self.half)), .close])
                : TestResponse(status: 200, headers: headers, body: whole)
        }
        let destination = directory.file("object.bin")
        let first = DownloadOperation(url: server.url("/object"), destination: destination)
        first.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await first.run() }
        let second = DownloadOperation(url: server.url("/object"), destination: destination)
        try await second.run()
        #expect(second.resumedBytes == Int64(Self.half))
        #expect(FileManager.default.contents(atPath: destination.path) == TestResponse.patternBytes(count: Self.length))
    }
}
