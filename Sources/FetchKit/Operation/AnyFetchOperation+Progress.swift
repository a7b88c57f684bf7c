import Foundation

/// How far a transfer has got: the response body received and, for a request with a body,
/// the request body sent; and how fast the body arrives.
///
/// Two values are equal when their byte counts are: ``bytesPerSecond`` and
/// ``estimatedTimeRemaining`` are estimates that depend on when the value was made, and are not
/// compared.
public struct FetchProgress: Sendable, Equatable {
    /// Body bytes received so far.
    public let bytesReceived: Int64
    /// The body's length from `Content-Length`, if the server sent one. Once a fetch succeeded,
    /// the final value's is the length received.
    public let bytesExpected: Int64?
    /// Request body bytes sent so far: 0 for a request without a body.
    ///
    /// Never more than ``bytesToSend``, and exactly it once an accepted response arrived. (On
    /// Linux, URLSession over-reports what it sent; FetchKit clamps it to the body's length.)
    public let bytesSent: Int64
    /// The request body's length: `httpBody`'s size, or the `Content-Length` of an
    /// `httpBodyStream`. `nil` for a request without a body, or a stream of unknown length.
    public let bytesToSend: Int64?
    /// How fast the response body arrives, in bytes per second, averaged over the last
    /// ``rateWindow`` (5 seconds) of the current attempt; `nil` during its first half second.
    ///
    /// Only the bytes that arrive count: a download that resumes a partial file does not count
    /// the bytes already on disk, and a retry starts the window again. The rate is computed as
    /// each chunk arrives, so a transfer that stalls keeps its last rate until the next chunk;
    /// a paused fetch reports `nil` (its window starts again with the next attempt's response).
    /// The same value is in the operation's `Progress` (``AnyFetchOperation/progress``) under
    /// `ProgressUserInfoKey.throughputKey` (`Progress.throughput` on Apple platforms), rounded.
    public let bytesPerSecond: Double?
    /// How long the rest of the body will take at ``bytesPerSecond``: `nil` when the rate or
    /// the body's length is unknown (or the rate is zero), 0 once every byte arrived. In the
    /// operation's `Progress` under `ProgressUserInfoKey.estimatedTimeRemainingKey`.
    public let estimatedTimeRemaining: TimeInterval?

    /// How far back ``bytesPerSecond`` looks: 5 seconds.
    public static let rateWindow: TimeInterval = RateWindow.window

    /// The least time between two progress updates a handler or a sequence gets unless you
    /// choose otherwise: 0.1 seconds, at most 10 updates a second (the rate of
    /// ``FetchEventMonitor``'s progress events).
    ///
    /// A transfer reports every chunk, hundreds of times a second on a fast download; updates
    /// that come sooner are coalesced into the newest. The final update is never held back for
    /// the interval. Choose another with ``AnyFetchOperation/onProgress(minimumInterval:_:)``,
    /// ``AnyFetchOperation/onProgress(on:minimumInterval:_:)`` or
    /// ``AnyFetchOperation/progressUpdates(minimumInterval:)``; 0 for every update a busy
    /// handler can take.
    public static let defaultMinimumInterval: TimeInterval = 0.1

    /// Creates a progress value.
    ///
    /// - Parameters:
    ///   - bytesReceived: Response body bytes received.
    ///   - bytesExpected: The response body's length, if known.
    ///   - bytesSent: Request body bytes sent; 0 by default.
    ///   - bytesToSend: The request body's length, if known; `nil` by default.
    ///   - bytesPerSecond: The receive rate, if known; `nil` by default.
    ///   - estimatedTimeRemaining: The time the rest of the body takes, if known; `nil` by default.
    public init(bytesReceived: Int64, bytesExpected: Int64?, bytesSent: Int64 = 0, bytesToSend: Int64? = nil,
                bytesPerSecond: Double? = nil, estimatedTimeRemaining: TimeInterval? = nil) {
        self.bytesReceived = bytesReceived
        self.bytesExpected = bytesExpected
        self.bytesSent = bytesSent
        self.bytesToSend = bytesToSend
        self.bytesPerSecond = bytesPerSecond
        self.estimatedTimeRemaining = estimatedTimeRemaining
    }

    /// Whether the byte counts are the same (the rate and time remaining are not compared).
    public static func == (lhs: FetchProgress, rhs: FetchProgress) -> Bool {
        lhs.bytesReceived == rhs.bytesReceived && lhs.bytesExpected == rhs.bytesExpected
            && lhs.bytesSent == rhs.bytesSent && lhs.bytesToSend == rhs.bytesToSend
    }

