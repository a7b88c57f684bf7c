import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Everything mutable about a ``FetchQueue``, and every change to it: a value, like the
/// operation's ``LifecycleStateMachine``.
///
/// Each transition changes the value and records what must happen because of it as
/// ``QueueAction``s; it calls nothing. The queue applies one transition under its lock, then
/// runs the actions (``FetchQueue/transition(_:)``):
///
/// - **ordered** actions — monitor events and announcements of counts and activity — are
///   appended, before the lock is released, to FetchKit's own serial queues (a
///   ``MonitorChannel``, the queue's event queue), so that they are delivered in the order of
///   the changes;
/// - every other action runs after the lock is released: creating, starting and stopping
///   transfers, telling an attempt how its transfer ended, timers.
///
/// So no user code, no URLSession call, no timer and no other object's lock runs under the
/// queue's lock. The lock order, where two locks meet: the queue's lock, then a
/// ``MonitorChannel``'s (a leaf: nothing is taken under it). An operation's lock and the
/// queue's are never held together.
struct QueueState {
    /// What the queue records of a fetch, from enqueue to finish.
    ///
    /// Kept on the operation itself (``AnyFetchOperation/queueEntry``), not in a table of the
    /// queue's: it lives exactly as long as the operation is registered, an operation belongs
    /// to one queue, and every transition about a fetch starts from its operation. The
    /// registry then only maps identifiers to operations (tens of thousands may wait, and a
    /// dictionary keeps up to 2.7 slots per entry). Packed: the optional times are stored as 0
    /// for none (an uptime is never 0), the retry count in 32 bits, and what few fetches have
    /// (a batch, session monitors, a request body) in an immutable box made only for those.
    struct Entry {
        let id: FetchID
        private var attachments: Attachments?
        /// When it was enqueued, got its slot and its first response head (uptime ns).
        let enqueuedAt = DispatchTime.now().uptimeNanoseconds
        private var storedStartedAt: UInt64 = 0
        private var storedFirstResponseAt: UInt64 = 0
        var bytesReceived: Int64 = 0
        private var storedRetries: Int32 = 0
        var began = false
        /// A `cancelAll` chose it: it is about to be cancelled, and gets no transfer slot.
        var swept = false
        /// Its last transfer ended and it is being told so: a queue freed now leaves it to
        /// finish with that result (``FetchQueue``'s `deinit`).
        var transferEnded = false

        /// Immutable, so that copies of an entry stay independent: a change makes a new one.
        final class Attachments: Sendable {
            let sessionMonitors: MonitorChannel?
            let batch: (FetchBatch, Int)?
            let bodyLength: Int64

            init(sessionMonitors: MonitorChannel?, batch: (FetchBatch, Int)?, bodyLength: Int64) {
                self.sessionMonitors = sessionMonitors
                self.batch = batch
                self.bodyLength = bodyLength
            }
        }

        init(id: FetchID, sessionMonitors: MonitorChannel?) {
            self.id = id
            if sessionMonitors != nil {
                attachments = Attachments(sessionMonitors: sessionMonitors, batch: nil, bodyLength: 0)
            }
        }

        /// The monitors of the operation's session when it was enqueued, which hear of it too.
        var sessionMonitors: MonitorChannel? { attachments?.sessionMonitors }
        /// The batch it belongs to, and its index there.
        var batch: (FetchBatch, Int)? {
            get { attachments?.batch }
            set {
                guard newValue != nil || attachments != nil else { return }
                attachments = Attachments(sessionMonitors: sessionMonitors, batch: newValue, bodyLength: bodyLength)
            }
        }
        /// The request body's length, for the metrics.
        var bodyLength: Int64 {
            get { attachments?.bodyLength ?? 0 }
            set {
                guard newValue != 0 || attachments != nil else { return }
                attachments = Attachments(sessionMonitors: sessionMonitors, batch: batch, bodyLength: newValue)
            }
        }
        var startedAt: UInt64? {
            get { storedStartedAt == 0 ? nil : storedStartedAt }
            set { storedStartedAt = newValue ?? 0 }
        }
        var firstResponseAt: UInt64? {
            get { storedFirstResponseAt == 0 ? nil : storedFirstResponseAt }
            set { storedFirstResponseAt = newValue ?? 0 }
        }
        var retries: Int {
            get { Int(storedRetries) }
            set { storedRetries = Int32(clamping: newValue) }
        }
    }

