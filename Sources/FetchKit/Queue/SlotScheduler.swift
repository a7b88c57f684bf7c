import Foundation

/// Where a ticket waits in a ``SlotScheduler``: its priority level and its place in line, in one
/// word (the level in the top byte).
struct SlotPlace: Equatable, Sendable {
    private let packed: UInt64

    init(level: Int, sequence: UInt64) {
        packed = UInt64(level) << 56 | (sequence & Self.sequenceMask)
    }

    /// No place: a ticket never enqueued. Withdrawing or raising it does nothing.
    static var none: SlotPlace { SlotPlace(level: 0xFF, sequence: Self.sequenceMask) }

    var level: Int { Int(packed >> 56) }
    /// Its place in line; unique (2⁵⁶ tickets would take centuries to enqueue).
    var sequence: UInt64 { packed & Self.sequenceMask }

    private static var sequenceMask: UInt64 { (1 << 56) - 1 }
}

/// Decides which waiting transfer starts next, under an overall limit and a per-host limit.
///
/// A pure value, like the lifecycle state machine: events in (enqueue, withdraw, release,
/// limit changes), grants out. The queue that owns it applies one event under its lock and
/// starts the granted transfers after unlocking.
///
/// Order: the highest `Operation.QueuePriority` first, first come first served within a
/// priority — among hosts that have a free slot. A host at its limit never blocks another
/// host's transfers (no head-of-line blocking).
///
/// The scheduler keeps a waiting ticket only in its line: where it waits (its ``SlotPlace``) is
/// reserved for it (``reservePlace(priority:)``) and kept by the caller, with the ticket, which
/// passes it to withdraw or raise it. So a waiting ticket costs one entry in line, and no
/// table beside it (tens of thousands may wait). Withdrawing finds the entry by bisection and
/// lets go of the ticket at once; the emptied entry is skipped when reached.
struct SlotScheduler<Ticket: Sendable>: Sendable {
    private(set) var maximumTotal: Int
    private(set) var maximumPerHost: Int
    private(set) var running = 0
    private(set) var runningPerHost: [String: Int] = [:]
    /// While paused, nothing is granted; releases still count.
    var isPaused = false

    /// One priority level of one host: its tickets in line, consumed from `head`. A consumed
    /// or withdrawn entry no longer holds its ticket, so that nothing granted or cancelled
    /// stays alive in line; an entry that holds one is waiting.
    private struct Line {
        var entries: [(ticket: Ticket?, sequence: UInt64)] = []
        var head = 0

        /// The sequence of the first entry still waiting, dropping emptied entries on the way.
        mutating func liveHead() -> UInt64? {
            while head < entries.count {
                if entries[head].ticket != nil { return entries[head].sequence }
                head += 1
            }
            compact()
            return nil
        }

        /// Takes the ticket entered with `sequence` out of line, if it is still waiting.
        /// Sequences only grow along a line, so it is found by bisection.
        mutating func take(sequence: UInt64) -> Ticket? {
            var low = head
            var high = entries.count
            while low < high {
                let middle = (low + high) / 2
                if entries[middle].sequence < sequence { low = middle + 1 } else { high = middle }
            }
            guard low < entries.count, entries[low].sequence == sequence else { return nil }
            defer { entries[low].ticket = nil }
            return entries[low].ticket
        }

        /// Adds an entry in sequence order: at the end, unless a later sequence got there first.
        /// A place taken again (a resumed fetch's, ``QueueState``) goes before the emptied entry
        /// it left, so that bisection finds the live one first.
        mutating func insert(_ entry: (ticket: Ticket?, sequence: UInt64)) {
            var index = entries.count
            while index > head, entries[index - 1].sequence >= entry.sequence { index -= 1 }
            entries.insert(entry, at: index)
        }

        /// Takes the head's ticket (the live head that ``liveHead()`` found).
        mutating func pop() -> Ticket? {
            guard head < entries.count else { return nil }
            let ticket = entries[head].ticket
            entries[head].ticket = nil
            head += 1
            compact()
            return ticket
        }

