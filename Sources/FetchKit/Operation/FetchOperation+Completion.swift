import Dispatch
import Foundation

/// Conveniences typed with the concrete operation class, so that a handler on a `GetUser`
/// receives a `GetUser`. Every ``FetchOperation`` conforms; you never conform to it yourself.
public protocol FetchOperationProtocol: FetchOperation {}

extension FetchOperation: FetchOperationProtocol {}

extension FetchOperationProtocol {
    /// Adds a completion handler, called exactly once when the operation has finished.
    ///
    /// It runs after `isFinished` became true and the results (``FetchOperation/response``,
    /// ``FetchOperation/responseBody``, ``FetchOperation/error``) are set — on success,
    /// failure and cancellation alike. A handler added after the operation finished runs at
    /// once (asynchronously, on its queue). Handlers are released after they run, so capturing
    /// the operation in one creates no lasting cycle.
    ///
    /// - Parameters:
    ///   - queue: Where it runs; `nil` (the default) uses ``FetchOperation/completionQueue``.
    ///   - handler: Receives the finished operation.
    public func onCompletion(on queue: CallbackQueue? = nil, _ handler: @escaping @Sendable (Self) -> Void) {
        addCompletionHandler(on: queue) { operation in
            guard let operation = operation as? Self else { return }
            handler(operation)
        }
    }

    /// Suspends until the operation has finished, and returns it, or throws its error.
    ///
    /// The operation must be started by someone — an `OperationQueue`, or
    /// `start()`; this only waits. Cancelling the awaiting Swift task cancels the operation,
    /// which then finishes promptly and this throws ``FetchError/cancelled(_:)``.
    ///
    /// ```swift
    /// queue.addOperation(getUser)
    /// let user = try await getUser.finished().user
    /// ```
    ///
    /// - Returns: The finished operation, for its parsed results.
    /// - Throws: The operation's ``FetchError``.
    @discardableResult
    public func finished() async throws(FetchError) -> Self {
        let result: Result<Void, FetchError> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, FetchError>, Never>) in
                addCompletionHandler(on: .immediate) { operation in
                    continuation.resume(returning: operation.error.map { .failure($0) } ?? .success(()))
                }
            }
        } onCancel: {
            self.cancel()
        }
        try result.get()
        return self
    }

    /// Starts the operation on the current thread and suspends until it has finished.
    ///
    /// For an operation that is not in any queue. Equivalent to `start()` followed by
    /// ``finished()``; cancelling the Swift task cancels the operation.
    ///
    /// - Returns: The finished operation, for its parsed results.
    /// - Throws: The operation's ``FetchError``.
    @discardableResult
    public func run() async throws(FetchError) -> Self {
        start()
        return try await finished()
    }
}

/// How far a transfer has got.
public struct FetchProgress: Sendable, Equatable {
    /// Body bytes received so far.
    public let bytesReceived: Int64
    /// The body's length from `Content-Length`, if the server sent one.
    public let bytesExpected: Int64?

    /// Creates a progress value.
    public init(bytesReceived: Int64, bytesExpected: Int64?) {
        self.bytesReceived = bytesReceived
        self.bytesExpected = bytesExpected
    }

    /// `bytesReceived / bytesExpected`, when the length is known.
    public var fractionCompleted: Double? {
        guard let bytesExpected, bytesExpected > 0 else { return nil }
        return min(1, Double(bytesReceived) / Double(bytesExpected))
    }
}

extension FetchOperation {
    /// Calls `handler` as the body arrives.
    ///
    /// Updates are coalesced: if your queue is busy, you get the latest value rather than a
    /// backlog of every 16 KiB chunk. The last update before completion is always delivered
    /// (though not necessarily before the completion handler, which may run on another queue).
    ///
    /// - Parameters:
    ///   - queue: Where it runs; `nil` (the default) uses ``completionQueue``.
    ///   - handler: Receives each progress value.
    public func onProgress(on queue: CallbackQueue? = nil, _ handler: @escaping @Sendable (FetchProgress) -> Void) {
        core.withLock { core in
            guard !core.machine.isFinished else { return }
            core.progressRelays.append(ProgressRelay(queue: queue ?? core.settings.completionQueue, handler: handler))
        }
    }

    /// Calls `handler` each time the operation is about to retry: after an attempt failed and
    /// before the wait (see ``retryPolicy``).
    ///
    /// - Parameters:
    ///   - queue: Where it runs; `nil` (the default) uses ``completionQueue``.
    ///   - handler: Receives the coming attempt's number, the wait and the error.
    public func onRetry(on queue: CallbackQueue? = nil, _ handler: @escaping @Sendable (RetryEvent) -> Void) {
        core.withLock { core in
            guard !core.machine.isFinished else { return }
            core.retryHandlers.append((queue: queue, handler: handler))
        }
    }

    // MARK: Completion delivery

    func addCompletionHandler(on queue: CallbackQueue?, _ handler: @escaping @Sendable (FetchOperation) -> Void) {
        let runNow = core.withLock { core -> CompletionEntry? in
            let entry = CompletionEntry(queue: queue, handler: handler)
            guard core.completionsReleased else {
                core.completionHandlers.append(entry)
                return nil
            }
            core.outstandingDeliveries += 1
            return entry
        }
        if let runNow {
            run(runNow)
        }
    }

    /// Runs every registered completion handler, once. Called from ordered delivery, right
    /// after Foundation heard `isFinished`.
    func releaseCompletions() {
        let (entries, coordinator) = core.withLock { core -> ([CompletionEntry], (any TransferCoordinator)?) in
            core.completionsReleased = true
            defer {
                core.completionHandlers.removeAll()
                core.coordinator = nil      // a finished operation keeps no queue alive
            }
            core.outstandingDeliveries += core.completionHandlers.count
            return (core.completionHandlers, core.coordinator)
        }
        coordinator?.operationDidComplete(self)
        for entry in entries {
            run(entry)
        }
        wakeWaiters()
    }

    private func run(_ entry: CompletionEntry) {
        let queue = entry.queue ?? completionQueue
        queue.perform {
            entry.handler(self)
            self.core.withLock { $0.outstandingDeliveries -= 1 }
            self.wakeWaiters()
        }
    }
}

/// Delivers values to one handler on its queue, coalescing while the queue is busy: the handler
/// gets the latest value, not a backlog. Used for operation progress and batch status.
final class CoalescingRelay<Value: Sendable>: @unchecked Sendable {
    private let queue: CallbackQueue
    private let handler: @Sendable (Value) -> Void
    private let state = Protected<(latest: Value?, scheduled: Bool)>((nil, false))

    init(queue: CallbackQueue, handler: @escaping @Sendable (Value) -> Void) {
        self.queue = queue
        self.handler = handler
    }

    func post(_ value: Value) {
        let schedule = state.withLock { state -> Bool in
            state.latest = value
            guard !state.scheduled else { return false }
            state.scheduled = true
            return true
        }
        guard schedule else { return }
        queue.perform {
            let latest = self.state.withLock { state -> Value? in
                state.scheduled = false
                return state.latest
            }
            if let latest { self.handler(latest) }
        }
    }
}

typealias ProgressRelay = CoalescingRelay<FetchProgress>