    /// A running transfer, or one that waits for its slot and may be shared, and the attempts
    /// that share it.
    ///
    /// An attempt that waits and may not be shared has none: it is only its ``Waiter`` in the
    /// scheduler until its slot is granted (tens of thousands may wait). What only a running
    /// flight has is in ``QueueState/runs``.
    struct FlightRecord {
        let flight: Flight
        var running = false
        /// Members that joined it running and wait for their replay (``replay(to:of:now:)``):
        /// until then they hear of nothing else, so that nothing reaches them twice.
        var pendingReplays: Int32 = 0
        var members: FlightMembers
    }

    /// What a running flight has: its transfer, once created, and the latest events, replayed to
    /// a member that joins it.
    struct Run {
        var transfer: Transfer?
        /// The last member, when it left (was cancelled) while the transfer ran: it hears of
        /// the end when the stopped transfer has ended — a download's partial file and resume
        /// record are then kept — not before.
        var leftWhileRunning: FlightMember?
        var response: (HTTPURLResponse, Int64?)?
        var received: (bytes: Int64, expected: Int64?)?
    }

    /// What waits in the scheduler for a slot: the first attempt of a flight, held by the
    /// scheduler's entry, and by its identity (its flight's ticket). The member keeps where it
    /// waits (``FlightMember/place``).
    struct Waiter: Sendable {
        let member: FlightMember

        var ticket: ObjectIdentifier { ObjectIdentifier(member) }
    }

    /// Where an attempt's handle is: new, in a flight (by ticket), or ended. Kept on the
    /// ``FlightMember`` itself (``FlightMember/membership``), because it lives exactly as long
    /// as the handle; like everything here, it is guarded by the queue's lock and changed only
    /// by these transitions.
    enum Membership {
        case new
        case joined(ObjectIdentifier)
        /// Its flight was withdrawn before it got a slot (a `cancelAll` chose every member):
        /// it hears of its end when its operation's cancel stops it.
        case withdrawn
        case ended
    }

    var scheduler: SlotScheduler<Waiter>
    var coalesces: Bool
    /// Whether the queue has monitors of its own (a fetch's session may have some too).
    let hasMonitors: Bool
    /// The operations registered, by identifier; what the queue records of each is on the
    /// operation (``Entry``).
    var registry: [FetchID: AnyFetchOperation] = [:]
    /// Flights running, or waiting for a slot and shareable, by ticket (their first member's
    /// identity): a waiting attempt that may not be shared is only in ``scheduler``.
    var flights: [ObjectIdentifier: FlightRecord] = [:]
    /// What the running flights have, by ticket.
    var runs: [ObjectIdentifier: Run] = [:]
    /// The flight each shareable request joins, while it waits or runs.
    var sharedFlights: [FlightKey: ObjectIdentifier] = [:]
    var isNetworkActive = false
    var activityGeneration = 0
    var activityHandlers = HandlerList<Callback<Bool>>()
    var countHandlers = HandlerList<Callback<FetchQueue.TransferCounts>>()
    var statistics = FetchQueue.Statistics()
    /// The wake-up scheduled for when a host's back-off ends, if any (uptime ns), and its token.
    var wakeAt: UInt64?
    var wakeToken = 0
    /// `cancelAll(where:)` calls whose predicate is running: no slot is granted meanwhile.
    var sweepsUnderWay = 0
    /// The queue itself, while ``wantsKeepAlive``. Set by ``FetchQueue/transition(_:)`` after
    /// each transition, never by one.
    var keepAlive: FetchQueue?

    /// What the transitions since the last ``takeActions()`` asked for, in order.
    private(set) var actions: [QueueAction] = []

    init(maximumTotal: Int, maximumPerHost: Int, coalesces: Bool, hasMonitors: Bool) {
        scheduler = SlotScheduler(maximumTotal: maximumTotal, maximumPerHost: maximumPerHost)
        self.coalesces = coalesces
        self.hasMonitors = hasMonitors
    }

    mutating func takeActions() -> [QueueAction] {
        defer { actions = [] }      // hands the buffer over: no copy, no allocation when empty
        return actions
    }

