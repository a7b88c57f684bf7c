import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The baseline: plain URLSession used as well as it can be. One session with a delegate on a
/// serial queue, exactly C tasks in flight (the next starts as one completes), bodies appended
/// to buffers reserved from Content-Length, or written with POSIX writes for the disk case.
///
/// With `allAtOnce`, every task is created and resumed at the start instead — the raw analogue
/// of enqueueing every fetch at once; the session's `httpMaximumConnectionsPerHost` (C) bounds
/// how many run.
package final class RawClient: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let scenario: Scenario
    private let allAtOnce: Bool
    private let base: URL
    private let directory: URL
    private let delegateQueue = OperationQueue()
    private var session: URLSession!
    private let done = DispatchSemaphore(value: 0)

    // Delegate-queue state.
    private var next = 0
    private var completed = 0
    private var buffers: [Int: Data] = [:]
    private var files: [Int: Int32] = [:]
    private var measurement = RunMeasurement()

    package init(scenario: Scenario, base: URL, directory: URL, allAtOnce: Bool = false) {
        self.scenario = scenario
        self.allAtOnce = allAtOnce
        self.base = base
        self.directory = directory
        super.init()
        delegateQueue.maxConcurrentOperationCount = 1
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = scenario.concurrency
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: delegateQueue)
    }

    package func run() -> RunMeasurement {
        let started = Date()
        delegateQueue.addOperation { [self] in
            for _ in 0..<(allAtOnce ? scenario.count : min(scenario.concurrency, scenario.count)) { startNext() }
        }
        done.wait()
        measurement.seconds = Date().timeIntervalSince(started)
        session.finishTasksAndInvalidate()
        return measurement
    }

    private func startNext() {
        guard next < scenario.count else { return }
        let index = next
        next += 1
        session.dataTask(with: scenario.url(base: base, index: index)).resume()
    }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let id = dataTask.taskIdentifier
        if scenario.destination == .disk {
            let path = directory.appendingPathComponent("raw-\(id).part").path
            files[id] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        } else {
            var buffer = Data()
            if response.expectedContentLength > 0 { buffer.reserveCapacity(Int(response.expectedContentLength)) }
            buffers[id] = buffer
        }
        completionHandler(.allow)
    }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let id = dataTask.taskIdentifier
        if let fd = files[id] {
            data.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
        } else {
            buffers[id]?.append(data)
        }
    }

    package func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let id = task.taskIdentifier
        var length = 0
        if let fd = files.removeValue(forKey: id) {
            length = Int(lseek(fd, 0, SEEK_CUR))
            close(fd)
            let part = directory.appendingPathComponent("raw-\(id).part").path
            rename(part, directory.appendingPathComponent("raw-\(id)").path)
        } else {
            length = buffers.removeValue(forKey: id)?.count ?? 0
        }
        if error != nil || (task.response as? HTTPURLResponse)?.statusCode != 200 || length != scenario.bodySize {
            measurement.errors += 1
        }
        measurement.bytes += Int64(length)
        measurement.requests += 1
        completed += 1
        if completed == scenario.count {
            done.signal()
        } else if !allAtOnce {
            startNext()
        }
    }
}

/// The floor under any client built on `Operation`: one `BlockOperation` per request, each
/// holding its `URLRequest`, in a suspended `OperationQueue`. Nothing is sent; the measurement
/// is the process's peak RSS with all of them queued (and a URLSession made, so that the same
/// libraries are loaded as in the clients).
package enum OperationsFloor {
    package static func run(scenario: Scenario, base: URL) -> RunMeasurement {
        let started = Date()
        let session = URLSession(configuration: .default)
        defer { session.finishTasksAndInvalidate() }
        let queue = OperationQueue()
        queue.isSuspended = true
        var operations: [Operation] = []
        operations.reserveCapacity(scenario.count)
        for index in 0..<scenario.count {
            let request = URLRequest(url: scenario.url(base: base, index: index))
            operations.append(BlockOperation { _ = request })
        }
        queue.addOperations(operations, waitUntilFinished: false)
        operations = []
        var measurement = RunMeasurement()
        measurement.peakRSS = Memory.peakResidentBytes()
        queue.cancelAllOperations()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        measurement.seconds = Date().timeIntervalSince(started)
        return measurement
    }

    /// The floors under any client that queues, held in an array with no queue (and a
    /// URLSession made, as above): the requests alone, one `URLRequest` each — what any queue
    /// of fetches holds — or, `asOperations`, each in an `Operation` of its own — what a queue
    /// whose fetches are operations holds at least.
    package static func held(scenario: Scenario, base: URL, asOperations: Bool) -> RunMeasurement {
        let started = Date()
        let session = URLSession(configuration: .default)
        defer { session.finishTasksAndInvalidate() }
        var requests: [URLRequest] = []
        var operations: [HeldRequest] = []
        if asOperations { operations.reserveCapacity(scenario.count) } else { requests.reserveCapacity(scenario.count) }
        for index in 0..<scenario.count {
            let request = URLRequest(url: scenario.url(base: base, index: index))
            if asOperations { operations.append(HeldRequest(request)) } else { requests.append(request) }
        }
        var measurement = RunMeasurement()
        measurement.peakRSS = Memory.peakResidentBytes()
        withExtendedLifetime((requests, operations)) {}
        measurement.seconds = Date().timeIntervalSince(started)
        return measurement
    }

    /// An operation that only holds its request.
    package final class HeldRequest: Operation, @unchecked Sendable {
        package let request: URLRequest
        package init(_ request: URLRequest) { self.request = request }
    }
}
