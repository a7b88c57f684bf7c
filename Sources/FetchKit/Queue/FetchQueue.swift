import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Identifies one fetch enqueued on a ``FetchQueue``.
public struct FetchID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The number, unique within the process, increasing in enqueue order.
    public let rawValue: UInt64

    public static func < (lhs: FetchID, rhs: FetchID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "fetch-\(rawValue)" }
}

/// The coordinator for many fetches: bounded overall and per host, with a registry of what is
/// in flight, a network-activity flag, notifications, completions exactly once, batch progress
/// and coalescing of identical requests.
///
/// ```swift
/// let queue = FetchQueue(maximumConcurrentTransfers: 8, maximumTransfersPerHost: 2)
/// for feed in feeds {
///     queue.enqueue(GetFeed(url: feed.url)) { result in     // on the main queue by default
///         switch result {
///         case .success(let operation): store(operation.feed)
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
/// a host at its limit never holds up another host. The highest `queuePriority` goes first.
///
/// Identical GETs (same URL, headers, session and limits) in flight at once share one transfer
/// when ``coalescesIdenticalRequests`` is on: the server sees one request, each caller gets its
/// own completion and its own parse, and cancelling one caller stops the transfer only when no
/// caller is left.
public final class FetchQueue: @unchecked Sendable {
    /// The default ``maximumConcurrentTransfers``: 8.
    public static let defaultMaximumConcurrentTransfers = 8
    /// The default ``maximumTransfersPerHost``: 4.
    public static let defaultMaximumTransfersPerHost = 4

    /// A queue for the whole process, with the default limits and completions on the main queue.
    public static let shared = FetchQueue(name: "FetchKit.FetchQueue.shared")

    /// The queue's name, for diagnostics.
    public let name: String
    /// Where completion handlers given to ``enqueue(_:completion:)`` and batch callbacks run.
    public let callbackQueue: CallbackQueue
    /// Where the queue posts its notifications.
    public let notificationCenter: NotificationCenter
    /// How long the network-activity flag stays on after the last transfer ended.
    public let networkActivityHideDelay: TimeInterval

    let operationQueue: OperationQueue
    /// Runs the network-activity hide timer: after the delay, call the closure. Replaceable so
    /// that tests can decide when time has passed.
    let activityTimer: @Sendable (TimeInterval, @escaping @Sendable () -> Void) -> Void
    /// Serialises notifications and activity changes, so that each fetch's did-begin,
    /// did-progress and did-finish are posted in order.
    let eventQueue: DispatchQueue
    private let state: Protected<State>

    struct Entry {
        let operation: FetchOperation
        var began = false
        /// The batch it belongs to, and its index there.
        var batch: (FetchBatch, Int)?
    }

    struct State {
        var scheduler: SlotScheduler<ObjectIdentifier>
        var coalesces: Bool
        var waitingFlights: [ObjectIdentifier: Flight] = [:]
        var sharedFlights: [FlightKey: Flight] = [:]
        var registry: [FetchID: Entry] = [:]
        var idsByOperation: [ObjectIdentifier: FetchID] = [:]
        /// Notifications waiting to be posted, in order, and the latest progress of each fetch
        /// not yet posted. One drain on the event queue posts them all: under load, many per
        /// wake-up; a busy center gets the latest progress, not every chunk.
        var pendingNotifications: [(name: Notification.Name, event: Event)] = []
        var pendingProgress: [FetchID: FetchProgress] = [:]
        var eventDrainScheduled = false
        var activeTransfers = 0
        var isNetworkActive = false
        var activityGeneration = 0
        var activityHandlers: [(id: Int, queue: CallbackQueue?, handler: @Sendable (Bool) -> Void)] = []
        var countHandlers: [(id: Int, queue: CallbackQueue?, handler: @Sendable (TransferCounts) -> Void)] = []
        var nextHandlerID = 0
        var statistics = Statistics()
        /// The wake-up scheduled for when a host's back-off ends, if any (uptime ns), and its token.
        var wakeAt: UInt64?
        var wakeToken = 0
    }

    /// Counters for diagnostics.
    public struct Statistics: Sendable, Equatable {
        /// Transfers started (each may serve several coalesced fetches).
        public var transfersStarted = 0
        /// Fetches that joined a transfer already waiting or in flight for an identical request.
        public var requestsCoalesced = 0
    }