    /// Work under way keeps its queue: a queue that holds fetches and is not suspended, and a
    /// transfer in flight, which reports its end to the queue.
    var wantsKeepAlive: Bool {
        (!registry.isEmpty && !scheduler.isPaused) || scheduler.running > 0
    }

    var transferCounts: FetchQueue.TransferCounts {
        FetchQueue.TransferCounts(inFlight: scheduler.running, waiting: scheduler.waitingCount)
    }

    // MARK: The registry

    mutating func register(_ operation: AnyFetchOperation, id: FetchID, sessionMonitors: MonitorChannel?) {
        registry[id] = operation
        operation.queueEntry = Entry(id: id, sessionMonitors: sessionMonitors)
    }

    /// Takes a fetch back out before it was activated.
    mutating func unregister(_ operation: AnyFetchOperation, id: FetchID) {
        registry[id] = nil
        operation.queueEntry = nil
    }

    /// A registered fetch is member `index` of `batch`.
    mutating func add(_ id: FetchID, to batch: FetchBatch, at index: Int) {
        registry[id]?.queueEntry?.batch = (batch, index)
    }

    /// The queue is being freed: every fetch leaves the registry, and its entry leaves its
    /// operation, which finishes without the queue and must not keep the queue's record of it
    /// (its batch, its session monitors). Returns each operation with its entry, in enqueue
    /// order.
    mutating func releaseAll() -> [(operation: AnyFetchOperation, entry: Entry)] {
        let released = registry.sorted { $0.key < $1.key }.compactMap { _, operation -> (operation: AnyFetchOperation, entry: Entry)? in
            defer { operation.queueEntry = nil }
            return operation.queueEntry.map { (operation, $0) }
        }
        registry = [:]
        return released
    }

    /// A registered fetch goes into the operation queue: its monitors hear of it.
    mutating func activated(_ id: FetchID) {
        guard let operation = registry[id], let entry = operation.queueEntry else { return }
        emit(.enqueued, operation, entry)
    }

    /// The operation finished: its metrics and its end go to the monitors, and it leaves the
    /// registry.
    mutating func completed(_ operation: AnyFetchOperation, error: FetchError?, now: UInt64) {
        guard let entry = operation.queueEntry, registry.removeValue(forKey: entry.id) != nil else { return }
        operation.queueEntry = nil
        let metrics = FetchMetrics(enqueuedAt: entry.enqueuedAt, startedAt: entry.startedAt, firstResponseAt: entry.firstResponseAt,
                                   now: now, attempts: entry.retries + 1, bytesReceived: entry.bytesReceived,
                                   bodyLength: entry.bodyLength)
        emit(.metrics(metrics), operation, entry)
        emit(.finished(error), operation, entry)
    }

    mutating func willRetry(_ operation: AnyFetchOperation, _ event: RetryEvent) {
        guard operation.queueEntry != nil else { return }
        operation.queueEntry?.retries += 1
        operation.queueEntry?.transferEnded = false     // it waits now: a queue freed meanwhile cancels it
        emit(.retry(event), operation)
    }

    mutating func received(_ response: HTTPURLResponse, for operation: AnyFetchOperation, now: UInt64) {
        guard let entry = operation.queueEntry else { return }
        if entry.firstResponseAt == nil { operation.queueEntry?.firstResponseAt = now }
        emit(.response(response), operation)
    }

    mutating func redirected(_ response: HTTPURLResponse, to request: URLRequest, for operation: AnyFetchOperation) {
        emit(.redirected(response, request), operation)
    }

    /// A member's fetch progressed, in its flight's transfer: records the body bytes received
    /// (for its metrics) and tells its batch, if it is in one. Progress counts from where a
    /// download resumed, once the server answered `206`, as the operation's own does.
    private mutating func progressed(_ member: FlightMember, in ticket: ObjectIdentifier, received: Int64, expected: Int64?) {
        guard let entry = member.operation.queueEntry else { return }
        let base = member.resumedFrom != 0 && runs[ticket]?.response?.0.statusCode == 206 ? member.resumedFrom : 0
        member.operation.queueEntry?.bytesReceived = base + received
        if let (batch, index) = entry.batch {
            actions.append(.batchProgress(batch, index, received: base + received, expected: expected.map { base + $0 }))
        }
    }

    /// Whether a `cancelAll` chose this operation.
    func isSwept(_ operation: AnyFetchOperation) -> Bool {
        operation.queueEntry?.swept ?? false
    }

