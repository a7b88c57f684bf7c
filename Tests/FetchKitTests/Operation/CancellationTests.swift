import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("Cancellation at every point of the lifecycle", .timeLimit(.minutes(3)))
struct CancellationTests {
    @Test func cancelBeforeStartOnlyMarksTheOperation() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        operation.cancel()
        #expect(operation.isCancelled)
        #expect(!operation.isFinished, "never finished without being started")
        #expect(!operation.isExecuting)
        #expect(operation.isReady)
        operation.start()
        #expect(operation.isFinished, "start() finishes a cancelled operation at once")
        #expect(operation.error?.isCancellation == true)
        #expect(await operation.awaitCompletion())
        #expect(server.counters.requestsReceived == 0)
        #expect(operation.parses.current.isEmpty)
    }

    @Test func cancelWhileQueuedFinishesWithoutSending() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeQueue(1)
        let blocker = server.operation("/delay/300")
        let waiting = server.operation("/json")
        queue.enqueue([blocker, waiting])
        waiting.cancel()
        try await blocker.finished()
        await #expect(throws: FetchError.self) { try await waiting.finished() }
        #expect(waiting.error?.isCancellation == true)
        #expect(server.requests("/json").count == 0)
        #expect(await queueDrains(queue))
    }

    @Test func cancelDuringTransferStopsItAndFinishesCancelled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/stall-mid-body/200000")
        let session = FetchSession()
        defer { session.invalidate() }
        operation.configuration.session = session
        let receiving = Countdown(1)
        operation.onProgress(on: .global) { progress in if progress.bytesReceived > 0 { receiving.signal() } }
        makeQueue(1).addOperation(operation)
        #expect(await receiving.wait(), "the body never started")
        operation.cancel()
        await #expect(throws: FetchError.self) { try await operation.finished() }
        #expect(operation.error?.isCancellation == true)
        #expect(operation.parses.current.isEmpty)
        #expect(await transfersDrain(session), "the cancelled transfer unregistered itself")
    }

    @Test func cancelDuringParseLetsItReturnThenFinishesCancelled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        let parsing = Countdown(1)
        let release = DispatchSemaphore(value: 0)
        operation.onParse = { _ in
            parsing.signal()
            release.wait()
        }
        makeQueue(1).addOperation(operation)
        #expect(await parsing.wait())
        operation.cancel()
        #expect(operation.isCancelled)
        #expect(!operation.isFinished, "it finishes only when the parse returns")
        release.signal()
        await #expect(throws: FetchError.self) { try await operation.finished() }
        #expect(operation.error?.isCancellation == true)
        #expect(operation.parses.current.count == 1)
        #expect(operation.responseBody != nil, "the body stays available for inspection")
    }

    @Test func cancelAfterFinishChangesNothing() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        try await operation.run()
        operation.cancel()
        #expect(!operation.isCancelled)
        #expect(operation.error == nil)
        #expect(operation.isFinished)
    }

    @Test func cancellingTheSwiftTaskCancelsTheOperation() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/stall-head")
        makeQueue(1).addOperation(operation)
        let task = Task { try await operation.finished() }
        task.cancel()
        let result = await task.result
        #expect(throws: FetchError.self) { try result.get() }
        #expect(operation.isCancelled)
        #expect(operation.isFinished)
    }

    @Test func progressCancelCancelsTheOperation() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/stall-head")
        makeQueue(1).addOperation(operation)
        operation.progress.cancel()
        await #expect(throws: FetchError.self) { try await operation.finished() }
        #expect(operation.error?.isCancellation == true)
    }
}

/// Waits until an operation queue holds no operations at all (every one finished and was
/// removed), on a helper thread, because `waitUntilAllOperationsAreFinished()` blocks.
func queueDrains(_ queue: OperationQueue, timeout: TimeInterval = 60) async -> Bool {
    let drained = Countdown(1)
    Thread {
        queue.waitUntilAllOperationsAreFinished()
        drained.signal()
    }.start()
    return await drained.wait(timeout: timeout)
}

/// Whether a session has no registered transfers once its router queue has run everything
/// queued so far (a transfer's cleanup runs there, before the operation finishes).
func transfersDrain(_ session: FetchSession) async -> Bool {
    await withCheckedContinuation { continuation in
        session.router.queue.async { continuation.resume(returning: session.router.activeTransferCount == 0) }
    }
}