    /// `bytesReceived / bytesExpected`, when the length is known.
    public var fractionCompleted: Double? {
        guard let bytesExpected, bytesExpected > 0 else { return nil }
        return min(1, Double(bytesReceived) / Double(bytesExpected))
    }

    /// `bytesSent / bytesToSend`, when the request has a body of known length.
    public var fractionSent: Double? {
        guard let bytesToSend, bytesToSend > 0 else { return nil }
        return min(1, Double(bytesSent) / Double(bytesToSend))
    }
}

extension AnyFetchOperation {
    /// The operation's progress as an asynchronous sequence: each iteration gets the latest
    /// ``FetchProgress``, at most every ``FetchProgress/defaultMinimumInterval`` (0.1 s), and the
    /// sequence ends when the operation finishes.
    ///
    /// ```swift
    /// let upload = FetchOperation<Data>(request: request)      // a POST with a body
    /// queue.enqueue(upload)
    /// for await progress in upload.progressUpdates {
    ///     print(progress.bytesSent, "of", progress.bytesToSend ?? 0, "sent")
    /// }
    /// ```
    ///
    /// - Values are coalesced: a consumer slower than the transfer gets the newest value, never
    ///   a backlog of every chunk. The last value before the end is the final one (after a
    ///   success, `bytesExpected` is the length received), given without waiting for the
    ///   interval.
    /// - Each access makes a new sequence; several consumers each get every latest value.
    /// - A sequence made while the operation runs starts with its latest value; one made after
    ///   it finished yields the final value (none if no transfer began) and ends.
    /// - Cancelling the task that iterates ends that iteration only: it does **not** cancel the
    ///   fetch. Call `cancel()` on the operation for that.
    /// - A finished operation keeps no reference to its sequences.
    ///
    /// For another rate, see ``progressUpdates(minimumInterval:)``.
    public var progressUpdates: AsyncStream<FetchProgress> {
        progressUpdates(minimumInterval: FetchProgress.defaultMinimumInterval)
    }

    /// The operation's progress as an asynchronous sequence, like ``progressUpdates``, with
    /// values at most every `minimumInterval` seconds.
    ///
    /// ```swift
    /// for await progress in download.progressUpdates(minimumInterval: 1) {
    ///     print(progress.bytesReceived, "bytes")                // once a second at most
    /// }
    /// ```
    ///
    /// - Parameter minimumInterval: The least time between two values, in seconds: a value that
    ///   comes sooner waits (replaced by any newer one) until the interval has passed. 0 for
    ///   every value the consumer can take. The final value never waits.
    /// - Returns: A new sequence of the operation's progress.
    public func progressUpdates(minimumInterval: TimeInterval) -> AsyncStream<FetchProgress> {
        let interval = Self.nanoseconds(minimumInterval)
        return LatestValueStreams<FetchProgress>.makeStream(
            add: { [core] continuation in core.withLock { $0.addProgressStream(continuation, minimumInterval: interval) } },
            remove: { [weak self] id in self?.core.withLock { $0.removeProgressStream(id) } })
    }

    /// Calls `handler` on the main actor as the body arrives (and as a request body is sent),
    /// at most every `minimumInterval` seconds.
    ///
    /// Updates are coalesced: if the main actor is busy, or an update comes sooner than the
    /// interval after the last, you get the latest value rather than a backlog of every chunk.
    /// The handler is never called with an older value after a newer one. The last update
    /// before completion is always delivered, without waiting for the interval (before the
    /// completion handlers that run on the main actor). For the same values as an asynchronous
    /// sequence, see ``progressUpdates``.
    ///
    /// ```swift
    /// download.onProgress { progress in
    ///     model.fraction = progress.fractionCompleted ?? 0     // a @MainActor view model
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - minimumInterval: The least time between the starts of two calls, in seconds;
    ///     ``FetchProgress/defaultMinimumInterval`` (0.1 s) by default. 0 for every update the
    ///     main actor can take.
    ///   - handler: Receives each progress value, on the main actor.
    public func onProgress(minimumInterval: TimeInterval = FetchProgress.defaultMinimumInterval,
                           _ handler: @escaping @MainActor (FetchProgress) -> Void) {
        addProgressRelay(ProgressRelay(queue: .main, minimumInterval: minimumInterval) { progress in
            MainActor.assumeIsolated { handler(progress) }
        })
    }

