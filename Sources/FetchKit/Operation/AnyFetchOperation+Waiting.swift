import Foundation

extension AnyFetchOperation {
    /// How long the run-loop wait runs the run loop at a time.
    static let runLoopSlice: TimeInterval = 0.05

    /// Blocks until the operation has finished and its completion handlers have run, running
    /// the current thread's run loop meanwhile, or until `timeout` passes.
    ///
    /// For callers that must block on a thread whose run loop delivers their callbacks — the
    /// main thread waiting for a fetch whose completion handler runs on the main queue:
    ///
    /// ```swift
    /// operation.onCompletion { result in model.show(result) }   // on the main actor
    /// fetchQueue.enqueue(operation)
    /// guard operation.waitUntilFinished(timeout: 10) else { throw Timeout() }
    /// ```
    ///
    /// The run loop runs in slices of 50 ms, never until `distantFuture`. When the thread's run
    /// loop has no sources (any background thread; on Linux `run(mode:before:)` then returns at
    /// once), the wait sleeps on the operation's lock instead of spinning.
    ///
    /// Do not call it from inside a block running on the main queue while completion handlers
    /// target the main queue: they cannot run until that block returns, so the wait can only
    /// time out. It never hangs past `timeout`.
    ///
    /// - Parameter timeout: The longest to wait, in seconds.
    /// - Returns: `true` if the operation finished and its handlers ran; `false` on timeout.
    @available(*, noasync, message: "Blocks the thread; use `try await operation.value` or `try await queue.fetch(operation)` in async code.")
    public func waitUntilFinished(timeout: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: max(0, timeout))
        let onMainThread = Thread.isMainThread
        if onMainThread { core.withLock { $0.mainThreadWaiters += 1 } }
        defer { if onMainThread { core.withLock { $0.mainThreadWaiters -= 1 } } }
        let runLoop = RunLoop.current
        while !core.withLock({ $0.isSettled }) {
            let now = Date()
            guard now < deadline else { return false }
            let sliceEnd = min(deadline, now.addingTimeInterval(Self.runLoopSlice))
            if !runLoop.run(mode: .default, before: sliceEnd) {
                // Nothing can arrive through this run loop: sleep until woken or the slice ends.
                _ = core.wait(until: sliceEnd) { !$0.isSettled }
            }
        }
        return true
    }

    /// Wakes run-loop waiters: those sleeping on the lock, and a main thread blocked in its run
    /// loop (an empty main-queue block makes its `run(mode:before:)` return).
    func wakeWaiters() {
        let nudgeMain = core.withLock { $0.mainThreadWaiters > 0 }
        core.broadcast()
        if nudgeMain && !Thread.isMainThread {
            DispatchQueue.main.async {}
        }
    }
}
