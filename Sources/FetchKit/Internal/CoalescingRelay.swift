import Foundation

/// Where the timers of progress deliveries fire (relays', sequences'): each only takes a lock
/// and hands a delivery over.
let deliveryTimers = DispatchQueue(label: "FetchKit.deliveryTimers")

/// Delivers values to one handler on its queue, one call at a time, newest value first: the
/// handler is never entered again before it returns (whatever the queue, a concurrent one
/// too), never sees an older value after a newer one, and gets the latest value rather than a
/// backlog. Calls begin at least `minimumInterval` apart; ``finish()`` delivers the value
/// still waiting at once. Used for operation progress and batch status.
///
/// The rules are ``CoalescingRelayMachine``'s; this class performs its actions: it schedules
/// a delivery on the queue, or arms a timer for a value that came too soon after the last call.
/// Nothing is called while the lock is held.
final class CoalescingRelay<Value: Sendable>: Sendable {
    private let queue: CallbackQueue
    private let handler: @Sendable (Value) -> Void
    private let state: Protected<CoalescingRelayMachine<Value>>

    /// - Parameters:
    ///   - queue: Where the handler runs.
    ///   - minimumInterval: The least time between the starts of two calls, in seconds; 0 (the
    ///     default) for none. Ignored for ``CallbackQueue/immediate``, whose handler runs on the
    ///     thread that produced the value (a timer's thread is not).
    ///   - handler: Receives the values.
    init(queue: CallbackQueue, minimumInterval: TimeInterval = 0, handler: @escaping @Sendable (Value) -> Void) {
        self.queue = queue
        self.handler = handler
        let immediate = if case .immediate = queue.target { true } else { false }
        let interval = immediate ? 0 : AnyFetchOperation.nanoseconds(minimumInterval)
        state = Protected(CoalescingRelayMachine(interval: interval))
    }

    /// Hands over a value: it is delivered now, after the call in progress, or when the
    /// interval since the last call has passed, unless a newer one replaces it first.
    func post(_ value: Value) {
        let action = state.withLock { $0.post(value, at: RateWindow.now()) }
        perform(action)
    }

    /// No more values come: the one waiting, if any, is delivered without waiting for the
    /// interval (after the call in progress, in the same hand-off as it).
    func finish() {
        perform(state.withLock { $0.finish() })
    }

    private func perform(_ action: CoalescingRelayMachine<Value>.Action) {
        switch action {
        case .none:
            break
        case .deliver:
            queue.perform { self.deliver() }
        case .arm(let deadline, let timer):
            deliveryTimers.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: deadline)) {
                self.perform(self.state.withLock { $0.timerFired(timer) })
            }
        }
    }

    /// One hand-off on the queue: calls the handler with the newest value, and again at once
    /// with a final value that arrived meanwhile.
    private func deliver() {
        var next = state.withLock { $0.take(at: RateWindow.now()) }
        while let value = next {
            handler(value)
            let (action, inline) = state.withLock { machine -> (CoalescingRelayMachine<Value>.Action, Value?) in
                machine.delivered(at: RateWindow.now())
            }
            next = inline
            if inline == nil { perform(action) }
        }
    }
}

/// The rules of a ``CoalescingRelay``, as a value: events in, actions out.
///
/// One delivery at most is *in flight* (scheduled on the queue, or running the handler); a
/// value that arrives meanwhile waits, replaced by any newer one. A value that arrives less
/// than `interval` after the last call began waits for a timer. Once finished, the value
/// waiting is delivered without the interval: inline, right after the call in flight returns,
/// or in a delivery of its own if none is in flight.
struct CoalescingRelayMachine<Value> {
    enum Phase: Equatable {
        /// Nothing in flight, no timer armed.
        case idle
        /// A value waits for the timer with this number.
        case waiting(timer: Int)
        /// A delivery is scheduled on the queue or running the handler.
        case delivering
    }

    enum Action: Equatable {
        case none
        /// Schedule a delivery on the queue.
        case deliver
        /// Arm timer number `timer` for `deadline` (monotonic nanoseconds).
        case arm(deadline: UInt64, timer: Int)
    }

    /// The least time between the starts of two calls, in nanoseconds.
    let interval: UInt64
    private(set) var phase = Phase.idle
    /// The newest value not delivered yet.
    private(set) var pending: Value?
    /// When the last call began.
    private var lastCall: UInt64?
    private(set) var isFinished = false
    private var timers = 0

    init(interval: UInt64) {
        self.interval = interval
    }

    /// When the next call may begin.
    private func due(at now: UInt64) -> UInt64? {
        guard !isFinished, let lastCall, interval > 0, now < lastCall &+ interval else { return nil }
        return lastCall &+ interval
    }

    private mutating func scheduleOrArm(at now: UInt64) -> Action {
        if let deadline = due(at: now) {
            timers += 1
            phase = .waiting(timer: timers)
            return .arm(deadline: deadline, timer: timers)
        }
        phase = .delivering
        return .deliver
    }

    /// A value arrived.
    mutating func post(_ value: Value, at now: UInt64) -> Action {
        pending = value
        guard phase == .idle else { return .none }
        return scheduleOrArm(at: now)
    }

    /// Timer number `timer` fired.
    mutating func timerFired(_ timer: Int) -> Action {
        guard phase == .waiting(timer: timer) else { return .none }
        phase = .delivering
        return .deliver
    }

    /// No more values come.
    mutating func finish() -> Action {
        isFinished = true
        guard case .waiting = phase else { return .none }
        phase = .delivering
        return .deliver
    }

    /// A scheduled delivery begins: the value to call the handler with, if any.
    mutating func take(at now: UInt64) -> Value? {
        precondition(phase == .delivering, "FetchKit: a relay delivered while \(phase)")
        guard let value = pending else {
            phase = .idle
            return nil
        }
        pending = nil
        lastCall = now
        return value
    }

    /// The handler returned: either a value to deliver at once in the same hand-off (a final
    /// one), or what to do about the value waiting.
    mutating func delivered(at now: UInt64) -> (Action, Value?) {
        guard pending != nil else {
            phase = .idle
            return (.none, nil)
        }
        if isFinished { return (.none, take(at: now)) }
        return (scheduleOrArm(at: now), nil)
    }
}

typealias ProgressRelay = CoalescingRelay<FetchProgress>