    /// Calls `handler` on `queue` as the body arrives, coalescing like
    /// ``onProgress(minimumInterval:_:)``.
    ///
    /// One call at a time, whatever the queue: on a concurrent queue such as
    /// ``CallbackQueue/global`` too, the handler is not called again before it returned, and
    /// never with an older value after a newer one. A handler slower than the transfer gets
    /// the newest value when it returns.
    ///
    /// - Parameters:
    ///   - queue: Where it runs.
    ///   - minimumInterval: The least time between the starts of two calls, in seconds;
    ///     ``FetchProgress/defaultMinimumInterval`` (0.1 s) by default. 0 for every update the
    ///     handler can take.
    ///   - handler: Receives each progress value.
    public func onProgress(on queue: CallbackQueue, minimumInterval: TimeInterval = FetchProgress.defaultMinimumInterval,
                           _ handler: @escaping @Sendable (FetchProgress) -> Void) {
        addProgressRelay(ProgressRelay(queue: queue, minimumInterval: minimumInterval, handler: handler))
    }

    /// `seconds` in whole nanoseconds, 0 for a negative or not-a-number interval.
    static func nanoseconds(_ seconds: TimeInterval) -> UInt64 {
        guard seconds > 0 else { return 0 }
        return seconds >= Double(UInt64.max) / 1e9 ? .max : UInt64(seconds * 1e9)
    }

    /// Arms the timer for the sequences' consumers that wait for their interval; when it
    /// fires, they get the latest value (unless the operation finished and gave them the final
    /// one), and it is armed again if some still wait.
    func armProgressFlush(at deadline: UInt64) {
        deliveryTimers.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: deadline)) { [weak self] in
            guard let self else { return }
            if let next = core.withLock({ $0.flushProgressStreams(due: deadline, at: RateWindow.now()) }) {
                armProgressFlush(at: next)
            }
        }
    }

    private func addProgressRelay(_ relay: ProgressRelay) {
        core.withLock { core in
            guard !core.machine.isFinished else { return }
            core.progressRelays.append(relay)
        }
    }

    // MARK: Reports from the transfer (router queue)

    /// Records upload progress: `bytes` of the request body sent, of `total` if known.
    func transferDidSend(bytes: Int64, of total: Int64?) {
        reportProgress { core in
            core.bytesSent = bytes
            core.bytesToSend = total
            return 0
        }
    }

    /// Records download progress: `received` body bytes of this attempt, of `expected`. The
    /// fetch's batch, if any, hears of it too.
    func reportProgress(received: Int64, expected: Int64?) {
        let now = RateWindow.now()
        reportProgress(toBatch: true) { core in
            core.bytesReceived = core.attempt.progressBase + received
            core.bytesExpected = expected.map { core.attempt.progressBase + $0 }
            // A response head (0 received) starts the attempt's window; what arrives after it
            // is counted, never the bytes a resumed file already had.
            if received == 0 {
                core.rate.begin(at: now)
                core.attemptBytesCounted = 0
            }
            let moved = max(0, received - core.attemptBytesCounted)
            core.attemptBytesCounted = max(core.attemptBytesCounted, received)
            core.rate.add(moved, at: now)
            return moved
        }
    }

    /// A fetch was paused: it receives nothing now, so its rate and time remaining are no longer
    /// known. The window starts again with the next attempt's response; if progress was
    /// reported before, the value without a rate goes to the `Progress` object, the sequences
    /// and the progress handlers (not to the batch: no bytes moved).
    func reportPausedRate() {
        typealias Update = (value: FetchProgress, progress: (Progress, ProgressWrites, UInt64)?, relays: [ProgressRelay], flush: UInt64?)
        let update = core.withLock { core -> Update? in
            core.rate = RateWindow()
            guard core.progressReported, !core.machine.isFinished else { return nil }
            let value = core.currentProgress
            let flush = core.yieldProgress(value)
            core.updateObserved { $0.progressed(value, self) }
            return (value, core.writableProgress, core.progressRelays, flush)
        }
        guard let update else { return }
        if let flush = update.flush { armProgressFlush(at: flush) }
        if let (progress, writes, number) = update.progress {
            writes.write(number) { progress.setRate(nil, timeRemaining: nil) }
        }
        for relay in update.relays {
            relay.post(update.value)
        }
    }

    /// Applies `change` and hands the new value to the `Progress` object (if anyone asked for
    /// it), the sequences, the progress handlers and, if `toBatch`, the fetch's batch. Only
    /// while transferring: a late report (to a caller that already left a shared transfer)
    /// changes nothing.
    ///
    /// The sequences get the value under the lock, so that no older value can overtake the
    /// final one that ``Core/endProgressStreams(succeeded:)`` yields.
    private func reportProgress(toBatch: Bool = false, _ change: (inout Core) -> Int64) {
        typealias Update = (value: FetchProgress, moved: Int64, progress: (Progress, ProgressWrites, UInt64)?, relays: [ProgressRelay],
                            batch: (FetchBatch, Int)?, flush: UInt64?)
        let update = core.withLock { core -> Update? in
            guard case .executing(.transferring) = core.machine.state else { return nil }
            let moved = change(&core)
            let value = core.currentProgress
            let flush = core.yieldProgress(value)
            core.updateObserved { $0.progressed(value, self) }
            return (value, moved, core.writableProgress, core.progressRelays, toBatch ? core.observed?.batch : nil, flush)
        }
        guard let update else { return }
        if let flush = update.flush { armProgressFlush(at: flush) }
        if let (batch, index) = update.batch {
            batch.member(index, received: update.value.bytesReceived, expected: update.value.bytesExpected, moved: update.moved)
        }
        if let (progress, writes, number) = update.progress {
            writes.write(number) {
                progress.totalUnitCount = update.value.bytesExpected ?? -1
                progress.completedUnitCount = update.value.bytesReceived
                progress.setRate(update.value.bytesPerSecond, timeRemaining: update.value.estimatedTimeRemaining)
            }
        }
        for relay in update.relays {
            relay.post(update.value)
        }
    }
}

