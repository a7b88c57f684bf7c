import Foundation

/// A value guarded by a lock: the only way in is ``withLock(_:)``.
///
/// The rule every caller follows: never call out while holding the lock — no Foundation
/// change notifications, no user callbacks, no `URLSessionTask.cancel()`, no dispatch that
/// could wait. Compute what to do under the lock, then do it after.
///
/// A waiter can sleep on the same lock that guards the state (``wait(until:while:)``) and be
/// woken by ``broadcast()``.
///
/// One allocation holds the value and its mutex (a `ManagedBuffer` with the mutex as its tail
/// element, as swift-nio's `LockStorage` does). Every operation, transfer and queue entry
/// has one of these, tens of thousands of them when many fetches wait: an `NSCondition` would
/// add three allocations (the object, its mutex, its condition variable) each time. The
/// condition variable is created only when a thread first waits.
struct Protected<Value>: @unchecked Sendable {
    private let storage: ProtectedStorage<Value>

    init(_ value: Value) {
        storage = ProtectedStorage.make(value)
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try storage.withLock(body)
    }

    /// Reads a copy of the value.
    var snapshot: Value {
        withLock { $0 }
    }

    /// Blocks the calling thread while `predicate` holds, until `deadline` at the latest.
    ///
    /// - Returns: `true` if the predicate stopped holding, `false` if the deadline passed first.
    func wait(until deadline: Date, while predicate: (Value) -> Bool) -> Bool {
        storage.wait(until: deadline, while: predicate)
    }

    /// Wakes every thread blocked in ``wait(until:while:)``.
    func broadcast() {
        storage.broadcast()
    }
}

/// The value, and the condition variable once someone waited.
struct ProtectedHeader<Value> {
    var value: Value
    var condition: UnsafeMutablePointer<pthread_cond_t>?
}

/// The storage of a ``Protected``: the header, then the mutex in the same allocation.
final class ProtectedStorage<Value>: ManagedBuffer<ProtectedHeader<Value>, pthread_mutex_t> {
    static func make(_ value: Value) -> ProtectedStorage<Value> {
        let buffer = create(minimumCapacity: 1) { _ in ProtectedHeader(value: value, condition: nil) }
        let storage = unsafeDowncast(buffer, to: ProtectedStorage<Value>.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            let result = pthread_mutex_init(mutex, nil)
            precondition(result == 0, "FetchKit: pthread_mutex_init failed (\(result))")
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointers { header, mutex in
            if let condition = header.pointee.condition {
                pthread_cond_destroy(condition)
                condition.deallocate()
            }
            pthread_mutex_destroy(mutex)
        }
    }

    @inline(__always)
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try withUnsafeMutablePointers { header, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&header.pointee.value)
        }
    }

    func wait(until deadline: Date, while predicate: (Value) -> Bool) -> Bool {
        withUnsafeMutablePointers { header, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            let condition: UnsafeMutablePointer<pthread_cond_t>
            if let existing = header.pointee.condition {
                condition = existing
            } else {
                condition = .allocate(capacity: 1)
                let result = pthread_cond_init(condition, nil)
                precondition(result == 0, "FetchKit: pthread_cond_init failed (\(result))")
                header.pointee.condition = condition
            }
            // pthread_cond_timedwait's default clock is the wall clock, which a Date is on.
            let time = max(0, deadline.timeIntervalSince1970)
            var until = timespec()
            until.tv_sec = .init(time.rounded(.down))
            until.tv_nsec = .init(min(999_999_999, (time - time.rounded(.down)) * 1e9))
            while predicate(header.pointee.value) {
                if pthread_cond_timedwait(condition, mutex, &until) == ETIMEDOUT {
                    return !predicate(header.pointee.value)
                }
            }
            return true
        }
    }

    func broadcast() {
        withUnsafeMutablePointers { header, mutex in
            pthread_mutex_lock(mutex)
            if let condition = header.pointee.condition {
                pthread_cond_broadcast(condition)
            }
            pthread_mutex_unlock(mutex)
        }
    }
}
