import Foundation

extension FetchQueue {
    /// This queue, with its handlers run on `callbackQueue` — for code off the main actor (a
    /// command-line tool, a server, a background service), so that no `enqueue` repeats `on:`.
    ///
    /// ```swift
    /// let downloads = FetchQueue(name: "downloads").delivering(on: .global)
    /// downloads.enqueue(DataFetchOperation(url: url)) { result in   // on .global
    ///     print(result)
    /// }
    /// ```
    ///
    /// The handlers of ``enqueue(_:completion:)`` and its siblings run on the main actor,
    /// which a program that blocks its main thread never reaches; their `on:` variants run
    /// them elsewhere. A ``Delivery`` is the same queue with `on:` given once.
    ///
    /// - Parameter callbackQueue: Where the handlers given to the ``Delivery`` run.
    public func delivering(on callbackQueue: CallbackQueue) -> Delivery {
        Delivery(queue: self, callbackQueue: callbackQueue)
    }

    /// A ``FetchQueue`` whose handlers run on one ``CallbackQueue`` (see
    /// ``FetchQueue/delivering(on:)``). Everything but where the handlers run is the queue's:
    /// its limits, its fetches and its state are those of ``queue``.
    public struct Delivery: Sendable {
        /// The queue the fetches go to: for its limits, cancellation and state.
        public let queue: FetchQueue
        /// Where the handlers given here run.
        public let callbackQueue: CallbackQueue

        /// Enqueues an operation; `completion` runs once, on ``callbackQueue``. As
        /// ``FetchQueue/enqueue(_:on:completion:)``.
        ///
        /// - Returns: The fetch's identifier, for ``FetchQueue/cancel(_:)``.
        @discardableResult
        public func enqueue<Fetch: OutputProducing>(
            _ operation: Fetch,
            completion: @escaping @Sendable (Result<Fetch.Output, FetchError>) -> Void = { _ in }
        ) -> FetchID {
            queue.enqueue(operation, on: callbackQueue, completion: completion)
        }

        /// Enqueues an operation; `completion` runs once, on ``callbackQueue``, with the operation
        /// and its outcome. As ``FetchQueue/enqueue(_:on:completionWithOperation:)``.
        ///
        /// - Returns: The fetch's identifier, for ``FetchQueue/cancel(_:)``.
        @discardableResult
        public func enqueue<Fetch: OutputProducing>(
            _ operation: Fetch,
            completionWithOperation completion: @escaping @Sendable (Fetch, Result<Fetch.Output, FetchError>) -> Void
        ) -> FetchID {
            queue.enqueue(operation, on: callbackQueue, completionWithOperation: completion)
        }

        /// Enqueues a batch; its handlers run on ``callbackQueue``. As
        /// ``FetchQueue/enqueue(batch:on:cancellingRestOnFailure:progress:completion:)``.
        @discardableResult
        public func enqueue(
            batch operations: [AnyFetchOperation],
            progress: (@Sendable (FetchBatch.Status) -> Void)? = nil,
            completion: (@Sendable (FetchBatch.Status) -> Void)? = nil
        ) -> FetchBatch {
            queue.enqueue(batch: operations, on: callbackQueue, progress: progress, completion: completion)
        }

        /// Enqueues an operation and suspends until it finished. As ``FetchQueue/fetch(_:)``.
        public func fetch<Fetch: OutputProducing>(_ operation: Fetch) async throws(FetchError) -> Fetch.Output {
            try await queue.fetch(operation)
        }
    }
}
