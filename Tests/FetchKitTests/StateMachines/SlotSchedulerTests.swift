import Foundation
import Testing
@testable import FetchKit

@Suite("Slot scheduler (pure)", .timeLimit(.minutes(3)))
struct SlotSchedulerTests {
    typealias Scheduler = BookedScheduler<Int>

    @Test func grantsUpToTheOverallLimit() {
        var scheduler = Scheduler(maximumTotal: 2, maximumPerHost: 10)
        for ticket in 0..<5 { scheduler.enqueue(ticket, host: "h\(ticket)", priority: .normal) }
        #expect(scheduler.takeGrants().map(\.ticket) == [0, 1])
        #expect(scheduler.running == 2)
        #expect(scheduler.waitingCount == 3)
        #expect(scheduler.takeGrants().isEmpty)
        scheduler.release(host: "h0")
        #expect(scheduler.takeGrants().map(\.ticket) == [2])
    }

    @Test func enforcesThePerHostLimitWithoutBlockingOtherHosts() {
        var scheduler = Scheduler(maximumTotal: 10, maximumPerHost: 2)
        for ticket in 0..<5 { scheduler.enqueue(ticket, host: "a", priority: .normal) }
        for ticket in 5..<7 { scheduler.enqueue(ticket, host: "b", priority: .normal) }
        let grants = scheduler.takeGrants()
        #expect(grants.map(\.ticket) == [0, 1, 5, 6], "b is not held up behind a's queue")
        #expect(scheduler.runningPerHost == ["a": 2, "b": 2])
        scheduler.release(host: "b")
        #expect(scheduler.takeGrants().isEmpty, "b has nobody waiting; a is at its limit")
        scheduler.release(host: "a")
        #expect(scheduler.takeGrants().map(\.ticket) == [2])
    }

