import Dispatch
import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

@Suite("Cancellation at every point of the lifecycle", .timeLimit(.minutes(3)))
struct CancellationTests {
    @Test func cancelBeforeStartOnlyMarksTheOperation() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
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
        #expect(server.requestsReceived == 0)
        #expect(operation.parses.current.isEmpty)
    }

    @Test func cancelWhileQueuedFinishesWithoutSending() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let queue = makeQueue(1)
        let blocker = server.operation("/delay/300")
        let waiting = server.operation("/json")
        queue.enqueue([blocker, waiting])
        waiting.cancel()
        try await blocker.finished()
        await #expect(throws: FetchError.self) { try await waiting.finished() }
        #expect(waiting.error?.isCancellation == true)
        #expect(server.requestCount(path: "/json") == 0)
        #expect(await queueDrains(queue))
    }

    @Test func cancelDuringTransferStopsItAndFinishesCancelled() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
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
        let server = try LoopbackServer()
        defer { server.stop() }
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
        let server = try LoopbackServer()
        defer { server.stop() }
        let operation = server.operation("/json")
        try await operation.run()
        operation.cancel()
        #expect(!operation.isCancelled)
        #expect(operation.error == nil)
        #expect(operation.isFinished)
    }

    @Test func cancellingTheSwiftTaskCancelsTheOperation() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
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
        let server = try LoopbackServer()
        defer { server.stop() }
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
