import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

/// Samples `servers`' pattern bytes sent every 50 ms until `done` is set: what each server handed
/// to the kernel, over time (seconds since the first sample).
private final class SendLog: @unchecked Sendable {
    private let samples = Locked<[(seconds: Double, bytes: [Int])]>([])
    private let stopped = Locked(false)
    private let thread: Thread

    init(_ servers: [LoopbackServer]) {
        let samples = self.samples, stopped = self.stopped
        thread = Thread {
            let start = Date()
            while !stopped.current {
                samples.withLock { $0.append((Date().timeIntervalSince(start), servers.map { $0.counters.patternBytesSent })) }
                Thread.sleep(forTimeInterval: 0.05)      // the sampling period, not a wait for an event
            }
        }
        thread.start()
    }

    func stop() -> [(seconds: Double, bytes: [Int])] {
        stopped.withLock { $0 = true }
        return samples.current
    }
}

/// The bytes per second server `index` sent between `from` and `to` seconds.
private func rate(_ log: [(seconds: Double, bytes: [Int])], server index: Int = 0, from: Double, to: Double) -> Double? {
    guard let start = log.first(where: { $0.seconds >= from }), let end = log.last(where: { $0.seconds <= to }),
          end.seconds > start.seconds else { return nil }
    return Double(end.bytes[index] - start.bytes[index]) / (end.seconds - start.seconds)
}

/// Whether the rate measured at the server is held to `limit`: never more than 30 % over it.
/// Below it, only a bound that a loaded two-core machine meets (the whole suite in parallel
/// starves the transfers: 0.45× was seen), so that the test still fails for a limit that stops
/// a transfer for good; the precise figures (±15 % over every 5-second window) are
/// `fetchkit-bench limit-rate`'s.
private func within(_ rate: Double, of limit: Double) -> Bool {
    rate <= limit * 1.3 && rate >= limit * 0.2
}

@Suite("Bandwidth limits", .timeLimit(.minutes(3)))
struct BandwidthLimitTests {
    @Test func aBucketPaysForWhatItLendsAtItsRate() {
        let budget = ReceiveBudget(bytesPerSecond: 100_000, now: 0)
        #expect(budget.take(16_384, at: 0) == 0, "the burst (16 KiB at least) is free")
        #expect(budget.take(100_000, at: 0) == 1.0, "then each byte costs 10 µs")
        #expect(budget.take(0, at: 1_000_000_000) == 0, "paid after 1 s")
    }

    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: an 8-second transfer; the two-host test runs the same buckets under it"))
    func aQueueLimitHoldsTheServerToItsRate() async throws {
        // A small send buffer: what the server hands its kernel is within 64 KiB (the kernel
        // doubles it) of what went on the wire.
        let server = try LoopbackServer(sendBufferSize: 32 << 10)
        defer { server.stop() }
        let limit = 200_000
        let queue = FetchQueue(bandwidthLimit: limit)
        let log = SendLog([server])
        let operation = FetchOperation<Data>(url: server.url("/bytes/1600000"))   // 8 s at the limit
        let started = Date()
        let data = try await queue.fetch(operation)
        let samples = log.stop()
        #expect(data.count == 1_600_000)
        let seconds = Date().timeIntervalSince(started)
        #expect(seconds > 6, "1.6 MB at 200 kB/s takes about 8 s (the socket buffers hold some): \(seconds) s")
        // Past the first two seconds (the socket buffers fill), the server sends at the limit.
        let steady = try #require(rate(samples, from: 2, to: seconds - 1))
        #expect(within(steady, of: Double(limit)), "the server sent \(Int(steady)) B/s under a limit of \(limit): \(samples.enumerated().filter { $0.offset % 10 == 0 }.map { "\(Int($0.element.seconds * 10)):\($0.element.bytes[0] / 1000)" })")
        #expect(queue.isBandwidthLimitEnforced)
    }

    @Test func transfersShareTheQueueLimitAndEachHostHasItsOwn() async throws {
        let a = try LoopbackServer(sendBufferSize: 32 << 10), b = try LoopbackServer(sendBufferSize: 32 << 10)
        defer { a.stop(); b.stop() }
        // 150 kB/s per host, 200 kB/s overall: two hosts together are held to 200.
        let queue = FetchQueue(bandwidthLimit: 200_000, bandwidthLimitPerHost: 150_000)
        let log = SendLog([a, b])
        async let first = queue.fetch(FetchOperation<Data>(url: a.url("/bytes/800000")))
        async let second = queue.fetch(FetchOperation<Data>(url: b.url("/bytes/800000")))
        let started = Date()
        let (one, two) = try await (first, second)
        let samples = log.stop()
        #expect(one.count == 800_000 && two.count == 800_000)
        let seconds = Date().timeIntervalSince(started)
        let together = try #require(rate(samples, server: 0, from: 2, to: seconds - 2).flatMap { x in
            rate(samples, server: 1, from: 2, to: seconds - 2).map { x + $0 } })
        #expect(within(together, of: 200_000), "both servers together sent \(Int(together)) B/s under 200 kB/s")
    }

    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: an 8-second transfer; the two-host test runs the same buckets under it"))
    func aHostLimitHoldsOneHost() async throws {
        let server = try LoopbackServer(sendBufferSize: 32 << 10)
        defer { server.stop() }
        let queue = FetchQueue(bandwidthLimitPerHost: 150_000)
        let log = SendLog([server])
        async let first = queue.fetch(FetchOperation<Data>(url: server.url("/bytes/500000?a")))
        async let second = queue.fetch(FetchOperation<Data>(url: server.url("/bytes/500000?b")))
        let started = Date()
        _ = try await (first, second)
        let samples = log.stop()
        let seconds = Date().timeIntervalSince(started)
        let steady = try #require(rate(samples, from: 2, to: seconds - 1))
        #expect(within(steady, of: 150_000), "two transfers to one host sent \(Int(steady)) B/s under 150 kB/s")
    }
}