    @Test func higherPriorityFirstThenFirstComeFirstServed() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 1)
        scheduler.enqueue(1, host: "h", priority: .low)
        scheduler.enqueue(2, host: "h", priority: .normal)
        scheduler.enqueue(3, host: "h", priority: .veryHigh)
        scheduler.enqueue(4, host: "h", priority: .normal)
        scheduler.enqueue(5, host: "h", priority: .high)
        scheduler.enqueue(6, host: "h", priority: .veryLow)
        var order: [Int] = []
        while scheduler.waitingCount > 0 {
            let grants = scheduler.takeGrants()
            order += grants.map(\.ticket)
            for grant in grants { scheduler.release(host: grant.host) }
        }
        #expect(order == [3, 5, 2, 4, 1, 6])
    }

    @Test func priorityAppliesAcrossHosts() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 5)
        scheduler.enqueue(1, host: "a", priority: .normal)
        scheduler.enqueue(2, host: "b", priority: .high)
        #expect(scheduler.takeGrants().map(\.ticket) == [2])
    }

    @Test func withdrawnTicketsAreSkippedAndUncounted() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 1)
        for ticket in 0..<4 { scheduler.enqueue(ticket, host: "h", priority: .normal) }
        let first = scheduler.withdraw(0)
        let second = scheduler.withdraw(2)
        let again = scheduler.withdraw(2)
        #expect(first && second)
        #expect(!again, "withdrawing twice is harmless")
        #expect(scheduler.waitingCount == 2)
        #expect(scheduler.takeGrants().map(\.ticket) == [1])
        let granted = scheduler.withdraw(1)
        #expect(!granted, "a granted ticket is no longer waiting")
        scheduler.release(host: "h")
        #expect(scheduler.takeGrants().map(\.ticket) == [3])
    }

    @Test func raisingMovesATicketUpButNeverDown() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 1)
        scheduler.enqueue(1, host: "h", priority: .normal)
        scheduler.enqueue(2, host: "h", priority: .high)
        scheduler.raise(1, to: .veryHigh)       // up: ahead of 2
        scheduler.enqueue(3, host: "h", priority: .veryHigh)
        scheduler.raise(1, to: .high)           // less urgent than where it waits: no move
        scheduler.raise(3, to: .veryHigh)       // the same level: keeps its place
        scheduler.raise(9, to: .veryHigh)       // not waiting: ignored
        #expect(scheduler.waitingCount == 3)
        var order: [Int] = []
        while scheduler.waitingCount > 0 {
            let grants = scheduler.takeGrants()
            order += grants.map(\.ticket)
            for grant in grants { scheduler.release(host: grant.host) }
        }
        #expect(order == [1, 3, 2])
    }

    @Test func movingATicketTakesItUpOrDownToTheBackOfItsNewLevel() {
        var scheduler = SlotScheduler<Int>(maximumTotal: 1, maximumPerHost: 1)
        let one = scheduler.enqueue(1, host: "h", priority: .normal)
        let two = scheduler.enqueue(2, host: "h", priority: .normal)
        scheduler.enqueue(3, host: "h", priority: .normal)
        let veryLow = scheduler.reservePlace(priority: .veryLow)
        let high = scheduler.reservePlace(priority: .high)
        let again = scheduler.reservePlace(priority: .high)
        let r1 = scheduler.move(at: one, host: "h", to: veryLow)
        #expect(r1)    // down: last
        let r2 = scheduler.move(at: two, host: "h", to: high)
        #expect(r2)        // up: first
        let r3 = scheduler.move(at: one, host: "h", to: again)
        #expect(!r3, "not waiting there any more")
        #expect(scheduler.waitingCount == 3)
        var order: [Int] = []
        while scheduler.waitingCount > 0 {
            let grants = scheduler.takeGrants()
            order += grants.map(\.ticket)
            for grant in grants { scheduler.release(host: grant.host) }
        }
        #expect(order == [2, 3, 1])
    }

    @Test func reEnqueueingMovesATicketToItsNewPriority() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 1)
        scheduler.enqueue(1, host: "h", priority: .normal)
        scheduler.enqueue(2, host: "h", priority: .normal)
        scheduler.enqueue(2, host: "h", priority: .veryHigh)
        #expect(scheduler.waitingCount == 2)
        #expect(scheduler.takeGrants().map(\.ticket) == [2])
    }

    @Test func raisingTheLimitGrantsMoreAtOnce() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 10)
        for ticket in 0..<4 { scheduler.enqueue(ticket, host: "h", priority: .normal) }
        #expect(scheduler.takeGrants().count == 1)
        scheduler.setLimits(total: 3, perHost: 10)
        #expect(scheduler.takeGrants().map(\.ticket) == [1, 2])
        scheduler.setLimits(total: 1, perHost: 10)
        scheduler.release(host: "h")
        #expect(scheduler.takeGrants().isEmpty, "two still run against a limit of one")
    }

    @Test func pausedGrantsNothing() {
        var scheduler = Scheduler(maximumTotal: 4, maximumPerHost: 4)
        scheduler.isPaused = true
        scheduler.enqueue(1, host: "h", priority: .normal)
        #expect(scheduler.takeGrants().isEmpty)
        scheduler.isPaused = false
        #expect(scheduler.takeGrants().map(\.ticket) == [1])
    }

    @Test func aPausedHostIsSkippedUntilItsPauseEnds() {
        var scheduler = Scheduler(maximumTotal: 4, maximumPerHost: 4)
        scheduler.block("a", until: 1_000)
        scheduler.enqueue(1, host: "a", priority: .veryHigh)
        scheduler.enqueue(2, host: "b", priority: .low)
        #expect(scheduler.takeGrants(now: 500).map(\.ticket) == [2], "only the host that is not paused")
        #expect(scheduler.nextUnblock == 1_000)
        #expect(scheduler.takeGrants(now: 999).isEmpty)
        #expect(scheduler.takeGrants(now: 1_000).map(\.ticket) == [1], "the pause is over")
        #expect(scheduler.blockedUntil.isEmpty)
    }

    @Test func aLaterPauseWinsAndUnblockEndsIt() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 1)
        scheduler.block("a", until: 2_000)
        scheduler.block("a", until: 1_000)
        #expect(scheduler.blockedUntil["a"] == 2_000)
        scheduler.enqueue(1, host: "a", priority: .normal)
        #expect(scheduler.takeGrants(now: 1_500).isEmpty)
        scheduler.unblock("a")
        #expect(scheduler.takeGrants(now: 1_500).map(\.ticket) == [1])
        #expect(scheduler.nextUnblock == nil)
    }

    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: a value's arithmetic on one thread, 200,000 operations (4 s of CI's time)"))
    func manyWithdrawalsStayCheap() {
        var scheduler = Scheduler(maximumTotal: 1, maximumPerHost: 1)
        for ticket in 0..<100_000 { scheduler.enqueue(ticket, host: "h", priority: .normal) }
        for ticket in 0..<99_999 { scheduler.withdraw(ticket) }
        #expect(scheduler.waitingCount == 1)
        #expect(scheduler.takeGrants().map(\.ticket) == [99_999])
        #expect(scheduler.waitingCount == 0)
    }

    /// A ticket held by identity, to see whether the scheduler still holds it.
    final class Held: Hashable, Sendable {
        static func == (lhs: Held, rhs: Held) -> Bool { lhs === rhs }
        func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    }

    @Test func grantedAndWithdrawnTicketsAreNotKeptAlive() {
        var scheduler = BookedScheduler<Held>(maximumTotal: 1, maximumPerHost: 1)
        var tickets = (0..<4).map { _ in Held() }
        for ticket in tickets { scheduler.enqueue(ticket, host: "h", priority: .normal) }
        weak let granted = tickets[0]
        weak let withdrawn = tickets[1]
        #expect(scheduler.takeGrants().map(\.ticket) == [tickets[0]])
        scheduler.withdraw(tickets[1])
        scheduler.release(host: "h")
        #expect(scheduler.takeGrants().map(\.ticket) == [tickets[2]], "the withdrawn ticket is skipped")
        tickets = []
        #expect(granted == nil, "a granted ticket is its owner's, not the scheduler's")
        #expect(withdrawn == nil, "a withdrawn ticket passed in line is dropped")
        #expect(scheduler.waitingCount == 1)
    }

    @Test func aTicketWithdrawnBehindOthersIsLetGoAtOnce() {
        // A cancelled fetch queued behind many others is not kept until its line reaches it.
        var scheduler = BookedScheduler<Held>(maximumTotal: 1, maximumPerHost: 1)
        let first = Held()
        scheduler.enqueue(first, host: "h", priority: .normal)
        var behind = (0..<40).map { _ in Held() }
        for ticket in behind { scheduler.enqueue(ticket, host: "h", priority: .normal) }
        weak let withdrawn = behind[20]
        weak let raised = behind[30]
        scheduler.withdraw(behind[20])
        scheduler.raise(behind[30], to: .high)     // its old place is let go too
        let last = behind[39]
        let raisedTicket = behind[30]
        behind = []
        #expect(withdrawn == nil)
        #expect(raised != nil, "still waiting, at its new level")
        #expect(scheduler.waitingCount == 40)
        #expect(scheduler.takeGrants().map(\.ticket) == [raisedTicket], "the raised ticket goes first")
        _ = (first, last)
    }
}

