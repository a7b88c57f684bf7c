import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Records the kind of each event and the progress values, for the progress and log tests.
private final class ProgressLog: FetchEventMonitor {
    let lines = Locked<[String]>([])
    let progress = Locked<[FetchProgress]>([])
    let metrics = Locked<[FetchMetrics]>([])
    let queue = DispatchQueue(label: "ProgressLog")

    func fetchWasEnqueued(_ fetch: MonitoredFetch) { lines.withLock { $0.append("enqueued") } }
    func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) { lines.withLock { $0.append("started") } }
    func fetch(_ fetch: MonitoredFetch, didReceive response: HTTPURLResponse) { lines.withLock { $0.append("response") } }
    func fetch(_ fetch: MonitoredFetch, didProgress progress: FetchProgress) {
        self.progress.withLock { $0.append(progress) }
        lines.withLock { $0.append("progress") }
    }
    func fetch(_ fetch: MonitoredFetch, didCollect metrics: FetchMetrics) {
        self.metrics.withLock { $0.append(metrics) }
        lines.withLock { $0.append("metrics") }
    }
    func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?) {
        lines.withLock { $0.append(error == nil ? "finished" : error?.isCancellation == true ? "cancelled" : "failed") }
    }
}

@Suite("Monitors hear progress, and a whole log for every fetch", .timeLimit(.minutes(3)))
struct MonitorProgressTests {
    /// A body that trickles in 60 chunks, 5 ms apart: the monitor hears its progress between
    /// the response and the metrics, in order, at most once per 100 ms (and the first report).
    @Test func progressIsHeardInOrderAndThrottled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let log = ProgressLog()
        let queue = makeFetchQueue(monitors: [log])
        let began = DispatchTime.now().uptimeNanoseconds
        let body = try await queue.fetch(FetchOperation<Data>(url: server.url("/trickle/6000/100/5")))
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - began) / 1e9
        #expect(body.count == 6000)
        #expect(await eventsDrain(queue))
        let lines = log.lines.current
        let reports = log.progress.current
        #expect(!reports.isEmpty, "the monitor heard no progress")
        let first = try #require(lines.firstIndex(of: "progress"))
        let last = try #require(lines.lastIndex(of: "progress"))
        #expect(lines[..<first] == ["enqueued", "started", "response"])
        #expect(lines[(last + 1)...] == ["metrics", "finished"])
        #expect(zip(reports, reports.dropFirst()).allSatisfy { $0.bytesReceived <= $1.bytesReceived })
        // One at the response, then at most one per 100 ms (the body took `elapsed` at least).
        #expect(Double(reports.count) <= elapsed / 0.1 + 2,
                "\(reports.count) progress events in \(elapsed) s: not throttled")
    }

    /// The report that completes a body of known length always reaches the monitor.
    @Test func theReportCompletingAKnownLengthIsHeard() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let log = ProgressLog()
        let queue = makeFetchQueue(monitors: [log])
        let body = try await queue.fetch(FetchOperation<Data>(url: server.url("/bytes/300000")))
        #expect(body.count == 300_000)
        #expect(await eventsDrain(queue))
        let final = try #require(log.progress.current.last)
        #expect(final.bytesReceived == 300_000)
        #expect(final.bytesExpected == 300_000)
    }

    /// A fetch cancelled while it waits for a transfer slot: its log is whole — enqueued,
    /// metrics (0 attempts), cancelled — and nothing more arrives once its queue drained.
    @Test func aFetchCancelledBeforeItsSlotHasAWholeLog() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        defer { gate.open() }
        server.gatedRoute("/gate", gate)
        let log = ProgressLog()
        let recorder = EventRecorder()
        let queue = makeFetchQueue(total: 1, perHost: 1, monitors: [recorder, log])
        let holder = server.operation("/gate")
        queue.enqueue(holder)
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 1 })
        let waiting = FetchOperation<Data>(url: server.url("/json"))
        let id = queue.enqueue(waiting)
        #expect(await recorder.waitUntil(timeout: 60) { $0.contains { $0.id == id && $0.kind == .enqueue } })
        waiting.cancel()
        #expect(await recorder.waitUntil(timeout: 60) { $0.contains { $0.id == id && $0.kind == .finish } })
        gate.open()
        try await holder.finished()
        #expect(await queueDrains(queue.operationQueue))
        #expect(await eventsDrain(queue))
        #expect(recorder.kinds(for: id) == [.enqueue, .metrics, .finish])
        #expect(log.metrics.current.first?.attempts == 0)
    }

    /// A fetch cancelled in a suspended queue, which then resumes and starts it (Foundation
    /// finishes it only then): the same whole log, heard once, at the cancel.
    @Test func aFetchCancelledInASuspendedQueueHasAWholeLogOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(monitors: [recorder])
        queue.isSuspended = true
        let operation = FetchOperation<Data>(url: server.url("/json"))
        let id = queue.enqueue(operation)
        operation.cancel()
        #expect(await recorder.waitUntil(timeout: 60) { $0.contains { $0.id == id && $0.kind == .finish } })
        queue.isSuspended = false
        #expect(await queueDrains(queue.operationQueue))
        #expect(operation.isFinished)
        #expect(await eventsDrain(queue))
        #expect(recorder.kinds(for: id) == [.enqueue, .metrics, .finish])
        #expect(server.counters.requestsReceived == 0)
    }
}