    private static let ids = Protected<UInt64>(0)

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - name: A name for diagnostics.
    ///   - maximumConcurrentTransfers: Transfers in flight at once, overall. Default 8.
    ///   - maximumTransfersPerHost: Transfers in flight at once to one host. Default 4.
    ///   - callbackQueue: Where completions and batch callbacks run. Default ``CallbackQueue/main``
    ///     — which a command-line program must service (`dispatchMain()`, a run loop, or
    ///     ``FetchOperation/waitUntilFinished(timeout:)`` on the main thread).
    ///   - notificationCenter: Where notifications are posted. Default `.default`.
    ///   - coalescesIdenticalRequests: Whether identical GETs share a transfer. Default `true`.
    ///   - networkActivityHideDelay: How long ``isNetworkActive`` stays `true` after the last
    ///     transfer, so that it does not flicker between back-to-back requests. Default 0.25 s.
    public convenience init(
        name: String = "FetchKit.FetchQueue",
        maximumConcurrentTransfers: Int = FetchQueue.defaultMaximumConcurrentTransfers,
        maximumTransfersPerHost: Int = FetchQueue.defaultMaximumTransfersPerHost,
        callbackQueue: CallbackQueue = .main,
        notificationCenter: NotificationCenter = .default,
        coalescesIdenticalRequests: Bool = true,
        networkActivityHideDelay: TimeInterval = 0.25
    ) {
        self.init(name: name, maximumConcurrentTransfers: maximumConcurrentTransfers,
                  maximumTransfersPerHost: maximumTransfersPerHost, callbackQueue: callbackQueue,
                  notificationCenter: notificationCenter, coalescesIdenticalRequests: coalescesIdenticalRequests,
                  networkActivityHideDelay: networkActivityHideDelay,
                  activityTimer: { delay, fire in DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: fire) })
    }

    init(
        name: String,
        maximumConcurrentTransfers: Int,
        maximumTransfersPerHost: Int,
        callbackQueue: CallbackQueue,
        notificationCenter: NotificationCenter,
        coalescesIdenticalRequests: Bool,
        networkActivityHideDelay: TimeInterval,
        activityTimer: @escaping @Sendable (TimeInterval, @escaping @Sendable () -> Void) -> Void
    ) {
        self.activityTimer = activityTimer
        self.name = name
        self.callbackQueue = callbackQueue
        self.notificationCenter = notificationCenter
        self.networkActivityHideDelay = max(0, networkActivityHideDelay)
        state = Protected(State(
            scheduler: SlotScheduler(maximumTotal: maximumConcurrentTransfers, maximumPerHost: maximumTransfersPerHost),
            coalesces: coalescesIdenticalRequests
        ))
        eventQueue = DispatchQueue(label: "\(name).events")
        operationQueue = OperationQueue()
        operationQueue.name = name
        // Unbounded on purpose: starting an operation only prepares its request and puts it in
        // line for a slot; the slots bound the transfers. A bounded queue would let operations
        // waiting for a busy host hold up those for idle hosts.
        operationQueue.maxConcurrentOperationCount = OperationQueue.defaultMaxConcurrentOperationCount
    }

    // MARK: Enqueueing

    /// Enqueues an operation; its completion handler runs exactly once, on ``callbackQueue``.
    ///
    /// An operation belongs to one queue: one that was already enqueued (here, on another
    /// ``FetchQueue``), started or finished is refused, and `completion` receives
    /// ``FetchError/InvalidRequest/Reason/alreadyEnqueued``. (Do not also add it to an
    /// `OperationQueue` yourself: Foundation traps on that.)
    ///
    /// - Parameters:
    ///   - operation: The operation to run.
    ///   - completion: Called once with the finished operation, or its error.
    /// - Returns: The fetch's identifier, for ``cancel(_:)`` and ``operation(for:)``.
    @discardableResult
    public func enqueue<Operation: FetchOperation>(
        _ operation: Operation,
        completion: (@Sendable (Result<Operation, FetchError>) -> Void)? = nil
    ) -> FetchID {
        register(operation, completion: completion).id
    }

    /// Enqueues an operation and suspends until it finished.
    ///
    /// Cancelling the Swift task cancels the fetch.
    ///
    /// - Returns: The finished operation, for its parsed results.
    /// - Throws: The operation's ``FetchError``.
    public func fetch<Operation: FetchOperation>(_ operation: Operation) async throws(FetchError) -> Operation {
        let (_, accepted) = register(operation, completion: nil)
        guard accepted else {
            throw .invalidRequest(.init(reason: .alreadyEnqueued, url: operation.request?.url))
        }
        return try await operation.finished()
    }

    /// Registers and enqueues one operation.
    func register<Operation: FetchOperation>(
        _ operation: Operation,
        completion: (@Sendable (Result<Operation, FetchError>) -> Void)?
    ) -> (id: FetchID, accepted: Bool) {
        let (id, accepted) = reserve(operation)
        guard accepted else {
            if let completion {
                let error = FetchError.invalidRequest(.init(reason: .alreadyEnqueued, url: operation.request?.url))
                callbackQueue.perform { completion(.failure(error)) }
            }
            return (id, false)
        }
        activate(operation, id: id, completion: completion) { _ in }
        return (id, true)
    }

    /// Gives an operation an identifier and claims it; `false` if it belongs elsewhere.
    func reserve(_ operation: FetchOperation) -> (id: FetchID, accepted: Bool) {
        let id = FetchID(rawValue: Self.ids.withLock { value in
            value += 1
            return value
        })
        guard operation.claim(by: self) else { return (id, false) }
        state.withLock { state in
            state.registry[id] = Entry(operation: operation)
            state.idsByOperation[ObjectIdentifier(operation)] = id
        }
        return (id, true)
    }

    /// Attaches the completion handler to a reserved operation, and enqueues it. (The registry,
    /// notifications and batches hear of it as its coordinator: no handler per operation.)
    func activate<Operation: FetchOperation>(
        _ operation: Operation,
        id: FetchID,
        completion: (@Sendable (Result<Operation, FetchError>) -> Void)?,
        extra: (Operation) -> Void
    ) {
        if let completion {
            operation.onCompletion(on: callbackQueue) { operation in
                completion(operation.error.map { .failure($0) } ?? .success(operation))
            }
        }
        extra(operation)
        operationQueue.addOperation(operation)
    }

    // MARK: The registry

    /// The operation of a fetch still in the queue (not finished).
    public func operation(for id: FetchID) -> FetchOperation? {
        state.withLock { $0.registry[id]?.operation }
    }

    /// The identifier of an operation still in the queue.
    public func id(of operation: FetchOperation) -> FetchID? {
        state.withLock { $0.idsByOperation[ObjectIdentifier(operation)] }
    }

    /// The fetches in the queue — waiting, in flight or finishing — in enqueue order.
    public var ids: [FetchID] {
        state.withLock { $0.registry.keys.sorted() }
    }

    /// How many fetches are in the queue.
    public var count: Int {
        state.withLock { $0.registry.count }
    }

    /// Cancels one fetch. Its completion still runs, once, with ``FetchError/cancelled``.
    ///
    /// - Returns: `false` if no such fetch is in the queue (it finished, or never was).
    @discardableResult
    public func cancel(_ id: FetchID) -> Bool {
        guard let operation = operation(for: id) else { return false }
        operation.cancel()
        return true
    }

    /// Cancels the fetches that match `predicate`.
    ///
    /// - Returns: How many were cancelled.
    @discardableResult
    public func cancelAll(where predicate: (FetchID, FetchOperation) -> Bool) -> Int {
        let entries = state.withLock { $0.registry.map { ($0.key, $0.value.operation) } }
        var cancelled = 0
        for (id, operation) in entries where predicate(id, operation) {
            operation.cancel()
            cancelled += 1
        }
        return cancelled
    }

    /// Cancels every fetch in the queue. Each completes once, as cancelled; this returns promptly.
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
    public var maximumTransfersPerHost: Int {
        get { state.withLock { $0.scheduler.maximumPerHost } }
        set { changeScheduler { $0.setLimits(total: $0.maximumTotal, perHost: newValue) } }
    }

    /// While `true`, no operation starts and no waiting transfer begins; those in flight go on.
    public var isSuspended: Bool {
        get { state.withLock { $0.scheduler.isPaused } }
        set {
            if newValue { operationQueue.isSuspended = true }
            changeScheduler { $0.isPaused = newValue }
            if !newValue { operationQueue.isSuspended = false }
        }
    }

    /// Whether identical GETs share a transfer. Applies to fetches that start afterwards.
    public var coalescesIdenticalRequests: Bool {
        get { state.withLock { $0.coalesces } }
        set { state.withLock { $0.coalesces = newValue } }
    }

    /// Counters for diagnostics.
    public var statistics: Statistics {
        state.withLock { $0.statistics }
    }

    /// Transfers in flight, and transfers waiting for a slot.
    public struct TransferCounts: Sendable, Equatable {
        /// Transfers in flight (each may serve several coalesced fetches).
        public let inFlight: Int
        /// Transfers waiting for a slot.
        public let waiting: Int
    }

    /// Transfers in flight now, and transfers waiting for a slot.
    public var transferCounts: TransferCounts {
        state.withLock { TransferCounts(inFlight: $0.scheduler.running, waiting: $0.scheduler.waitingCount) }
    }

    /// Calls `handler` with the new ``transferCounts`` each time they change ("3 downloading,
    /// 12 waiting").
    ///
    /// - Parameters:
    ///   - queue: Where it runs; `nil` uses ``callbackQueue``. On a serial queue the calls
    ///     arrive in order.
    ///   - handler: Receives the new counts.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onTransferCountsChange(on queue: CallbackQueue? = nil, _ handler: @escaping @Sendable (TransferCounts) -> Void) -> FetchObservation {
        let id = state.withLock { state in
            let id = state.nextHandlerID
            state.nextHandlerID += 1
            state.countHandlers.append((id: id, queue: queue, handler: handler))
            return id
        }
        return FetchObservation { [weak self] in
            self?.state.withLock { state in state.countHandlers.removeAll { $0.id == id } }
        }
    }

    /// Announces the transfer counts, if anyone listens. Under the lock, so that the order of
    /// announcements is the order of changes.
    func announceCounts(_ state: State) {
        guard !state.countHandlers.isEmpty else { return }
        let counts = TransferCounts(inFlight: state.scheduler.running, waiting: state.scheduler.waitingCount)
        let handlers = state.countHandlers
        let fallback = callbackQueue
        eventQueue.async {
            for entry in handlers {
                (entry.queue ?? fallback).perform { entry.handler(counts) }
            }
        }
    }

    private func changeScheduler(_ change: (inout SlotScheduler<ObjectIdentifier>) -> Void) {
        let grants = state.withLock { state -> [Flight] in
            change(&state.scheduler)
            let grants = takeGrants(&state)
            announceCounts(state)
            return grants
        }
        start(grants)
    }

    // MARK: Internal plumbing

    func withState<Result>(_ body: (inout State) -> Result) -> Result {
        state.withLock(body)
    }

    /// Marks a fetch as begun and posts did-begin, once. Under the lock, so that its order
    /// with did-finish holds.
    private func markBegan(_ operation: FetchOperation, _ state: inout State) {
        guard let id = state.idsByOperation[ObjectIdentifier(operation)], state.registry[id]?.began == false else { return }
        state.registry[id]!.began = true
        post(Self.didBeginNotification, Event(id: id, operation: operation, progress: nil, error: nil, retry: nil), &state)
    }
}

