import Foundation

/// Where FetchKit runs a callback of yours when you name a queue: a completion handler, a
/// progress handler, a parse.
///
/// Handlers you give without a queue run on the main actor, and are `@MainActor` closures the
/// compiler checks. Name a queue — any `DispatchQueue` or `OperationQueue` — for work that
/// should not wait for the main thread (a server, a command-line tool); those handlers are
/// `@Sendable`:
///
/// ```swift
/// operation.configuration.parseQueue = .dispatch(storeQueue)   // a serial queue serialises every parse
/// operation.onCompletion(on: .global) { result in log(result) }
/// ```
public struct CallbackQueue: Sendable {
    enum Target: Sendable {
        case dispatch(DispatchQueue)
        case operation(OperationQueue)
        /// Runs on the thread that produced the event. Internal: bookkeeping and continuations only.
        case immediate
    }

    let target: Target
    /// Whether this is ``global``: a callback for it may run on any thread of that pool,
    /// including one FetchKit is already on.
    var isGlobal = false

    /// The main queue: where main-actor handlers are dispatched. Internal: a handler for the
    /// main thread is a `@MainActor` closure, given without a queue.
    static var main: CallbackQueue { CallbackQueue(target: .dispatch(.main)) }

    /// The global concurrent dispatch queue at the default quality of service.
    public static var global: CallbackQueue { CallbackQueue(target: .dispatch(globalQueue), isGlobal: true) }

    /// One wrapper of the global queue for every callback: on Linux, `DispatchQueue.global()`
    /// makes a new object at each call, which each queued fetch's completion would keep.
    private static let globalQueue = DispatchQueue.global()

    /// A dispatch queue of yours. A serial queue runs the callbacks one at a time, in order.
    public static func dispatch(_ queue: DispatchQueue) -> CallbackQueue {
        CallbackQueue(target: .dispatch(queue))
    }

    /// An operation queue of yours; each callback is added to it as a block operation.
    public static func operation(_ queue: OperationQueue) -> CallbackQueue {
        CallbackQueue(target: .operation(queue))
    }

    static var immediate: CallbackQueue { CallbackQueue(target: .immediate) }

    /// Runs `work` asynchronously on this queue (synchronously for `.immediate`).
    func perform(_ work: @escaping @Sendable () -> Void) {
        switch target {
        case .dispatch(let queue): queue.async(execute: work)
        case .operation(let queue): queue.addOperation(work)
        case .immediate: work()
        }
    }
}