@Suite("FetchQueue.shared serves one-liners beside slow requests", .timeLimit(.minutes(3)))
struct SharedQueueTests {
    /// Eight requests that hang at two servers (four each) hold slots of the shared queue: a
    /// one-liner to a third server, and one more to each slow server, still go out at once.
    @Test func slowRequestsHoldUpNoOtherCaller() async throws {
        let slow = [try TestServer(), try TestServer()]
        let fast = try TestServer.standard()
        let gate = TestGate()
        defer {
            gate.open()
            for server in slow { server.shutDown() }
            fast.shutDown()
        }
        for server in slow { server.gatedRoute("/slow", gate) }
        let shared = FetchQueue.shared
        #expect(shared.maximumConcurrentTransfers == FetchQueue.sharedMaximumConcurrentTransfers)
        #expect(shared.maximumTransfersPerHost == FetchQueue.sharedMaximumTransfersPerHost)
        let held = Countdown(9)
        // They hang for the whole test: no timeout frees their slots meanwhile.
        func hanging(_ url: URL) -> FetchOperation<Data> {
            let operation = FetchOperation<Data>(url: url)
            operation.configuration.idleTimeout = 600
            operation.configuration.retryPolicy = .none
            return operation
        }
        for index in 0..<8 {
            shared.enqueue(hanging(slow[index % 2].url("/slow?n=\(index)")), on: .global) { _ in held.signal() }
        }
        for server in slow {
            #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 4 })
        }
        // A one-liner elsewhere, and a fifth request to a slow host, beside them.
        let answered = Countdown(1)
        let body = Locked<Data?>(nil)
        Task {
            let data = try? await FetchQueue.shared.fetch(DataFetchOperation(url: fast.url("/json")))
            body.withLock { $0 = data }
            answered.signal()
        }
        #expect(await answered.wait(timeout: 60), "the one-liner waited behind the slow requests")
        #expect(body.current?.isEmpty == false)
        shared.enqueue(hanging(slow[0].url("/slow?n=fifth")), on: .global) { _ in held.signal() }
        #expect(await slow[0].waitUntil(timeout: 60) { $0.requestsInFlight == 5 },
                "a fifth request to a slow host waited behind four")
        gate.open()
        #expect(await held.wait(timeout: 60))
    }
}

@Suite("Completion handlers know their operation", .timeLimit(.minutes(3)))
struct HandlerOperationTests {
    /// One handler for many operations: each call gets the operation it is for, with its result.
    @Test func enqueueHandsTheOperationToItsHandler() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let operations = (0..<4).map { FetchOperation<Data>(url: server.url("/bytes/\($0 + 1)")) }
        let heard = Locked<[(ObjectIdentifier, Int)]>([])
        let done = Countdown(operations.count)
        let handler: @Sendable (FetchOperation<Data>, Result<Data, FetchError>) -> Void = { operation, result in
            heard.withLock { $0.append((ObjectIdentifier(operation), (try? result.get())?.count ?? -1)) }
            done.signal()
        }
        for operation in operations { queue.enqueue(operation, on: .global, completionWithOperation: handler) }
        #expect(await done.wait(timeout: 60))
        let byOperation = Dictionary(uniqueKeysWithValues: heard.current)
        for (index, operation) in operations.enumerated() {
            #expect(byOperation[ObjectIdentifier(operation)] == index + 1)
        }
    }

    /// `onCompletion` with two parameters, on the main actor and on a queue; a refused
    /// operation's handler gets it too.
    @Test func onCompletionAndARefusalHandTheOperation() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let operation = FetchOperation<Data>(url: server.url("/json"))
        let onQueue = Countdown(1)
        let onMain = Countdown(1)
        let same = Locked<[Bool]>([])
        operation.onCompletion(on: .global) { finished, result in
            same.withLock { $0.append(finished === operation && (try? result.get()) != nil) }
            onQueue.signal()
        }
        operation.onCompletion { finished, result in
            same.withLock { $0.append(finished === operation && (try? result.get()) != nil) }
            onMain.signal()
        }
        queue.enqueue(operation)
        #expect(await onQueue.wait(timeout: 60))
        #expect(await onMain.wait(timeout: 60))
        let refused = Countdown(1)
        makeFetchQueue().enqueue(operation, on: .global) { again, result in
            if again === operation, case .failure(.invalidRequest) = result { refused.signal() }
        }
        #expect(await refused.wait(timeout: 60))
        #expect(same.current == [true, true])
    }
}