@Suite("Cancelling a fetch its suspended queue has not started", .timeLimit(.minutes(3)))
struct SuspendedQueueCancellationTests {
    /// Cancels the awaiting task, never resumes the queue until the answer came: `value` and the
    /// completion handler answer at once, and the handler runs once only, even after the queue
    /// resumes and Foundation finishes the operation.
    @Test func awaitingCallerAndHandlerHearOfTheCancelWhileTheQueueStaysSuspended() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        queue.isSuspended = true
        let operation = FetchOperation<Data>(url: server.url("/json"))
        let handlerRuns = Protected(0)
        let handled = Countdown(1)
        queue.enqueue(operation, on: .global) { result in
            if case .failure(let error) = result, error.isCancellation { handlerRuns.withLock { $0 += 1 } }
            handled.signal()
        }
        let awaiting = Task { () -> FetchError? in
            do throws(FetchError) {
                _ = try await operation.value
                return nil
            } catch {
                return error
            }
        }
        awaiting.cancel()
        let answered = Countdown(1)
        let outcome = Task { () -> FetchError? in
            defer { answered.signal() }
            return await awaiting.value
        }
        let answeredInTime = await answered.wait(timeout: 60)
        #expect(answeredInTime, "the awaiting caller answered while the queue is suspended")
        if !answeredInTime { queue.isSuspended = false }     // lets the rest of the test end
        #expect(await outcome.value?.isCancellation == true)
        #expect(await handled.wait(timeout: 60), "the completion handler ran while the queue is suspended")
        #expect(queue.isSuspended == answeredInTime)
        #expect(operation.isCancelled)
        #expect(operation.result.map { if case .failure(let error) = $0 { error.isCancellation } else { false } } == true)
        if answeredInTime {
            #expect(!operation.isFinished, "Foundation finishes it only when its queue starts it")
            #expect(queue.count == 0, "the queue no longer holds a fetch that has completed")
        }

        queue.isSuspended = false
        #expect(await queueDrains(queue.operationQueue))
        #expect(operation.isFinished)
        #expect(await allSettle([operation]))
        #expect(handlerRuns.withLock { $0 } == 1)
        #expect(handled.overSignals == 0, "the handler ran exactly once")
        #expect(server.counters.requestsReceived == 0)
    }

    @Test func cancellingThroughTheQueueAnswersAFetchAwaitedOnIt() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(monitors: [recorder])
        queue.isSuspended = true
        let operation = FetchOperation<Data>(url: server.url("/json"))
        let answered = Countdown(1)
        let fetch = Task { () -> FetchError? in
            defer { answered.signal() }
            do throws(FetchError) {
                _ = try await queue.fetch(operation)
                return nil
            } catch {
                return error
            }
        }
        #expect(await recorder.waitUntil(timeout: 60) { $0.contains { $0.kind == .enqueue } })
        queue.cancelAll()
        let answeredInTime = await answered.wait(timeout: 60)
        #expect(answeredInTime, "queue.fetch answered while the queue is suspended")
        if !answeredInTime { queue.isSuspended = false }     // lets the rest of the test end
        #expect(await fetch.value?.isCancellation == true)
        #expect(queue.isSuspended == answeredInTime)
        queue.isSuspended = false
        #expect(await queueDrains(queue.operationQueue))
        // Monitors hear of events asynchronously: wait for the end, then for everything the
        // queue sent so far, before counting.
        #expect(await recorder.waitUntil(timeout: 60) { $0.contains { $0.kind == .finish } }, "the monitor heard the end")
        #expect(await eventsDrain(queue))
        #expect(recorder.events.current.filter { $0.kind == .finish }.count == 1, "the monitor heard the end once")
        #expect(server.counters.requestsReceived == 0)
    }
}

/// Waits until Foundation finished every operation and its handlers ran (on a thread of its
/// own: the wait blocks), or the deadline passes.
func allSettle(_ operations: [AnyFetchOperation], timeout: TimeInterval = 30) async -> Bool {
    let settled = Countdown(1)
    let result = Locked(false)
    Thread {
        let deadline = Date(timeIntervalSinceNow: timeout)
        result.withLock { $0 = operations.allSatisfy { $0.waitUntilFinished(timeout: deadline.timeIntervalSinceNow) } }
        settled.signal()
    }.start()
    _ = await settled.wait(timeout: timeout + 10)
    return result.current
}
