import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Samples, every 50 ms until `stop()`, what each of `servers` put on the wire: the bytes its
/// clients acknowledged (``TestServer/bytesAcknowledged``, `TCP_INFO`). With the kernel's
/// default socket buffers, what a server hands its kernel (`patternBytesSent`) runs up to
/// megabytes ahead of that on loopback; the acknowledged bytes are what crossed the wire.
private final class SendLog: @unchecked Sendable {
    private let samples = Locked<[(seconds: Double, bytes: [Int])]>([])
    private let stopped = Locked(false)
    private let thread: Thread

    init(_ servers: [TestServer]) {
        let samples = self.samples, stopped = self.stopped
        let start = Date()
        let sample: @Sendable () -> Void = { samples.withLock { $0.append((Date().timeIntervalSince(start), servers.map { $0.bytesAcknowledged ?? 0 })) } }
        sample()
        thread = Thread {
            while !stopped.current {
                Thread.sleep(forTimeInterval: 0.05)      // the sampling period, not a wait for an event
                sample()
            }
        }
        thread.start()
    }

    func stop() -> [(seconds: Double, bytes: [Int])] {
        stopped.withLock { $0 = true }
        return samples.current
    }
}

/// The bytes per second that `servers` (indexes into the log) sent together over every
/// 5-second window of `log` (sliding by a sample), from its first sample to their last byte.
private func windowRates(_ log: [(seconds: Double, bytes: [Int])], servers: [Int] = [0]) -> [Double] {
    // Up to the servers' last byte on the wire: the windows past it measure the client finishing.
    let total = { (sample: (seconds: Double, bytes: [Int])) in servers.reduce(0) { $0 + sample.bytes[$1] } }
    var log = log
    if let last = log.last, let end = log.firstIndex(where: { total($0) >= total(last) }) { log = Array(log[...end]) }
    var rates: [Double] = []
    for (index, first) in log.enumerated() {
        guard let last = log[index...].first(where: { $0.seconds >= first.seconds + 5 }) else { break }
        let bytes = servers.reduce(0) { $0 + last.bytes[$1] - first.bytes[$1] }
        rates.append(Double(bytes) / (last.seconds - first.seconds))
    }
    return rates
}

/// The log every half second, for a failure's message: "seconds:kB".
private func summary(_ log: [(seconds: Double, bytes: [Int])]) -> String {
    log.enumerated().filter { $0.offset % 10 == 0 }.map { "\(Int($0.element.seconds * 10))/10:\($0.element.bytes.reduce(0, +) / 1000)" }
        .joined(separator: " ")
}

/// Whether every 5-second window at the server held to `limit`: never more than 15 % over it
/// (the bound, which a loaded machine cannot break: load only slows a transfer). Below
/// it, only a bound that a loaded two-core machine meets (the whole suite in parallel starves
/// the transfers: 0.45× was seen), so that the test still fails for a limit that stops a
/// transfer for good; the precise figures (±15 % both ways) are `fetchkit-bench limit-rate`'s.
private func held(_ rates: [Double], to limit: Double, over: Double = 0.15) -> Bool {
    !rates.isEmpty && rates.allSatisfy { $0 <= limit * (1 + over) } && rates.max()! >= limit * 0.2
}