    // MARK: Flights

    /// An attempt wants its transfer: it joins an identical flight, or waits for a slot as the
    /// first of a flight of its own, which is made when the slot is granted (or now, if identical
    /// requests may join it meanwhile).
    ///
    /// - Parameter priority: Its operation's `queuePriority` (read before the lock is taken).
    mutating func join(_ member: FlightMember, priority: Operation.QueuePriority) {
        guard case .new = member.membership else { return }   // stopped before it started
        member.operation.queueEntry?.transferEnded = false
        // A `cancelAll` chose it and is about to cancel it: no slot, no shared transfer. The
        // member stays new; the cancel stops it.
        guard !isSwept(member.operation) else { return }
        member.host = scheduler.interned(member.host)
        if let key = member.key, let ticket = sharedFlights[key], let joined = flights[ticket].map({ ($0.flight, $0.running) }) {
            flights[ticket]?.members.append(member)      // in place: no copy of the list per joiner
            member.membership = .joined(ticket)
            statistics.requestsCoalesced += 1
            let (flight, running) = joined
            if running {
                markBegan(member.operation, request: flight.request)
                member.awaitingReplay = true
                flights[ticket]?.pendingReplays += 1
                actions.append(.replay(member, flight))
            } else {
                // A more urgent caller moves the shared transfer up the line (never down).
                let first = flight.first
                if let place = scheduler.raise(at: first.place, host: first.host, to: priority) { first.place = place }
            }
            return
        }
        let waiter = Waiter(member: member)
        member.membership = .joined(waiter.ticket)
        if let key = member.key {
            flights[waiter.ticket] = FlightRecord(flight: Flight(first: member), members: FlightMembers(member))
            sharedFlights[key] = waiter.ticket
        }
        member.place = scheduler.enqueue(waiter, host: member.host, priority: priority)
        takeGrants()
        announceCounts()
    }

    /// An attempt's operation was cancelled: it leaves its flight, which stops only when empty.
    /// The member hears of its cancel (``QueueAction/confirmCancel(_:)``) unless it already
    /// ended.
    mutating func leave(_ member: FlightMember) {
        switch member.membership {
        case .ended:
            return
        case .new, .withdrawn:
            member.membership = .ended
        case .joined(let ticket):
            member.membership = .ended
            guard var record = flights[ticket] else {
                // The first of a flight not made yet: it waits alone.
                if scheduler.withdraw(at: member.place, host: member.host) != nil { announceCounts() }
                break
            }
            record.members.remove(member)
            if member.awaitingReplay {
                member.awaitingReplay = false
                record.pendingReplays -= 1
            }
            flights[ticket] = record
            guard record.members.isEmpty else { break }
            forgetShared(record.flight)
            if record.running {
                // None yet: `transferCreated` finds no members and ends the flight.
                if let transfer = runs[ticket]?.transfer {
                    actions.append(.stopTransfer(transfer))
                    // Told by `flightEnded`, once the transfer has cleaned up after itself: a
                    // cancelled fetch must not complete while its sink still writes.
                    runs[ticket]?.leftWhileRunning = member
                    return
                }
            } else {
                scheduler.withdraw(at: record.flight.first.place, host: record.flight.host)
                flights[ticket] = nil
                announceCounts()
            }
        }
        actions.append(.confirmCancel(member))
    }

    /// The transfer of a granted flight exists. Returns whether to start it: `false` if every
    /// member left before it existed (the caller then ends the flight as cancelled).
    mutating func transferCreated(_ transfer: Transfer, for flight: Flight) -> Bool {
        guard let record = flights[flight.ticket], !record.members.isEmpty else { return false }
        runs[flight.ticket, default: Run()].transfer = transfer
        return true
    }

    /// A flight's transfer ended: its slot is freed and the next granted. Returns the members
    /// to tell how it ended.
    @discardableResult
    mutating func flightEnded(_ flight: Flight, result: TransferResult) -> [FlightMember] {
        guard let record = flights.removeValue(forKey: flight.ticket), record.running else { return [] }
        let left = runs[flight.ticket]?.leftWhileRunning
        runs[flight.ticket] = nil
        forgetShared(flight)
        scheduler.release(host: flight.host)
        backOffIfAsked(flight.host, result: result)
        // The next flight first: when one takes the slot, nothing went idle and no hide timer
        // is needed.
        takeGrants()
        transferEnded()
        for member in record.members {
            member.membership = .ended
            member.awaitingReplay = false
            member.operation.queueEntry?.transferEnded = true
        }
        announceCounts()
        return Array(record.members) + (left.map { [$0] } ?? [])
    }

