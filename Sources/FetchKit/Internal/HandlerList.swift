/// Registered handlers, each under the number its ``FetchObservation`` removes it by. Kept
/// inside the state a lock guards (an operation's, a queue's).
struct HandlerList<Handler> {
    private var entries: [(id: Int, handler: Handler)] = []
    private var nextID = 0

    var isEmpty: Bool { entries.isEmpty }

    /// The handlers, in the order they were added.
    var handlers: [Handler] { entries.map(\.handler) }

    /// Adds `handler`; returns the number to remove it by.
    mutating func add(_ handler: Handler) -> Int {
        defer { nextID += 1 }
        entries.append((nextID, handler))
        return nextID
    }

    mutating func remove(_ id: Int) {
        entries.removeAll { $0.id == id }
    }

    mutating func removeAll() {
        entries.removeAll()
    }
}

/// A handler for a value that runs on a queue of its choosing, or the owner's default.
struct QueuedHandler<Value>: Sendable {
    let queue: CallbackQueue?
    let handler: @Sendable (Value) -> Void
}

extension HandlerList: Sendable where Handler: Sendable {}

extension Array {
    /// Runs every handler with `value`, each on its own queue or `fallback`.
    func deliver<Value: Sendable>(_ value: Value, fallback: CallbackQueue) where Element == QueuedHandler<Value> {
        for entry in self {
            (entry.queue ?? fallback).perform { entry.handler(value) }
        }
    }
}
