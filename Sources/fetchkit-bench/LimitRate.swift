import FetchKit
import Foundation
import LoopbackServer

/// How closely a ``FetchQueue`` bandwidth limit holds the server's send rate: the loopback
/// server's pattern bytes handed to the kernel, sampled every 50 ms while the queue fetches
/// `transfers` bodies of `seconds` × limit bytes in all (several to one host, sharing the
/// limit), then the rate over every 5-second window (sliding by 50 ms) against the limit. The
/// server's send buffer is fixed at 32 KiB (64 KiB with the kernel's bookkeeping), so that what
/// it hands its kernel is within that of what went on the wire.
enum LimitRateBenchmark {
    static func run(rate: Int, seconds: Int, transfers: Int, perHost: Bool) throws {
        let server = try LoopbackServer(recordRequests: false, sendBufferSize: 32 << 10)
        defer { server.stop() }
        let queue = perHost ? FetchQueue(maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers, bandwidthLimitPerHost: rate)
                            : FetchQueue(maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers, bandwidthLimit: rate)
        let size = rate * seconds / transfers
        let samples = Guarded<[(Double, Int)]>([])
        let done = DispatchSemaphore(value: 0)
        let failures = Guarded(0)
        let start = Date()
        let sampler = Thread {
            while done.wait(timeout: .now() + 0.05) == .timedOut {
                samples.withLock { $0.append((Date().timeIntervalSince(start), server.counters.patternBytesSent)) }
            }
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
        let log = samples.withLock { $0 }
        let window = 5.0
        var ratios: [Double] = []
        for (index, first) in log.enumerated() {
            guard let last = log[index...].first(where: { $0.0 >= first.0 + window }) else { break }
            ratios.append(Double(last.1 - first.1) / (last.0 - first.0) / Double(rate))
        }
        let firstWindow = ratios.first ?? .nan
        let steady = ratios.count > Int(window / 0.05) ? Array(ratios.dropFirst(Int(window / 0.05))) : []
        print("bandwidth limit \(rate) B/s \(perHost ? "per host" : "per queue"), \(transfers) transfer(s) to one host, "
              + "\(size) B each, \(String(format: "%.1f", elapsed)) s, \(failures.withLock { $0 }) failed")
        print("overall: \(String(format: "%.3f", Double(size * transfers) / elapsed / Double(rate)))× the limit")
        print("5-s windows at the server (sent / limit): \(ratios.count) windows")
        print(String(format: "  the first (from the request, socket buffers filling): %.3f", firstWindow))
        if let low = steady.min(), let high = steady.max() {
            print(String(format: "  every window starting after the first 5 s: min %.3f max %.3f (%d windows)", low, high, steady.count))
        }
        if let low = ratios.min(), let high = ratios.max() {
            print(String(format: "  every window: min %.3f max %.3f", low, high))
        }
        print("enforced: \(queue.isBandwidthLimitEnforced)")
    }
}

/// A value behind a lock.
private final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
