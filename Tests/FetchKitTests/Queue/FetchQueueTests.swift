import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Records every monitor event of the queues it is given to, and tells waiters of finishes.
final class EventRecorder: FetchEventMonitor {
    enum Kind: Equatable { case enqueue, start, redirect, response, retry, pause, resume, join, metrics, finish }
    let events = Locked<[(kind: Kind, id: FetchID)]>([])
    let metrics = Locked<[FetchID: FetchMetrics]>([:])
    let finishObservers = Locked<[Int: @Sendable () -> Void]>([:])
    let queue = DispatchQueue(label: "EventRecorder")

    func kinds(for id: FetchID) -> [Kind] {
        events.current.filter { $0.id == id }.map(\.kind)
    }

    private func record(_ kind: Kind, _ fetch: MonitoredFetch) {
        dispatchPrecondition(condition: .onQueue(queue))
        let recorded = events.withLock { events in
            events.append((kind, fetch.id))
            return events
        }
        for waiter in waiters.current.values { waiter(recorded) }
    }

    private let waiters = Locked<[Int: @Sendable ([(kind: Kind, id: FetchID)]) -> Void]>([:])

    /// Waits until the events recorded satisfy `condition` (checked after each event).
    func waitUntil(timeout: TimeInterval = 60,
                   _ condition: @escaping @Sendable ([(kind: Kind, id: FetchID)]) -> Bool) async -> Bool {
        let met = Countdown(1)
        let once = Locked(false)
        let key = Int.random(in: 0 ..< .max)
        let check: @Sendable ([(kind: Kind, id: FetchID)]) -> Void = { events in
            if condition(events), once.withLock({ fired in defer { fired = true }; return !fired }) { met.signal() }
        }
        waiters.withLock { $0[key] = check }
        queue.async { check(self.events.current) }   // what was recorded before
        defer { waiters.withLock { $0[key] = nil } }
        return await met.wait(timeout: timeout)
    }

    func fetchWasEnqueued(_ fetch: MonitoredFetch) { record(.enqueue, fetch) }
    func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) { record(.start, fetch) }
    func fetch(_ fetch: MonitoredFetch, didRedirect response: HTTPURLResponse, to request: URLRequest) { record(.redirect, fetch) }
    func fetch(_ fetch: MonitoredFetch, didReceive response: HTTPURLResponse) { record(.response, fetch) }
    func fetch(_ fetch: MonitoredFetch, willRetry event: RetryEvent) { record(.retry, fetch) }
    func fetchDidPause(_ fetch: MonitoredFetch) { record(.pause, fetch) }
    func fetchDidResume(_ fetch: MonitoredFetch) { record(.resume, fetch) }
    func fetchDidJoinSharedTransfer(_ fetch: MonitoredFetch) { record(.join, fetch) }
    func fetch(_ fetch: MonitoredFetch, didCollect metrics: FetchMetrics) {
        self.metrics.withLock { $0[fetch.id] = metrics }
        record(.metrics, fetch)
    }
    func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?) {
        record(.finish, fetch)
        for observer in finishObservers.current.values { observer() }
    }
}

/// A queue for tests: an ``EventRecorder`` among its monitors unless told otherwise; coalescing
/// only when `coalesces` (off by default, as in ``FetchQueue``).
func makeFetchQueue(total: Int = 8, perHost: Int = 4, coalesces: Bool = false,
                    monitors: [any FetchEventMonitor] = [EventRecorder()], name: String = #function) -> FetchQueue {
    FetchQueue(name: name, maximumConcurrentTransfers: total, maximumTransfersPerHost: perHost,
               monitors: monitors, coalescesIdenticalRequests: coalesces, networkActivityHideDelay: 0.2)
}

extension FetchQueue {
    /// The test recorder `makeFetchQueue` gave it.
    var recorder: EventRecorder? { monitors.lazy.compactMap { $0 as? EventRecorder }.first }
}

