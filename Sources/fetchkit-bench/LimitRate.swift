import FetchKit
import Foundation
import Measurements
import LoopbackServer
#if canImport(Glibc)
import Glibc
#endif

/// How closely a ``FetchQueue`` bandwidth limit holds the server's send rate *on the wire*,
/// with the kernel's default socket buffers: the bytes the client acknowledged to the loopback
/// server (`TCP_INFO`'s `tcpi_bytes_acked`, ``LoopbackServer/bytesAcknowledged``), sampled
/// every 50 ms while the queue fetches `transfers` bodies of `seconds` × limit bytes in all
/// (to one host, sharing the limit), then the rate over every 5-second window (sliding by
/// 50 ms, from the first request to the server's last byte on the wire) against the limit. What the server handed
/// its kernel (``ServerCounters/patternBytesSent``) is shown beside it: with default buffers it
/// runs ahead of the wire by what the send buffer holds.
///
/// Each mechanism runs in turn in each round, so that they meet the same load; the figures are
/// the medians over the rounds. There is one, FetchKit's token bucket (`bucket`); named with
/// `-nowindow` (`bucket-nowindow`) it runs without the small receive window that FetchKit gives
/// a new connection up to 1 MB/s per transfer (``ComparisonSwitches/boundsReceiveWindow``), for
/// comparison. (libcurl's own `CURLOPT_MAX_RECV_SPEED_LARGE`, compared here until issue 33,
/// lost to the bucket and was removed; the Benchmarks article keeps its figures.)
enum LimitRateBenchmark {
    static let mechanisms = ["bucket"]
    static let withoutWindow = "-nowindow"

    /// Whether `name` is a mechanism, with or without ``withoutWindow``.
    static func isMechanism(_ name: String) -> Bool {
        mechanisms.contains(name.hasSuffix(withoutWindow) ? String(name.dropLast(withoutWindow.count)) : name)
    }

    /// One run's figures, as ratios to the limit.
    struct Run {
        var wireFirst: Double
        var wireMin: Double
        var wireMax: Double
        var writtenMax: Double
        var overall: Double
        var seconds: Double
        var windows: Int
        var failed: Int
        var enforced: Bool
    }

    static func run(rate: Int, seconds: Int, transfers: [Int], perHost: Bool, rounds: Int, mechanisms: [String],
                    sendBufferSize: Int?) throws {
        let buffers = sendBufferSize.map { "server SO_SNDBUF \($0) B" } ?? "kernel default socket buffers"
        print("bandwidth limit \(rate) B/s \(perHost ? "per host" : "per queue"), \(seconds) s' worth per run, \(buffers), "
              + "\(rounds) round(s); ratios to the limit, medians over the rounds")
        print("wire = bytes the client acknowledged (TCP_INFO tcpi_bytes_acked at the server); "
              + "written = pattern bytes the server handed its kernel")
        for count in transfers {
            var results: [String: [Run]] = [:]
            for round in 1...rounds {
                for mechanism in mechanisms {
                    let result = try once(rate: rate, seconds: seconds, transfers: count, perHost: perHost,
                                          mechanism: mechanism, sendBufferSize: sendBufferSize)
                    results[mechanism, default: []].append(result)
                    print(String(format: "  round %d, %d transfer(s), %@: wire 5-s windows min %.3f max %.3f (first %.3f), written max %.3f, overall %.3f, %.1f s, %d failed%@",
                                 round, count, mechanism, result.wireMin, result.wireMax, result.wireFirst,
                                 result.writtenMax, result.overall, result.seconds, result.failed,
                                 result.enforced ? "" : ", NOT ENFORCED"))
                }
            }
            print("\(count) transfer(s) sharing the limit: median of \(rounds)")
            print("  mechanism        | wire windows min | max   | first window | written max | overall | in ±15 %")
            for mechanism in mechanisms {
                let runs = results[mechanism] ?? []
                let inside = runs.filter { $0.wireMin >= 0.85 && $0.wireMax <= 1.15 }.count
                print(String(format: "  %-16@ | %16.3f | %.3f | %12.3f | %11.3f | %7.3f | %d of %d",
                             mechanism, median(runs.map(\.wireMin)), median(runs.map(\.wireMax)), median(runs.map(\.wireFirst)),
                             median(runs.map(\.writtenMax)), median(runs.map(\.overall)), inside, runs.count))
            }
        }
    }

