import Dispatch
import Foundation

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

extension AnyFetchOperation {
    /// Calls `handler` on the main actor as the body arrives.
    ///
    /// Updates are coalesced: if the main actor is busy, you get the latest value rather than
    /// a backlog of every chunk. The last update before completion is always delivered
    /// (before the completion handlers that run on the main actor).
    ///
    /// ```swift
    /// download.onProgress { progress in
    ///     model.fraction = progress.fractionCompleted ?? 0     // a @MainActor view model
    /// }
    /// ```
    ///
    /// - Parameter handler: Receives each progress value, on the main actor.
    public func onProgress(_ handler: @escaping @MainActor (FetchProgress) -> Void) {
        addProgressRelay(ProgressRelay(queue: .main) { progress in
            MainActor.assumeIsolated { handler(progress) }
        })
    }

    /// Calls `handler` on `queue` as the body arrives, coalescing like ``onProgress(_:)``.
    ///
    /// - Parameters:
    ///   - queue: Where it runs.
    ///   - handler: Receives each progress value.
    public func onProgress(on queue: CallbackQueue, _ handler: @escaping @Sendable (FetchProgress) -> Void) {
        addProgressRelay(ProgressRelay(queue: queue, handler: handler))
    }

    private func addProgressRelay(_ relay: ProgressRelay) {
        core.withLock { core in
            guard !core.machine.isFinished else { return }
            core.progressRelays.append(relay)
        }
    }

    /// Calls `handler` on the main actor each time the operation is about to retry: after an
    /// attempt failed and before the wait (see ``FetchConfiguration/retryPolicy``).
    ///
    /// - Parameter handler: Receives the coming attempt's number, the wait and the error.
    public func onRetry(_ handler: @escaping @MainActor (RetryEvent) -> Void) {
        onRetry(on: .main) { event in
            MainActor.assumeIsolated { handler(event) }
        }
    }

    /// Calls `handler` on `queue` each time the operation is about to retry.
    ///
    /// - Parameters:
    ///   - queue: Where it runs.
    ///   - handler: Receives the coming attempt's number, the wait and the error.
    public func onRetry(on queue: CallbackQueue, _ handler: @escaping @Sendable (RetryEvent) -> Void) {
        core.withLock { core in
            guard !core.machine.isFinished else { return }
            core.retryHandlers.append((queue: queue, handler: handler))
        }
    }

    // MARK: Completion delivery

    func addCompletionHandler(on queue: CallbackQueue, _ handler: @escaping @Sendable (AnyFetchOperation) -> Void) {
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
        entry.queue.perform {
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