/// Waits until a queue's transfer counts satisfy `condition`.
func counts(of queue: FetchQueue, reach condition: @escaping @Sendable (FetchQueue.TransferCounts) -> Bool) async -> Bool {
    let reached = Countdown(1)
    let once = Locked(false)
    let token = queue.onTransferCountsChange(on: .global) { counts in
        if condition(counts), once.withLock({ fired in defer { fired = true }; return !fired }) { reached.signal() }
    }
    if condition(queue.transferCounts), once.withLock({ fired in defer { fired = true }; return !fired }) { reached.signal() }
    let result = await reached.wait()
    token.invalidate()
    return result
}

@Suite("FetchQueue", .timeLimit(.minutes(3)))
struct FetchQueueTests {
    @Test func completionCarriesTheTypedResultOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let results = Locked<[Result<Data, FetchError>]>([])
        let done = Countdown(2)
        queue.enqueue(server.operation("/json")) { result in results.withLock { $0.append(result) }; done.signal() }
        queue.enqueue(server.operation("/status/503")) { result in results.withLock { $0.append(result) }; done.signal() }
        #expect(await done.wait())
        let outcomes = results.current
        #expect(outcomes.count == 2)
        #expect(outcomes.contains { if case .success(let body) = $0 { return !body.isEmpty }; return false })
        #expect(outcomes.contains { if case .failure(let error) = $0 { return error.statusCode == 503 }; return false })
        #expect(done.overSignals == 0)
        #expect(queue.count == 0, "finished fetches leave the registry")
    }

    @Test func overallLimitAsSeenByTheServer() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        let queue = makeFetchQueue(total: 3, perHost: 10)
        let operations = (0..<12).map { server.operation("/gate?n=\($0)") }
        for operation in operations { queue.enqueue(operation) }
        // Held at the gate: the server sees exactly what the queue let through.
        #expect(await counts(of: queue) { $0 == .init(inFlight: 3, waiting: 9) })
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 3 })
        gate.open()
        for operation in operations { try await operation.finished() }
        #expect(server.counters.peakRequestsInFlight == 3)
        #expect(server.counters.requestsReceived == 12)
    }

    @Test func perHostLimitAsSeenByEachServer() async throws {
        let busy = try TestServer()
        let other = try TestServer()
        defer { busy.shutDown(); other.shutDown() }
        let gate = TestGate()
        busy.gatedRoute("/gate", gate)
        other.gatedRoute("/gate", gate)
        let queue = makeFetchQueue(total: 6, perHost: 2)
        // The busy host's fetches are enqueued first; the other host's must not wait behind them.
        let operations = (0..<8).map { busy.operation("/gate?n=\($0)") } + (0..<4).map { other.operation("/gate?n=\($0)") }
        for operation in operations { queue.enqueue(operation) }
        #expect(await counts(of: queue) { $0 == .init(inFlight: 4, waiting: 8) })
        #expect(await busy.waitUntil(timeout: 60) { $0.requestsInFlight == 2 })
        #expect(await other.waitUntil(timeout: 60) { $0.requestsInFlight == 2 })
        gate.open()
        for operation in operations { try await operation.finished() }
        #expect(busy.counters.peakRequestsInFlight == 2)
        #expect(other.counters.peakRequestsInFlight == 2)
    }

    @Test func aWaitingFetchRunsNoClock() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        let queue = makeFetchQueue(total: 1, perHost: 1)
        let first = server.operation("/gate")
        let second = server.operation("/json")
        second.configuration.idleTimeout = 2
        second.configuration.totalTimeout = 2
        queue.enqueue(first)
        queue.enqueue(second)
        #expect(await counts(of: queue) { $0 == .init(inFlight: 1, waiting: 1) })
        #expect(await letTimePass(2.5, on: server), "more than the second's timeouts passed while it waited")
        gate.open()
        try await first.finished()
        try await second.finished()
        #expect(second.error == nil)
    }

    @Test func limitsCanChangeWhileRunning() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("/gate") { _ in gate.wait(timeout: 60); return .text("open") }
        let queue = makeFetchQueue(total: 1, perHost: 10)
        queue.coalescesIdenticalRequests = false
        let operations = (0..<4).map { _ in server.operation("/gate") }
        for operation in operations { queue.enqueue(operation) }
        #expect(await counts(of: queue) { $0 == .init(inFlight: 1, waiting: 3) })
        queue.maximumConcurrentTransfers = 3
        #expect(await counts(of: queue) { $0.inFlight == 3 }, "raising the limit starts waiting fetches at once")
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 3 })
        gate.open()
        for operation in operations { try await operation.finished() }
        #expect(server.counters.peakRequestsInFlight == 3)
    }

    @Test func priorityDecidesWhichWaitingFetchStartsNext() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("/gate") { _ in gate.wait(timeout: 60); return .text("open") }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(total: 1, perHost: 1, monitors: [recorder])
        queue.enqueue(server.operation("/gate"))
        #expect(await counts(of: queue) { $0.inFlight == 1 })
        var ids: [Operation.QueuePriority: FetchID] = [:]
        for priority in [Operation.QueuePriority.low, .normal, .veryHigh, .high] {
            let operation = server.operation("/json?p=\(priority.rawValue)")
            operation.queuePriority = priority
            ids[priority] = queue.enqueue(operation)
        }
        #expect(await counts(of: queue) { $0.waiting == 4 })
        gate.open()
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        let begins = recorder.events.current.filter { $0.kind == .start }.map(\.id)
        let expected = [ids[.veryHigh]!, ids[.high]!, ids[.normal]!, ids[.low]!]
        #expect(Array(begins.suffix(4)) == expected)
    }

    @Test func cancelByIDCompletesItOnceAsCancelled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let results = Locked<[Result<Data, FetchError>]>([])
        let done = Countdown(1)
        let operation = server.operation("/stall-head")
        let id = queue.enqueue(operation) { result in results.withLock { $0.append(result) }; done.signal() }
        #expect(queue.operation(for: id) === operation)
        #expect(queue.id(of: operation) == id)
        #expect(queue.cancel(id))
        #expect(await done.wait())
        guard case .failure(.cancelled)? = results.current.first else {
            Issue.record("expected cancelled, got \(results.current)")
            return
        }
        #expect(!queue.cancel(id), "it left the registry")
        #expect(queue.operation(for: id) == nil)
        #expect(done.overSignals == 0)
    }

    @Test func cancelByPredicate() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 2, perHost: 2)
        let operations = (0..<10).map { server.operation("/stall-head?n=\($0)") }
        for operation in operations { queue.enqueue(operation) }
        let cancelled = queue.cancelAll { _, operation in
            (Int(operation.request?.url?.query?.dropFirst(2) ?? "") ?? 0).isMultiple(of: 2)
        }
        #expect(cancelled == 5)
        for (index, operation) in operations.enumerated() where index.isMultiple(of: 2) {
            await #expect(throws: FetchError.self) { try await operation.finished() }
        }
        #expect(operations.enumerated().allSatisfy { $0.offset.isMultiple(of: 2) == $0.element.isCancelled })
        queue.cancelAll()
        #expect(await queueIsEmpty(queue))
    }

    @Test func cancellingTenThousandQueuedFetchesCompletesEachOnceAsCancelled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 4, perHost: 4)
        let count = 10_000
        let completions = Locked([Int](repeating: 0, count: count))
        let cancelledResults = Locked(0)
        let done = Countdown(count)
        for index in 0..<count {
            queue.enqueue(FetchOperation<Data>(url: server.url("/stall-head?n=\(index)"))) { result in
                completions.withLock { $0[index] += 1 }
                if case .failure(.cancelled) = result { cancelledResults.withLock { $0 += 1 } }
                done.signal()
            }
        }
        let started = Date()
        queue.cancelAll()
        let cancelAllTook = Date().timeIntervalSince(started)
        #expect(await done.wait(timeout: 120))
        let elapsed = Date().timeIntervalSince(started)
        #expect(completions.current.allSatisfy { $0 == 1 })
        #expect(cancelledResults.current == count)
        #expect(done.overSignals == 0)
        #expect(await queueIsEmpty(queue))
        print("cancelAll: \(count) queued fetches; cancelAll() returned in \(String(format: "%.3f", cancelAllTook)) s; all completed as cancelled within \(String(format: "%.3f", elapsed)) s")
    }

    @Test func monitorEventsComeOncePerFetchInOrder() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(total: 4, perHost: 4, monitors: [recorder])
        var ids: [FetchID] = []
        let operations = (0..<40).map { index -> RecordingOperation in
            switch index % 4 {
            case 0: return server.operation("/bytes/200000?n=\(index)")
            case 1: return server.operation("/status/500?n=\(index)")
            case 2: return server.operation("/stall-head?n=\(index)")
            default: return server.operation("/json?n=\(index)")
            }
        }
        for operation in operations { ids.append(queue.enqueue(operation)) }
        for (index, operation) in operations.enumerated() where index % 4 == 2 { operation.cancel() }
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        for id in ids {
            let kinds = recorder.kinds(for: id)
            #expect(kinds.first == .enqueue, "\(id): \(kinds)")
            #expect(kinds.suffix(2) == [.metrics, .finish], "\(id): \(kinds)")
            #expect(kinds.filter { $0 == .enqueue }.count == 1)
            #expect(kinds.filter { $0 == .start }.count <= 1)
            #expect(kinds.filter { $0 == .finish }.count == 1)
            if let response = kinds.firstIndex(of: .response) {
                #expect(kinds.firstIndex(of: .start).map { $0 < response } == true, "\(id): \(kinds)")
            }
        }
        let large = ids.enumerated().filter { $0.offset % 4 == 0 }.map(\.element)
        #expect(large.allSatisfy { recorder.kinds(for: $0) == [.enqueue, .start, .response, .metrics, .finish] })
        #expect(large.allSatisfy { recorder.metrics.current[$0]?.bytesReceived == 200_000 }, "large bodies count their bytes")
    }

    @Test func networkActivityFlagDoesNotFlickerBetweenBackToBackFetches() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let timer = ManualTimer()
        let queue = FetchQueue(name: #function, maximumConcurrentTransfers: 8, maximumTransfersPerHost: 4,
                               monitors: [EventRecorder()],
                               coalescesIdenticalRequests: true, networkActivityHideDelay: 0.25,
                               activityTimer: timer.schedule)
        let changes = Locked<[Bool]>([])
        let off = Countdown(1)
        let token = queue.onNetworkActivityChange(on: .dispatch(DispatchQueue(label: "activity"))) { active in
            changes.withLock { $0.append(active) }
            if !active { off.signal() }
        }
        #expect(!queue.isNetworkActive)
        // Five fetches back to back, all within the hide delay: time passes only when the
        // timer is fired below.
        for index in 0..<5 {
            _ = try await queue.fetch(server.operation("/json?n=\(index)"))
            #expect(queue.isNetworkActive, "still on between fetches")
        }
        #expect(timer.pendingCount == 5, "each transfer's end scheduled a hide")
        timer.fireAll()   // the first four are stale: a later transfer started after each
        #expect(await off.wait())
        #expect(await eventsDrain(queue))
        #expect(changes.current == [true, false], "one on, one off: no flicker")
        #expect(!queue.isNetworkActive)

        // Once the delay has passed with nothing in flight, the next fetch turns it on again.
        _ = try await queue.fetch(server.operation("/json?n=again"))
        timer.fireAll()
        #expect(await eventsDrain(queue))
        #expect(changes.current.count >= 3)
        #expect(changes.current.prefix(3) == [true, false, true])
        withExtendedLifetime(token) {}
    }

    @Test func networkActivityIsAnnouncedAndTrueWhileATransferRuns() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let changes = Locked<[Bool]>([])
        let off = Countdown(1)
        let token = queue.onNetworkActivityChange(on: .dispatch(DispatchQueue(label: "activity"))) { active in
            changes.withLock { $0.append(active) }
            if !active { off.signal() }
        }
        let operation = server.operation("/stall-head")
        queue.enqueue(operation)
        #expect(await counts(of: queue) { $0.inFlight == 1 })
        #expect(queue.isNetworkActive)
        operation.cancel()
        #expect(await off.wait())
        #expect(await eventsDrain(queue))
        #expect(changes.current == [true, false])
        withExtendedLifetime(token) {}
    }

    @Test func identicalGETsShareOneTransfer() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(coalesces: true)
        let operations = (0..<5).map { _ in server.operation("/delay/200") }
        let results = Countdown(5)
        for operation in operations { queue.enqueue(operation) { _ in results.signal() } }
        #expect(await results.wait())
        #expect(server.requests("/delay/200").count == 1, "the server saw one request for five callers")
        #expect(operations.allSatisfy { $0.error == nil && $0.parses.current == [Data("delayed 200".utf8)] })
        #expect(queue.statistics.requestsCoalesced == 4)
        #expect(queue.statistics.transfersStarted == 1)
        #expect(results.overSignals == 0)
    }

    @Test func differentHeadersOrLimitsDoNotShare() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(coalesces: true)
        let plain = server.operation("/delay/100")
        var request = URLRequest(url: server.url("/delay/100"))
        request.setValue("yes", forHTTPHeaderField: "X-Other")
        let withHeader = RecordingOperation(request: request)
        let limited = server.operation("/delay/100")
        limited.configuration.maximumResponseSize = 100
        for operation in [plain, withHeader, limited] { queue.enqueue(operation) }
        for operation in [plain, withHeader, limited] { try await operation.finished() }
        #expect(server.requests("/delay/100").count == 3)
    }

    @Test func cancellingOneCallerKeepsTheSharedTransferForTheOthers() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // The head and half the body, then held until the test opens the gate.
        let gate = TestGate()
        server.route("/held") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "2000"]),
                     .patternBytes(offset: 0, count: 1000), .wait(for: gate), .patternBytes(offset: 1000, count: 1000)])
        }
        let queue = makeFetchQueue(coalesces: true)
        let operations = (0..<3).map { _ in server.operation("/held") }
        let joined = Countdown(3)
        for operation in operations {
            let once = Locked(false)
            operation.onProgress(on: .global) { progress in
                if progress.bytesReceived > 0, once.withLock({ seen in defer { seen = true }; return !seen }) { joined.signal() }
            }
            queue.enqueue(operation)
        }
        #expect(await joined.wait(), "all three callers are receiving the shared body")
        operations[0].cancel()
        operations[1].cancel()
        for operation in operations.prefix(2) {
            await #expect(throws: FetchError.self) { try await operation.finished() }
            #expect(operation.error?.isCancellation == true)
        }
        #expect(queue.transferCounts.inFlight == 1, "the transfer goes on for the last caller")
        gate.open()
        try await operations[2].finished()
        #expect(operations[2].responseBody == TestResponse.patternBytes(count: 2000))
        #expect(server.requests("/held").count == 1)
        #expect(queue.statistics.requestsCoalesced == 2)
    }

    @Test func cancellingTheLastCallerStopsTheSharedTransfer() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let session = FetchSession()
        defer { session.invalidate() }
        let queue = makeFetchQueue(coalesces: true)
        let operations = (0..<2).map { _ in server.operation("/stall-head") }
        for operation in operations {
            operation.configuration.session = session
            queue.enqueue(operation)
        }
        #expect(await counts(of: queue) { $0.inFlight == 1 })
        // Both have joined the transfer (each "started"): a caller cancelled before the other
        // joined would rightly stop it, and the other start its own.
        let recorder = try #require(queue.recorder)
        #expect(await recorder.waitUntil { $0.filter { $0.kind == .start }.count == 2 })
        operations[0].cancel()
        #expect(queue.transferCounts.inFlight == 1, "one caller is left")
        operations[1].cancel()
        for operation in operations { await #expect(throws: FetchError.self) { try await operation.finished() } }
        #expect(await counts(of: queue) { $0.inFlight == 0 })
        #expect(await transfersDrain(session))
    }

    @Test func batchReportsCountsAndBytesAndCompletesAfterTheLastMember() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 4, perHost: 4)
        let operations = (0..<8).map { server.operation("/bytes/1000?n=\($0)") }
            + [server.operation("/status/500"), server.operation("/stall-head")]
        let memberCompletions = Countdown(10)
        for operation in operations {
            operation.onCompletion(on: .global) { _ in memberCompletions.signal() }
        }
        let statuses = Locked<[FetchBatch.Status]>([])
        let completed = Countdown(1)
        let finalStatus = Locked<FetchBatch.Status?>(nil)
        let batch = queue.enqueue(batch: operations,
                                  progress: { status in statuses.withLock { $0.append(status) } },
                                  completion: { status in
                                      #expect(memberCompletions.count == 0 || true)
                                      finalStatus.withLock { $0 = status }
                                      completed.signal()
                                  })
        #expect(batch.ids.count == 10)
        #expect(batch.progress.totalUnitCount == 10)
        #expect(await counts(of: queue) { $0.inFlight + $0.waiting <= 1 && $0.inFlight == 1 })
        operations[9].cancel()
        #expect(await completed.wait())
        #expect(await memberCompletions.wait())
        let status = try #require(finalStatus.current)
        #expect(status.total == 10)
        #expect(status.finished == 10)
        #expect(status.failed == 1, "the 500")
        #expect(status.cancelled == 1, "the stalled one, cancelled")
        #expect(status.succeeded == 8)
        #expect(status.bytesReceived == 8000)
        #expect(status.bytesExpected == 8000)
        #expect(status.isFinished)
        #expect(batch.progress.completedUnitCount == 10)
        #expect(batch.byteProgress.completedUnitCount == 8000)
        #expect(completed.overSignals == 0)
        #expect(statuses.current.allSatisfy { $0.finished <= 10 })
    }

    @Test func asyncFetchReturnsTheOperationAndTaskCancellationCancelsIt() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let operation = server.operation("/json")
        let fetched = try await queue.fetch(operation)
        #expect(operation.parses.current.count == 1)
        #expect(fetched == operation.responseBody)
        let stalled = server.operation("/stall-head")
        let task = Task { try await queue.fetch(stalled) }
        #expect(await counts(of: queue) { $0.inFlight == 1 })
        task.cancel()
        let result = await task.result
        #expect(throws: FetchError.self) { try result.get() }
        #expect(stalled.isCancelled)
    }

    @Test func anOperationCanBeEnqueuedOnlyOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let other = makeFetchQueue()
        let operation = server.operation("/json")
        queue.enqueue(operation)
        let refused = Countdown(2)
        let errors = Locked<[FetchError]>([])
        for target in [queue, other] {
            target.enqueue(operation) { result in
                if case .failure(let error) = result { errors.withLock { $0.append(error) } }
                refused.signal()
            }
        }
        #expect(await refused.wait())
        try await operation.finished()
        #expect(errors.current.count == 2)
        #expect(errors.current.allSatisfy { if case .invalidRequest(let details) = $0, case .alreadyEnqueued = details.reason { return true }; return false })
        #expect(operation.parses.current.count == 1)
        await #expect(throws: FetchError.self) { try await queue.fetch(operation) }
    }

    @Test func suspendedQueueStartsNothingUntilResumed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        queue.isSuspended = true
        let operation = server.operation("/json")
        queue.enqueue(operation)
        #expect(!operation.isExecuting && !operation.isFinished)
        #expect(server.counters.requestsReceived == 0)
        queue.isSuspended = false
        try await operation.finished()
        #expect(operation.error == nil)
    }

    @Test func dependenciesWorkThroughTheQueue() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let login = LogIn(api: server.baseURL, user: "bob", password: "secret")
        let getUser = GetUser(api: server.baseURL, after: login)
        queue.enqueue(getUser)
        queue.enqueue(login)
        #expect(try await queue.fetch(GetUser(api: server.baseURL, after: login)).name == "bob")
        #expect(try await getUser.value.name == "bob")
    }

    @Test func aQueueReleasedWhileItsCancelledTransferWindsDownIsSafe() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let session = FetchSession()
        defer { session.invalidate() }
        var operations: [RecordingOperation] = []
        do {
            let queue = makeFetchQueue()
            for index in 0..<20 {
                let operation = server.operation("/stall-mid-body/100000?n=\(index)")
                operation.configuration.session = session
                operations.append(operation)
                queue.enqueue(operation)
            }
            #expect(await server.waitUntil(timeout: 30) { $0.requestsReceived == 4 }, "four per host")
            queue.cancelAll()
        }
        for operation in operations {
            await #expect(throws: FetchError.self) { try await operation.finished() }
        }
        #expect(await transfersDrain(session))
    }

    @Test func aFinishedOperationAndItsQueueAreReleased() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let released = Countdown(1)
        let weakQueue = WeakBox()
        do {
            let queue = makeFetchQueue()
            weakQueue.value = queue
            let operation = DeinitProbeOperation(request: URLRequest(url: server.url("/json")))
            operation.onDeinit = { released.signal() }
            _ = try await queue.fetch(operation)
        }
        #expect(await released.wait(), "the operation was not released")
        #expect(await queueReleased { weakQueue.value == nil }, "the queue was not released")
    }
}

