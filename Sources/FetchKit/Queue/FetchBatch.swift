import Foundation

/// A group of fetches enqueued together — one refresh of every feed — that reports as one.
///
/// It counts members finished, failed, cancelled and in all, and body bytes received and
/// expected (where the servers announced a length), as two Foundation `Progress` objects and a
/// callback, and completes once, after its last member completed. ``cancel()`` cancels the
/// members that have not completed; `cancellingRestOnFailure: true` does so at the first member
/// that fails.
///
/// ```swift
/// let refresh = queue.enqueue(batch: feeds.map { GetFeed(url: $0) }, cancellingRestOnFailure: true)
/// // … the user presses Stop:
/// refresh.cancel()
/// ```
///
/// ```swift
/// let batch = queue.enqueue(batch: feeds.map { GetFeed(url: $0) },
///                           progress: { status in model.fraction = status.fractionFinished },
///                           completion: { status in model.failures = status.failed })
/// ```
public final class FetchBatch: @unchecked Sendable {
    /// A snapshot of a batch.
    public struct Status: Sendable, Equatable {
        /// Members in the batch.
        public let total: Int
        /// Members that completed, successfully or not.
        public var finished = 0
        /// Members that completed with an error other than a cancellation (a member the queue
        /// refused counts here).
        public var failed = 0
        /// Members that completed cancelled (``FetchError/cancelled(_:)``): by ``cancel()``, by
        /// their own `cancel()`, or by the queue's.
        public var cancelled = 0
        /// Body bytes received by all members so far.
        public var bytesReceived: Int64 = 0
        /// The sum of the announced lengths of the members whose length is known (each
        /// member's latest: a download that started over on a changed file counts its new one).
        public var bytesExpected: Int64 = 0
        /// Members whose length is not (yet) known.
        public var membersWithUnknownLength: Int
        /// How fast the members' bodies arrive together, in bytes per second, averaged over
        /// the last ``FetchProgress/rateWindow`` (5 seconds) since the batch's first response;
        /// `nil` during its first half second.
        ///
        /// Only bytes that arrive count (not those a resumed download already had). The rate is
        /// computed as chunks arrive: while no member receives anything, it keeps its last
        /// value. Also in ``FetchBatch/byteProgress`` under `ProgressUserInfoKey.throughputKey`.
        public var bytesPerSecond: Double?
        /// How long the rest takes at ``bytesPerSecond``: the bytes the members that have not
        /// completed have yet to receive (a member that failed partway receives no more); `nil`
        /// until the length of each of them is known (and while the rate is unknown or zero), 0
        /// once nothing is left to come. Also in ``FetchBatch/byteProgress`` under
        /// `ProgressUserInfoKey.estimatedTimeRemainingKey`.
        public var estimatedTimeRemaining: TimeInterval?

        /// Members that completed without error.
        public var succeeded: Int { finished - failed - cancelled }
        /// Whether every member completed.
        public var isFinished: Bool { finished == total }
        /// `finished / total` (1 for an empty batch).
        public var fractionFinished: Double { total == 0 ? 1 : Double(finished) / Double(total) }

        /// Whether the counts are the same (the rate and time remaining, estimates that depend
        /// on when the status was taken, are not compared).
        public static func == (lhs: Status, rhs: Status) -> Bool {
            lhs.total == rhs.total && lhs.finished == rhs.finished && lhs.failed == rhs.failed && lhs.cancelled == rhs.cancelled
                && lhs.bytesReceived == rhs.bytesReceived && lhs.bytesExpected == rhs.bytesExpected
                && lhs.membersWithUnknownLength == rhs.membersWithUnknownLength
        }
    }

    /// The fetches in the batch, in the order given.
    public let ids: [FetchID]
    /// Members: `totalUnitCount` is the member count, `completedUnitCount` those finished.
    public let progress: Progress
    /// Bytes: `totalUnitCount` is the sum of the known lengths (-1 while none is known),
    /// `completedUnitCount` the bytes received.
    public let byteProgress: Progress

    private let state: Protected<(status: Status, perMember: [Member], completed: Bool,
                                  streams: LatestValueStreams<Status>, rate: RateWindow)>
    /// A member's bytes received (from the start of its file), its length if known, and
    /// whether it completed.
    private typealias Member = (received: Int64, expected: Int64?, ended: Bool)
    /// Orders the writes to ``progress`` and ``byteProgress``.
    private let progressWrites = ProgressWrites()
    private let relay: CoalescingRelay<Status>?
    private let completion: Callback<Status>?
    /// Where the batch's handlers run: the main queue, or the queue the caller named.
    let callbackQueue: CallbackQueue

