import Dispatch
import Foundation
import Testing
@testable import FetchKit

/// Re-prioritising waiting fetches, and the priority of a shared flight as its members come and
/// go, in the queue's state machine (pure, on plain values).
@Suite("Queue state machine: priorities after enqueue (pure)", .timeLimit(.minutes(3)))
struct ReprioritizeStateTests {
    let helper = QueueStateTests()

    func level(_ priority: Operation.QueuePriority) -> Int {
        SlotScheduler<StubMember>.level(of: priority)
    }

    /// One slot, taken; then the members joined in order. Returns the busy flight.
    func busySlot(_ state: inout StubState) throws -> StubFlight {
        let busy = helper.fetch("a", in: &state)
        state.join(busy)
        return try #require(helper.started(state.takeActions()).first)
    }

    /// Ends `flight` and each flight after it; returns the first member of each, in grant order.
    func drain(after flight: StubFlight, _ state: inout StubState, count: Int) throws -> [StubMember] {
        var flight = flight
        var order: [StubMember] = []
        for _ in 0..<count {
            helper.end(flight, &state)
            flight = try #require(helper.started(state.takeActions()).first)
            order.append(flight.first)
        }
        return order
    }

    @Test func aSharedFlightFallsBackWhenTheMemberThatRaisedItLeaves() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let busy = try busySlot(&state)
        let lowShared = helper.fetch("a", in: &state, key: "/shared", priority: .low)
        let normal = helper.fetch("a", in: &state)
        state.join(lowShared)
        state.join(normal)
        let urgent = helper.fetch("a", in: &state, key: "/shared", priority: .veryHigh)
        state.join(urgent)          // raises the shared flight above `normal`
        state.leave(urgent)         // ... and leaves (cancelled, or paused)
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 2)
        #expect(order == [normal, lowShared], "the flight is back at .low, behind .normal")
    }

    /// How the member that raised a shared flight stops raising it. A cancel and a pause are
    /// one transition here (the attempt leaves); the queue's loopback tests tell them apart.
    enum Leaving: String, CaseIterable, Sendable { case cancelled, paused, lowered }

    /// Ends `flight` and each flight after it; returns the flights, in grant order.
    func drainFlights(after flight: StubFlight, _ state: inout StubState, count: Int) throws -> [StubFlight] {
        var flight = flight
        var flights: [StubFlight] = []
        for _ in 0..<count {
            helper.end(flight, &state)
            flight = try #require(helper.started(state.takeActions()).first)
            flights.append(flight)
        }
        return flights
    }

    /// The urgent member made the flight (its attempt is what waits in line) and the joiners
    /// wait at `.normal`, behind a `.normal` fetch that took its place before them.
    @Test(arguments: Leaving.allCases)
    func aSharedFlightFallsBackWhenTheUrgentMemberThatMadeItLeaves(_ how: Leaving) throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let busy = try busySlot(&state)
        let urgent = helper.fetch("a", in: &state, key: "/shared", priority: .veryHigh)
        let normal = helper.fetch("a", in: &state)
        let joiners = [helper.fetch("a", in: &state, key: "/shared"), helper.fetch("a", in: &state, key: "/shared")]
        state.join(urgent)          // makes the flight, at .veryHigh
        state.join(normal)
        for joiner in joiners { state.join(joiner) }
        #expect(helper.announcedJoins(state.takeActions()) == joiners, "the monitors hear of each joiner")
        switch how {
        case .cancelled, .paused:
            state.leave(urgent)
            #expect(helper.confirmed(state.takeActions()) == [urgent])
        case .lowered:
            state.reprioritize(urgent.id, attempt: urgent, to: level(.low))
            _ = state.takeActions()
        }
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 2))
        let flights = try drainFlights(after: busy, &state, count: 2)
        #expect(flights.map(\.first) == [normal, urgent], "the flight is back at .normal, behind `normal`")
        #expect(flights.last?.members == (how == .lowered ? [urgent] + joiners : joiners))
    }

    /// A flight whose first member left keeps that member's place as its ticket; that member's
    /// fetch (paused, then resumed) may run its next attempt in a flight of its own meanwhile
    /// (here its request changed — a refreshed credential — so it cannot join): each flight
    /// frees its own slot, and a cancel reaches the attempt's own flight.
    @Test func aFlightWhoseFirstMemberLeftIsNotMistakenForThatFetchsNextFlight() throws {
        var state = StubState(maximumTotal: 2, maximumPerHost: 2, coalesces: true)
        let busy = try busySlot(&state)
        let otherBusy = helper.fetch("a", in: &state)
        state.join(otherBusy)
        let secondSlot = try #require(helper.started(state.takeActions()).first)
        let creator = helper.fetch("a", in: &state, key: "/shared")
        let joiner = helper.fetch("a", in: &state, key: "/shared")
        state.join(creator)
        state.join(joiner)
        state.leave(creator)        // paused: the flight waits on, for the joiner
        _ = state.takeActions()
        helper.end(busy, &state)
        let shared = try #require(helper.started(state.takeActions()).first)
        #expect(shared.first == creator && shared.members == [joiner])

        let next = helper.attempt(of: creator.id, host: "a", in: &state, key: "/shared, new credential")
        state.join(next)            // resumed: its own flight, once a slot is free
        helper.end(secondSlot, &state)
        let own = try #require(helper.started(state.takeActions()).first)
        #expect(own.first == next)
        #expect(state.transferCounts == .init(inFlight: 2, waiting: 0))

        helper.end(shared, &state)
        _ = state.takeActions()
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0), "the shared flight's end freed its slot only")
        state.leave(next)           // cancelled: its own flight stops
        #expect(helper.left(state.takeActions()).map(\.flight.first) == [next])
        helper.end(own, &state)
        _ = state.takeActions()
        #expect(state.transferCounts == .init(inFlight: 0, waiting: 0), "both slots are free")
        #expect(state.running.isEmpty)
        let later = helper.fetch("a", in: &state)
        state.join(later)
        #expect(helper.started(state.takeActions()).map(\.first) == [later])
    }

    /// A paused fetch keeps its place in line, as aria2 keeps a paused download's: resumed, it
    /// waits where it waited, not behind the fetches enqueued after it.
    @Test func aResumedFetchWaitsAtItsPlaceNotBehindThoseEnqueuedAfterIt() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let waiting = (0..<3).map { _ in helper.fetch("a", in: &state) }
        for member in waiting { state.join(member) }
        state.leave(waiting[0])                     // paused while it waits
        #expect(helper.confirmed(state.takeActions()) == [waiting[0]])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 2))
        var resumed = helper.attempt(of: waiting[0].id, host: "a", in: &state)   // made at the back
        state.join(resumed)
        // Paused again, it is taken out of its place (beside the emptied entry it left there) …
        state.leave(resumed)
        #expect(helper.confirmed(state.takeActions()) == [resumed])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 2))
        // … and resumed, it takes it again.
        resumed = helper.attempt(of: waiting[0].id, host: "a", in: &state)
        state.join(resumed)
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 3)
        #expect(order == [resumed, waiting[1], waiting[2]])
    }

    /// One paused while it runs goes back before the fetches enqueued after it (aria2 puts it at
    /// the front of its waiting line), and keeps that place when paused again.
    @Test func aFetchPausedWhileItRunsIsResumedBeforeThoseEnqueuedAfterIt() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let running = helper.fetch("a", in: &state)
        state.join(running)
        var flight = try #require(helper.started(state.takeActions()).first)
        let later = (0..<3).map { _ in helper.fetch("a", in: &state) }
        for member in later { state.join(member) }
        for round in 0..<2 {
            // Paused while it runs: its flight stops and ends; the next takes the slot.
            state.leave(flight.first)
            #expect(helper.left(state.takeActions()).map(\.member) == [flight.first])
            helper.end(flight, &state)
            let next = try #require(helper.started(state.takeActions()).first)
            #expect(next.first == later[round])
            let resumed = helper.attempt(of: running.id, host: "a", in: &state)
            state.join(resumed)
            helper.end(next, &state)
            flight = try #require(helper.started(state.takeActions()).first)
            #expect(flight.first == resumed, "round \(round): ahead of those enqueued after it")
        }
        let rest = try drain(after: flight, &state, count: 1)
        #expect(rest == [later[2]])
    }

    @Test func aFetchRepriorisedWhilePausedWaitsAtTheBackOfItsNewLevel() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let paused = helper.fetch("a", in: &state)
        let high = helper.fetch("a", in: &state, priority: .high)
        let normal = helper.fetch("a", in: &state)
        for member in [paused, high, normal] { state.join(member) }
        state.leave(paused)
        state.reprioritize(paused.id, attempt: nil, to: level(.high))
        let resumed = helper.attempt(of: paused.id, host: "a", in: &state)
        state.join(resumed)
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 3)
        #expect(order == [high, resumed, normal], "at .high, behind the one already there")
        state.unregister(paused.id)
        #expect(state.homes.isEmpty, "nothing kept for a finished fetch")
    }

    /// Its own priority again, set while it is paused, is nothing: it keeps its place (it
    /// once went to the back of its line, as if the priority had changed).
    @Test func aFetchGivenItsOwnPriorityWhilePausedKeepsItsPlace() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let paused = helper.fetch("a", in: &state)
        let later = helper.fetch("a", in: &state)
        let raised = helper.fetch("a", in: &state, priority: .high)
        for member in [paused, later, raised] { state.join(member) }
        state.leave(paused)
        state.reprioritize(paused.id, attempt: nil, to: level(.normal))
        state.leave(raised)
        state.reprioritize(raised.id, attempt: nil, to: level(.high))
        let resumed = helper.attempt(of: paused.id, host: "a", in: &state)
        let resumedRaised = helper.attempt(of: raised.id, host: "a", in: &state, priority: .high)
        state.join(resumed)
        state.join(resumedRaised)
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 3)
        #expect(order == [resumedRaised, resumed, later], "both where they waited")
    }

    @Test func aSharedFlightKeepsItsPlaceWhenALeaverDidNotSetItsPriority() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let busy = try busySlot(&state)
        let first = helper.fetch("a", in: &state, key: "/shared")
        let other = helper.fetch("a", in: &state)
        let joiner = helper.fetch("a", in: &state, key: "/shared")
        state.join(first)
        state.join(other)
        state.join(joiner)
        state.leave(first)          // the same level is left: it keeps its place, before `other`
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 2)
        #expect(order == [first, other])
    }

    @Test func aWaitingFetchMovesUpAndDown() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let waiting = (0..<4).map { _ in helper.fetch("a", in: &state) }
        for member in waiting { state.join(member) }
        state.reprioritize(waiting[3].id, attempt: waiting[3], to: level(.high))    // last → first
        state.reprioritize(waiting[0].id, attempt: waiting[0], to: level(.low))     // first → last
        state.reprioritize(waiting[1].id, attempt: waiting[1], to: level(.normal))  // the same: stays
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 4))
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 4)
        #expect(order == [waiting[3], waiting[1], waiting[2], waiting[0]])
    }

    /// The queue may be asked before the operation holds its attempt (between the join and the
    /// attach): the waiting member is found by its fetch's identifier. Before, it kept its
    /// place, and `theServerSeesTheNewOrderWithOneSlot` saw [c, b, d, a] once under load.
    @Test func aWaitingFetchMovesWhenItsAttemptIsNotYetHeld() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let waiting = (0..<4).map { _ in helper.fetch("a", in: &state) }
        for member in waiting { state.join(member) }
        state.reprioritize(waiting[3].id, attempt: nil, to: level(.veryHigh))
        state.reprioritize(waiting[0].id, attempt: nil, to: level(.low))
        state.reprioritize(waiting[2].id, attempt: nil, to: level(.high))
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 4)
        #expect(order == [waiting[3], waiting[2], waiting[1], waiting[0]])
    }

    @Test func aMovedFetchThatLeavesIsWithdrawnFromItsNewPlace() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let moved = helper.fetch("a", in: &state)
        let other = helper.fetch("a", in: &state)
        state.join(moved)
        state.join(other)
        state.reprioritize(moved.id, attempt: moved, to: level(.veryLow))
        state.leave(moved)
        #expect(helper.confirmed(state.takeActions()) == [moved], "withdrawn from where it waits now")
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1))
        #expect(state.relocated.isEmpty)
        helper.end(busy, &state)
        #expect(helper.started(state.takeActions()).map(\.first) == [other])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
    }

    @Test func anAttemptMadeAfterARepriorisationWaitsAtTheNewLevel() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let other = helper.fetch("a", in: &state)
        state.join(other)
        let id = FetchID.next()
        state.register("later", id: id)
        // Re-prioritised while it had no attempt (paused, or between retries) …
        state.reprioritize(id, attempt: nil, to: level(.veryHigh))
        // … its next attempt, made at its old priority before the change reached it, waits at the new one.
        let attempt = helper.attempt(of: id, host: "a", in: &state)
        state.join(attempt)
        _ = state.takeActions()
        let order = try drain(after: busy, &state, count: 2)
        #expect(order == [attempt, other])
        #expect(state.relocated.isEmpty, "nothing kept for a granted attempt")
    }

    @Test func loweringTheMostUrgentMemberLowersTheSharedFlight() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let busy = try busySlot(&state)
        let shared = helper.fetch("a", in: &state, key: "/s", priority: .high)
        let joiner = helper.fetch("a", in: &state, key: "/s", priority: .low)
        let normal = helper.fetch("a", in: &state)
        state.join(shared)
        state.join(joiner)
        state.join(normal)
        state.reprioritize(shared.id, attempt: shared, to: level(.veryLow))
        _ = state.takeActions()
        var order = try drain(after: busy, &state, count: 2)
        #expect(order == [normal, shared], "the flight waits at its most urgent member's level, .low")

        // Raising a joiner raises its flight.
        var raised = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let busy2 = try busySlot(&raised)
        let s = helper.fetch("a", in: &raised, key: "/s", priority: .low)
        let n = helper.fetch("a", in: &raised)
        let j = helper.fetch("a", in: &raised, key: "/s", priority: .low)
        raised.join(s)
        raised.join(n)
        raised.join(j)
        raised.reprioritize(j.id, attempt: j, to: level(.veryHigh))
        _ = raised.takeActions()
        order = try drain(after: busy2, &raised, count: 2)
        #expect(order == [s, n])
    }

    @Test func heldGrantsStartNothingUntilReleased() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = try busySlot(&state)
        let waiting = helper.fetch("a", in: &state)
        state.join(waiting)
        state.holdGrants()
        helper.end(busy, &state)
        #expect(helper.started(state.takeActions()).isEmpty, "a pauseAll is under way")
        state.releaseGrants()
        #expect(helper.started(state.takeActions()).map(\.first) == [waiting])
    }
}
