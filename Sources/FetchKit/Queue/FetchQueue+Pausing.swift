import Foundation

// Pausing and re-prioritising fetches by identifier. A pause is the operation's own
// (``AnyFetchOperation/pause()``): its attempt leaves the line or its flight as a cancelled one
// does, and the queue hands its slot on. A priority is the queue's: where an attempt waits.
extension FetchQueue {
    /// Pauses one fetch: its transfer stops, its slot goes to the next waiting fetch, and it
    /// keeps its identifier, its completion and, for a download, its partial file. See
    /// ``AnyFetchOperation/pause()``.
    ///
    /// - Returns: `true` if it is now paused; `false` if no such fetch is in the queue, or it
    ///   could not be paused (already paused, cancelled, or its transfer already ended).
    @discardableResult
    public func pause(_ id: FetchID) -> Bool {
        operation(for: id)?.pause() ?? false
    }

    /// Resumes one paused fetch: it waits for a slot again, in the place it kept in line, and
    /// continues (a download with `Range`). See ``AnyFetchOperation/resume()``.
    ///
    /// - Returns: `false` if no such fetch is in the queue, or it was not paused.
    @discardableResult
    public func resume(_ id: FetchID) -> Bool {
        operation(for: id)?.resume() ?? false
    }

    /// Whether the fetch `id` is paused (`false` if it is not in the queue).
    public func isPaused(_ id: FetchID) -> Bool {
        operation(for: id)?.isPaused ?? false
    }

    /// Pauses every fetch in the queue, at once: no slot is granted while they are paused, so
    /// that pausing one does not start another. Fetches enqueued afterwards are not paused
    /// (suspend the queue, ``isSuspended``, to hold those too).
    ///
    /// - Returns: How many were paused.
    @discardableResult
    public func pauseAll() -> Int {
        transition { $0.holdGrants() }
        defer { transition { $0.releaseGrants() } }
        return state.withLock { $0.fetchesInEnqueueOrder }.filter { $0.pause() }.count
    }

    /// Resumes every paused fetch, in enqueue order: they wait for slots again, each in the place
    /// it kept in line (see ``AnyFetchOperation/resume()``).
    ///
    /// - Returns: How many were resumed.
    @discardableResult
    public func resumeAll() -> Int {
        state.withLock { $0.fetchesInEnqueueOrder }.filter { $0.resume() }.count
    }

    /// Changes the priority of a fetch in the queue, up or down.
    ///
    /// A fetch waiting for a slot moves to the back of its new priority at once, and so does a
    /// paused one (it waits there when resumed); given the priority it has, either keeps its
    /// place. One in flight keeps its slot, and its later
    /// attempts (a retry, a resume after ``pause(_:)``) wait at the new priority. In a shared flight (``coalescesIdenticalRequests``) the flight waits at
    /// the priority of its most urgent member: raising one raises it, and lowering (or pausing,
    /// or cancelling) that member lets it fall back to the most urgent of those left.
    ///
    /// It is the queue's order of transfers; the operation's `queuePriority` (which its
    /// `OperationQueue` uses before it starts) is not changed.
    ///
    /// ```swift
    /// func userTapped(_ id: FetchID) {
    ///     queue.setPriority(.veryHigh, of: id)   // the one the user tapped goes next
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - priority: The new priority.
    ///   - id: The fetch.
    /// - Returns: `false` if no such fetch is in the queue.
    @discardableResult
    public func setPriority(_ priority: Operation.QueuePriority, of id: FetchID) -> Bool {
        guard let operation = operation(for: id) else { return false }
        // First the operation's: an attempt made from now on reserves its place at it; then
        // the queue's: an attempt made before, waiting or about to join, waits at it too.
        operation.overridePriority(priority)
        let attempt = operation.currentTransfer as? FlightMember
        let level = SlotScheduler<FlightMember>.level(of: priority)
        transition { $0.reprioritize(id, attempt: attempt?.queue === self ? attempt : nil, to: level) }
        return true
    }
}