    /// Cancels the members that have not completed (through their queue); set once, at
    /// ``init(ids:callbackQueue:progress:completion:cancelling:cancellingRestOnFailure:)``.
    private let cancelMembers: @Sendable ([FetchID]) -> Void
    /// Whether the first member to fail cancels the others.
    private let cancelsRestOnFailure: Bool

    init(ids: [FetchID], callbackQueue: CallbackQueue, progress: Callback<Status>?, completion: Callback<Status>?,
         cancelling: @escaping @Sendable ([FetchID]) -> Void = { _ in }, cancellingRestOnFailure: Bool = false) {
        self.ids = ids
        cancelMembers = cancelling
        cancelsRestOnFailure = cancellingRestOnFailure
        self.callbackQueue = callbackQueue
        self.completion = completion
        let status = Status(total: ids.count, membersWithUnknownLength: ids.count)
        state = Protected((status, Array(repeating: (0, nil, false), count: ids.count), false, LatestValueStreams(), RateWindow()))
        self.progress = Progress(totalUnitCount: Int64(ids.count))
        byteProgress = Progress(totalUnitCount: -1)
        relay = progress.map { CoalescingRelay(queue: $0.queue, handler: $0.body) }
    }

    /// The batch now.
    public var status: Status {
        state.withLock { $0.status }
    }

    /// Whether every member completed.
    public var isFinished: Bool {
        status.isFinished
    }

    /// The batch's status as an asynchronous sequence: each iteration gets the latest
    /// ``Status``, and the sequence ends after the batch completed, its last value finished.
    ///
    /// ```swift
    /// let feedRefresh = queue.enqueue(batch: feeds.map { GetFeed(url: $0) })
    /// for await status in feedRefresh.statusUpdates {
    ///     print(status.finished, "of", status.total)
    /// }
    /// ```
    ///
    /// Values are coalesced like ``AnyFetchOperation/progressUpdates``: a slow consumer gets the
    /// newest status, never a backlog (but with no minimum interval: every status it can take). Each access makes a new sequence; one made after the
    /// batch completed yields the final status and ends. Cancelling the task that iterates ends
    /// that iteration only: it does not cancel the members.
    public var statusUpdates: AsyncStream<Status> {
        LatestValueStreams<Status>.makeStream(
            add: { [state] continuation in
                state.withLock { state in
                    // A stream made before any event starts from the batch as it stands.
                    if state.streams.latest == nil, !state.streams.isFinished { state.streams.yield(state.status) }
                    return state.streams.add(continuation)
                }
            },
            remove: { [weak self] id in self?.state.withLock { $0.streams.remove(id) } })
    }

    // MARK: Member events

    /// A member's progress: `received` in all (from the start of its file), of `expected`;
    /// `moved` of them arrived since its last report (what the rate counts).
    func member(_ index: Int, received: Int64, expected: Int64?, moved: Int64) {
        let now = RateWindow.now()
        let (status, number) = state.withLock { state -> (Status, UInt64) in
            let before = state.perMember[index]
            state.status.bytesReceived += received - before.received
            // A member's latest length counts: a download that started over (its file changed
            // while it was paused or between retries) may announce another.
            switch (before.expected, expected) {
            case (nil, let new?):
                state.status.bytesExpected += new
                state.status.membersWithUnknownLength -= 1
            case (let old?, let new?) where new != old:
                state.status.bytesExpected += new - old
            default:
                break
            }
            state.perMember[index] = (received, expected ?? before.expected, before.ended)
            state.rate.add(moved, at: now)
            state.status.bytesPerSecond = state.rate.bytesPerSecond
            state.status.estimatedTimeRemaining = Self.timeRemaining(of: state.perMember, at: state.rate)
            state.streams.yield(state.status)
            return (state.status, progressWrites.take())
        }
        publish(status, number)
    }