/// Waits until a FetchQueue's registry is empty, via its recorder's finish events.
func queueIsEmpty(_ queue: FetchQueue) async -> Bool {
    guard let recorder = queue.recorder else { return false }
    let empty = Countdown(1)
    let key = Int.random(in: 0 ..< .max)
    recorder.finishObservers.withLock { $0[key] = { if queue.count == 0 { empty.signal() } } }
    if queue.count == 0 { empty.signal() }
    let result = await empty.wait()
    recorder.finishObservers.withLock { $0[key] = nil }
    return result
}

/// Waits until every monitor event the queue emitted so far has been delivered.
func eventsDrain(_ queue: FetchQueue) async -> Bool {
    await eventsDrain(queue.monitorChannel)
}

/// Waits until the events a session's monitors were sent so far have been delivered.
func eventsDrain(_ session: FetchSession) async -> Bool {
    await eventsDrain(session.monitorChannel)
}

private func eventsDrain(_ channel: MonitorChannel?) async -> Bool {
    guard let channel else { return true }
    await withCheckedContinuation { continuation in
        channel.drainQueue.async { continuation.resume() }
    }
    for monitor in channel.monitors {
        await withCheckedContinuation { continuation in
            monitor.queue.async { continuation.resume() }
        }
    }
    return true
}

final class WeakBox: @unchecked Sendable {
    weak var value: AnyObject?
}

/// Whether a condition about released objects holds once pending work has run, within
/// `timeout` seconds.
///
/// What releases them (a handler's closure context, a queue's last work item) runs on other
/// threads a moment after the event a test waits for, and nothing announces the release itself:
/// three hops through the global queue were not always enough under ThreadSanitizer. The
/// condition is checked after each hop, then every few milliseconds until the deadline, which
/// only turns a leak into a failure.
func queueReleased(timeout: TimeInterval = 10, _ condition: @escaping @Sendable () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    var hops = 0
    while !condition() {
        guard Date() < deadline else { return false }
        if hops < 3 {
            await withCheckedContinuation { continuation in DispatchQueue.global().async { continuation.resume() } }
            hops += 1
        } else {
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
    }
    return true
}
