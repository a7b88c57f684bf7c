import Dispatch
import Foundation

/// Decides which waiting transfer starts next, under an overall limit and a per-host limit.
///
/// A pure value, like the lifecycle state machine: events in (enqueue, withdraw, release,
/// limit changes), grants out. The queue that owns it applies one event under its lock and
/// starts the granted transfers after unlocking.
///
/// Order: the highest `Operation.QueuePriority` first, first come first served within a
/// priority — among hosts that have a free slot. A host at its limit never blocks another
/// host's transfers (no head-of-line blocking). Withdrawing is O(1): the ticket is forgotten
/// and its queue entry skipped when reached.
struct SlotScheduler<Ticket: Hashable & Sendable>: Sendable {
    private(set) var maximumTotal: Int
    private(set) var maximumPerHost: Int
    private(set) var running = 0
    private(set) var runningPerHost: [String: Int] = [:]
    /// While paused, nothing is granted; releases still count.
    var isPaused = false

    /// A waiting ticket's host, level and place in line: three words, not four (tens of
    /// thousands may wait), the level in the top byte of the sequence's word.
    private struct Waiting {
        let host: String
        private let packed: UInt64

        init(host: String, level: Int, sequence: UInt64) {
            self.host = host
            packed = UInt64(level) << 56 | (sequence & Self.sequenceMask)
        }

        var level: Int { Int(packed >> 56) }
        /// Its place in line; unique (2⁵⁶ tickets would take centuries to enqueue).
        var sequence: UInt64 { packed & Self.sequenceMask }

        private static var sequenceMask: UInt64 { (1 << 56) - 1 }
    }

    /// One host's waiting tickets: a FIFO per priority level, with stale entries left behind
    /// by withdrawals.
    private struct HostQueue {
        var levels = [[(ticket: Ticket, sequence: UInt64)]](repeating: [], count: SlotScheduler.levelCount)
        var heads = [Int](repeating: 0, count: SlotScheduler.levelCount)
        var live = 0
    }

    private var hosts: [String: HostQueue] = [:]
    private var waiting: [Ticket: Waiting] = [:]
    private var nextSequence: UInt64 = 0
    /// Hosts that asked for a pause (429 or 503 with `Retry-After`), until when (uptime ns).
    private(set) var blockedUntil: [String: UInt64] = [:]

    static var levelCount: Int { 5 }

    init(maximumTotal: Int, maximumPerHost: Int) {
        self.maximumTotal = max(1, maximumTotal)
        self.maximumPerHost = max(1, maximumPerHost)
    }

    /// How many tickets wait for a slot.
    var waitingCount: Int { waiting.count }

    /// The tickets that wait for a slot, in no particular order.
    var waitingTickets: [Ticket] { Array(waiting.keys) }

    /// Level 0 is `.veryHigh`, 4 is `.veryLow`.
    private static func level(of priority: Operation.QueuePriority) -> Int {
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

    /// Puts a ticket in line. A ticket already waiting is moved to the new priority.
    mutating func enqueue(_ ticket: Ticket, host: String, priority: Operation.QueuePriority) {
        if waiting[ticket] != nil { _ = withdraw(ticket) }
        let level = Self.level(of: priority)
        let sequence = nextSequence
        nextSequence += 1
        waiting[ticket] = Waiting(host: host, level: level, sequence: sequence)
        hosts[host, default: HostQueue()].levels[level].append((ticket, sequence))
        hosts[host]!.live += 1
    }

    /// Moves a waiting ticket up to `priority` if that is more urgent than where it waits (to
    /// the back of that level); never moves it down. A ticket not waiting is left alone.
    mutating func raise(_ ticket: Ticket, to priority: Operation.QueuePriority) {
        guard let entry = waiting[ticket], Self.level(of: priority) < entry.level else { return }
        enqueue(ticket, host: entry.host, priority: priority)
    }

    /// Takes a ticket out of line. Returns `false` if it was not waiting (granted, or unknown).
    @discardableResult
    mutating func withdraw(_ ticket: Ticket) -> Bool {
        guard let entry = waiting.removeValue(forKey: ticket) else { return false }
        hosts[entry.host]!.live -= 1
        if hosts[entry.host]!.live == 0 {
            hosts[entry.host] = nil     // drops the stale entries with it
        }
        return true
    }

    /// A granted transfer to `host` ended: its slots are free.
    mutating func release(host: String) {
        running = max(0, running - 1)
        let remaining = (runningPerHost[host] ?? 1) - 1
        runningPerHost[host] = remaining > 0 ? remaining : nil
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
        blockedUntil.filter { hosts[$0.key] != nil }.values.min()
    }

    /// Grants as many waiting tickets as the limits allow, best first, and counts them running.
    /// Hosts that asked for a pause are skipped until it is over.
    mutating func takeGrants(now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> [(ticket: Ticket, host: String)] {
        blockedUntil = blockedUntil.filter { $0.value > now }
        var grants: [(ticket: Ticket, host: String)] = []
        while !isPaused && running < maximumTotal {
            var best: (host: String, level: Int, sequence: UInt64)?
            for host in Array(hosts.keys) where (runningPerHost[host] ?? 0) < maximumPerHost && blockedUntil[host] == nil {
                guard let head = liveHead(of: host) else { continue }
                if best == nil || (head.level, head.sequence) < (best!.level, best!.sequence) {
                    best = (host, head.level, head.sequence)
                }
            }
            guard let best else { break }
            let ticket = popHead(of: best.host, level: best.level)
            withdraw(ticket)
            running += 1
            runningPerHost[best.host, default: 0] += 1
            grants.append((ticket, best.host))
        }
        return grants
    }

    /// The best live entry of a host, dropping stale entries on the way.
    private mutating func liveHead(of host: String) -> (level: Int, sequence: UInt64)? {
        for level in 0..<Self.levelCount {
            while hosts[host]!.heads[level] < hosts[host]!.levels[level].count {
                let entry = hosts[host]!.levels[level][hosts[host]!.heads[level]]
                if waiting[entry.ticket]?.sequence == entry.sequence {
                    return (level, entry.sequence)
                }
                hosts[host]!.heads[level] += 1
            }
            compact(host: host, level: level)
        }
        return nil
    }

    private mutating func popHead(of host: String, level: Int) -> Ticket {
        let ticket = hosts[host]!.levels[level][hosts[host]!.heads[level]].ticket
        hosts[host]!.heads[level] += 1
        compact(host: host, level: level)
        return ticket
    }

    /// Frees consumed entries once they make up half a level's storage.
    private mutating func compact(host: String, level: Int) {
        let head = hosts[host]!.heads[level]
        guard head > 32, head * 2 >= hosts[host]!.levels[level].count else { return }
        hosts[host]!.levels[level].removeFirst(head)
        hosts[host]!.heads[level] = 0
    }
}
