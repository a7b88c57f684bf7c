import Foundation

/// An attempt that waits for a transfer slot in a ``QueueState``: what the queue needs of it,
/// fixed when it was made (``FlightMember``).
protocol SlotHolder: Equatable, Sendable {
    associatedtype Key: Hashable, Sendable
    /// Its fetch: one attempt at a time per fetch.
    var id: FetchID { get }
    /// The origin its per-host limit applies to.
    var host: String { get }
    /// What makes it the same fetch as others, if it may share a transfer (a ``FlightKey``).
    var key: Key? { get }
    /// Where it waits in the scheduler (reserved when it was made).
    var place: SlotPlace { get }
}

/// A transfer that holds a slot, and the attempts it serves (``Flight``): made by a
/// ``QueueState`` when it grants the slot, then run by its owner.
protocol SlotFlight {
    associatedtype Member: SlotHolder
    init(first: Member, members: [Member])
    var first: Member { get }
}

extension SlotFlight {
    /// Its identity in its queue: the place its first member (the attempt that waited for the
    /// slot) reserved in line, which no other attempt has. Not that member's fetch: the member
    /// may leave a shared flight before it is granted, and its fetch (paused and resumed, or
    /// retried) may then run another attempt in a flight of its own while this one runs.
    var ticket: UInt64 { first.place.sequence }
}

/// Everything mutable about a ``FetchQueue``, and every change to it: a value, like the
/// operation's ``LifecycleStateMachine``.
///
/// It keeps slots and identifiers, and nothing of what a fetch does: the registry of fetches by
/// ``FetchID``, the slot scheduler and the attempts waiting in it, the keys of shareable flights,
/// the running flights by ticket (what holds each slot), a host's back-off, the counts, network
/// activity and the sweeps of `cancelAll`. It never reads or writes an operation or a member: a
/// flight's members, its events and its end are its own, on its session's queue (``Flight``);
/// what is observed of a fetch is the operation's (``ObservedFetch``).
///
/// Each transition changes the value and records what must happen because of it as
/// ``QueueAction``s; it calls nothing. The queue applies one transition under its lock, then
/// runs the actions (``FetchQueue/transition(_:)``): announcements of counts and activity are
/// appended to the queue's event queue before the lock is released, so that they are delivered
/// in the order of the changes; everything else (starting a flight, adding a member to one or
/// taking it out, confirming a cancel, timers) runs after. So no user code, no URLSession call,
/// no timer and no other object's lock runs under the queue's lock.
///
/// Generic over what it holds, so that its tests build values only: a ``FetchQueue`` holds
/// operations, ``FlightMember``s and ``Flight``s, with ``FlightKey``s.
struct QueueState<Fetch, Flight: SlotFlight> {
    typealias Member = Flight.Member
    typealias Key = Member.Key

    /// A shareable flight that waits for its slot: its first member is what waits in the
    /// scheduler; the others joined it. Made into a ``Flight`` when the slot is granted.
    struct WaitingFlight {
        let first: Member
        /// Where it waits: its first member's place, or higher, when a more urgent caller joined.
        var place: SlotPlace
        var members: [Member]
    }

    var scheduler: SlotScheduler<Member>
    var coalesces: Bool
    /// The fetches registered, by identifier.
    var registry: [FetchID: Fetch] = [:]
    /// The flights that hold a slot, by ticket (``SlotFlight/ticket``).
    var running: [UInt64: Flight] = [:]
    /// The shareable flights that wait for a slot, by key: an identical request joins one.
    var waitingShared: [Key: WaitingFlight] = [:]
    /// The shareable flights running, by key: an identical request joins one on its session's
    /// queue.
    var runningShared: [Key: Flight] = [:]
    /// The priority levels of fetches re-prioritised after they were enqueued
    /// (``reprioritize(_:attempt:to:)``), for their attempts from now on.
    var levels: [FetchID: Int] = [:]
    /// Where attempts of re-prioritised fetches wait, or would wait in a shared flight, instead
    /// of the place their member was made with (its ``SlotHolder/place``). Only while they wait.
    var relocated: [FetchID: SlotPlace] = [:]
    /// The places kept by fetches whose attempt left the line or its flight (paused, or
    /// cancelled): their next attempt (a resume) waits at that sequence in line, at its
    /// priority, not behind the fetches enqueued after them. The level is the one it waited at
    /// (a re-prioritisation to it changes nothing). Until they finish.
    var homes: [FetchID: SlotPlace] = [:]
    /// Fetches a `cancelAll` chose: they are about to be cancelled, and get no slot.
    var swept: Set<FetchID> = []
    /// Chosen fetches whose attempt a `cancelAll` took out of line (or kept from joining): each
    /// hears of its cancel when its operation stops it.
    var withdrawn: Set<FetchID> = []
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
    var keepAlive: AnyObject?