    /// The members of a running flight, to tell of its events, and what to remember for a late
    /// joiner.
    mutating func flightHeard(_ flight: Flight, received: (bytes: Int64, expected: Int64?)? = nil) -> FlightMembers {
        guard let record = flights[flight.ticket] else { return [] }
        let told = Self.told(record)
        if let received {
            runs[flight.ticket, default: Run()].received = received
            for member in told {
                progressed(member, in: flight.ticket, received: received.bytes, expected: received.expected)
            }
        }
        return told
    }

    /// The members of `record` to tell of an event: those that wait for their replay hear of
    /// it there.
    private static func told(_ record: FlightRecord) -> FlightMembers {
        guard record.pendingReplays > 0 else { return record.members }
        var told: FlightMembers = []
        for member in record.members where !member.awaitingReplay {
            told.append(member)
        }
        return told
    }

    /// A running flight's response head arrived: each member's fetch records it and its
    /// monitors hear of it, here, from the flight (the members' operations do not report it
    /// back). Returns the members to tell.
    mutating func flightReceived(_ flight: Flight, response: HTTPURLResponse, expectedLength: Int64?, now: UInt64) -> FlightMembers {
        guard let record = flights[flight.ticket] else { return [] }
        runs[flight.ticket, default: Run()].response = (response, expectedLength)
        let told = Self.told(record)
        for member in told {
            received(response, for: member.operation, now: now)
            progressed(member, in: flight.ticket, received: 0, expected: expectedLength)
        }
        return told
    }

    /// A running flight follows a redirect: each member's monitors hear of it. Returns the
    /// members to tell.
    mutating func flightRedirected(_ flight: Flight, response: HTTPURLResponse, to request: URLRequest) -> FlightMembers {
        guard let record = flights[flight.ticket] else { return [] }
        let told = Self.told(record)
        for member in told {
            redirected(response, to: request, for: member.operation)
        }
        return told
    }

    /// The latest head and progress of a running flight, for a member that joined it.
    func latest(of flight: Flight) -> Latest {
        guard let run = runs[flight.ticket] else { return (nil, nil) }
        return (run.response, run.received)
    }

    /// A member that joined a running flight is brought to where it is: its latest head and
    /// progress, and the head goes to the member's monitors as it goes to the member. From now
    /// on it hears the flight's events.
    ///
    /// - Returns: What to tell it; `nil` if it no longer waits for its replay (the flight
    ///   ended, or it left): then it is told nothing, not even that it started.
    mutating func replay(to member: FlightMember, of flight: Flight, now: UInt64) -> Latest? {
        guard member.awaitingReplay else { return nil }
        member.awaitingReplay = false
        flights[flight.ticket]?.pendingReplays -= 1
        let latest = latest(of: flight)
        if let (head, expected) = latest.response {
            received(head, for: member.operation, now: now)
            progressed(member, in: flight.ticket, received: 0, expected: expected)
        }
        if let received = latest.received {
            progressed(member, in: flight.ticket, received: received.bytes, expected: received.expected)
        }
        return latest
    }

    /// The flight is about to end: the members still waiting for their replay get it now, in
    /// the same transition, so that each hears it started (and its head) before it hears the
    /// end. Returns what to tell them.
    mutating func replaysBeforeEnd(of flight: Flight, now: UInt64) -> [(member: FlightMember, latest: Latest)] {
        guard let record = flights[flight.ticket], record.pendingReplays > 0 else { return [] }
        var replays: [(member: FlightMember, latest: Latest)] = []
        for member in record.members where member.awaitingReplay {
            if let latest = replay(to: member, of: flight, now: now) { replays.append((member, latest)) }
        }
        return replays
    }

    /// A running flight's latest head and progress.
    typealias Latest = (response: (HTTPURLResponse, Int64?)?, received: (bytes: Int64, expected: Int64?)?)

