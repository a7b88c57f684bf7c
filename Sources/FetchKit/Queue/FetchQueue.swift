import Foundation

/// Identifies one fetch enqueued on a ``FetchQueue``.
public struct FetchID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The number, unique within the process, increasing in enqueue order.
    public let rawValue: UInt64

    public static func < (lhs: FetchID, rhs: FetchID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "fetch-\(rawValue)" }

    private static let counter = Protected<UInt64>(0)

    /// The next identifier of the process.
    static func next() -> FetchID {
        FetchID(rawValue: counter.withLock { value in
            value += 1
            return value
        })
    }
}

/// The coordinator for many fetches: bounded overall and per host, with a registry of what is
/// in flight, a network-activity flag, event monitors, completions exactly once, batch progress
/// and coalescing of identical requests.
///
/// ```swift
/// let queue = FetchQueue(maximumConcurrentTransfers: 8, maximumTransfersPerHost: 2)
/// for url in feedURLs {
///     queue.enqueue(GetFeed(url: url)) { result in          // on the main actor by default
///         switch result {
///         case .success(let parsed): store(parsed)
///         case .failure(let error): log(error)
///         }
///     }
/// }
/// ```
///
/// Operations go through an internal `OperationQueue`, which honours their dependencies; once
/// one has built its request it waits for a **transfer slot** — one of
/// ``maximumConcurrentTransfers`` overall and one of ``maximumTransfersPerHost`` for its host
/// (scheme, host and port). While it waits, no URLSession task exists and no timeout clock runs;
/// a host at its limit never holds up another host. The highest `queuePriority` goes first;
/// ``setPriority(_:of:)`` changes a fetch's priority after it was enqueued, and ``pause(_:)``
/// takes a fetch out of line (or stops its transfer) until ``resume(_:)``.
/// A slot is a request in flight, not a connection: over HTTP/2 the requests to one host are
/// streams sharing its connections (see <doc:CoordinatingManyFetches>).
///
/// Each fetch sends its own request unless you opt in to coalescing with
/// ``coalescesIdenticalRequests``; then identical GETs in flight at once share one transfer
/// (see that property for exactly which requests are shared).
///
/// Lifetime: a queue that is not suspended keeps itself while it holds fetches, so a queue you
/// let go of still finishes its work, then is freed (one whose fetches wait for an operation
/// that never finishes is kept as long). A suspended queue you let go of is freed once its
/// transfers in flight have ended, and cancels the fetches it still holds: each completes once,
/// as cancelled. Operations do not keep their queue alive; an `await` on ``fetch(_:)`` does.
public final class FetchQueue: @unchecked Sendable {
    /// The default ``maximumConcurrentTransfers``: 8.
    public static let defaultMaximumConcurrentTransfers = 8
    /// The default ``maximumTransfersPerHost``: 4.
    public static let defaultMaximumTransfersPerHost = 4

    /// The queue for one-off fetches anywhere in the process: the one-liners
    /// `try await FetchQueue.shared.fetch(JSONFetchOperation<User>(url: url))`.
    ///
    /// Every caller that does not make a queue of its own shares it, so it is sized for many
    /// unrelated callers rather than for one workload: ``sharedMaximumConcurrentTransfers``
    /// (64, the connections one session keeps) transfers in flight overall and
    /// ``sharedMaximumTransfersPerHost`` (6, what browsers allow a host) per host. A few slow
    /// requests to one server then hold up neither the other servers' fetches nor the rest of
    /// that server's. It has no monitors and does not coalesce requests.
    ///
    /// Make a queue of your own for a workload with limits of its own — a crawl, a batch of
    /// downloads, a politeness limit for one API — or to suspend, cancel all, or observe your
    /// fetches as a group: `cancelAll()` or `isSuspended` on the shared queue affects every
    /// caller of the process.
    public static let shared = FetchQueue(name: "FetchKit.FetchQueue.shared",
                                          maximumConcurrentTransfers: sharedMaximumConcurrentTransfers,
                                          maximumTransfersPerHost: sharedMaximumTransfersPerHost)