    /// What the transitions since the last ``takeActions()`` asked for, in order.
    private(set) var actions: [QueueAction<Flight>] = []

    init(maximumTotal: Int, maximumPerHost: Int, coalesces: Bool) {
        scheduler = SlotScheduler(maximumTotal: maximumTotal, maximumPerHost: maximumPerHost)
        self.coalesces = coalesces
    }

    mutating func takeActions() -> [QueueAction<Flight>] {
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

    mutating func register(_ fetch: Fetch, id: FetchID) {
        registry[id] = fetch
    }

    /// Takes a fetch out: it was refused before it was activated, or it finished.
    mutating func unregister(_ id: FetchID) {
        registry[id] = nil
        levels[id] = nil
        relocated[id] = nil
        homes[id] = nil
        swept.remove(id)
        withdrawn.remove(id)
    }

    /// The queue is being freed: every fetch leaves the registry. Returns them in enqueue order.
    mutating func releaseAll() -> [Fetch] {
        defer { registry = [:] }
        return fetchesInEnqueueOrder
    }

    /// Every fetch in the registry, in enqueue order.
    var fetchesInEnqueueOrder: [Fetch] { registry.sorted { $0.key < $1.key }.map(\.value) }

    // MARK: Slots

    /// Where an attempt made now will wait, at `priority`, and its host as the equal string the
    /// scheduler already holds (the waiting attempts to one host share one).
    mutating func reservePlace(host: String, priority: Operation.QueuePriority) -> (host: String, place: SlotPlace) {
        (scheduler.interned(host), scheduler.reservePlace(priority: priority))
    }

    /// An attempt wants its transfer: it joins an identical flight (waiting, or running on its
    /// session's queue), or waits for a slot, as the first of a flight made when it is granted.
    mutating func join(_ member: Member) {
        // A `cancelAll` chose it and is about to cancel it: no slot, no shared transfer.
        guard !swept.contains(member.id) else {
            withdrawn.insert(member.id)
            return
        }
        if let key = member.key, let flight = runningShared[key] {
            statistics.requestsCoalesced += 1
            actions.append(.announceJoin(member))
            actions.append(.joinFlight(flight, member))
            return
        }
        // A fetch that left its place (paused) takes it again; one re-prioritised before this
        // attempt was made at its new level waits there.
        let level = levels[member.id] ?? member.place.level
        if let home = homes[member.id] {
            relocated[member.id] = SlotPlace(level: level, sequence: home.sequence)
        } else if level != member.place.level {
            relocated[member.id] = scheduler.reservePlace(level: level)
        }
        let place = place(of: member)
        if let key = member.key {
            if let index = waitingShared.index(forKey: key) {
                statistics.requestsCoalesced += 1
                actions.append(.announceJoin(member))
                waitingShared.values[index].members.append(member)     // in place: no copy per joiner
                // A more urgent caller moves the shared transfer up the line.
                settle(at: index)
                return
            }
            waitingShared[key] = WaitingFlight(first: member, place: place, members: [member])
        }
        scheduler.enqueue(member, host: member.host, at: place)
        takeGrants()
        announceCounts()
    }

    /// An attempt's operation was cancelled: the attempt leaves the line, or its flight (which
    /// stops when its last member left, on its session's queue). One that waited hears of its
    /// cancel (``QueueAction/confirmCancel(_:)``); one that has ended already, nothing.
    mutating func leave(_ member: Member) {
        if withdrawn.remove(member.id) != nil {
            actions.append(.confirmCancel(member))
            return
        }
        // Where it waited, or waited before it was granted: its next attempt waits there again.
        if homes[member.id] == nil, registry[member.id] != nil {
            homes[member.id] = place(of: member)
        }
        if let key = member.key, let index = waitingShared.index(forKey: key),
           waitingShared.values[index].members.contains(member) {
            waitingShared.values[index].members.removeAll { $0 == member }
            relocated[member.id] = nil
            if waitingShared.values[index].members.isEmpty {
                let waiting = waitingShared.remove(at: index).value
                scheduler.withdraw(at: waiting.place, host: waiting.first.host)
                announceCounts()
            } else {
                // Those left decide where it waits: the most urgent of them.
                settle(at: index)
                // Its place may stay the flight's: its next attempt joins the flight there, or
                // (a request that differs now) waits at the back, never beside it in line.
                if homes[member.id]?.sequence == waitingShared.values[index].place.sequence { homes[member.id] = nil }
            }
            actions.append(.confirmCancel(member))
            return
        }
        if member.key == nil, scheduler.withdraw(at: place(of: member), host: member.host) != nil {
            relocated[member.id] = nil
            announceCounts()
            actions.append(.confirmCancel(member))
            return
        }
        // Running, or ended: its flight decides (it tells a member it still has). One that may
        // not share is the first of its flight.
        if let flight = member.key.flatMap({ runningShared[$0] }) ?? running[member.place.sequence] {
            actions.append(.leaveFlight(flight, member))
        }
    }

    /// A flight's transfer ended: its slot is freed and the next granted; a host that asked for
    /// a pause (`backOff`, from a 429 or 503 with `Retry-After`) is held until then.
    mutating func flightEnded(_ flight: Flight, backOff: TimeInterval?, now: UInt64) {
        guard running.removeValue(forKey: flight.ticket) != nil else { return }
        if let key = flight.first.key, runningShared[key]?.ticket == flight.ticket {
            runningShared[key] = nil
        }
        scheduler.release(host: flight.first.host)
        if let backOff, backOff > 0 {
            let pause = min(backOff, FetchQueue.maximumHostBackOff)
            scheduler.block(flight.first.host, until: now &+ UInt64(pause * 1e9))
        }
        // The next flight first: when one takes the slot, nothing went idle and no hide timer
        // is needed.
        takeGrants(now: now)
        networkMayGoIdle()
        announceCounts()
    }

    /// Moves granted attempts to running flights, and asks for them to start.
    ///
    /// Nothing is granted while a `cancelAll(where:)` predicate runs; a flight whose members a
    /// `cancelAll` has all chosen is not started: its slot goes back and the next is granted.
    private mutating func takeGrants(now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        defer { scheduleWake() }
        guard sweepsUnderWay == 0 else { return }
        var declined = true
        while declined {
            declined = false
            for grant in scheduler.takeGrants(now: now) {
                let first = grant.ticket
                var members = [first]
                if let key = first.key, let waiting = waitingShared[key], waiting.first == first {
                    waitingShared[key] = nil
                    members = waiting.members
                }
                if members.allSatisfy({ swept.contains($0.id) }) {
                    scheduler.release(host: grant.host)
                    for member in members { withdrawn.insert(member.id) }
                    declined = true
                    continue
                }
                for member in members { relocated[member.id] = nil }
                let flight = Flight(first: first, members: members)
                running[flight.ticket] = flight
                if let key = first.key { runningShared[key] = flight }
                statistics.transfersStarted += 1
                networkBecameBusy()
                actions.append(.startFlight(flight))
            }
        }
    }

    // MARK: Priorities

    /// Where an attempt waits, or would wait alone: its member's place, unless its fetch was
    /// re-prioritised.
    func place(of member: Member) -> SlotPlace {
        relocated[member.id] ?? member.place
    }

    /// The fetch `id` gets the priority `level` (0 most urgent) from now on: its attempt
    /// waiting in line (`attempt`, its current one, if it has one) moves to the back of that
    /// level, up or down; one that waits in a shared flight moves it to where its most urgent
    /// member wants it. Its next attempts wait at that level (see ``join(_:)``). One that
    /// runs, or waits for nothing here, is not moved.
    mutating func reprioritize(_ id: FetchID, attempt: Member?, to level: Int) {
        guard registry[id] != nil else { return }
        // A paused fetch given a new level goes to the back of it, as a waiting one does: there
        // it waits when resumed. Given the level it has, it keeps its place.
        let current = levels[id] ?? homes[id]?.level
        levels[id] = level
        if let current, current != level, homes[id] != nil {
            homes[id] = scheduler.reservePlace(level: level)
        }
        // The operation may not hold its attempt yet (between this queue's join and its attach):
        // the waiting member is then found here.
        guard let member = attempt ?? waitingMember(id), member.id == id, level != place(of: member).level else { return }
        let target = scheduler.reservePlace(level: level)
        if let key = member.key, let index = waitingShared.index(forKey: key) {
            guard waitingShared.values[index].members.contains(member) else { return }
            relocated[member.id] = target
            if homes[id] != nil { homes[id] = target }
            settle(at: index)
            return
        }
        guard member.key == nil else { return }
        if scheduler.move(at: place(of: member), host: member.host, to: target) {
            relocated[member.id] = target
            if homes[id] != nil { homes[id] = target }
        }
    }

    /// The member of fetch `id` that waits for a slot, alone or in a waiting shared flight, if
    /// any: a scan, for a re-prioritisation that came before the operation held its attempt.
    private func waitingMember(_ id: FetchID) -> Member? {
        scheduler.waitingTickets.first { $0.id == id }
            ?? waitingShared.values.lazy.flatMap(\.members).first { $0.id == id }
    }

    /// A waiting shared flight's priority is its most urgent member's: when that changes (a
    /// member joined, left or was re-prioritised), the flight moves to that member's place
    /// (up or down). A flight whose level stays keeps its place in line.
    private mutating func settle(at index: [Key: WaitingFlight].Index) {
        let waiting = waitingShared.values[index]
        var best: SlotPlace?
        for member in waiting.members {
            let candidate = place(of: member)
            if let current = best, (current.level, current.sequence) <= (candidate.level, candidate.sequence) { continue }
            best = candidate
        }
        guard let best, best.level != waiting.place.level else { return }
        if scheduler.move(at: waiting.place, host: waiting.first.host, to: best) {
            waitingShared.values[index].place = best
        }
    }

    // MARK: cancelAll

    /// A `pauseAll` begins: no slot is granted until ``releaseGrants()``, so that pausing one
    /// fetch does not start another that is about to be paused.
    mutating func holdGrants() {
        sweepsUnderWay += 1
    }

    /// The `pauseAll` is over: grant what may start now.
    mutating func releaseGrants() {
        sweepsUnderWay -= 1
        takeGrants()
        announceCounts()
    }

    /// A `cancelAll(where:)` begins: no slot is granted until it ends. Returns the fetches for
    /// its predicate.
    mutating func beginSweep() -> [(FetchID, Fetch)] {
        sweepsUnderWay += 1
        return registry.map { ($0.key, $0.value) }
    }

    /// A `cancelAll` chose `ids`: no slot goes to them, and the waiting flights of only those
    /// are withdrawn. Returns the fetches to cancel, in enqueue order.
    mutating func endSweep(choosing ids: [FetchID]) -> [Fetch] {
        sweepsUnderWay -= 1
        var chosen: [Fetch] = []
        for id in ids.sorted() {
            guard let fetch = registry[id] else { continue }
            swept.insert(id)
            chosen.append(fetch)
        }
        for first in scheduler.waitingTickets {
            if let key = first.key, let waiting = waitingShared[key], waiting.first == first {
                guard waiting.members.allSatisfy({ swept.contains($0.id) }) else { continue }
                waitingShared[key] = nil
                scheduler.withdraw(at: waiting.place, host: first.host)
                for member in waiting.members { withdrawn.insert(member.id) }
            } else if swept.contains(first.id) {
                scheduler.withdraw(at: place(of: first), host: first.host)
                withdrawn.insert(first.id)
            }
        }
        takeGrants()
        announceCounts()
        return chosen
    }

    // MARK: Limits, pauses and wake-ups

    /// Limits changed, the queue was suspended or resumed, a host's pause ended: grant what may
    /// start now.
    mutating func changeScheduler(_ change: (inout SlotScheduler<Member>) -> Void) {
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

    /// Makes sure the queue looks again when the first paused host with waiting transfers opens.
    private mutating func scheduleWake() {
        guard let unblock = scheduler.nextUnblock else { return }
        if let wakeAt, wakeAt <= unblock { return }
        wakeAt = unblock
        wakeToken += 1
        actions.append(.wake(at: unblock, token: wakeToken))
    }

    // MARK: Network activity

    /// A transfer started (the scheduler counts it running).
    private mutating func networkBecameBusy() {
        activityGeneration += 1      // cancels a pending hide
        if !isNetworkActive {
            isNetworkActive = true
            announceActivity(true)
        }
    }

    /// A transfer ended, after the scheduler released its slot. The flag goes off only after
    /// the hide delay, and only if nothing started meanwhile.
    private mutating func networkMayGoIdle() {
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
}

/// What a ``QueueState`` transition asks the queue to do.
enum QueueAction<Flight: SlotFlight> {
    // Ordered: appended to the queue's event queue before the lock is released.

    /// Tell the transfer-count handlers.
    case announceCounts(FetchQueue.TransferCounts, [Callback<FetchQueue.TransferCounts>])
    /// Tell the network-activity handlers.
    case announceActivity(Bool, [Callback<Bool>])
    /// Tell the monitors that a member joined an identical request's flight, waiting or
    /// running (``FetchEventMonitor/fetchDidJoinSharedTransfer(_:)``): sent before any event
    /// of that flight can reach the member.
    case announceJoin(Flight.Member)

    // After the lock is released.

    /// Start a flight whose slot was granted (on its session's queue).
    case startFlight(Flight)
    /// Add a member to a running shared flight (on its session's queue).
    case joinFlight(Flight, Flight.Member)
    /// Take a member out of its running flight, which stops when its last member left.
    case leaveFlight(Flight, Flight.Member)
    /// Tell a member that waited that it was cancelled.
    case confirmCancel(Flight.Member)
    /// After the hide delay, call ``QueueState/hideActivity(generation:)``.
    case hideActivityLater(generation: Int)
    /// At `at` (uptime ns), call ``QueueState/wakeFired(_:)`` with `token`.
    case wake(at: UInt64, token: Int)
}