    private mutating func forgetShared(_ flight: Flight) {
        if let key = flight.key, sharedFlights[key] == flight.ticket {
            sharedFlights[key] = nil
        }
    }

    // MARK: cancelAll

    /// A `cancelAll(where:)` begins: no slot is granted until it ends. Returns the fetches for
    /// its predicate.
    mutating func beginSweep() -> [(FetchID, AnyFetchOperation)] {
        sweepsUnderWay += 1
        return registry.map { ($0.key, $0.value) }
    }

    /// A `cancelAll` chose `ids`: no slot goes to them, and their waiting transfers are
    /// withdrawn. Returns the operations to cancel, in enqueue order.
    mutating func endSweep(choosing ids: [FetchID]) -> [AnyFetchOperation] {
        sweepsUnderWay -= 1
        var operations: [AnyFetchOperation] = []
        for id in ids.sorted() {
            guard let operation = registry[id] else { continue }
            operation.queueEntry?.swept = true
            operations.append(operation)
        }
        for waiter in scheduler.waitingTickets where allSwept(waiting: waiter) {
            scheduler.withdraw(at: waiter.member.place, host: waiter.member.host)
            withdrawFlight(of: waiter)
        }
        takeGrants()
        announceCounts()
        return operations
    }

    // MARK: Limits, pauses and wake-ups

    /// Limits changed, the queue was suspended or resumed, a host's pause ended: grant what may
    /// start now.
    mutating func changeScheduler(_ change: (inout SlotScheduler<Waiter>) -> Void) {
        change(&scheduler)
        takeGrants()
        announceCounts()
    }

    /// The wake-up `token` fired. Returns whether it is still the current one (then the caller
    /// looks again with ``changeScheduler(_:)``).
    mutating func wakeFired(_ token: Int) -> Bool {
        guard wakeToken == token, wakeAt != nil else { return false }
        wakeAt = nil
        return true
    }

    /// A host answered 429 or 503 with `Retry-After`: hold its transfers until then.
    private mutating func backOffIfAsked(_ host: String, result: TransferResult) {
        guard case .failure(.unacceptableStatus(let failure), _) = result, [429, 503].contains(failure.statusCode),
              let seconds = RetryAfter.seconds(in: failure), seconds > 0
        else { return }
        let pause = min(seconds, FetchQueue.maximumHostBackOff)
        scheduler.block(host, until: DispatchTime.now().uptimeNanoseconds &+ UInt64(pause * 1e9))
    }

    /// Moves granted flights to running, and asks for their transfers.
    ///
    /// Nothing is granted while a `cancelAll(where:)` predicate runs; a flight whose callers a
    /// `cancelAll` has all chosen is not started: its slot goes back and the next is granted.
    private mutating func takeGrants() {
        defer { scheduleWake() }
        guard sweepsUnderWay == 0 else { return }
        var declined = true
        while declined {
            declined = false
            for grant in scheduler.takeGrants() {
                if allSwept(waiting: grant.ticket) {
                    scheduler.release(host: grant.host)
                    withdrawFlight(of: grant.ticket)
                    declined = true
                    continue
                }
                let ticket = grant.ticket.ticket
                // A flight that may not be shared is made now, as its slot is granted.
                var record = flights[ticket]
                    ?? FlightRecord(flight: Flight(first: grant.ticket.member), members: FlightMembers(grant.ticket.member))
                guard !record.running else { continue }
                record.running = true
                flights[ticket] = record
                statistics.transfersStarted += 1
                transferStarted()
                for member in record.members {
                    markBegan(member.operation, request: record.flight.request)
                }
                actions.append(.startTransfer(record.flight))
            }
        }
    }

    /// Whether a `cancelAll` chose every member of the flight that `waiter` heads, which waits
    /// (or was just granted).
    private func allSwept(waiting waiter: Waiter) -> Bool {
        guard let record = flights[waiter.ticket] else { return isSwept(waiter.member.operation) }
        return record.members.allSatisfy { isSwept($0.operation) }
    }

    /// Forgets the flight that `waiter` heads, out of the scheduler now: none of its members
    /// gets a transfer. Each hears of its end when its operation is cancelled and stops it.
    private mutating func withdrawFlight(of waiter: Waiter) {
        guard let record = flights.removeValue(forKey: waiter.ticket) else {
            waiter.member.membership = .withdrawn
            return
        }
        forgetShared(record.flight)
        for member in record.members { member.membership = .withdrawn }
    }