    /// Cancels every member that has not completed: each completes once, as cancelled, and
    /// counts in ``Status/cancelled``; none of them starts a transfer after this returns. The
    /// batch then completes as usual, after its last member. Members that completed keep their
    /// outcome. Does nothing once the batch completed.
    public func cancel() {
        let remaining = state.withLock { state -> [FetchID] in
            state.completed ? [] : ids.indices.filter { !state.perMember[$0].ended }.map { ids[$0] }
        }
        if !remaining.isEmpty { cancelMembers(remaining) }
    }

    /// How a member ended.
    enum MemberOutcome {
        case succeeded, failed, cancelled

        init(_ error: FetchError?) {
            switch error {
            case nil: self = .succeeded
            case .cancelled?: self = .cancelled
            case _?: self = .failed
            }
        }
    }

    func memberFinished(_ index: Int, outcome: MemberOutcome) {
        let (status, last, streams, number) = state.withLock { state in
            state.status.finished += 1
            switch outcome {
            case .succeeded: break
            case .failed: state.status.failed += 1
            case .cancelled: state.status.cancelled += 1
            }
            state.perMember[index].ended = true
            // What it did not receive is no longer to come.
            state.status.estimatedTimeRemaining = Self.timeRemaining(of: state.perMember, at: state.rate)
            let last = state.status.isFinished && !state.completed
            if last { state.completed = true }
            state.streams.yield(state.status)
            return (state.status, last, last ? state.streams.finish(with: nil) : [], progressWrites.take())
        }
        for stream in streams { stream.finish() }
        publish(status, number)
        if outcome == .failed, cancelsRestOnFailure, !last { cancel() }
        if last {
            completion?.post(status)
        }
    }

    /// How long the members that have not completed take to receive the rest at `rate`: `nil`
    /// if one of them has no known length (or the rate is unknown), 0 if nothing is left.
    private static func timeRemaining(of members: [Member], at rate: RateWindow) -> TimeInterval? {
        var remaining: Int64 = 0
        for member in members where !member.ended {
            guard let expected = member.expected else { return nil }
            remaining += max(0, expected - member.received)
        }
        return rate.timeRemaining(for: remaining)
    }

    /// Completes an empty batch.
    func completeIfEmpty() {
        guard ids.isEmpty else { return }
        memberFinishedEmpty()
    }

    private func memberFinishedEmpty() {
        let (status, streams, number) = state.withLock { state in
            state.completed = true
            return (state.status, state.streams.finish(with: state.status), progressWrites.take())
        }
        for stream in streams { stream.finish() }
        publish(status, number)
        completion?.post(status)
    }

    /// Hands `status` (the value numbered `number`) to the `Progress` objects and the handler.
    private func publish(_ status: Status, _ number: UInt64) {
        progressWrites.write(number) {
            progress.completedUnitCount = Int64(status.finished)
            if status.membersWithUnknownLength < status.total {
                byteProgress.totalUnitCount = status.bytesExpected
            }
            byteProgress.completedUnitCount = status.bytesReceived
            byteProgress.setRate(status.bytesPerSecond, timeRemaining: status.estimatedTimeRemaining)
        }
        relay?.post(status)
    }
}

extension FetchQueue {
    /// Enqueues a group of operations that reports and completes as one, with its handlers on
    /// the main actor.
    ///
    /// Each member is enqueued as by ``enqueue(_:completion:)``; add a member's own completion
    /// handler to the member (``OutputProducing/onCompletion(_:)``) before enqueueing the batch.
    /// A member the queue refuses counts as failed. A member this queue already runs as another
    /// fetch's dependency (see ``enqueue(_:completion:)``) is taken over: the batch counts it
    /// when it completes.
    ///
    /// - Parameters:
    ///   - operations: The members.
    ///   - cancellingRestOnFailure: Whether the first member that fails (with an error other
    ///     than a cancellation) cancels the members that have not completed (``FetchBatch/cancel()``).
    ///     Default `false`: every member runs to its end.
    ///   - progress: Called on the main actor as members progress and finish (coalesced).
    ///   - completion: Called once, on the main actor, after the last member completed.
    /// - Returns: The batch, for its status, its `Progress` objects and ``FetchBatch/cancel()``.
    @discardableResult
    public func enqueue(
        batch operations: [AnyFetchOperation],
        cancellingRestOnFailure: Bool = false,
        progress: (@MainActor (FetchBatch.Status) -> Void)? = nil,
        completion: (@MainActor (FetchBatch.Status) -> Void)? = nil
    ) -> FetchBatch {
        enqueue(batch: operations, callbackQueue: .main, cancellingRestOnFailure: cancellingRestOnFailure,
                progress: progress.map { Callback(mainActor: $0) },
                completion: completion.map { Callback(mainActor: $0) })
    }

