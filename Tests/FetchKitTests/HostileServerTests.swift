import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

/// Servers that lie about lengths, never stop, cut encoded bodies short or redirect bodies
/// away: every attack is staged for real on the loopback server, and each ends in a clear
/// error (or the right behaviour), never a crash or unbounded memory.
@Suite("Hostile servers")
struct HostileServerTests {
    private func run(_ operation: FetchOperation) async -> FetchError? {
        do {
            try await operation.run()
            return nil
        } catch {
            return error
        }
    }

    // MARK: Lying and endless lengths

    /// `Content-Length: 1 TiB`, a limit above it, and a few bytes: no reservation of the
    /// announced length (it trapped inside `Data.reserveCapacity`), only a length error.
    @Test(arguments: [Int64(1) << 40, Int64(64) << 30])
    func lyingHugeContentLengthIsNotPreallocated(_ announced: Int64) async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/huge") { _ in
            .script([
                .write(HTTPResponse.rawHead(status: 200, headers: ["Content-Length": String(announced)])),
                .writePattern(offset: 0, count: 100),
                .close,
            ])
        }
        let operation = server.operation("/huge")
        operation.maximumResponseSize = announced * 2
        let error = await run(operation)
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
        let chunk = BytePattern.data(offset: 0, count: 16 << 10)
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
    @Test func endlessChunkedBodyStopsAtTheLimit() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/endless") { _ in
            HTTPResponse(status: 200, body: .chunkedPattern(count: .max, chunkSize: 16 << 10, intervalMilliseconds: 0))
        }
        let operation = server.operation("/endless")
        operation.maximumResponseSize = 4 << 20
        let error = await run(operation)
        guard case .responseTooLarge(let limit)? = error else {
            Issue.record("expected too large, got \(String(describing: error))")
            return
        }
        #expect(limit.limit == 4 << 20)
        #expect(limit.expectedLength == nil)
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 0 }, "the server stops sending")
    }
}