    /// Makes sure the queue looks again when the first paused host with waiting transfers opens.
    private mutating func scheduleWake() {
        guard let unblock = scheduler.nextUnblock else { return }
        if let wakeAt, wakeAt <= unblock { return }
        wakeAt = unblock
        wakeToken += 1
        actions.append(.wake(at: unblock, token: wakeToken))
    }

    /// Marks a fetch as begun and tells the monitors, once: its order with the finish holds.
    private mutating func markBegan(_ operation: AnyFetchOperation, request: URLRequest) {
        guard var entry = operation.queueEntry, !entry.began else { return }
        entry.began = true
        entry.startedAt = DispatchTime.now().uptimeNanoseconds
        entry.bodyLength = Int64(request.httpBody?.count ?? 0)
        operation.queueEntry = entry
        emit(.started(request), operation, entry)
    }

    // MARK: Network activity

    /// A transfer started (the scheduler counts it running).
    private mutating func transferStarted() {
        activityGeneration += 1      // cancels a pending hide
        if !isNetworkActive {
            isNetworkActive = true
            announceActivity(true)
        }
    }

    /// A transfer ended, after the scheduler released its slot. The flag goes off only after
    /// the hide delay, and only if nothing started meanwhile.
    private mutating func transferEnded() {
        guard scheduler.running == 0 else { return }
        activityGeneration += 1
        actions.append(.hideActivityLater(generation: activityGeneration))
    }

    /// The hide delay after generation `generation` passed.
    mutating func hideActivity(generation: Int) {
        guard activityGeneration == generation, scheduler.running == 0, isNetworkActive else { return }
        isNetworkActive = false
        announceActivity(false)
    }

    private mutating func announceActivity(_ active: Bool) {
        guard !activityHandlers.isEmpty else { return }
        actions.append(.announceActivity(active, activityHandlers.handlers))
    }

    /// Announces the transfer counts, if anyone listens.
    private mutating func announceCounts() {
        guard !countHandlers.isEmpty else { return }
        actions.append(.announceCounts(transferCounts, countHandlers.handlers))
    }

    // MARK: Monitors

    private mutating func emit(_ event: MonitorEvent, _ operation: AnyFetchOperation) {
        guard let entry = operation.queueEntry else { return }
        emit(event, operation, entry)
    }

    private mutating func emit(_ event: MonitorEvent, _ operation: AnyFetchOperation, _ entry: Entry) {
        guard hasMonitors || entry.sessionMonitors != nil else { return }
        actions.append(.monitor(event, MonitoredFetch(id: entry.id, operation: operation), entry.sessionMonitors))
    }
}

/// What a ``QueueState`` transition asks the queue to do.
enum QueueAction {
    // Ordered: appended to FetchKit's own serial queues before the lock is released.

    /// Tell the queue's monitors, and those of the fetch's session.
    case monitor(MonitorEvent, MonitoredFetch, MonitorChannel?)
    /// Tell the transfer-count handlers.
    case announceCounts(FetchQueue.TransferCounts, [Callback<FetchQueue.TransferCounts>])
    /// Tell the network-activity handlers.
    case announceActivity(Bool, [Callback<Bool>])

    // After the lock is released.

    /// Create the flight's transfer and start it.
    case startTransfer(Flight)
    /// Stop a transfer whose every member left.
    case stopTransfer(Transfer)
    /// Tell a batch that its member `index` progressed.
    case batchProgress(FetchBatch, Int, received: Int64, expected: Int64?)
    /// Tell a member's attempt that it was cancelled.
    case confirmCancel(FlightMember)
    /// Bring a member that joined a running flight to where the transfer is (its latest head
    /// and progress, read when the replay runs).
    case replay(FlightMember, Flight)
    /// After the hide delay, call ``QueueState/hideActivity(generation:)``.
    case hideActivityLater(generation: Int)
    /// At `at` (uptime ns), call ``QueueState/wakeFired(_:)`` with `token`.
    case wake(at: UInt64, token: Int)

    /// Whether it is appended to an ordered queue while the lock is held.
    var isOrdered: Bool {
        switch self {
        case .monitor, .announceCounts, .announceActivity: return true
        default: return false
        }
    }
}
