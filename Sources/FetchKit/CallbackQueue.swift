import Dispatch
import Foundation

/// Where FetchKit runs a callback of yours: a completion handler, a progress handler, a parse.
///
/// Any `DispatchQueue` or `OperationQueue` will do:
///
/// ```swift
/// operation.completionQueue = .main
/// operation.parseQueue = .dispatch(storeQueue)   // a serial queue serialises every parse
/// ```
public struct CallbackQueue: Sendable {
    enum Target: Sendable {
        case dispatch(DispatchQueue)
        case operation(OperationQueue)
        /// Runs on the thread that produced the event. Internal: bookkeeping and continuations only.
        case immediate
    }

    let target: Target

    /// The main queue. Callbacks run only while the main thread services it (an app's run
    /// loop, `dispatchMain()`, or ``FetchOperation/waitUntilFinished(timeout:)`` on the main
    /// thread). A command-line program that blocks its main thread otherwise never sees them.
    public static var main: CallbackQueue { CallbackQueue(target: .dispatch(.main)) }

    /// The global concurrent dispatch queue at the default quality of service.
    public static var global: CallbackQueue { CallbackQueue(target: .dispatch(.global())) }

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