@Suite("Bandwidth limits", .timeLimit(.minutes(3)))
struct BandwidthLimitTests {
    @Test func aBucketPaysForWhatItLendsAtItsRate() {
        let budget = ReceiveBudget(bytesPerSecond: 100_000, now: 0)
        #expect(budget.take(10_000, at: 0) == 0, "the burst (a tenth of a second) is free")
        #expect(budget.take(100_000, at: 0) == 1.0, "then each byte costs 10 µs")
        #expect(budget.take(0, at: 1_000_000_000) == 0, "paid after 1 s")
        let slow = ReceiveBudget(bytesPerSecond: 10_000, now: 0)
        #expect(slow.take(4096, at: 0) == 0, "at least 4 KiB are free")
        #expect(slow.take(16_384, at: 0) == 1.6384, "a libcurl read beyond it is lent")
    }

    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: an 8-second transfer; the two-host test runs the same buckets under it"))
    func aQueueLimitHoldsTheWireToItsRate() async throws {
        // The kernel's default buffers: the server's send buffer grows to megabytes, and only
        // what its client acknowledged tells what crossed the wire.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let limit = 200_000
        let queue = FetchQueue(bandwidthLimit: limit)
        let log = SendLog([server])
        let operation = FetchOperation<Data>(url: server.url("/bytes/1600000"))   // 8 s at the limit
        let started = Date()
        let data = try await queue.fetch(operation)
        let samples = log.stop()
        #expect(data.count == 1_600_000)
        let seconds = Date().timeIntervalSince(started)
        #expect(seconds > 6.5, "1.6 MB at 200 kB/s takes about 8 s: \(seconds) s")
        let rates = windowRates(samples)
        #expect(held(rates, to: Double(limit)),
                "5-s windows on the wire \(Int(rates.min() ?? 0))...\(Int(rates.max() ?? 0)) B/s under \(limit): \(summary(samples))")
        #expect(queue.isBandwidthLimitEnforced && queue.bandwidthLimitShortfall == nil)
    }

    @Test func transfersShareTheQueueLimitAndEachHostHasItsOwn() async throws {
        let a = try TestServer.standard(), b = try TestServer.standard()
        defer { a.shutDown(); b.shutDown() }
        // 150 kB/s per host, 200 kB/s overall: two hosts together are held to 200.
        let queue = FetchQueue(bandwidthLimit: 200_000, bandwidthLimitPerHost: 150_000)
        let log = SendLog([a, b])
        async let first = queue.fetch(FetchOperation<Data>(url: a.url("/bytes/600000")))
        async let second = queue.fetch(FetchOperation<Data>(url: b.url("/bytes/600000")))
        let (one, two) = try await (first, second)
        let samples = log.stop()
        #expect(one.count == 600_000 && two.count == 600_000)
        let together = windowRates(samples, servers: [0, 1])
        #expect(held(together, to: 200_000),
                "5-s windows of both servers together \(Int(together.min() ?? 0))...\(Int(together.max() ?? 0)) B/s under 200 kB/s: \(summary(samples))")
        for server in [0, 1] {
            let alone = windowRates(samples, servers: [server])
            #expect(alone.allSatisfy { $0 <= 150_000 * 1.15 }, "server \(server) alone: up to \(Int(alone.max() ?? 0)) B/s under 150 kB/s per host")
        }
    }

    /// Two connections at once: each socket takes in its receive window (some 190 kB on
    /// loopback) before the first pause, which the limit must charge for (``WireMeter``;
    /// charging only the chunks read, the first 5 s sent 1.28× the limit). Measured with it,
    /// 1.03–1.15×: the bound here is 20 %, so that the test tells the two apart without
    /// failing on a loaded machine; `fetchkit-bench limit-rate` gives the figures.
    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: a 7-second transfer; the two-host test runs the same buckets under it"))
    func aHostLimitHoldsOneHost() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = FetchQueue(bandwidthLimitPerHost: 150_000)
        let log = SendLog([server])
        async let first = queue.fetch(FetchOperation<Data>(url: server.url("/bytes/500000?a")))
        async let second = queue.fetch(FetchOperation<Data>(url: server.url("/bytes/500000?b")))
        let (one, two) = try await (first, second)
        let samples = log.stop()
        #expect(one.count == 500_000 && two.count == 500_000)
        let rates = windowRates(samples)
        #expect(held(rates, to: 150_000, over: 0.2),
                "two transfers to one host: 5-s windows \(Int(rates.min() ?? 0))...\(Int(rates.max() ?? 0)) B/s under 150 kB/s: \(summary(samples))")
    }

    /// Up to 1 MB/s per transfer, a new connection's receive window is a tenth of a second
    /// of its share (``ReceiveWindow``), set before it connects: the server is never ahead of
    /// the limit by more than the bucket's burst (16 KiB) and that window. With the kernel's
    /// default window the server sent some 190 kB at once, which the limit then paid back
    /// (the 5-second windows after it fell to 0.64× at 50 kB/s). Load only slows the client,
    /// so the bound cannot fail for it. Set `ComparisonSwitches.boundsReceiveWindow = false` to see it fail.
    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: a 4-second transfer; the window is set the same way in the two-host test"))
    func aLowLimitHoldsTheServerFromTheFirstPacket() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let limit = 40_000
        let queue = FetchQueue(bandwidthLimit: limit)
        let log = SendLog([server])
        let data = try await queue.fetch(FetchOperation<Data>(url: server.url("/bytes/160000")))   // 4 s at the limit
        let samples = log.stop()
        #expect(data.count == 160_000)
        // The most the server was ahead of the limit at any sample (from before the request).
        let ahead = samples.map { $0.bytes[0] - Int(Double(limit) * $0.seconds) }.max() ?? 0
        #expect(ahead <= 48_000, "the server ran \(ahead) B ahead of \(limit) B/s: \(summary(samples))")
        #expect(queue.isBandwidthLimitEnforced)
    }

    /// A transfer given a small window has a connection of its own: not one from the pool
    /// (which would keep its default window), and closed when it ends (no later transfer,
    /// limited or not, inherits its window). A transfer whose share needs no window (above
    /// 1 MB/s) uses the pool as any other. The transfers share a session of their own: the
    /// shared one's pool is every parallel test's, and libcurl's cache closes its oldest idle
    /// connection when it is full (the likely cause of a new connection in 2 full-suite runs of 20).
    @Test func aConnectionWithASmallWindowIsItsTransfersAlone() async throws {
        let before = try TestServer.standard(), after = try TestServer.standard(), fast = try TestServer.standard()
        let session = FetchSession()
        defer { before.shutDown(); after.shutDown(); fast.shutDown(); session.invalidate() }
        let unlimited = FetchQueue(), slow = FetchQueue(bandwidthLimit: 100_000), quick = FetchQueue(bandwidthLimit: 2_000_000)
        func get(_ url: URL) -> FetchOperation<Data> {
            let operation = FetchOperation<Data>(url: url)
            operation.configuration.session = session
            return operation
        }
        _ = try await unlimited.fetch(get(before.url("/bytes/1000?first")))
        _ = try await slow.fetch(get(before.url("/bytes/1000?then-slow")))
        #expect(before.counters.connectionsAccepted == 2, "the slow transfer did not take the pooled connection")
        _ = try await slow.fetch(get(after.url("/bytes/1000?slow")))
        _ = try await unlimited.fetch(get(after.url("/bytes/1000?then-unlimited")))
        #expect(after.counters.connectionsAccepted == 2, "the slow transfer's connection was closed after it")
        _ = try await quick.fetch(get(fast.url("/bytes/1000?quick")))
        _ = try await unlimited.fetch(get(fast.url("/bytes/1000?then-unlimited")))
        #expect(fast.counters.connectionsAccepted == 1, "a 2 MB/s share's connection is pooled and reused")
    }

    @Test func theWindowIsATenthOfASecondOfTheShareUpTo1MBPerSecond() {
        #expect(ReceiveWindow.bytes(forShare: 100_000) == 10_000)
        #expect(ReceiveWindow.bytes(forShare: 1_000_000) == 100_000)
        #expect(ReceiveWindow.bytes(forShare: 20_000) == 4096, "at least 4 KiB")
        #expect(ReceiveWindow.bytes(forShare: 1_000_001) == nil, "the default window holds the limit from there")
    }
}
