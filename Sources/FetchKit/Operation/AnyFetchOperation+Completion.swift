import Dispatch
import Foundation

extension AnyFetchOperation {
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
        var coordinator: (any TransferCoordinator)?
        let entries = core.withLock { core -> [CompletionEntry] in
            core.completionsReleased = true
            coordinator = core.coordinator
            defer {
                core.completionHandlers.removeAll()
                core.coordinator = nil      // a finished operation keeps no queue alive
            }
            core.outstandingDeliveries += core.completionHandlers.count
            return core.completionHandlers
        }
        coordinator?.operationDidComplete(self)
        // Let go of the queue before any handler runs: a handler may be the last thing its owner
        // waits for before dropping it, and expects it freed.
        coordinator = nil
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