    /// Enqueues a group of operations that reports and completes as one, with its handlers on
    /// `queue`.
    ///
    /// - Parameters:
    ///   - operations: The members.
    ///   - queue: Where `progress` and `completion` run.
    ///   - cancellingRestOnFailure: Whether the first member that fails cancels the rest (see
    ///     ``enqueue(batch:cancellingRestOnFailure:progress:completion:)``). Default `false`.
    ///   - progress: Called as members progress and finish (coalesced).
    ///   - completion: Called once, after the last member completed.
    /// - Returns: The batch, for its status, its `Progress` objects and ``FetchBatch/cancel()``.
    @discardableResult
    public func enqueue(
        batch operations: [AnyFetchOperation],
        on queue: CallbackQueue,
        cancellingRestOnFailure: Bool = false,
        progress: (@Sendable (FetchBatch.Status) -> Void)? = nil,
        completion: (@Sendable (FetchBatch.Status) -> Void)? = nil
    ) -> FetchBatch {
        enqueue(batch: operations, callbackQueue: queue, cancellingRestOnFailure: cancellingRestOnFailure,
                progress: progress.map { Callback(on: queue, $0) },
                completion: completion.map { Callback(on: queue, $0) })
    }

    private func enqueue(
        batch operations: [AnyFetchOperation],
        callbackQueue: CallbackQueue,
        cancellingRestOnFailure: Bool,
        progress: Callback<FetchBatch.Status>?,
        completion: Callback<FetchBatch.Status>?
    ) -> FetchBatch {
        // Every member gets its identifier before any starts: the batch is built from them.
        var ids: [FetchID] = []
        var pending: [(AnyFetchOperation, FetchID, refusal: FetchError?)] = []
        // Members this queue already runs as another fetch's dependency: taken over, as by
        // `enqueue(_:)` (they are neither checked nor enqueued again).
        var takenOver: Set<Int> = []
        for operation in operations {
            if let id = operation.takeAdoption(by: self) {
                takenOver.insert(pending.count)
                ids.append(id)
                pending.append((operation, id, nil))
                continue
            }
            let (id, accepted) = reserve(operation)
            ids.append(id)
            pending.append((operation, id, accepted ? nil : Self.alreadyEnqueued(operation)))
        }
        // Members may depend on each other (in any order): each is checked once all are
        // reserved. A member refused for a cycle is unclaimed, and one that depends on it is
        // then found to need it enqueued.
        var orphans: [AnyFetchOperation] = []
        for index in pending.indices where pending[index].refusal == nil && !takenOver.contains(index) {
            let (operation, id, _) = pending[index]
            switch Self.checkDependencies(of: operation) {
            case .refuse(let reason):
                unreserve(operation, id: id)
                pending[index].refusal = Self.dependencyError(reason, operation)
            case .enqueue(let found):
                orphans += found
            }
        }
        adopt(orphans)
        let cancelling: @Sendable ([FetchID]) -> Void = { [weak self] members in
            let wanted = Set(members)
            _ = self?.cancelAll { id, _ in wanted.contains(id) }
        }
        let batch = FetchBatch(ids: ids, callbackQueue: callbackQueue, progress: progress, completion: completion,
                               cancelling: cancelling, cancellingRestOnFailure: cancellingRestOnFailure)
        for (index, (operation, id, refusal)) in pending.enumerated() {
            if refusal != nil {
                // Refused (already enqueued elsewhere, or could never start): a failed member.
                batch.memberFinished(index, outcome: .failed)
                continue
            }
            operation.join(batch, at: index)
            // After the member's own completion handlers on the batch's queue.
            let joinBatch = {
                operation.addCompletionHandler(on: callbackQueue) { operation in
                    batch.memberFinished(index, outcome: FetchBatch.MemberOutcome(operation.error))
                }
            }
            if takenOver.contains(index) {
                joinBatch()         // already enqueued, perhaps finished: counted when it completes
            } else {
                activate(operation, id: id, attach: joinBatch)
            }
        }
        batch.completeIfEmpty()
        return batch
    }
}