        /// Frees consumed entries once they make up half the storage.
        private mutating func compact() {
            guard head > 32, head * 2 >= entries.count else { return }
            entries.removeFirst(head)
            head = 0
        }
    }

    /// One host's waiting tickets: a FIFO per priority level (``Line``).
    private struct HostQueue {
        var lines = [Line](repeating: Line(), count: SlotScheduler.levelCount)
        var live = 0
    }

    private var hosts: [String: HostQueue] = [:]
    /// How many tickets wait for a slot.
    private(set) var waitingCount = 0
    private var nextSequence: UInt64 = 0
    /// Hosts that asked for a pause (429 or 503 with `Retry-After`), until when (uptime ns).
    private(set) var blockedUntil: [String: UInt64] = [:]

    static var levelCount: Int { 5 }

    init(maximumTotal: Int, maximumPerHost: Int) {
        self.maximumTotal = max(1, maximumTotal)
        self.maximumPerHost = max(1, maximumPerHost)
    }

    /// The tickets that wait for a slot, in no particular order.
    var waitingTickets: [Ticket] {
        hosts.values.flatMap { queue in queue.lines.flatMap { line in line.entries[line.head...].compactMap(\.ticket) } }
    }

    /// Level 0 is `.veryHigh`, 4 is `.veryLow`.
    static func level(of priority: Operation.QueuePriority) -> Int {
        switch priority {
        case .veryHigh: return 0
        case .high: return 1
        case .normal: return 2
        case .low: return 3
        case .veryLow: return 4
        @unknown default: return 2
        }
    }

    mutating func setLimits(total: Int, perHost: Int) {
        maximumTotal = max(1, total)
        maximumPerHost = max(1, perHost)
    }

    /// `host` as the equal string the scheduler already holds, if it holds one: the tickets of
    /// one host then share its storage.
    func interned(_ host: String) -> String {
        if let index = hosts.index(forKey: host) { return hosts[index].key }
        if let index = runningPerHost.index(forKey: host) { return runningPerHost[index].key }
        return host
    }

    /// The place a ticket made now takes at `priority`: at the back of its level, after every
    /// place reserved before. The caller keeps it, to enqueue the ticket there, then withdraw
    /// or raise it.
    mutating func reservePlace(priority: Operation.QueuePriority) -> SlotPlace {
        reservePlace(level: Self.level(of: priority))
    }

    mutating func reservePlace(level: Int) -> SlotPlace {
        defer { nextSequence += 1 }
        return SlotPlace(level: level, sequence: nextSequence)
    }

    /// Puts a ticket in line at the back of its priority level. Returns where it waits.
    @discardableResult
    mutating func enqueue(_ ticket: Ticket, host: String, priority: Operation.QueuePriority) -> SlotPlace {
        let place = reservePlace(priority: priority)
        enqueue(ticket, host: host, at: place)
        return place
    }

    /// Puts a ticket in line at the place reserved for it: in order of the reservations, so a
    /// ticket that took its place earlier but comes later still goes before those that took
    /// theirs after it.
    mutating func enqueue(_ ticket: Ticket, host: String, at place: SlotPlace) {
        waitingCount += 1
        Self.insert((ticket, place.sequence), level: place.level, into: &hosts[host, default: HostQueue()])
    }

    /// One lookup of the host's queue, not one per change.
    private static func insert(_ entry: (ticket: Ticket?, sequence: UInt64), level: Int, into queue: inout HostQueue) {
        queue.lines[level].insert(entry)
        queue.live += 1
    }

    /// Moves the ticket waiting at `place` for `host` up to `level` if that is more urgent than
    /// where it waits (to the back of that level); never moves it down. Returns its new place,
    /// or `nil` if it stays where it is or does not wait there.
    mutating func raise(at place: SlotPlace, host: String, to level: Int) -> SlotPlace? {
        guard level < place.level, let ticket = withdraw(at: place, host: host) else { return nil }
        let raised = reservePlace(level: level)
        enqueue(ticket, host: host, at: raised)
        return raised
    }