/// A ``SlotScheduler`` and the places of its tickets, kept as its callers keep them (the queue
/// keeps each on its member): the tests name tickets, not places.
@dynamicMemberLookup
struct BookedScheduler<Ticket: Hashable & Sendable> {
    private var scheduler: SlotScheduler<Ticket>
    private var places: [Ticket: SlotPlace] = [:]
    private var hosts: [Ticket: String] = [:]

    init(maximumTotal: Int, maximumPerHost: Int) {
        scheduler = SlotScheduler(maximumTotal: maximumTotal, maximumPerHost: maximumPerHost)
    }

    subscript<Value>(dynamicMember keyPath: KeyPath<SlotScheduler<Ticket>, Value>) -> Value {
        scheduler[keyPath: keyPath]
    }

    var isPaused: Bool {
        get { scheduler.isPaused }
        set { scheduler.isPaused = newValue }
    }

    /// Puts a ticket in line; a ticket already waiting is moved to the new priority.
    mutating func enqueue(_ ticket: Ticket, host: String, priority: Operation.QueuePriority) {
        withdraw(ticket)
        places[ticket] = scheduler.enqueue(ticket, host: host, priority: priority)
        hosts[ticket] = host
    }

    @discardableResult
    mutating func withdraw(_ ticket: Ticket) -> Bool {
        guard let place = places.removeValue(forKey: ticket), let host = hosts.removeValue(forKey: ticket) else { return false }
        return scheduler.withdraw(at: place, host: host) != nil
    }

