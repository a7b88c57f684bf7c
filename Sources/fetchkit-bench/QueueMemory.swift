import Dispatch
import FetchKit
import Foundation
import Measurements
import LoopbackServer

/// `fetchkit-bench queue-memory`: memory per queued operation, for 100,000 queued operations.
///
/// Each scenario runs in a fresh child process, which measures its resident set size before
/// and after queueing the operations; the parent prints the median of several runs.
enum QueueMemoryBenchmark {
    enum Scenario: String, CaseIterable {
        case fetchQueueSuspended = "fetchqueue-suspended"
        case fetchQueueWaiting = "fetchqueue-waiting"
        case baselineOperations = "baseline-operations"
        case baselineTasks = "baseline-urlsession-tasks"

        var title: String {
            switch self {
            case .fetchQueueSuspended: return "FetchQueue, suspended (operations not started)"
            case .fetchQueueWaiting: return "FetchQueue, started and waiting for a slot"
            case .baselineOperations: return "baseline: BlockOperation + URLRequest, suspended OperationQueue"
            case .baselineTasks: return "baseline: URLSession data tasks, not resumed"
            }
        }
    }

    static func run(count: Int, runs: Int) throws {
        print("Memory per queued operation: \(count) operations per run, median of \(runs) runs, each in a fresh process")
        print("")
        print(pad("scenario", 66) + pad("RSS growth", 12) + "per operation")
        var perOperation: [Scenario: Int] = [:]
        var notes: [String] = []
        for scenario in Scenario.allCases {
            var deltas: [Int] = []
            for _ in 0..<runs {
                let output = try runSelf(["queue-memory-child", scenario.rawValue, String(count)])
                let fields = Dictionary(output.split(separator: "\n").compactMap { line -> (String, String)? in
                    let parts = line.split(separator: "=", maxSplits: 1)
                    return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
                }, uniquingKeysWith: { _, last in last })
                guard let delta = fields["delta"].flatMap(Int.init) else { throw BenchError("no reading from child: \(output)") }
                deltas.append(delta)
                if let note = fields["note"] { notes.append(note) }
            }
            let delta = median(deltas)
            perOperation[scenario] = delta / count
            print(pad(scenario.title, 66) + pad(Memory.format(bytes: delta), 12) + "\(delta / count) B")
            fflush(nil)
        }
        if let waiting = perOperation[.fetchQueueWaiting], let suspended = perOperation[.fetchQueueSuspended],
           let base = perOperation[.baselineTasks], base > 0 {
            print("")
            print(String(format: "ratio to a URLSession task not resumed: %.2f× suspended, %.2f× waiting for a slot",
                         Double(suspended) / Double(base), Double(waiting) / Double(base)))
        }
        if let waiting = perOperation[.fetchQueueWaiting], let block = perOperation[.baselineOperations], block > 0 {
            print(String(format: "waiting FetchOperation: %d B, BlockOperation + URLRequest: %d B (%.2f×)",
                         waiting, block, Double(waiting) / Double(block)))
        }
        if let note = notes.last {
            print("cancel: \(note)")
        }
    }

    /// One scenario, in a child process. Prints `delta=<bytes>` and optionally `note=…`.
    static func child(scenario name: String, count: Int) throws {
        guard let scenario = Scenario(rawValue: name) else { throw BenchError("unknown scenario \(name)") }
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        // Warm up Foundation, URLSession and FetchKit so that one-time costs are not counted.
        let warm = FetchOperation<Data>(url: server.url("/bytes/16"))
        warm.start()
        _ = warm.waitUntilFinished(timeout: 10)
        let urls = (0..<count).map { server.url("/bytes/1?n=\($0)") }
        Memory.trim()
        let before = Memory.residentBytes()
        switch scenario {
        case .fetchQueueSuspended:
            let queue = FetchQueue(name: "bench")
            queue.isSuspended = true
            for url in urls { queue.enqueue(FetchOperation<Data>(url: url), on: .global) { _ in } }
            Memory.trim()
            print("delta=\(Memory.residentBytes() - before)")
            queue.cancelAll()
            queue.isSuspended = false
        case .fetchQueueWaiting:
            let queue = FetchQueue(name: "bench", maximumConcurrentTransfers: 1, maximumTransfersPerHost: 1)
            // The blocker takes the one slot before the others are enqueued (operations start
            // concurrently, so enqueue order alone would not decide who gets it).
            let blocker = FetchOperation<Data>(url: server.url("/stall-head"))
            queue.enqueue(blocker)
            while queue.transferCounts.inFlight < 1 { usleep(1_000) }
            // The completion captures nothing, as the suspended scenario's does: a handler that
            // captures its own state costs its closure context (48 bytes for a counter and a
            // semaphore), which is the caller's, not FetchKit's.
            let done = waitingScenarioDone
            waitingScenarioCompleted.expect(count)
            for url in urls {
                queue.enqueue(FetchOperation<Data>(url: url), on: .global) { _ in
                    if waitingScenarioCompleted.increment() == waitingScenarioCompleted.expected {
                        waitingScenarioDone.signal()
                    }
                }
            }
            // Every operation has started and waits in the scheduler for the one slot.
            while queue.transferCounts.waiting < count { usleep(1_000) }
            Memory.trim()
            print("delta=\(Memory.residentBytes() - before)")
            let started = Date()
            queue.cancelAll()
            let returned = Date().timeIntervalSince(started)
            guard done.wait(timeout: .now() + 120) == .success else { throw BenchError("cancelled fetches did not all complete") }
            print(String(format: "note=cancelAll() of \(count) waiting fetches returned in %.2f s; all completed, once each, as cancelled within %.2f s",
                         returned, Date().timeIntervalSince(started)))
            blocker.cancel()
        case .baselineOperations:
            let queue = OperationQueue()
            queue.isSuspended = true
            var operations: [Operation] = []
            operations.reserveCapacity(count)
            for url in urls {
                let request = URLRequest(url: url)
                operations.append(BlockOperation { _ = request })
            }
            queue.addOperations(operations, waitUntilFinished: false)
            operations = []
            Memory.trim()
            print("delta=\(Memory.residentBytes() - before)")
            queue.cancelAllOperations()
            queue.isSuspended = false
        case .baselineTasks:
            let session = URLSession(configuration: .default)
            var tasks: [URLSessionDataTask] = []
            tasks.reserveCapacity(count)
            for url in urls { tasks.append(session.dataTask(with: url)) }
            Memory.trim()
            print("delta=\(Memory.residentBytes() - before)")
            session.invalidateAndCancel()
        }
        fflush(nil)
    }
}

/// What the waiting scenario's completions share, as globals, so that each handler captures
/// nothing.
private let waitingScenarioCompleted = Counter()
private let waitingScenarioDone = DispatchSemaphore(value: 0)

/// A locked counter for the children.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    private var target = 0

    /// The count a caller waits for.
    var expected: Int {
        lock.lock()
        defer { lock.unlock() }
        return target
    }

    func expect(_ count: Int) {
        lock.lock()
        defer { lock.unlock() }
        target = count
    }

    func increment() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
}