    /// Moves the ticket waiting at `place` for `host` to `target` (a place reserved with
    /// ``reservePlace(priority:)``, or one reserved earlier and not in line), up or down.
    /// Returns whether it moved (`false`: it does not wait there).
    @discardableResult
    mutating func move(at place: SlotPlace, host: String, to target: SlotPlace) -> Bool {
        guard place != target, let ticket = withdraw(at: place, host: host) else { return false }
        enqueue(ticket, host: host, at: target)
        return true
    }

    /// Takes the ticket waiting at `place` for `host` out of line. Returns it, or `nil` if it
    /// no longer waits there (granted, or withdrawn already).
    @discardableResult
    mutating func withdraw(at place: SlotPlace, host: String) -> Ticket? {
        guard place.level < Self.levelCount, let index = hosts.index(forKey: host),
              let ticket = hosts.values[index].lines[place.level].take(sequence: place.sequence)
        else { return nil }
        waitingCount -= 1
        leave(index)
        return ticket
    }

    /// One ticket of the host at `index` stopped waiting: a host with none left is dropped, its
    /// stale entries with it.
    private mutating func leave(_ index: [String: HostQueue].Index) {
        hosts.values[index].live -= 1
        if hosts.values[index].live == 0 {
            hosts.remove(at: index)
        }
    }

    /// A granted transfer to `host` ended: its slots are free.
    mutating func release(host: String) {
        running = max(0, running - 1)
        guard let index = runningPerHost.index(forKey: host) else { return }
        if runningPerHost.values[index] > 1 {
            runningPerHost.values[index] -= 1
        } else {
            runningPerHost.remove(at: index)
        }
    }

    /// Holds every transfer to `host` until `deadline` (uptime nanoseconds); a later block wins.
    mutating func block(_ host: String, until deadline: UInt64) {
        blockedUntil[host] = max(blockedUntil[host] ?? 0, deadline)
    }

    /// Lifts a host's pause.
    mutating func unblock(_ host: String) {
        blockedUntil[host] = nil
    }

    /// When the first blocked host that has tickets waiting opens again, if any.
    var nextUnblock: UInt64? {
        guard !blockedUntil.isEmpty else { return nil }
        return blockedUntil.filter { hosts[$0.key] != nil }.values.min()
    }

    /// Grants as many waiting tickets as the limits allow, best first, and counts them running.
    /// Hosts that asked for a pause are skipped until it is over.
    ///
    /// The hosts are walked by index and changed in place: a host's name is hashed only to read
    /// and count its running transfers, not for every step through its lines.
    mutating func takeGrants(now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> [(ticket: Ticket, host: String)] {
        if !blockedUntil.isEmpty {
            blockedUntil = blockedUntil.filter { $0.value > now }
        }
        var grants: [(ticket: Ticket, host: String)] = []
        while !isPaused && running < maximumTotal {
            var best: (index: [String: HostQueue].Index, level: Int, sequence: UInt64)?
            var index = hosts.startIndex
            while index != hosts.endIndex {
                defer { index = hosts.index(after: index) }
                let host = hosts.keys[index]
                guard (runningPerHost[host] ?? 0) < maximumPerHost, blockedUntil.isEmpty || blockedUntil[host] == nil,
                      let head = liveHead(at: index)
                else { continue }
                if let current = best, (current.level, current.sequence) < (head.level, head.sequence) { continue }
                best = (index, head.level, head.sequence)
            }
            guard let best else { break }
            let host = hosts.keys[best.index]
            guard let ticket = hosts.values[best.index].lines[best.level].pop() else { continue }
            waitingCount -= 1
            leave(best.index)
            running += 1
            runningPerHost[host, default: 0] += 1
            grants.append((ticket, host))
        }
        return grants
    }

    /// The best live entry of the host at `index`, dropping emptied entries on the way.
    private mutating func liveHead(at index: [String: HostQueue].Index) -> (level: Int, sequence: UInt64)? {
        for level in 0..<Self.levelCount {
            if let sequence = hosts.values[index].lines[level].liveHead() {
                return (level, sequence)
            }
        }
        return nil
    }
}