    mutating func raise(_ ticket: Ticket, to priority: Operation.QueuePriority) {
        guard let place = places[ticket], let host = hosts[ticket],
              let raised = scheduler.raise(at: place, host: host, to: SlotScheduler<Ticket>.level(of: priority))
        else { return }
        places[ticket] = raised
    }

    mutating func takeGrants(now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> [(ticket: Ticket, host: String)] {
        let grants = scheduler.takeGrants(now: now)
        for grant in grants {
            places[grant.ticket] = nil
            hosts[grant.ticket] = nil
        }
        return grants
    }

    mutating func release(host: String) { scheduler.release(host: host) }
    mutating func setLimits(total: Int, perHost: Int) { scheduler.setLimits(total: total, perHost: perHost) }
    mutating func block(_ host: String, until deadline: UInt64) { scheduler.block(host, until: deadline) }
    mutating func unblock(_ host: String) { scheduler.unblock(host) }
}

@Suite("Slot scheduler places (pure)", .timeLimit(.minutes(3)))
struct SlotSchedulerPlaceTests {
    @Test func aPlaceWithdrawsOnlyTheTicketStillWaitingThere() {
        var scheduler = SlotScheduler<Int>(maximumTotal: 1, maximumPerHost: 1)
        let first = scheduler.enqueue(1, host: "h", priority: .normal)
        let second = scheduler.enqueue(2, host: "h", priority: .normal)
        #expect(scheduler.takeGrants().map(\.ticket) == [1])
        #expect(scheduler.withdraw(at: first, host: "h") == nil, "granted: no longer waits there")
        #expect(scheduler.withdraw(at: second, host: "other") == nil, "the place is in its host's line")
        #expect(scheduler.withdraw(at: .none, host: "h") == nil, "never enqueued")
        #expect(scheduler.waitingCount == 1)
        #expect(scheduler.withdraw(at: second, host: "h") == 2)
        #expect(scheduler.withdraw(at: second, host: "h") == nil, "withdrawn once")
        #expect(scheduler.waitingCount == 0)
        #expect(scheduler.waitingTickets.isEmpty)
    }

    @Test func aRaisedTicketGetsANewPlaceAndItsOldOneIsEmpty() {
        var scheduler = SlotScheduler<Int>(maximumTotal: 1, maximumPerHost: 1)
        let low = scheduler.enqueue(1, host: "h", priority: .low)
        _ = scheduler.enqueue(2, host: "h", priority: .normal)
        #expect(scheduler.raise(at: low, host: "h", to: SlotScheduler<Int>.level(of: .veryLow)) == nil, "never down")
        let raised = scheduler.raise(at: low, host: "h", to: SlotScheduler<Int>.level(of: .high))
        #expect(raised != nil && raised != low)
        #expect(scheduler.withdraw(at: low, host: "h") == nil)
        #expect(scheduler.waitingTickets.sorted() == [1, 2])
        #expect(scheduler.takeGrants().map(\.ticket) == [1])
    }
}
