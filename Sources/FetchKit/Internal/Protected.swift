import Foundation

/// A value guarded by a lock: the only way in is ``withLock(_:)``.
///
/// The rule every caller follows: never call out while holding the lock — no Foundation
/// change notifications, no user callbacks, no `URLSessionTask.cancel()`, no dispatch that
/// could wait. Compute what to do under the lock, then do it after.
///
/// Backed by `NSCondition` so that a waiter can sleep on the same lock that guards the state
/// (``wait(until:while:)``) and be woken by ``broadcast()``.
final class Protected<Value>: @unchecked Sendable {
    private let condition = NSCondition()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        condition.lock()
        defer { condition.unlock() }
        return try body(&value)
    }

    /// Reads a copy of the value.
    var snapshot: Value {
        withLock { $0 }
    }

    /// Blocks the calling thread while `predicate` holds, until `deadline` at the latest.
    ///
    /// - Returns: `true` if the predicate stopped holding, `false` if the deadline passed first.
    func wait(until deadline: Date, while predicate: (Value) -> Bool) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while predicate(value) {
            if !condition.wait(until: deadline) {
                return !predicate(value)
            }
        }
        return true
    }

    /// Wakes every thread blocked in ``wait(until:while:)``.
    func broadcast() {
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }
}
