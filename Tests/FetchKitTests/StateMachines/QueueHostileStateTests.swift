import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A queue in awkward states: cancelled in one sweep while thousands wait, dropped by its owner
/// while suspended, asked to run a fetch whose dependency nothing runs.
@Suite("FetchQueue hostile states", .timeLimit(.minutes(3)))
struct QueueHostileStateTests {
    // MARK: cancelAll is atomic

    /// Thousands wait behind a few transfers held at the server. After `cancelAll()` no fetch
    /// that was waiting may start a transfer — not even one that a cancelled transfer's freed
    /// slot would hand to a fetch the sweep has not reached yet.
    @Test func cancelAllStartsNoTransferForAnythingItCancels() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        defer { gate.open() }
        let limit = 4
        let count = 3_000
        let queue = makeFetchQueue(total: limit, perHost: limit)
        let completions = Locked([Int](repeating: 0, count: count))
        let cancelledResults = Locked(0)
        let done = Countdown(count)
        for index in 0..<count {
            queue.enqueue(FetchOperation<Data>(url: server.url("/gate?n=\(index)"))) { result in
                completions.withLock { $0[index] += 1 }
                if case .failure(.cancelled) = result { cancelledResults.withLock { $0 += 1 } }
                done.signal()
            }
        }
        // Given: `limit` transfers held at the server, the rest waiting for a slot.
        #expect(await counts(of: queue) { $0 == .init(inFlight: limit, waiting: count - limit) })
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == limit })
        // When
        queue.cancelAll()
        // Then: every completion once, as cancelled; no transfer started after the first `limit`.
        #expect(await done.wait(timeout: 60))
        #expect(completions.current.allSatisfy { $0 == 1 })
        #expect(cancelledResults.current == count)
        #expect(done.overSignals == 0)
        #expect(queue.statistics.transfersStarted == limit, "a cancelled fetch started a transfer")
        #expect(server.counters.requestsReceived == limit, "a cancelled fetch reached the server")
        #expect(await queueIsEmpty(queue))
    }

    /// The same with a predicate: the fetches it selects never start a transfer, the others run.
    @Test func cancelAllWherePredicateStartsNothingItSelected() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        defer { gate.open() }
        let limit = 2
        let count = 2_000
        let queue = makeFetchQueue(total: limit, perHost: limit)
        let done = Countdown(count + 3)
        let operations = (0..<count).map { FetchOperation<Data>(url: server.url("/gate?n=\($0)")) }
        for operation in operations {
            queue.enqueue(operation) { _ in done.signal() }
        }
        #expect(await counts(of: queue) { $0 == .init(inFlight: limit, waiting: count - limit) })
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == limit })
        // Three more, enqueued once the slots are taken: they wait.
        let kept = (0..<3).map { FetchOperation<Data>(url: server.url("/gate?kept=\($0)")) }
        for operation in kept {
            queue.enqueue(operation) { _ in done.signal() }
        }
        #expect(await counts(of: queue) { $0 == .init(inFlight: limit, waiting: count + 3 - limit) })
        let keptIDs = kept.map { ObjectIdentifier($0) }
        // When: every fetch but those three is cancelled.
        let cancelled = queue.cancelAll { _, operation in !keptIDs.contains(ObjectIdentifier(operation)) }
        #expect(cancelled == count)
        // Then: only the three kept ones start transfers; they wait at the gate.
        #expect(await counts(of: queue) { $0 == .init(inFlight: 2, waiting: 1) })
        #expect(queue.statistics.transfersStarted == limit + limit, "only kept fetches may start after the sweep")
        gate.open()
        #expect(await done.wait(timeout: 60))
        #expect(kept.allSatisfy { $0.error == nil })
        #expect(operations.allSatisfy { if case .cancelled? = $0.error { true } else { false } })
        #expect(queue.statistics.transfersStarted == limit + 3)
    }

    // MARK: A dropped queue is freed

    /// A suspended queue holds operations that never started. Its owner lets go of it (the
    /// operations are still held, here by the test): the queue is freed, and each operation
    /// finishes as cancelled, its completion once.
    @Test func aSuspendedQueueItsOwnerDropsIsFreedAndItsOperationsEndCancelled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let count = 20
        let weakQueue = WeakBox()
        let completions = Locked([Int](repeating: 0, count: count))
        let cancelledResults = Locked(0)
        let done = Countdown(count)
        var operations: [RecordingOperation] = []
        do {
            let queue = makeFetchQueue(total: 2, perHost: 2)
            weakQueue.value = queue
            queue.isSuspended = true
            for index in 0..<count {
                let operation = server.operation("/json?n=\(index)")
                operations.append(operation)
                queue.enqueue(operation) { result in
                    completions.withLock { $0[index] += 1 }
                    if case .failure(.cancelled) = result { cancelledResults.withLock { $0 += 1 } }
                    done.signal()
                }
            }
        }
        // The queue is gone once its operations have been told.
        #expect(await done.wait(timeout: 60), "\(done.count) operations never finished")
        #expect(await queueReleased { weakQueue.value == nil }, "the queue was not released")
        #expect(completions.current.allSatisfy { $0 == 1 })
        #expect(cancelledResults.current == count)
        // Their handlers ran at the cancel; Foundation finishes them as their queue, resumed
        // as it goes, starts them.
        #expect(await allSettle(operations))
        #expect(operations.allSatisfy { $0.isFinished && $0.isCancelled })
        #expect(server.counters.requestsReceived == 0)
        #expect(done.overSignals == 0)
    }

    /// Suspended with one transfer held at the server and others waiting for a slot, then
    /// dropped: the transfer in flight keeps the queue until it ends (and succeeds); then the
    /// queue is freed and the waiting ones end cancelled, none reaching the server.
    @Test func aDroppedSuspendedQueueLetsItsTransferFinishThenCancelsWhatWaits() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        defer { gate.open() }
        let weakQueue = WeakBox()
        let done = Countdown(4)
        let operations = (0..<4).map { server.operation("/gate?n=\($0)") }
        do {
            let queue = makeFetchQueue(total: 1, perHost: 1)
            weakQueue.value = queue
            for operation in operations {
                queue.enqueue(operation) { _ in done.signal() }
            }
            #expect(await counts(of: queue) { $0 == .init(inFlight: 1, waiting: 3) })
            #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 1 })
            queue.isSuspended = true
        }
        #expect(weakQueue.value != nil, "a transfer in flight keeps its queue")
        gate.open()
        #expect(await done.wait(timeout: 60), "\(done.count) operations never finished")
        #expect(await queueReleased { weakQueue.value == nil }, "the queue was not released")
        // Which one got the slot is a race among the four: exactly one.
        #expect(operations.filter { $0.error == nil }.count == 1)
        #expect(operations.filter { if case .cancelled? = $0.error { true } else { false } }.count == 3)
        #expect(server.counters.requestsReceived == 1)
        #expect(done.overSignals == 0)
    }

    /// A fetch waiting out a retry delay holds no transfer: suspended and dropped, the queue is
    /// freed at once, and the fetch ends cancelled instead of trying again.
    @Test func aDroppedSuspendedQueueCancelsAFetchWaitingToRetry() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let weakQueue = WeakBox()
        let retrying = Countdown(1)
        let done = Countdown(1)
        let operation = server.operation("/status/500")
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: 3_600, maximumDelay: 3_600, jitter: 0)   // only the drop ends it
        operation.onRetry(on: .global) { _ in retrying.signal() }
        do {
            let queue = makeFetchQueue()
            weakQueue.value = queue
            queue.enqueue(operation) { _ in done.signal() }
            #expect(await retrying.wait(timeout: 60))
            queue.isSuspended = true
        }
        #expect(await done.wait(timeout: 60), "the fetch waited out its retry delay")
        #expect(await queueReleased { weakQueue.value == nil }, "the queue was not released")
        #expect(operation.isCancelled)
        #expect(server.counters.requestsReceived == 1)
    }

    /// An unsuspended queue its owner drops runs what it holds to the end, then is freed.
    @Test func aDroppedRunningQueueFinishesItsWorkThenIsFreed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let weakQueue = WeakBox()
        let done = Countdown(6)
        let operations = (0..<6).map { server.operation("/json?n=\($0)") }
        do {
            let queue = makeFetchQueue(total: 2, perHost: 2)
            weakQueue.value = queue
            for operation in operations {
                queue.enqueue(operation) { _ in done.signal() }
            }
        }
        #expect(await done.wait(timeout: 60))
        #expect(operations.allSatisfy { $0.error == nil })
        #expect(await queueReleased { weakQueue.value == nil }, "the queue was not released")
    }

    // MARK: A dependency that nothing runs

    /// `fetch` of an operation whose dependency was never enqueued anywhere would wait forever:
    /// the queue enqueues the dependency too. Enqueueing it there afterwards takes it over: its
    /// completion runs once, with the result, and the identifier is the one it got.
    @Test func fetchWithADependencyNeverEnqueuedRunsItOnTheSameQueue() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let token = server.operation("/json?token")
        let login = server.operation("/json?login")
        login.addDependency(token)
        let user = server.operation("/json?user")
        user.addDependency(login)
        let error = await fetchOutcome(queue, user)
        #expect(error == nil)
        #expect(token.error == nil && login.error == nil && user.error == nil)
        #expect(token.isFinished && login.isFinished)
        #expect(server.requests("/json").count == 3)
        // Taken over after it finished: the completion still runs, once, with its result.
        let done = Countdown(1)
        let result = Locked<Result<Data, FetchError>?>(nil)
        queue.enqueue(login) { outcome in result.withLock { $0 = outcome }; done.signal() }
        #expect(await done.wait(timeout: 60))
        #expect(result.current.map { if case .success = $0 { true } else { false } } == true)
        // A second explicit enqueue is refused, as for any operation already enqueued.
        let refused = Countdown(1)
        queue.enqueue(login) { outcome in if case .failure(.invalidRequest) = outcome { refused.signal() } }
        #expect(await refused.wait(timeout: 60))
        #expect(done.overSignals == 0)
    }

    /// The non-async `enqueue` and a batch do the same: a dependency nothing runs is enqueued
    /// with its dependent; members of one batch may depend on each other in any order.
    @Test func enqueueAndBatchRunADependencyNothingElseRuns() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let orphanDependency = server.operation("/json?never")
        let first = server.operation("/json?first")
        first.addDependency(orphanDependency)
        let done = Countdown(1)
        queue.enqueue(first) { _ in done.signal() }
        #expect(await done.wait(timeout: 60))
        #expect(first.error == nil && orphanDependency.error == nil)
        // A batch: `after` depends on `before`, which comes after it in the batch.
        let before = server.operation("/json?before")
        let after = server.operation("/json?after")
        after.addDependency(before)
        let nobody = server.operation("/json?nobody")
        let orphan = server.operation("/json?orphan")
        orphan.addDependency(nobody)
        let batchDone = Countdown(1)
        let status = Locked<FetchBatch.Status?>(nil)
        queue.enqueue(batch: [after, before, orphan], completion: { final in status.withLock { $0 = final }; batchDone.signal() })
        #expect(await batchDone.wait(timeout: 60))
        #expect(status.current?.succeeded == 3)
        #expect(nobody.error == nil && nobody.isFinished)
        #expect(done.overSignals == 0)
    }

    /// A dependency on an `OperationQueue` that has not started it yet is not "never enqueued":
    /// the fetch waits for it, then runs.
    @Test func aDependencyWaitingOnAPlainOperationQueueIsWaitedFor() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let plain = makeQueue(1)
        plain.isSuspended = true
        let login = server.operation("/json?login")
        plain.addOperation(login)
        let user = server.operation("/json?user")
        user.addDependency(login)
        let fetched = Countdown(1)
        let result = Locked<Result<Data, FetchError>?>(nil)
        queue.enqueue(user) { outcome in result.withLock { $0 = outcome }; fetched.signal() }
        #expect(queue.count == 1, "accepted, waiting for its dependency")
        plain.isSuspended = false
        #expect(await fetched.wait(timeout: 60))
        #expect(login.error == nil && user.error == nil)
        #expect(result.current.map { if case .success = $0 { true } else { false } } == true)
    }

    /// Operations that depend on each other could never start: refused at once, naming one.
    @Test func aDependencyCycleFailsFast() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let operation = server.operation("/json")
        let other = BlockOperation {}
        other.name = "other"
        operation.addDependency(other)
        other.addDependency(operation)
        let error = await fetchOutcome(queue, operation)
        guard case .invalidRequest(let details)? = error, case .dependencyCycle(let name) = details.reason else {
            Issue.record("expected dependencyCycle, got \(String(describing: error))")
            return
        }
        #expect(name.contains("other") || name.contains("RecordingOperation"), "\(name)")
        #expect(!operation.isFinished && queue.count == 0)
        other.removeDependency(operation)     // let the test's objects go
    }
}

/// The error `queue.fetch(operation)` throws, or `nil` if it returned; waits at most 150 s (the
/// fetch's task may wait that long for the cooperative pool on a loaded machine), then cancels
/// the fetch and records a hang.
private func fetchOutcome(_ queue: FetchQueue, _ operation: some OutputProducing) async -> FetchError? {
    let outcome = Locked<FetchError?>(nil)
    let finished = Countdown(1)
    let task = Task {
        do throws(FetchError) {
            _ = try await queue.fetch(operation)
        } catch {
            outcome.withLock { $0 = error }
        }
        finished.signal()
    }
    let returned = await finished.wait(timeout: 150)
    #expect(returned, "the fetch waited for a dependency that nothing runs")
    if !returned {
        task.cancel()
        return nil
    }
    return outcome.current
}
