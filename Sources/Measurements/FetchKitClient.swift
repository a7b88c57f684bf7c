import Dispatch
import FetchKit
import Foundation

/// FetchKit as its users would use it: every request enqueued at once on a FetchQueue bounded
/// to C transfers, each a FetchOperation (a DownloadOperation for the disk case).
package final class FetchKitClient: @unchecked Sendable {
    private let scenario: Scenario
    private let base: URL
    private let directory: URL
    /// What each download's file must hash to (to disk only).
    private let digest: FileDigest?

    package init(scenario: Scenario, base: URL, directory: URL, digest: FileDigest? = nil) {
        self.scenario = scenario
        self.base = base
        self.directory = directory
        self.digest = digest
    }

    package func run() -> RunMeasurement {
        let queue = FetchQueue(name: "bench", maximumConcurrentTransfers: scenario.concurrency,
                               maximumTransfersPerHost: scenario.concurrency,
                               coalescesIdenticalRequests: false)
        let done = DispatchSemaphore(value: 0)
        let tally = Tally(count: scenario.count)
        let started = Date()
        for index in 0..<scenario.count {
            let url = scenario.url(base: base, index: index)
            let expected = scenario.bodySize
            switch scenario.destination {
            case .memory:
                let operation = FetchOperation<Data>(url: url)
                operation.configuration.maximumResponseSize = Int64(expected) * 2
                queue.enqueue(operation, on: .global) { result in
                    let length = (try? result.get())?.count ?? 0
                    if tally.add(bytes: length, ok: length == expected) { done.signal() }
                }
            case .disk:
                let operation = DownloadOperation(url: url, destination: directory.appendingPathComponent("fetchkit-\(index)"))
                operation.expectedDigest = digest
                queue.enqueue(operation, on: .global) { result in
                    let length = (try? result.get()).flatMap { DownloadOperation.size(of: $0) } ?? 0
                    if tally.add(bytes: length, ok: length == expected) { done.signal() }
                }
            }
        }
        done.wait()
        var measurement = tally.measurement
        measurement.seconds = Date().timeIntervalSince(started)
        return measurement
    }
}

/// Counts completions from any thread.
private final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private let count: Int
    private(set) var measurement = RunMeasurement()

    package init(count: Int) { self.count = count }

    /// - Returns: whether this was the last one.
    package func add(bytes: Int, ok: Bool) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        measurement.bytes += Int64(bytes)
        measurement.requests += 1
        if !ok { measurement.errors += 1 }
        return measurement.requests == count
    }
}

extension DownloadOperation {
    package static func size(of url: URL) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue
    }
}
