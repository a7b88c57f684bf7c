import Foundation

// Pausing: the lifecycle parks the operation between attempts (``LifecycleStateMachine``,
// `executing(stoppingForPause)` and `executing(paused)`); resuming begins the next attempt as a
// continuation of the last. A paused fetch holds no transfer and no slot: in a ``FetchQueue``
// its attempt left the line or its flight (as a cancelled one does: another member of a shared
// flight goes on), and its operation keeps its identifier, its completion handlers and its
// awaiting callers. Never `URLSessionTask.suspend()`: on Linux, resuming a suspended task
// sends its request again, body and all. A download's partial file is kept as a cancel keeps
// it, and the resumed attempt asks for the rest with `Range` and `If-Range`.
extension AnyFetchOperation {
    /// Pauses the fetch: it stops its transfer, if one runs, and starts none until ``resume()``.
    ///
    /// What it keeps:
    /// - its identity: the same operation, the same ``FetchID`` in its ``FetchQueue``; its
    ///   completion handlers and an `await` of ``OutputProducing/value`` still run once, at
    ///   its real end (a pause is not an end);
    /// - its bytes, if it is a ``DownloadOperation``: its partial file is kept as a cancel keeps
    ///   it (when the server gave a validator and accepts ranges, and
    ///   ``DownloadOperation/resumesPartialDownloads`` is on), and ``resume()`` asks for the rest
    ///   with `Range` and `If-Range`, validated as ever. A fetch whose body is kept in memory
    ///   drops what it received and asks again from the start on ``resume()``.
    ///
    /// What it frees: its transfer slot in its queue (the next waiting fetch starts); its place
    /// in line is kept for ``resume()``. In a shared flight (``FetchQueue/coalescesIdenticalRequests``) it leaves
    /// the flight, which goes on for the others, at the priority of those left.
    ///
    /// It takes effect at once while the fetch waits for a slot, for its dependencies, or
    /// between attempts (a retry's delay ends in the pause). Pausing a running transfer stops
    /// it; if the body was already complete, the fetch completes as usual instead of pausing,
    /// and a transfer that failed for good meanwhile ends the fetch with its error. A paused
    /// fetch can be cancelled (it completes once, as cancelled) and keeps its queue alive, as
    /// every unfinished fetch does.
    ///
    /// A resumed request is sent again: pause only fetches that may be asked twice (a GET, a
    /// download — not a request with side effects).
    ///
    /// ```swift
    /// download.pause()            // the slot goes to the next download; the bytes stay on disk
    /// download.resume()           // continues with Range from the partial file
    /// ```
    ///
    /// Its monitors hear ``FetchEventMonitor/fetchDidPause(_:)``.
    ///
    /// - Returns: `true` if it is now paused; `false` if it already was, was cancelled, or its
    ///   transfer has already ended (it is parsing or has finished).
    @discardableResult
    public func pause() -> Bool {
        let (action, transfer) = core.withLock { core in
            let action = core.machine.pause()
            if action != .none { core.observed?.send(.paused, self) }
            return (action, core.transfer)
        }
        guard action != .none else { return false }
        reportPausedRate()
        if action == .stopTransfer { transfer?.stop() }
        return true
    }

    /// Resumes a paused fetch: it waits for a transfer slot again, and continues — a
    /// ``DownloadOperation`` from its partial file, with `Range`. A resume is not a retry: it
    /// does not count in ``attempts``.
    ///
    /// In a ``FetchQueue`` it takes its place in line again, as aria2 and download managers keep
    /// a paused download's: among the fetches of its priority it goes before those enqueued
    /// after it — where it waited, if it was paused while waiting; if it was paused while its
    /// transfer ran, ahead of those that waited behind it then. One re-prioritised while paused
    /// (``FetchQueue/setPriority(_:of:)``) waits at the back of its new priority. One paused
    /// before it ever waited for a slot has no place yet: it waits at the back.
    ///
    /// Its monitors hear ``FetchEventMonitor/fetchDidResume(_:)``.
    ///
    /// - Returns: `true` if it was paused; `false` otherwise (nothing changes).
    @discardableResult
    public func resume() -> Bool {
        let action = core.withLock { core in
            let action = core.machine.resume()
            if action != .none { core.observed?.send(.resumed, self) }
            return action
        }
        guard action != .none else { return false }
        if action == .beginAttempt {
            // Off the caller's thread (a download inspects its partial file first), on one
            // serial queue: fetches resumed one after another take their places in that order.
            Self.resumeQueue.async { self.beginAttempt(continuing: true) }
        }
        return true
    }

    /// Where resumed fetches begin their next attempt, in the order they were resumed.
    private static let resumeQueue = DispatchQueue(label: "FetchKit.resume")

    /// Whether the fetch is paused: ``pause()`` was called, not ``resume()``, and the fetch has
    /// not ended (a fetch whose transfer completed as it was paused is not paused).
    public var isPaused: Bool {
        core.withLock { $0.machine.isPaused }
    }

    /// The current attempt's transfer handle (`nil` between attempts).
    var currentTransfer: (any TransferHandle)? {
        core.withLock { $0.transfer }
    }

    /// Sets the priority of the fetch's next attempts in its queue.
    func overridePriority(_ priority: Operation.QueuePriority) {
        core.withLock { $0.priorityOverride = priority }
    }
}