extension AnyFetchOperation.Core {
    /// The `Progress` object, if anyone asked for it, with its writes and the number of the
    /// value taken now (under the lock).
    var writableProgress: (Progress, ProgressWrites, UInt64)? {
        guard let progress = self.progress, let writes = self.progressWrites else { return nil }
        return (progress, writes, writes.take())
    }

    /// The progress now.
    var currentProgress: FetchProgress {
        let received = self.bytesReceived
        let expected = self.bytesExpected
        let rate = self.rate
        return FetchProgress(bytesReceived: received, bytesExpected: expected,
                             bytesSent: self.bytesSent, bytesToSend: self.bytesToSend,
                             bytesPerSecond: rate.bytesPerSecond,
                             estimatedTimeRemaining: expected.flatMap { rate.timeRemaining(for: $0 - received) })
    }

    /// In the terminal transition: yields the final value to every sequence (if a transfer
    /// reported anything) and forgets them. The caller finishes the returned continuations
    /// after unlocking (finishing runs their termination handlers, which take the lock).
    mutating func endProgressStreams(succeeded: Bool) -> [AsyncStream<FetchProgress>.Continuation] {
        if succeeded, self.bytesExpected == nil {
            self.bytesExpected = self.bytesReceived
        }
        // The sequences' latest value is the last report's, if any (``yieldProgress(_:)``).
        let final = progressReported ? currentProgress : nil
        return finishProgressStreams(with: final)
    }
}

/// The consumers of one latest-value sequence (an operation's progress, a batch's status),
/// kept under their owner's lock.
///
/// A value is yielded under the lock, which orders it with the others; finishing happens after
/// unlocking, because it runs the termination handlers, which take the lock to remove
/// themselves. Each stream buffers only the newest value. If the owner is freed before it
/// finished (an operation never started), its consumers' sequences end then: a dropped
/// continuation alone would leave them waiting forever.
///
/// A consumer may have a minimum interval: a value that comes sooner after the last one it was
/// given waits (replaced by any newer one), and ``yield(_:at:)`` asks the owner to call
/// ``flush(due:at:)`` when it is due. The final value (``finish(with:)``) is given at once.
struct LatestValueStreams<Value: Sendable> {
    typealias Continuation = AsyncStream<Value>.Continuation

    /// One consumer: its continuation, its interval (nanoseconds), when it was last given a
    /// value, and whether a newer value than that waits for it.
    struct Consumer {
        let continuation: Continuation
        let interval: UInt64
        var lastYield: UInt64?
        var behind = false

        func isDue(at now: UInt64) -> Bool {
            guard interval > 0, let lastYield else { return true }
            return now >= lastYield &+ interval
        }
    }

    /// The last value yielded.
    private(set) var latest: Value?
    private(set) var isFinished = false
    private let registry = Registry()
    /// When the owner was last asked to call ``flush(due:at:)``, if it was and has not yet.
    private var flushDue: UInt64?