// MARK: - Transfers: slots, flights, members

extension FetchQueue: TransferCoordinator {
    func operation(_ operation: FetchOperation, didProgress progress: FetchProgress) {
        let batch = state.withLock { state -> (FetchBatch, Int)? in
            guard let id = state.idsByOperation[ObjectIdentifier(operation)], let entry = state.registry[id] else { return nil }
            state.pendingProgress[id] = progress
            scheduleEventDrain(&state)
            return entry.batch
        }
        if let (batch, index) = batch {
            batch.member(index, received: progress.bytesReceived, expected: progress.bytesExpected)
        }
    }

    func operationDidComplete(_ operation: FetchOperation) {
        state.withLock { state in
            guard let id = state.idsByOperation.removeValue(forKey: ObjectIdentifier(operation)),
                  let entry = state.registry.removeValue(forKey: id) else { return }
            if !entry.began {
                // It finished without a transfer (cancelled while waiting, a failed dependency,
                // an invalid request): did-begin still comes first, once.
                post(Self.didBeginNotification, Event(id: id, operation: operation, progress: nil, error: nil, retry: nil), &state)
            }
            if let progress = state.pendingProgress.removeValue(forKey: id) {
                post(Self.didProgressNotification, Event(id: id, operation: operation, progress: progress, error: nil, retry: nil), &state)
            }
            post(Self.didFinishNotification, Event(id: id, operation: operation, progress: nil, error: operation.error, retry: nil), &state)
        }
    }

