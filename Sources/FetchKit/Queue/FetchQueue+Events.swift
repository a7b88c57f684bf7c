import Dispatch
import Foundation

extension FetchQueue {
    /// Posted once per fetch when its transfer begins — or, for a fetch that finishes without
    /// one (cancelled while waiting, a failed dependency), just before did-finish.
    public static let didBeginNotification = Notification.Name("org.fetchkit.FetchQueue.didBegin")
    /// Posted as a fetch's body arrives, between did-begin and did-finish; coalesced, so that a
    /// busy observer gets the latest value rather than every chunk.
    public static let didProgressNotification = Notification.Name("org.fetchkit.FetchQueue.didProgress")
    /// Posted once per fetch when it finished, successfully or not; last of its notifications.
    public static let didFinishNotification = Notification.Name("org.fetchkit.FetchQueue.didFinish")
    /// Posted when a fetch failed an attempt and will try again after a wait (see
    /// ``RetryPolicy``); the event's ``FetchQueue/Event/retry`` says when and why.
    public static let willRetryNotification = Notification.Name("org.fetchkit.FetchQueue.willRetry")
    /// Posted when ``FetchQueue/isNetworkActive`` changes; read it with
    /// `Notification.fetchQueueNetworkActivity`.
    public static let networkActivityDidChangeNotification = Notification.Name("org.fetchkit.FetchQueue.networkActivityDidChange")

    /// The payload of did-begin, did-progress and did-finish; read it with
    /// `Notification.fetchQueueEvent`.
    ///
    /// Notifications are posted, with the queue as their `object`, from one serial queue of
    /// the ``FetchQueue``: an observer added with `queue: nil` runs there, in order. Pass
    /// `queue: .main` to `addObserver(forName:object:queue:using:)` to update a UI.
    public struct Event: Sendable {
        /// The fetch.
        public let id: FetchID
        /// Its operation.
        public let operation: AnyFetchOperation
        /// How far its body got (did-progress only).
        public let progress: FetchProgress?
        /// Why it failed (did-finish and will-retry; `nil` on success).
        public let error: FetchError?
        /// The retry about to happen (will-retry only).
        public let retry: RetryEvent?
    }

    static let eventKey = "org.fetchkit.FetchQueue.event"
    static let activityKey = "org.fetchkit.FetchQueue.isNetworkActive"

    /// Queues a notification for the event queue, in order. Under the lock: the order of the
    /// calls is the order of the posts.
    func post(_ name: Notification.Name, _ event: Event, _ state: inout State) {
        state.pendingNotifications.append((name, event))
        scheduleEventDrain(&state)
    }

    /// Makes sure one drain of the pending notifications is on its way. Under the lock.
    func scheduleEventDrain(_ state: inout State) {
        guard !state.eventDrainScheduled else { return }
        state.eventDrainScheduled = true
        eventQueue.async { [self] in drainEvents() }
    }

    /// How often progress notifications are posted at most: a transfer reports every 64 KiB, which
    /// at hundreds of MB/s would wake the event queue thousands of times a second for displays
    /// that redraw a few times a second. (Did-begin and did-finish are not delayed, and a
    /// fetch's last progress is posted before its did-finish.)
    static let progressInterval: TimeInterval = 0.05

    /// Makes sure a drain posts pending progress within ``progressInterval``. Under the lock.
    func scheduleProgressDrain(_ state: inout State) {
        guard !state.eventDrainScheduled, !state.progressDrainScheduled else { return }
        state.progressDrainScheduled = true
        eventQueue.asyncAfter(deadline: .now() + Self.progressInterval) { [self] in
            withState { $0.progressDrainScheduled = false }
            drainEvents()
        }
    }

    /// Posts every pending notification, in order, then the latest progress of each fetch still
    /// in the queue. (A fetch's progress is posted before its did-finish: finishing moves its
    /// pending progress into the ordered list first.) On the event queue.
    private func drainEvents() {
        let (ordered, progress) = withState { state -> ([(name: Notification.Name, event: Event)], [Event]) in
            state.eventDrainScheduled = false
            let ordered = state.pendingNotifications
            state.pendingNotifications.removeAll()
            let progress = state.pendingProgress.sorted { $0.key < $1.key }.compactMap { id, progress in
                state.registry[id].map { Event(id: id, operation: $0.operation, progress: progress, error: nil, retry: nil) }
            }
            state.pendingProgress.removeAll()
            return (ordered, progress)
        }
        for (name, event) in ordered {
            notificationCenter.post(name: name, object: self, userInfo: [Self.eventKey: event])
        }
        for event in progress {
            notificationCenter.post(name: Self.didProgressNotification, object: self, userInfo: [Self.eventKey: event])
        }
    }

    // MARK: Network activity

    /// Whether any transfer is in flight — or ended less than ``networkActivityHideDelay`` ago,
    /// so that back-to-back requests do not make an activity indicator flicker.
    public var isNetworkActive: Bool {
        withState { $0.isNetworkActive }
    }

    /// Calls `handler` on the main actor with the new value each time ``isNetworkActive``
    /// changes, in order.
    ///
    /// - Parameter handler: Receives the new value.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onNetworkActivityChange(_ handler: @escaping @MainActor (Bool) -> Void) -> FetchObservation {
        observe(\.activityHandlers, Callback(mainActor: handler))
    }

    /// Calls `handler` on `queue` with the new value each time ``isNetworkActive`` changes.
    ///
    /// - Parameters:
    ///   - queue: Where it runs. On a serial queue the calls arrive in order.
    ///   - handler: Receives the new value.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onNetworkActivityChange(on queue: CallbackQueue, _ handler: @escaping @Sendable (Bool) -> Void) -> FetchObservation {
        observe(\.activityHandlers, Callback(on: queue, handler))
    }

    /// A transfer started (the scheduler counts it running). Under the lock.
    func transferStarted(_ state: inout State) {
        state.activityGeneration += 1      // cancels a pending hide
        if !state.isNetworkActive {
            state.isNetworkActive = true
            announceActivity(true, state)
        }
    }

    /// A transfer ended. Under the lock. The flag goes off only after the hide delay, and only
    /// if nothing started meanwhile. Called after the scheduler released the transfer's slot.
    func transferEnded(_ state: inout State) {
        guard state.scheduler.running == 0 else { return }
        state.activityGeneration += 1
        let generation = state.activityGeneration
        activityTimer(networkActivityHideDelay) { [weak self] in
            self?.withState { state in
                guard state.activityGeneration == generation, state.scheduler.running == 0, state.isNetworkActive else { return }
                state.isNetworkActive = false
                self?.announceActivity(false, state)
            }
        }
    }

    private func announceActivity(_ active: Bool, _ state: State) {
        let handlers = state.activityHandlers.handlers
        let center = notificationCenter
        eventQueue.async { [self] in
            center.post(name: Self.networkActivityDidChangeNotification, object: self, userInfo: [Self.activityKey: active])
            handlers.deliver(active)
        }
    }
}

extension Notification {
    /// The payload of a ``FetchQueue`` did-begin, did-progress or did-finish notification.
    public var fetchQueueEvent: FetchQueue.Event? {
        userInfo?[FetchQueue.eventKey] as? FetchQueue.Event
    }

    /// The new value carried by ``FetchQueue/networkActivityDidChangeNotification``.
    public var fetchQueueNetworkActivity: Bool? {
        userInfo?[FetchQueue.activityKey] as? Bool
    }
}