    /// Consumers to come, of a sequence whose latest value is `latest` (if any), and that
    /// ended already if `finished`.
    init(latest: Value? = nil, finished: Bool = false) {
        self.latest = latest
        isFinished = finished
    }
    private var consumers: [Int: Consumer] {
        get { registry.consumers }
        nonmutating set { registry.consumers = newValue }
    }
    private var nextID = 0

    /// How many consumers are registered (tests).
    var count: Int { consumers.count }

    /// Holds the consumers, and ends their sequences if the owner goes away with them. Used
    /// only under the owner's lock (or in its deinit, when no one else can reach it).
    private final class Registry {
        var consumers: [Int: Consumer] = [:]
        deinit {
            // The owner is being freed: its termination handlers find it gone and take no lock.
            for consumer in consumers.values { consumer.continuation.finish() }
        }
    }

    /// Registers a consumer and gives it the latest value.
    ///
    /// - Parameter minimumInterval: The least time between two values it is given, in
    ///   nanoseconds (0: none).
    /// - Returns: Its identifier, or `nil` when finished: the caller then finishes it.
    mutating func add(_ continuation: Continuation, minimumInterval: UInt64 = 0, at now: UInt64 = RateWindow.now()) -> Int? {
        if let latest { continuation.yield(latest) }
        guard !isFinished else { return nil }
        let id = nextID
        nextID += 1
        consumers[id] = Consumer(continuation: continuation, interval: minimumInterval, lastYield: latest == nil ? nil : now)
        return id
    }

    mutating func remove(_ id: Int) {
        consumers[id] = nil
    }

    /// Gives `value` to every consumer that is due, and keeps it for the others.
    ///
    /// - Returns: When the owner is to call ``flush(due:at:)``, if a consumer waits and the
    ///   owner was not asked for that time or sooner already. It arms the timer after unlocking.
    @discardableResult
    mutating func yield(_ value: Value, at now: UInt64 = RateWindow.now()) -> UInt64? {
        guard !isFinished else { return nil }
        latest = value
        guard let waiting = deliver(value, at: now, onlyBehind: false), waiting < flushDue ?? .max else { return nil }
        flushDue = waiting
        return waiting
    }

    /// The timer the owner armed for `due` fired: gives the latest value to the consumers that
    /// waited for it and are due now. A timer armed for a later time than one armed since
    /// does nothing.
    ///
    /// - Returns: When to call it again, if some still wait.
    mutating func flush(due: UInt64, at now: UInt64) -> UInt64? {
        guard due == flushDue else { return nil }
        flushDue = nil
        guard !isFinished, let latest else { return nil }
        flushDue = deliver(latest, at: now, onlyBehind: true)
        return flushDue
    }

    /// Gives `value` to the consumers that are due (of those behind only, if `onlyBehind`);
    /// the others are behind.
    ///
    /// - Returns: The soonest time one of those behind is due, if any.
    private mutating func deliver(_ value: Value, at now: UInt64, onlyBehind: Bool) -> UInt64? {
        var waiting: UInt64?
        for (id, var consumer) in consumers where !onlyBehind || consumer.behind {
            if consumer.isDue(at: now) {
                consumer.continuation.yield(value)
                consumer.lastYield = now
                consumer.behind = false
            } else {
                consumer.behind = true
                let due = (consumer.lastYield ?? now) &+ consumer.interval
                waiting = min(waiting ?? due, due)
            }
            consumers[id] = consumer
        }
        return waiting
    }

    /// Yields `final` (if any) to every consumer at once, whatever its interval, then ends:
    /// later consumers get the latest value and end.
    ///
    /// - Returns: The consumers, for the caller to finish after unlocking.
    mutating func finish(with final: Value?) -> [Continuation] {
        guard !isFinished else { return [] }
        let value = final ?? latest
        latest = value
        for consumer in consumers.values where final != nil || consumer.behind {
            if let value { consumer.continuation.yield(value) }
        }
        isFinished = true
        defer { consumers.removeAll() }
        return consumers.values.map(\.continuation)
    }

    /// Makes a stream that buffers only the newest value, registered through `add` (which
    /// runs ``add(_:minimumInterval:at:)`` under the owner's lock) and removed through
    /// `remove` when its consumer stops iterating.
    static func makeStream(add: (Continuation) -> Int?, remove: @escaping @Sendable (Int) -> Void) -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        // The stream is not handed out yet, so nothing can end it before the handler is set.
        guard let id = add(continuation) else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { _ in remove(id) }
        return stream
    }
}
