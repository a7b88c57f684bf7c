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
        addCompletionEntry(CompletionEntry(queue: queue, handler: OperationCompletion(body: handler)))
    }

    func addCompletionEntry(_ entry: CompletionEntry) {
        let runNow = core.withLock { core -> Bool in
            guard core.completionsReleased else {
                core.appendCompletion(entry)
                return false
            }
            core.outstandingDeliveries += 1
            return true
        }
        if runNow {
            run(entry)
        }
    }

    /// Runs every registered completion handler, once. Called from ordered delivery, right
    /// after Foundation heard `isFinished`.
    ///
    /// - Parameter onGlobal: This runs on a thread of ``CallbackQueue/global`` (the parse's):
    ///   one handler for that queue then runs right here, last, instead of being handed to
    ///   another of its threads — the same pool, one wake-up fewer per fetch.
    ///
    /// An operation cancelled before it started releases them at the cancel, and again when its
    /// queue starts it (Foundation's `isFinished`): the second time does nothing.
    func releaseCompletions(onGlobal: Bool = false) {
        if core.withLock({ $0.completionsReleased }) {
            wakeWaiters()           // isFinished just turned true: run-loop waiters may be done
            return
        }
        finishedBeforeCompletions()
        var coordinator: (any TransferCoordinator)?
        var id = FetchID(rawValue: 0)
        var finish: (observed: ObservedFetch, error: FetchError?, attempts: Int, bytesReceived: Int64)?
        let entries = core.withLock { core -> (first: CompletionEntry?, later: [CompletionEntry]) in
            core.completionsReleased = true
            coordinator = core.coordinator
            id = FetchID(rawValue: claimedID)
            if let observed = core.takeObserved() {
                var error: FetchError?
                if case .failure(let failure)? = core.machine.outcome { error = failure }
                finish = (observed, error, core.attempt.sentCount, core.bytesReceived)
            }
            defer { core.coordinator = nil }     // a finished operation keeps no queue alive
            let entries = core.takeCompletions()
            core.outstandingDeliveries += (entries.first == nil ? 0 : 1) + entries.later.count
            return entries
        }
        coordinator?.operationDidComplete(self, id: id)
        // Its last events, once its queue let go of it (so a monitor that asks the queue then
        // finds it gone); the record is out of the core: nothing is sent after them.
        if let finish {
            finish.observed.finished(finish.error, attempts: finish.attempts, bytesReceived: finish.bytesReceived, self)
        }
        // Let go of the queue before any handler runs: a handler may be the last thing its owner
        // waits for before dropping it, and expects it freed.
        coordinator = nil
        var here: CompletionEntry?
        func hand(_ entry: CompletionEntry) {
            if onGlobal, here == nil, entry.queue.isGlobal {
                here = entry
            } else {
                run(entry)
            }
        }
        if let first = entries.first { hand(first) }
        for entry in entries.later { hand(entry) }
        wakeWaiters()
        if let here {
            here.handler.run(self)
            core.withLock { $0.outstandingDeliveries -= 1 }
            wakeWaiters()
        }
    }

    private func run(_ entry: CompletionEntry) {
        entry.queue.perform {
            entry.handler.run(self)
            self.core.withLock { $0.outstandingDeliveries -= 1 }
            self.wakeWaiters()
        }
    }
}