    private static func once(rate: Int, seconds: Int, transfers: Int, perHost: Bool, mechanism: String,
                             sendBufferSize: Int?) throws -> Run {
        let server = try LoopbackServer(recordRequests: false, sendBufferSize: sendBufferSize)
        defer { server.stop() }
        // Read as each transfer starts.
        ComparisonSwitches.boundsReceiveWindow = !mechanism.hasSuffix(withoutWindow)
        defer { ComparisonSwitches.boundsReceiveWindow = true }
        let queue = perHost ? FetchQueue(maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers, bandwidthLimitPerHost: rate)
                            : FetchQueue(maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers, bandwidthLimit: rate)
        let size = rate * seconds / transfers
        let samples = Guarded<[(seconds: Double, wire: Int, written: Int)]>([])
        let done = DispatchSemaphore(value: 0)
        let failures = Guarded(0)
        let start = Date()
        let sample: @Sendable () -> Void = {
            let written = server.counters.patternBytesSent
            samples.withLock { $0.append((Date().timeIntervalSince(start), server.bytesAcknowledged ?? 0, written)) }
        }
        sample()
        let sampler = Thread {
            while done.wait(timeout: .now() + 0.05) == .timedOut { sample() }
        }
        sampler.start()
        let group = DispatchGroup()
        for index in 0..<transfers {
            group.enter()
            queue.enqueue(FetchOperation<Data>(url: server.url("/bytes/\(size)?n=\(index)")), on: .global) { result in
                if case .failure = result { failures.withLock { $0 += 1 } }
                group.leave()
            }
        }
        group.wait()
        let elapsed = Date().timeIntervalSince(start)
        done.signal()
        sample()
        var log = samples.withLock { $0 }
        // Up to the server's last byte on the wire.
        log = upToLastByte(log, bytes: \.wire)
        if ProcessInfo.processInfo.environment["FETCHKIT_BENCH_TRACE"] != nil {
            // Every half second: seconds, kB acknowledged, kB written.
            print(log.enumerated().filter { $0.offset % 10 == 0 }.map {
                String(format: "%.1f:%d/%d", $0.element.seconds, $0.element.wire / 1000, $0.element.written / 1000)
            }.joined(separator: " "))
        }
        let wire = windows(log.map { ($0.seconds, $0.wire) }, rate: rate)
        let written = windows(log.map { ($0.seconds, $0.written) }, rate: rate)
        return Run(wireFirst: wire.first ?? .nan, wireMin: wire.min() ?? .nan, wireMax: wire.max() ?? .nan,
                   writtenMax: written.max() ?? .nan, overall: Double(size * transfers) / elapsed / Double(rate),
                   seconds: elapsed, windows: wire.count, failed: failures.withLock { $0 },
                   enforced: queue.isBandwidthLimitEnforced)
    }

    /// The rate of every 5-second window of `samples` (a cumulative byte count and when it was
    /// read, in order), one starting at each sample and ending at the first sample 5 s or more
    /// after it, as a ratio to `rate`.
    static func windows(_ samples: [(seconds: Double, bytes: Int)], rate: Int, window: Double = 5) -> [Double] {
        var ratios: [Double] = []
        for (index, first) in samples.enumerated() {
            guard let last = samples[index...].first(where: { $0.seconds >= first.seconds + window }) else { break }
            ratios.append(Double(last.bytes - first.bytes) / (last.seconds - first.seconds) / Double(rate))
        }
        return ratios
    }

    /// `samples` up to the first that reached the last's count: after the server's last byte
    /// it sends nothing, and windows reaching past it measure the client finishing, not the
    /// server's rate.
    static func upToLastByte<Sample>(_ samples: [Sample], bytes: (Sample) -> Int) -> [Sample] {
        guard let last = samples.last, let end = samples.firstIndex(where: { bytes($0) >= bytes(last) }) else { return samples }
        return Array(samples[...end])
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}

/// A value behind a lock.
final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
