import Dispatch
import Foundation

/// Waits for a number of events without sleeping: `signal()` counts one down, and waiters wake
/// when the count reaches zero. The deadline only turns a hang into a failure.
final class Countdown: @unchecked Sendable {
    private let condition = NSCondition()
    private var remaining: Int
    private var extra = 0
    private var continuations: [(id: Int, continuation: CheckedContinuation<Bool, Never>)] = []
    private var nextWaiterID = 0

    init(_ count: Int) {
        remaining = count
    }

    /// Counts one event. Signals beyond the expected count are recorded in ``overSignals``.
    func signal() {
        condition.lock()
        if remaining == 0 {
            extra += 1
            condition.unlock()
            return
        }
        remaining -= 1
        var ready: [CheckedContinuation<Bool, Never>] = []
        if remaining == 0 {
            ready = continuations.map(\.continuation)
            continuations = []
            condition.broadcast()
        }
        condition.unlock()
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// How many signals arrived after the count reached zero.
    var overSignals: Int {
        condition.lock()
        defer { condition.unlock() }
        return extra
    }

    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return remaining
    }

    /// How long a wait lasts unless told: long enough that only a hang reaches it. A full run
    /// on two cores beside other builds had tests take 60 s from start to end, and completions
    /// delivered on `.global` behind a 10,000-operation stress test arrive late.
    static let defaultTimeout: TimeInterval = 90

    /// Blocks until the count reaches zero or the deadline passes.
    @available(*, noasync)
    func waitBlocking(timeout: TimeInterval = Countdown.defaultTimeout) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while remaining > 0 {
            if !condition.wait(until: deadline) { return remaining == 0 }
        }
        return true
    }

    /// Suspends until the count reaches zero or the deadline passes.
    func wait(timeout: TimeInterval = Countdown.defaultTimeout) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            condition.lock()
            if remaining == 0 {
                condition.unlock()
                continuation.resume(returning: true)
                return
            }
            let id = nextWaiterID
            nextWaiterID += 1
            continuations.append((id, continuation))
            condition.unlock()
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                condition.lock()
                let index = continuations.firstIndex { $0.id == id }
                let expired = index.map { continuations.remove(at: $0) }
                condition.unlock()
                expired?.continuation.resume(returning: false)
            }
        }
    }
}

/// A thread-safe box for values tests collect from callbacks.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    var current: Value { withLock { $0 } }
}