    /// ``shared``'s ``maximumConcurrentTransfers``: 64.
    public static let sharedMaximumConcurrentTransfers = 64
    /// ``shared``'s ``maximumTransfersPerHost``: 6.
    public static let sharedMaximumTransfersPerHost = 6

    /// The queue's name, for diagnostics.
    public let name: String
    /// Who observes every fetch of this queue, in the order given.
    public let monitors: [any FetchEventMonitor]
    /// Delivers to ``monitors``; `nil` when there are none.
    let monitorChannel: MonitorChannel?
    /// How long the network-activity flag stays on after the last transfer ended.
    public let networkActivityHideDelay: TimeInterval
    /// The credential its fetches to the authentication's origins carry, refreshed once for
    /// any number of refusals; `nil` for none. See ``FetchAuthentication``.
    public let authentication: FetchAuthentication?

    let operationQueue: OperationQueue

    /// The most response-body bytes per second that the queue's transfers read together, or
    /// `nil` for no limit.
    ///
    /// **Enforced on the wire.** On Linux each body chunk is charged, as libcurl reads it, to a
    /// token bucket the queue's transfers share (refilled at this rate, holding at most a tenth
    /// of a second's worth, at least 4 KiB); a transfer that overdraws it stops reading
    /// (libcurl's `curl_easy_pause`) until the refill has paid the debt, so its receive window
    /// closes and the server sends no faster than the limit. The limit counts the body as it
    /// comes off the connection (compressed, if it was sent so), not the request. Transfers are
    /// never `suspend()`ed.
    ///
    /// **Even shares.** The transfers under one limit share it evenly: each reads at most its
    /// share among those that want more than that, and the share follows the transfers as they
    /// start and end. A transfer that reads less on its own (a slow server, or a lower limit of
    /// its own or of its host) leaves the rest to the others.
    ///
    /// **Changing it.** Set it at any time, from any thread: the transfers in flight are held
    /// to the new limit from their next chunk on, and a transfer paused under the old limit
    /// resumes at once to be held to the new one; `nil` lifts the limit. A value below 1 is
    /// taken as 1. A transfer that started without a limit keeps its connection (possibly an
    /// HTTP/2 stream, or the kernel's default receive window): its reading is held like any
    /// other, but the server may send up to that window ahead of the limit, and over HTTP/2 it
    /// is not held on the wire (``isBandwidthLimitEnforced`` turns `false`).
    ///
    /// **Connections.** A limited transfer runs over HTTP/1.1 on a connection of its own, even to
    /// a server that speaks HTTP/2 (pausing an HTTP/2 stream does not stop the server sending
    /// up to the stream's window). Up to 1 MB/s per transfer (its share when it starts), that
    /// connection's receive buffer is set before it connects to about a tenth of a second of
    /// the share, at least 4 KiB, so that the first burst is small; it is closed when the
    /// transfer ends. The cost is a connection (over HTTPS, a TLS handshake) per limited
    /// transfer, and over a path whose round trip is longer than about a tenth of a second the
    /// window, not the limit, paces it.
    ///
    /// **When it is not enforced.** Where FetchKit cannot reach a task's libcurl handle
    /// (another FoundationNetworking layout, a session whose configuration has a `urlCache` of
    /// its own for the HTTP/1.1 and window settings) or on Apple platforms (no libcurl), the
    /// transfers' bodies still reach the app at the limit but the server may send faster, and
    /// ``isBandwidthLimitEnforced`` turns `false` at the first chunk that should have paused
    /// them, and ``bandwidthLimitShortfall`` says why. ``FetchSession/workarounds`` says which
    /// mechanisms are in effect.
    ///
    /// A limit so low that a transfer waits longer than its
    /// ``FetchConfiguration/idleTimeout`` for its share makes it time out: keep each transfer's
    /// share above a chunk (16 KiB) per idle timeout. How closely the limit holds, measured at
    /// the server, and why libcurl's own speed limit is not used, are in <doc:Benchmarks>.
    public var bandwidthLimit: Int? {
        get { bandwidthBudgets.overall.rate }
        set { bandwidthBudgets.overall.setRate(newValue.map { max(1, $0) }) }
    }
    /// The most response-body bytes per second that the queue's transfers to one host
    /// (scheme, host and port) read together, or `nil` for no limit. Enforced, shared and
    /// changed as ``bandwidthLimit`` is, with a bucket per host; a transfer reads under both.
    /// Setting it sets every host's limit, for the transfers in flight too.
    public var bandwidthLimitPerHost: Int? {
        get { bandwidthBudgets.perHostRate }
        set { bandwidthBudgets.setPerHostRate(newValue.map { max(1, $0) }) }
    }
    /// The token buckets of ``bandwidthLimit`` and ``bandwidthLimitPerHost``, which every
    /// transfer of the queue reads under, with or without a limit (so that one set later
    /// holds the transfers in flight).
    let bandwidthBudgets: BandwidthBudgets

