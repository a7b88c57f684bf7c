import Foundation

/// An operation with a typed output: every ``FetchOperation`` (its `Output`) and every
/// ``DownloadOperation`` (the file's URL).
///
/// You do not conform to it yourself: subclass ``FetchOperation``. It gives both kinds of
/// operation the same typed way to read the outcome — ``result``, ``value`` and
/// ``onCompletion(_:)`` — and lets ``FetchQueue/fetch(_:)`` return the output.
public protocol OutputProducing: AnyFetchOperation {
    /// What the operation produces when it succeeds.
    associatedtype Output: Sendable
}

extension OutputProducing {
    /// The outcome: the output or the error, once the operation has finished; `nil` before.
    ///
    /// Safe to read from any thread at any time: it is stored under the operation's lock when
    /// the operation finishes, before `isFinished` turns true and before any completion
    /// handler runs. An operation cancelled before it started has its outcome,
    /// ``FetchError/cancelled(_:)``, from the cancel on (see ``value``).
    public var result: Result<Output, FetchError>? {
        outcome(as: Output.self)
    }

    /// The output, once the operation has finished: suspends until then.
    ///
    /// It only waits: someone must start the operation — a ``FetchQueue`` (whose
    /// ``FetchQueue/fetch(_:)`` enqueues and waits in one call), an `OperationQueue`, or
    /// `start()`. Cancelling the awaiting Swift task cancels the operation, which then finishes
    /// promptly, and this throws ``FetchError/cancelled(_:)``: the error is always a
    /// ``FetchError``, never `CancellationError`.
    ///
    /// A cancel answers at once even when the operation has not started — waiting in a
    /// suspended ``FetchQueue`` or `OperationQueue`, or in none: this throws and the completion
    /// handlers run (once) at the cancel, and the fetch leaves its ``FetchQueue``. Foundation's
    /// `isFinished` alone waits until the queue starts the operation (as Foundation requires;
    /// a suspended queue does so when resumed), and so do the operation's dependents.
    ///
    /// ```swift
    /// queue.enqueue(getUser)
    /// let user = try await getUser.value
    /// ```
    public var value: Output {
        get async throws(FetchError) {
            try await finishedOutcome(as: Output.self).get()
        }
    }

    /// Calls `handler` on the main actor, exactly once, when the operation has finished.
    ///
    /// It runs after `isFinished` turned true and the results are set — on success, failure
    /// and cancellation alike — except for an operation cancelled before it started, whose
    /// handlers run at the cancel, before its queue starts it (see ``value``). A handler added after the operation finished runs soon after,
    /// still on the main actor. Handlers are released after they run, so capturing the
    /// operation in one creates no lasting cycle. Completion handlers run on the main actor
    /// unless you name a queue (``onCompletion(on:_:)``), here and on ``FetchQueue``.
    ///
    /// The main actor runs on the main thread: an app's run loop serves it; a command-line
    /// program must too (`dispatchMain()`, `await` from its top-level code, or
    /// ``AnyFetchOperation/waitUntilFinished(timeout:)`` on the main thread).
    ///
    /// ```swift
    /// getUser.onCompletion { result in
    ///     model.user = try? result.get()       // model is @MainActor: no hop, no cast
    /// }
    /// ```
    ///
    /// - Parameter handler: Receives the output or the error, on the main actor.
    public func onCompletion(_ handler: @escaping @MainActor (Result<Output, FetchError>) -> Void) {
        addCompletion(Callback(mainActor: handler))
    }

    /// Calls `handler` on `queue`, exactly once, when the operation has finished.
    ///
    /// - Parameters:
    ///   - queue: Where it runs (``CallbackQueue/global``, a dispatch queue or an operation
    ///     queue of yours).
    ///   - handler: Receives the output or the error.
    public func onCompletion(on queue: CallbackQueue, _ handler: @escaping @Sendable (Result<Output, FetchError>) -> Void) {
        addCompletion(Callback(on: queue, handler))
    }

    /// Calls `handler` on the main actor, exactly once, when the operation has finished, with
    /// the operation itself and its outcome: one handler can then serve many operations.
    ///
    /// Everything else is as for ``onCompletion(_:)``. With a trailing closure, its two
    /// parameters choose this method: `operation.onCompletion { operation, result in … }`.
    ///
    /// - Parameter handler: Receives the operation and its output or error, on the main actor.
    public func onCompletion(withOperation handler: @escaping @MainActor (Self, Result<Output, FetchError>) -> Void) {
        addCompletion(Callback(mainActor: { result in handler(self, result) }))
    }

    /// Calls `handler` on `queue`, exactly once, when the operation has finished, with the
    /// operation itself and its outcome.
    ///
    /// - Parameters:
    ///   - queue: Where it runs.
    ///   - handler: Receives the operation and its output or error.
    public func onCompletion(on queue: CallbackQueue, withOperation handler: @escaping @Sendable (Self, Result<Output, FetchError>) -> Void) {
        addCompletion(Callback(on: queue) { result in handler(self, result) })
    }

    /// Adds a completion handler for the typed outcome.
    func addCompletion(_ callback: Callback<Result<Output, FetchError>>) {
        addCompletionEntry(CompletionEntry(queue: callback.queue, handler: TypedCompletion(body: callback.body)))
    }
}

extension AnyFetchOperation {
    /// The outcome with the output as `Output`, once finished.
    func outcome<Output>(as type: Output.Type) -> Result<Output, FetchError>? {
        let (outcome, output) = core.withLock { ($0.machine.outcome, $0.output) }
        switch outcome {
        case nil:
            return nil
        case .failure(let error)?:
            return .failure(error)
        case .success?:
            if let output = output as? Output { return .success(output) }
            // A success always has an output; were it missing, say so rather than trap.
            return .failure(parseFailure(MissingParser(operation: "\(Swift.type(of: self))")))
        }
    }

    /// Waits for the operation to finish; cancelling the waiting task cancels it.
    func finishedOutcome<Output>(as type: Output.Type) async -> Result<Output, FetchError> {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Output, FetchError>, Never>) in
                addCompletionHandler(on: .immediate) { operation in
                    continuation.resume(returning: operation.outcome(as: Output.self) ?? .failure(.cancelled(.init(url: operation.request?.url))))
                }
            }
        } onCancel: {
            self.cancel()
        }
    }
}
