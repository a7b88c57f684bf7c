import Foundation

extension AnyFetchOperation {
    /// A state an operation can be observed in.
    public enum StateKey: String, Sendable, CaseIterable {
        /// `isReady`: every dependency has finished (or the operation was cancelled).
        case ready
        /// `isExecuting`: started and not yet finished.
        case executing
        /// `isFinished`.
        case finished
        /// `isCancelled`.
        case cancelled
    }

    /// One change of one state key.
    public struct StateChange: Sendable, Equatable, CustomStringConvertible {
        /// The key that changed.
        public let key: StateKey
        /// Its value before.
        public let oldValue: Bool
        /// Its value after.
        public let newValue: Bool

        /// Creates a change record.
        public init(key: StateKey, oldValue: Bool, newValue: Bool) {
            self.key = key
            self.oldValue = oldValue
            self.newValue = newValue
        }

        public var description: String { "\(key): \(oldValue) → \(newValue)" }
    }

    /// Observes the operation's state keys — ready, executing, finished, cancelled.
    ///
    /// Foundation on Linux has no key-value observing, so this is the portable way to watch an
    /// operation. The handler is called once per real change, with old and new values, in the
    /// order the changes happened, synchronously on the thread that made the change (or on the
    /// thread already delivering earlier changes). Foundation's own `isExecuting` /
    /// `isFinished` notifications are sent just before, so an `OperationQueue` has already
    /// seen a change when your handler does. After `finished` is delivered no change can
    /// follow, and the operation drops its observers.
    ///
    /// ```swift
    /// let observation = operation.observeState { change in
    ///     print(change)                        // "executing: false → true"
    /// }
    /// ```
    ///
    /// On Apple platforms, KVO on `isExecuting` and `isFinished` works too.
    ///
    /// - Parameter handler: Called for each change. Keep it short; avoid blocking.
    /// - Returns: A token; observation stops when you call ``FetchObservation/invalidate()``
    ///   or release it.
    public func observeState(_ handler: @escaping @Sendable (StateChange) -> Void) -> FetchObservation {
        let id = core.withLock { $0.observers.add(handler) }
        return FetchObservation { [weak self] in
            self?.core.withLock { core in core.observers.remove(id) }
        }
    }

    // MARK: Readiness

    /// Reads `super.isReady` and, when it differs from what observers last heard, reports the
    /// change. Foundation computes readiness itself (dependencies finishing, cancel) and always
    /// reads it through this getter, which is therefore where a change is first seen.
    ///
    /// Ready and not cancelled also means every dependency finished: the operation then stops
    /// keeping itself alive (AnyFetchOperation+Dependents.swift).
    func observedReadiness(_ ready: Bool) -> Bool {
        var released: AnyFetchOperation?
        let deliver = core.withLock { core -> Bool in
            core.readinessAsked = true
            if ready { released = core.releasingHoldOnDependencies() }
            guard core.lastReportedReady != ready, !core.machine.isFinished else { return false }
            core.lastReportedReady = ready
            return core.post(.change(StateChange(key: .ready, oldValue: !ready, newValue: ready)))
        }
        // Released here, not under the lock; whoever asked holds the operation until it returns.
        withExtendedLifetime(released) {}
        if deliver {
            // Foundation may call this getter while holding its own locks: deliver elsewhere.
            DispatchQueue.global().async { self.deliverEvents() }
        }
        return ready
    }

    // MARK: Ordered delivery

    /// Delivers posted events in order until none are left.
    ///
    /// Exactly one thread delivers at a time (the one that received `true` from
    /// `Core.post`), so changes reach Foundation and observers in the order they were made,
    /// and a handler that changes the operation again (cancel from an observer) does not
    /// deadlock: its events are appended and delivered next.
    ///
    /// - Parameter onGlobal: The caller runs on a thread of ``CallbackQueue/global``.
    func deliverEvents(onGlobal: Bool = false) {
        while true {
            let batch = core.withLock { core -> [Event] in
                guard !core.pendingEvents.isEmpty else {
                    core.isDeliveringEvents = false
                    return []
                }
                // Taken whole: an operation keeps no event buffer between deliveries.
                defer { core.pendingEvents = [] }
                return core.pendingEvents
            }
            if batch.isEmpty { return }
            for event in batch {
                deliver(event, onGlobal: onGlobal)
            }
        }
    }

    private func deliver(_ event: Event, onGlobal: Bool) {
        switch event {
        case .change(let change):
            // Foundation learns of executing and finished from us; it originates ready and
            // cancelled itself. The state is stored already: `isFinished` returns true here,
            // which is when OperationQueue's bookkeeping acts on the notification.
            switch change.key {
            case .executing:
                willChangeValue(forKey: "isExecuting")
                didChangeValue(forKey: "isExecuting")
            case .finished:
                // Before anyone hears of it and frees the operation, while a dependency still
                // holds a pointer to it.
                leaveDependencies(super.dependencies, onlyIfUnfinished: true) { super.removeDependency($0) }
                // What it holds that a dependent may need (a download's destination): an
                // OperationQueue starts the dependents as it hears this.
                willAnnounceFinished()
                willChangeValue(forKey: "isFinished")
                didChangeValue(forKey: "isFinished")
            case .ready, .cancelled:
                break
            }
            let observers = core.withLock { core in
                defer { if change.key == .finished { core.dropHandlers(observers: true) } }
                return core.observers.handlers
            }
            for observer in observers {
                observer(change)
            }
        case .releaseCompletions:
            releaseCompletions(onGlobal: onGlobal)
        }
    }
}