    /// Whether the bandwidth limits held for every transfer so far: `false` once a transfer
    /// that had to pause could not (see ``bandwidthLimit``). `true` without limits.
    public var isBandwidthLimitEnforced: Bool {
        bandwidthBudgets.isEnforced
    }

    /// Why ``isBandwidthLimitEnforced`` turned `false`: what kept the first transfer that was
    /// not held to a limit from being held on the wire; `nil` while it is `true`.
    public var bandwidthLimitShortfall: BandwidthLimitShortfall? {
        bandwidthBudgets.shortfall
    }
    /// Runs the network-activity hide timer: after the delay, call the closure. Replaceable so
    /// that tests can decide when time has passed.
    let activityTimer: @Sendable (TimeInterval, @escaping @Sendable () -> Void) -> Void
    /// Serialises announcements of counts and activity, so that they are delivered in order.
    let eventQueue: DispatchQueue
    /// Everything mutable, changed only through ``transition(_:)`` (and read under the lock).
    let state: Protected<State>
    typealias State = QueueState<AnyFetchOperation, Flight>

    /// Counters for diagnostics.
    public struct Statistics: Sendable, Equatable {
        /// Transfers started (each may serve several coalesced fetches).
        public var transfersStarted = 0
        /// Fetches that joined a transfer already waiting or in flight for an identical request.
        public var requestsCoalesced = 0
    }


    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - name: A name for diagnostics.
    ///   - maximumConcurrentTransfers: Transfers in flight at once, overall. Default 8.
    ///   - maximumTransfersPerHost: Transfers (requests) in flight at once to one host,
    ///     whether they share an HTTP/2 connection or not. Default 4.
    ///   - monitors: Who observes every fetch's life (see ``FetchEventMonitor``), called in
    ///     this order for each event. Default none.
    ///   - coalescesIdenticalRequests: Whether identical GETs in flight at once share one
    ///     transfer; see ``coalescesIdenticalRequests``. Default `false`: each fetch sends its
    ///     own request.
    ///   - networkActivityHideDelay: How long ``isNetworkActive`` stays `true` after the last
    ///     transfer, so that it does not flicker between back-to-back requests. Default 0.25 s.
    ///   - authentication: The credential of an API, applied to the fetches to its origins and
    ///     refreshed once for any number of refusals (see ``FetchAuthentication``). Default none.
    ///   - bandwidthLimit: The most response-body bytes per second that the queue's transfers
    ///     read together (a value below 1 is taken as 1); see ``bandwidthLimit``, which can be
    ///     changed later. Default `nil`: no limit.
    ///   - bandwidthLimitPerHost: The most response-body bytes per second that the queue's
    ///     transfers to one host (scheme, host and port) read together (a value below 1 is
    ///     taken as 1); see ``bandwidthLimitPerHost``, which can be changed later. Default
    ///     `nil`: no limit.
    public convenience init(
        name: String = "FetchKit.FetchQueue",
        maximumConcurrentTransfers: Int = FetchQueue.defaultMaximumConcurrentTransfers,
        maximumTransfersPerHost: Int = FetchQueue.defaultMaximumTransfersPerHost,
        monitors: [any FetchEventMonitor] = [],
        coalescesIdenticalRequests: Bool = false,
        networkActivityHideDelay: TimeInterval = 0.25,
        authentication: FetchAuthentication? = nil,
        bandwidthLimit: Int? = nil,
        bandwidthLimitPerHost: Int? = nil
    ) {
        self.init(name: name, maximumConcurrentTransfers: maximumConcurrentTransfers,
                  maximumTransfersPerHost: maximumTransfersPerHost,
                  monitors: monitors, coalescesIdenticalRequests: coalescesIdenticalRequests,
                  networkActivityHideDelay: networkActivityHideDelay, authentication: authentication,
                  activityTimer: { delay, fire in DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: fire) },
                  bandwidthLimit: bandwidthLimit, bandwidthLimitPerHost: bandwidthLimitPerHost)
    }

    init(
        name: String,
        maximumConcurrentTransfers: Int,
        maximumTransfersPerHost: Int,
        monitors: [any FetchEventMonitor],
        coalescesIdenticalRequests: Bool,
        networkActivityHideDelay: TimeInterval,
        authentication: FetchAuthentication? = nil,
        activityTimer: @escaping @Sendable (TimeInterval, @escaping @Sendable () -> Void) -> Void,
        bandwidthLimit: Int? = nil,
        bandwidthLimitPerHost: Int? = nil
    ) {
        bandwidthBudgets = BandwidthBudgets(overall: bandwidthLimit.map { max(1, $0) }, perHost: bandwidthLimitPerHost.map { max(1, $0) })
        self.activityTimer = activityTimer
        self.authentication = authentication
        self.name = name
        self.monitors = monitors
        monitorChannel = MonitorChannel(monitors, label: "\(name).monitors")
        self.networkActivityHideDelay = max(0, networkActivityHideDelay)
        state = Protected(State(maximumTotal: maximumConcurrentTransfers, maximumPerHost: maximumTransfersPerHost,
                                coalesces: coalescesIdenticalRequests))
        eventQueue = DispatchQueue(label: "\(name).events")
        operationQueue = OperationQueue()
        operationQueue.name = name
        // Unbounded on purpose: starting an operation only prepares its request and puts it in
        // line for a slot; the slots bound the transfers. A bounded queue would let operations
        // waiting for a busy host hold up those for idle hosts.
        operationQueue.maxConcurrentOperationCount = OperationQueue.defaultMaxConcurrentOperationCount
    }

    /// A queue is freed when its owner has dropped it and it holds no work that can progress:
    /// a queue that is not suspended keeps itself until every fetch it holds finished, and a
    /// transfer in flight keeps its queue until it ends. So this runs with fetches still held
    /// only when the queue is suspended: those that could never start a transfer now are
    /// cancelled and complete once, as cancelled (the queue's monitors hear nothing more: they go
    /// with it; the monitors of a fetch's session still hear its end). One whose transfer ended
    /// (parsing or completing: a flight holds its queue until its members heard their result)
    /// is left to finish with its result. This is the one place that decides.
    deinit {
        for operation in state.withLock({ $0.releaseAll() }) where operation.queueWasFreed() {
            operation.cancel()
        }
        // Cancelled operations that never started finish when their `OperationQueue` starts them.
        operationQueue.isSuspended = false
    }

    // MARK: Enqueueing

    /// Enqueues an operation; its completion handler runs exactly once, on the main actor.
    ///
    /// An operation belongs to one queue: one that was already enqueued (here, on another
    /// ``FetchQueue``), started or finished is refused, and `completion` receives
    /// ``FetchError/InvalidRequest/Reason/alreadyEnqueued``. (Do not also add it to an
    /// `OperationQueue` yourself: Foundation traps on that.)
    ///
    /// A dependency that nothing would run — a fetch operation, directly or further down,
    /// not started, in no ``FetchQueue`` and never taken by an `OperationQueue` — is enqueued
    /// here too, without a completion handler, so that the operation does not wait forever.
    /// Enqueueing that dependency here yourself later takes it over: your `completion` runs
    /// once and you get its identifier. A dependency of another kind (a `BlockOperation`…) may
    /// run on a queue FetchKit cannot see: the operation waits for it. An operation whose
    /// dependencies form a cycle could never start: it is refused, and left as it was, with
    /// ``FetchError/InvalidRequest/Reason/dependencyCycle(_:)``.
    ///
    /// ```swift
    /// queue.enqueue(GetUser(url: userURL)) { result in
    ///     model.user = try? result.get()       // on the main actor
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - operation: The operation to run.
    ///   - completion: Called once, on the main actor, with the output or the error.
    /// - Returns: The fetch's identifier, for ``cancel(_:)`` and ``operation(for:)``.
    @discardableResult
    public func enqueue<Fetch: OutputProducing>(
        _ operation: Fetch,
        completion: (@MainActor (Result<Fetch.Output, FetchError>) -> Void)? = nil
    ) -> FetchID {
        register(operation, completion: completion.map { Callback(mainActor: $0) }).id
    }

    /// Enqueues an operation; its completion handler runs exactly once, on `queue`.
    ///
    /// Everything else is as for ``enqueue(_:completion:)``.
    ///
    /// - Parameters:
    ///   - operation: The operation to run.
    ///   - queue: Where `completion` runs.
    ///   - completion: Called once with the output or the error.
    /// - Returns: The fetch's identifier, for ``cancel(_:)`` and ``operation(for:)``.
    @discardableResult
    public func enqueue<Fetch: OutputProducing>(
        _ operation: Fetch,
        on queue: CallbackQueue,
        completion: @escaping @Sendable (Result<Fetch.Output, FetchError>) -> Void
    ) -> FetchID {
        register(operation, completion: Callback(on: queue, completion)).id
    }

    /// Enqueues an operation; its completion handler runs exactly once, on the main actor, with
    /// the operation and its outcome — for a handler shared by many operations, or that needs
    /// the operation's ``AnyFetchOperation/response`` or its subclass's own properties.
    ///
    /// Everything else is as for ``enqueue(_:completion:)``.
    ///
    /// ```swift
    /// for url in feedURLs {
    ///     queue.enqueue(GetFeed(url: url)) { operation, result in     // on the main actor
    ///         model.show(result, for: operation.request?.url)
    ///     }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - operation: The operation to run.
    ///   - completion: Called once, on the main actor, with the operation and its output or
    ///     error. (Its label differs from ``enqueue(_:completion:)``'s only so that the two can
    ///     be told apart by name; with a trailing closure, the closure's two parameters choose
    ///     this one.)
    /// - Returns: The fetch's identifier, for ``cancel(_:)`` and ``operation(for:)``.
    @discardableResult
    public func enqueue<Fetch: OutputProducing>(
        _ operation: Fetch,
        completionWithOperation completion: @escaping @MainActor (Fetch, Result<Fetch.Output, FetchError>) -> Void
    ) -> FetchID {
        // The handler holds the operation until it ran (once), as a handler that captures it does.
        register(operation, completion: Callback(mainActor: { result in completion(operation, result) })).id
    }

    /// Enqueues an operation; its completion handler runs exactly once, on `queue`, with the
    /// operation and its outcome.
    ///
    /// Everything else is as for ``enqueue(_:completion:)``.
    ///
    /// - Parameters:
    ///   - operation: The operation to run.
    ///   - queue: Where `completion` runs.
    ///   - completion: Called once with the operation and its output or error.
    /// - Returns: The fetch's identifier, for ``cancel(_:)`` and ``operation(for:)``.
    @discardableResult
    public func enqueue<Fetch: OutputProducing>(
        _ operation: Fetch,
        on queue: CallbackQueue,
        completionWithOperation completion: @escaping @Sendable (Fetch, Result<Fetch.Output, FetchError>) -> Void
    ) -> FetchID {
        register(operation, completion: Callback(on: queue) { result in completion(operation, result) }).id
    }

    /// Enqueues an operation and suspends until it finished; returns its output.
    ///
    /// ```swift
    /// let user = try await queue.fetch(GetUser(url: userURL))
    /// ```
    ///
    /// Cancelling the Swift task cancels the fetch, and this throws ``FetchError/cancelled(_:)``.
    /// Dependencies that nothing else would run are enqueued too, and an operation the queue
    /// refuses throws at once (see ``enqueue(_:completion:)``): it never waits for a
    /// dependency that nothing runs. The queue stays alive while a fetch is awaited through it.
    ///
    /// - Returns: The operation's output.
    /// - Throws: The operation's ``FetchError``, or the reason it was refused.
    public func fetch<Fetch: OutputProducing>(_ operation: Fetch) async throws(FetchError) -> Fetch.Output {
        let (_, refusal) = register(operation, completion: nil)
        if let refusal { throw refusal }
        return try await operation.value
    }

    /// Registers and enqueues one operation.
    ///
    /// - Returns: Its identifier, and why it was refused, if it was.
    func register<Fetch: OutputProducing>(
        _ operation: Fetch,
        completion: Callback<Result<Fetch.Output, FetchError>>?
    ) -> (id: FetchID, refusal: FetchError?) {
        if let id = takeOver(operation, completion: completion) {
            return (id, nil)
        }
        let (id, accepted) = reserve(operation)
        guard accepted else {
            let error = Self.alreadyEnqueued(operation)
            completion?.post(.failure(error))
            return (id, error)
        }
        switch Self.checkDependencies(of: operation) {
        case .refuse(let reason):
            unreserve(operation, id: id)
            let error = Self.dependencyError(reason, operation)
            completion?.post(.failure(error))
            return (id, error)
        case .enqueue(let orphans):
            adopt(orphans)
        }
        activate(operation, id: id) {
            if let completion { operation.addCompletion(completion) }
        }
        return (id, nil)
    }

    /// The error of an operation that is already in a queue.
    static func alreadyEnqueued(_ operation: AnyFetchOperation) -> FetchError {
        .invalidRequest(.init(reason: .alreadyEnqueued, url: operation.request?.url))
    }

    /// Gives an operation an identifier and claims it; `false` if it belongs elsewhere.
    func reserve(_ operation: AnyFetchOperation) -> (id: FetchID, accepted: Bool) {
        let id = FetchID.next()
        guard operation.claim(by: self, id: id, monitors: monitorChannel) else { return (id, false) }
        transition { $0.register(operation, id: id) }
        return (id, true)
    }

    /// Enqueues a reserved operation, after `attach` added its handlers. (The registry,
    /// monitors and batches hear of it as its coordinator: no handler per operation.)
    func activate(_ operation: AnyFetchOperation, id: FetchID, attach: () -> Void = {}) {
        attach()
        // Here, not at `reserve`: a reserved fetch may be taken back out, and the monitors hear
        // only of fetches that will finish.
        operation.announceEnqueued()
        operationQueue.addOperation(operation)
        announceReadinessIfDependenciesFinished(operation)
    }

    /// swift-corelibs-foundation's `OperationQueue` (6.3.1) can lose the wake-up of an operation
    /// whose last dependency finishes while it is being added: `_addOperations` reads
    /// `isReady` (false) and stores it after the dependency's finish set it true with no queue
    /// yet to tell, and the next scheduling pass only corrects the stored value, scheduling
    /// nothing. The operation then waits until something else is added or finishes: a
    /// dependent of a login cancelled before the pair was enqueued hung, 1 run in about 100.
    /// A dependency that finishes after the add is seen by the queue itself; one that finished
    /// before or during it may have left the stale value. So, the add done, an operation whose
    /// dependencies have all finished announces its readiness (`didChangeValue(forKey:
    /// "isReady")`: corelibs then stores the readiness it reads now and schedules the queue).
    /// (An empty operation added on each dependency's finish, the first fix, made two more
    /// scheduling passes, which race with each other; and it skipped a dependency already
    /// finished, which is this very case: 1 hang in about 100 runs of the suite beside two CPU
    /// hogs.)
    private func announceReadinessIfDependenciesFinished(_ operation: AnyFetchOperation) {
        #if canImport(FoundationNetworking)
        let dependencies = operation.dependencies
        guard !dependencies.isEmpty, dependencies.allSatisfy(\.isFinished) else { return }
        operation.didChangeValue(forKey: "isReady")
        #endif
    }

    // MARK: The registry

    /// The operation of a fetch still in the queue (not finished).
    public func operation(for id: FetchID) -> AnyFetchOperation? {
        state.withLock { $0.registry[id] }
    }

    /// The identifier of an operation still in the queue.
    public func id(of operation: AnyFetchOperation) -> FetchID? {
        // Asked of the operation first: only a queue that holds it may read its entry.
        guard let id = operation.id(claimedBy: self) else { return nil }
        return state.withLock { $0.registry[id] === operation ? id : nil }
    }

    /// The fetches in the queue — waiting, in flight or finishing — in enqueue order.
    public var ids: [FetchID] {
        state.withLock { $0.registry.keys.sorted() }
    }

    /// How many fetches are in the queue.
    public var count: Int {
        state.withLock { $0.registry.count }
    }

    /// Cancels one fetch. Its completion still runs, once, with ``FetchError/cancelled(_:)``.
    ///
    /// - Returns: `false` if no such fetch is in the queue (it finished, or never was).
    @discardableResult
    public func cancel(_ id: FetchID) -> Bool {
        guard let operation = operation(for: id) else { return false }
        operation.cancel()
        return true
    }

    /// Cancels the fetches that match `predicate`, at once: none of them starts a transfer after
    /// this is called, even when cancelling one that is in flight frees a slot before the
    /// others are cancelled. Each completes once, as cancelled (one already in flight may still
    /// complete with its transfer's result if that ended first).
    ///
    /// No waiting transfer begins while `predicate` runs; it runs on the calling thread, outside
    /// the queue's lock, once per fetch in the queue.
    ///
    /// - Parameter predicate: Whether to cancel a fetch, given its identifier and operation.
    /// - Returns: How many were cancelled.
    @discardableResult
    public func cancelAll(where predicate: (FetchID, AnyFetchOperation) -> Bool) -> Int {
        let entries = transition { $0.beginSweep() }
        let chosen = entries.filter { predicate($0.0, $0.1) }
        let operations = transition { $0.endSweep(choosing: chosen.map(\.0)) }
        for operation in operations {
            operation.cancel()
        }
        return chosen.count
    }

    /// Cancels every fetch in the queue, at once: none of them starts a transfer after this is
    /// called. Each completes once, as cancelled; this returns promptly.
    public func cancelAll() {
        cancelAll { _, _ in true }
    }

    // MARK: Limits

    /// Transfers in flight at once, overall (at least 1). May be changed at any time: a rise
    /// starts waiting transfers at once; a fall lets those in flight finish.
    public var maximumConcurrentTransfers: Int {
        get { state.withLock { $0.scheduler.maximumTotal } }
        set { changeScheduler { $0.setLimits(total: newValue, perHost: $0.maximumPerHost) } }
    }

    /// Transfers in flight at once to one host — scheme, host and port (at least 1). May be
    /// changed at any time.
    ///
    /// It counts requests, not connections. Over HTTP/2 the requests to a host are streams
    /// that libcurl multiplexes onto its connections (usually one), so this bounds the
    /// streams in flight; over HTTP/1.1 each request in flight has a connection of its own.
    public var maximumTransfersPerHost: Int {
        get { state.withLock { $0.scheduler.maximumPerHost } }
        set { changeScheduler { $0.setLimits(total: $0.maximumTotal, perHost: newValue) } }
    }

    /// While `true`, no operation starts and no waiting transfer begins; those in flight go on.
    /// A suspended queue that its owner lets go of is freed, and cancels what it holds.
    ///
    /// Cancelling a fetch that waits in a suspended queue answers at once: its completion
    /// handler runs and an `await` on it throws ``FetchError/cancelled(_:)`` while the queue
    /// stays suspended (see ``OutputProducing/value``).
    public var isSuspended: Bool {
        get { state.withLock { $0.scheduler.isPaused } }
        set {
            if newValue { operationQueue.isSuspended = true }
            changeScheduler { $0.isPaused = newValue }
            if !newValue { operationQueue.isSuspended = false }
        }
    }

    /// Whether identical GETs in flight at once share one transfer. Default `false`. Applies to
    /// fetches that start afterwards.
    ///
    /// When on, a fetch joins a transfer already waiting or running for an identical request:
    /// the server sees one request, each caller gets its own completion and its own parse, and
    /// cancelling one caller stops the transfer only when no caller is left. Turn it on for
    /// resources that are the same for every caller at a given moment (images, feeds, static
    /// JSON), the way image loaders share one download among the views that show it. Leave it
    /// off for resources that answer each request anew (a counter, `/uuid`, a nonce): shared,
    /// every caller would get the first caller's answer.
    ///
    /// Even when on, a request is shared only if it is safe to hand it someone else's response:
    /// - a `GET` without a body, whose body is kept in memory (``DownloadOperation``s are never
    ///   shared: each has a file of its own);
    /// - identical URL, headers (so `Authorization` and `Cookie` included),
    ///   `httpShouldHandleCookies` (whether the session adds its stored cookies),
    ///   ``FetchSession``, limits, timeouts and redirect policy, and no
    ///   ``FetchConfiguration/credentials``;
    /// - not asking for a fresh answer: no `Cache-Control: no-cache`, `no-store` or
    ///   `max-age=0`, no `Pragma: no-cache`, and no `cachePolicy` of
    ///   `.reloadIgnoringLocalCacheData` or `.reloadIgnoringLocalAndRemoteCacheData`.
    ///
    /// A fetch never joins a transfer that has already ended.
    public var coalescesIdenticalRequests: Bool {
        get { state.withLock { $0.coalesces } }
        set { transition { $0.coalesces = newValue } }
    }

    /// Counters for diagnostics.
    public var statistics: Statistics {
        state.withLock { $0.statistics }
    }

    /// Transfers in flight, and transfers waiting for a slot.
    ///
    /// A paused fetch (``pause(_:)``) is in neither count: it holds no slot and does not wait
    /// for one until it is resumed. Ask ``isPaused(_:)``, or count a monitor's
    /// ``FetchEventMonitor/fetchDidPause(_:)`` and ``FetchEventMonitor/fetchDidResume(_:)``.
    public struct TransferCounts: Sendable, Equatable {
        /// Transfers in flight (each may serve several coalesced fetches).
        public let inFlight: Int
        /// Transfers waiting for a slot.
        public let waiting: Int
    }

    /// Transfers in flight now, and transfers waiting for a slot.
    public var transferCounts: TransferCounts {
        state.withLock { $0.transferCounts }
    }

    /// Calls `handler` with the new ``transferCounts`` each time they change ("3 downloading,
    /// 12 waiting").
    ///
    /// - Parameter handler: Receives the new counts, on the main actor, in order.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onTransferCountsChange(_ handler: @escaping @MainActor (TransferCounts) -> Void) -> FetchObservation {
        observe(\.countHandlers, Callback(mainActor: handler))
    }

    /// Calls `handler` on `queue` each time ``transferCounts`` changes.
    ///
    /// - Parameters:
    ///   - queue: Where it runs. On a serial queue the calls arrive in order.
    ///   - handler: Receives the new counts.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onTransferCountsChange(on queue: CallbackQueue, _ handler: @escaping @Sendable (TransferCounts) -> Void) -> FetchObservation {
        observe(\.countHandlers, Callback(on: queue, handler))
    }

    /// Adds a handler to one of the queue's lists; the token removes it.
    func observe<Value>(_ list: WritableKeyPath<State, HandlerList<Callback<Value>>> & Sendable,
                        _ handler: Callback<Value>) -> FetchObservation {
        let id = transition { $0[keyPath: list].add(handler) }
        return FetchObservation { [weak self] in
            self?.transition { state in state[keyPath: list].remove(id) }
        }
    }

    func changeScheduler(_ change: (inout SlotScheduler<FlightMember>) -> Void) {
        transition { $0.changeScheduler(change) }
    }
}