    func makeTransfer(for operation: FetchOperation, request: URLRequest, limits: TransferLimits,
                      sink: any ResponseBodySink, owner: any TransferOwner) -> any TransferHandle {
        let session = operation.session
        let key = coalescesIdenticalRequests ? FlightKey(request: request, limits: limits, session: session, sink: sink) : nil
        return FlightMember(operation: operation, owner: owner, request: request, limits: limits, session: session,
                            sink: sink, key: key, queue: self)
    }

    func operation(_ operation: FetchOperation, willRetry event: RetryEvent) {
        state.withLock { state in
            guard let id = state.idsByOperation[ObjectIdentifier(operation)] else { return }
            post(Self.willRetryNotification, Event(id: id, operation: operation, progress: nil, error: event.error, retry: event), &state)
        }
    }

    /// A member's operation wants its transfer: join an identical flight, or start a new one.
    func join(_ member: FlightMember) {
        var grants: [Flight] = []
        var replayFrom: Flight?
        state.withLock { state in
            guard case .new = member.state else { return }   // stopped before it started
            if let key = member.key, let flight = state.sharedFlights[key] {
                flight.members.append(member)
                member.state = .joined(flight)
                state.statistics.requestsCoalesced += 1
                switch flight.phase {
                case .running:
                    markBegan(member.operation, &state)
                    replayFrom = flight
                case .waiting:
                    // A more urgent caller moves the shared transfer up the line.
                    if SlotScheduler<ObjectIdentifier>.level(of: member.priority) < SlotScheduler<ObjectIdentifier>.level(of: flight.members[0].priority) {
                        state.scheduler.enqueue(flight.ticket, host: flight.host, priority: member.priority)
                    }
                case .ended:
                    break
                }
                return
            }
            let flight = Flight(first: member, queue: self)
            member.state = .joined(flight)
            if let key = member.key { state.sharedFlights[key] = flight }
            state.waitingFlights[flight.ticket] = flight
            state.scheduler.enqueue(flight.ticket, host: flight.host, priority: member.priority)
            grants = takeGrants(&state)
            announceCounts(state)
        }
        start(grants)
        if let flight = replayFrom {
            // On the router queue, in order with the flight's own events: the latest head and
            // progress, so a late joiner starts where the transfer is.
            flight.session.router.queue.async { [self] in
                let (response, received) = state.withLock { _ in (flight.response, flight.received) }
                member.owner.transferDidStart()
                if let (head, expected) = response {
                    member.owner.transferDidReceive(response: head, expectedLength: expected)
                }
                if let received {
                    member.owner.transferDidReceive(bytes: received.bytes, of: received.expected)
                }
            }
        }
    }

