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

/// A handler for a value and where it runs: on the main actor (the default of every public
/// handler), or on a queue the caller named.
struct Callback<Value: Sendable>: Sendable {
    let queue: CallbackQueue
    let body: @Sendable (Value) -> Void

    /// A handler that runs on `queue`.
    init(on queue: CallbackQueue, _ body: @escaping @Sendable (Value) -> Void) {
        self.queue = queue
        self.body = body
    }

    /// A handler that runs on the main actor: dispatched to the main queue, whose jobs run on
    /// the main actor's thread.
    init(mainActor body: @escaping @MainActor (Value) -> Void) {
        queue = .main
        self.body = { value in MainActor.assumeIsolated { body(value) } }
    }
}

extension Callback {
    /// Runs the handler with `value`, asynchronously on its queue.
    func post(_ value: Value) {
        queue.perform { body(value) }
    }
}

extension HandlerList: Sendable where Handler: Sendable {}

extension Array {
    /// Runs every handler with `value`, each on its own queue.
    func deliver<Value: Sendable>(_ value: Value) where Element == Callback<Value> {
        for entry in self {
            entry.post(value)
        }
    }
}