    /// A member's operation was cancelled: leave its flight, which stops only when empty.
    func leave(_ member: FlightMember) {
        var confirm = false
        var stopping: Transfer?
        state.withLock { state in
            switch member.state {
            case .ended:
                return
            case .new:
                member.state = .ended
                confirm = true
            case .joined(let flight):
                member.state = .ended
                confirm = true
                flight.members.removeAll { $0 === member }
                guard flight.members.isEmpty else { return }
                if let key = flight.key, state.sharedFlights[key] === flight {
                    state.sharedFlights[key] = nil
                }
                switch flight.phase {
                case .waiting:
                    state.scheduler.withdraw(flight.ticket)
                    state.waitingFlights[flight.ticket] = nil
                    flight.phase = .ended
                    announceCounts(state)
                case .running:
                    if let transfer = flight.transfer {
                        stopping = transfer
                    } else {
                        flight.abandoned = true
                    }
                case .ended:
                    break
                }
            }
        }
        stopping?.stop()
        if confirm {
            member.owner.transferDidEnd(.failure(.cancelled, nil))
        }
    }

    /// A flight's transfer ended: free its slot, start the next, and tell every member.
    func flightDidEnd(_ flight: Flight, result: TransferResult) {
        var members: [FlightMember] = []
        let grants = state.withLock { state -> [Flight] in
            guard flight.phase != .ended else { return [] }
            flight.phase = .ended
            flight.transfer = nil
            if let key = flight.key, state.sharedFlights[key] === flight {
                state.sharedFlights[key] = nil
            }
            state.scheduler.release(host: flight.host)
            backOffIfAsked(flight.host, result: result, &state)
            transferEnded(&state)
            members = flight.members
            flight.members = []
            for member in members { member.state = .ended }
            let grants = takeGrants(&state)
            announceCounts(state)
            return grants
        }
        start(grants)
        for member in members {
            member.owner.transferDidEnd(result)
        }
    }

    /// A host answered 429 or 503 with `Retry-After`: hold its transfers until then. Under the lock.
    private func backOffIfAsked(_ host: String, result: TransferResult, _ state: inout State) {
        guard case .failure(.unacceptableStatus(let failure), _) = result, [429, 503].contains(failure.statusCode),
              let seconds = RetryAfter.seconds(in: failure), seconds > 0
        else { return }
        let pause = min(seconds, Self.maximumHostBackOff)
        state.scheduler.block(host, until: DispatchTime.now().uptimeNanoseconds &+ UInt64(pause * 1e9))
    }

    /// The longest a host's `Retry-After` holds its transfers: 10 minutes.
    public static let maximumHostBackOff: TimeInterval = 600

    /// When transfers to `url`'s host may start again after it asked for a pause (a 429 or 503
    /// with `Retry-After`), or `nil` if it is not paused.
    public func backOffDeadline(for url: URL) -> Date? {
        let host = FlightMember.hostKey(of: url)
        let now = DispatchTime.now().uptimeNanoseconds
        return state.withLock { state in
            guard let until = state.scheduler.blockedUntil[host], until > now else { return nil }
            return Date(timeIntervalSinceNow: Double(until - now) / 1e9)
        }
    }

    /// Ends the pause of `url`'s host at once (a user asked to refresh now): its waiting
    /// transfers start as the limits allow.
    public func clearBackOff(for url: URL) {
        let host = FlightMember.hostKey(of: url)
        changeScheduler { $0.unblock(host) }
    }

    /// Moves granted flights to running. Under the lock.
    private func takeGrants(_ state: inout State) -> [Flight] {
        var flights: [Flight] = []
        defer { scheduleWake(&state) }
        for grant in state.scheduler.takeGrants() {
            guard let flight = state.waitingFlights.removeValue(forKey: grant.ticket) else { continue }
            flight.phase = .running
            state.statistics.transfersStarted += 1
            transferStarted(&state)
            for member in flight.members {
                markBegan(member.operation, &state)
            }
            flights.append(flight)
        }
        return flights
    }

    /// Makes sure the queue looks again when the first paused host with waiting transfers opens.
    /// Under the lock.
    private func scheduleWake(_ state: inout State) {
        guard let unblock = state.scheduler.nextUnblock else { return }
        if let wakeAt = state.wakeAt, wakeAt <= unblock { return }
        state.wakeAt = unblock
        state.wakeToken += 1
        let token = state.wakeToken
        DispatchQueue.global().asyncAfter(deadline: DispatchTime(uptimeNanoseconds: unblock)) { [weak self] in
            guard let self else { return }
            let current = self.state.withLock { state -> Bool in
                guard state.wakeToken == token else { return false }
                state.wakeAt = nil
                return true
            }
            if current { self.changeScheduler { _ in } }
        }
    }

    /// Creates and starts the transfers of granted flights. Outside the lock.
    private func start(_ flights: [Flight]) {
        for flight in flights {
            let transfer = Transfer(request: flight.request, session: flight.session, limits: flight.limits, sink: flight.sink, owner: flight)
            let go = state.withLock { _ -> Bool in
                guard !flight.abandoned else { return false }
                flight.transfer = transfer
                return true
            }
            if go {
                transfer.start()
            } else {
                flightDidEnd(flight, result: .failure(.cancelled, nil))
            }
        }
    }
}
