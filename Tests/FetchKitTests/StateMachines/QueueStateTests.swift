import Foundation
import Testing
@testable import FetchKit

/// An attempt as the queue's state sees it: an identifier, a host, a key and a place — a value.
struct StubMember: SlotHolder {
    let id: FetchID
    let host: String
    let key: String?
    let place: SlotPlace

    static func == (lhs: StubMember, rhs: StubMember) -> Bool { lhs.id == rhs.id && lhs.place == rhs.place }
}

/// A flight as the queue's state makes it: its first member and the members it starts with.
struct StubFlight: SlotFlight {
    let first: StubMember
    let members: [StubMember]

    init(first: StubMember, members: [StubMember]) {
        self.first = first
        self.members = members
    }
}

typealias StubState = QueueState<String, StubFlight>

/// The queue's state machine as a value: transitions in, actions out. No lock, no network, no
/// thread, no queue, operation or transfer: each test applies transitions to a `QueueState` of
/// plain values and reads what it asks for.
@Suite("Queue state machine (pure)", .timeLimit(.minutes(3)))
struct QueueStateTests {
    /// A fetch registered in `state`, and its next attempt, made at `priority` (it reserves its
    /// place in line now, as ``FetchQueue/enqueue(_:attach:)`` does).
    func fetch(_ host: String, in state: inout StubState, key: String? = nil,
               priority: Operation.QueuePriority = .normal) -> StubMember {
        let id = FetchID.next()
        state.register("fetch \(id)", id: id)
        return attempt(of: id, host: host, in: &state, key: key, priority: priority)
    }

    func attempt(of id: FetchID, host: String, in state: inout StubState, key: String? = nil,
                 priority: Operation.QueuePriority = .normal) -> StubMember {
        let (interned, place) = state.reservePlace(host: host, priority: priority)
        return StubMember(id: id, host: interned, key: key, place: place)
    }

    func started(_ actions: [QueueAction<StubFlight>]) -> [StubFlight] {
        actions.compactMap { if case .startFlight(let flight) = $0 { flight } else { nil } }
    }

    func confirmed(_ actions: [QueueAction<StubFlight>]) -> [StubMember] {
        actions.compactMap { if case .confirmCancel(let member) = $0 { member } else { nil } }
    }

    func joined(_ actions: [QueueAction<StubFlight>]) -> [(flight: StubFlight, member: StubMember)] {
        actions.compactMap { if case .joinFlight(let flight, let member) = $0 { (flight, member) } else { nil } }
    }

    /// The members whose joining an identical request's flight the monitors hear of.
    func announcedJoins(_ actions: [QueueAction<StubFlight>]) -> [StubMember] {
        actions.compactMap { if case .announceJoin(let member) = $0 { member } else { nil } }
    }

    func left(_ actions: [QueueAction<StubFlight>]) -> [(flight: StubFlight, member: StubMember)] {
        actions.compactMap { if case .leaveFlight(let flight, let member) = $0 { (flight, member) } else { nil } }
    }

    func end(_ flight: StubFlight, _ state: inout StubState, backOff: TimeInterval? = nil) {
        state.flightEnded(flight, backOff: backOff, now: DispatchTime.now().uptimeNanoseconds)
    }

    @Test func aFlightWaitsForItsSlotAndItsEndGrantsTheNext() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let first = fetch("a", in: &state)
        let second = fetch("a", in: &state)
        state.join(first)
        let firstStarts = started(state.takeActions())
        #expect(firstStarts.map(\.first) == [first])
        #expect(firstStarts.first?.members == [first], "a flight that may not be shared has its one member")
        state.join(second)
        #expect(started(state.takeActions()).isEmpty, "the only slot is taken")
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1))
        #expect(state.wantsKeepAlive)

        end(firstStarts[0], &state)
        #expect(started(state.takeActions()).map(\.first) == [second], "the freed slot goes to the next")
        end(firstStarts[0], &state)
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0), "a flight ends once: its slot is freed once")
    }

    @Test func leavingAWaitingAttemptWithdrawsItAndConfirmsTheCancelOnce() {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let running = fetch("a", in: &state)
        let waiting = fetch("a", in: &state)
        state.join(running)
        state.join(waiting)
        _ = state.takeActions()
        state.leave(waiting)
        #expect(confirmed(state.takeActions()) == [waiting])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
        state.leave(waiting)
        #expect(state.takeActions().isEmpty, "a second stop changes nothing")
    }

    @Test func aRunningAttemptLeavesThroughItsFlight() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let member = fetch("a", in: &state)
        state.join(member)
        let flight = try #require(started(state.takeActions()).first)
        state.leave(member)
        let leaving = left(state.takeActions())
        #expect(leaving.map(\.member) == [member], "its flight decides, on its session's queue")
        #expect(leaving.map(\.flight.first) == [member])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0), "the slot is held until the transfer ended")
        end(flight, &state)
        _ = state.takeActions()
        state.leave(member)
        #expect(state.takeActions().isEmpty, "once its flight ended, a late stop goes nowhere")
    }

    @Test func anIdenticalRequestJoinsTheRunningFlightThere() throws {
        var state = StubState(maximumTotal: 2, maximumPerHost: 2, coalesces: true)
        let first = fetch("a", in: &state, key: "same")
        let second = fetch("a", in: &state, key: "same")
        state.join(first)
        let flight = try #require(started(state.takeActions()).first)
        state.join(second)
        let actions = state.takeActions()
        #expect(started(actions).isEmpty, "an identical request does not start a transfer of its own")
        #expect(joined(actions).map(\.member) == [second])
        #expect(joined(actions).map(\.flight.first) == [first])
        #expect(state.statistics.requestsCoalesced == 1)
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))

        state.leave(second)
        #expect(left(state.takeActions()).map(\.member) == [second], "a joiner leaves through the flight it joined")
        end(flight, &state)
        let third = fetch("a", in: &state, key: "same")
        state.join(third)
        #expect(started(state.takeActions()).map(\.first) == [third], "a request never joins a flight that ended")
    }

    /// One slot, taken; behind it two identical shareable requests, joined.
    func twoIdenticalBehindABusySlot(_ state: inout StubState) throws -> (busy: StubFlight, first: StubMember, second: StubMember) {
        let busy = fetch("a", in: &state)
        state.join(busy)
        let busyFlight = try #require(started(state.takeActions()).first)
        let first = fetch("a", in: &state, key: "same")
        let second = fetch("a", in: &state, key: "same")
        state.join(first)
        state.join(second)
        return (busyFlight, first, second)
    }

    @Test func identicalRequestsWaitAsOneFlightAndStartTogether() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let (busyFlight, first, second) = try twoIdenticalBehindABusySlot(&state)
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1), "one transfer waits for both")
        end(busyFlight, &state)
        let flight = try #require(started(state.takeActions()).first)
        #expect(flight.members == [first, second], "the flight starts with every member that joined it waiting")
    }

    @Test func aWaitingSharedFlightWhoseMembersAllLeftIsWithdrawn() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let (busyFlight, first, second) = try twoIdenticalBehindABusySlot(&state)
        state.leave(first)
        #expect(confirmed(state.takeActions()) == [first])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1), "another caller still wants it")
        state.leave(second)
        #expect(confirmed(state.takeActions()) == [second])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
        end(busyFlight, &state)
        #expect(started(state.takeActions()).isEmpty)
    }

    @Test func anAttemptStoppedBeforeItJoinsIsNotTold() {
        // Its handle stops it again once it has joined (`FlightMember.start()`), when the stop
        // finds it.
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let member = fetch("a", in: &state)
        state.leave(member)
        #expect(state.takeActions().isEmpty)
        state.join(member)
        state.leave(member)
        #expect(started(state.takeActions()).count == 1)
    }

    @Test func placesReservedEarlierGoFirstEvenWhenTheyJoinLater() throws {
        // Two attempts made on two threads can join in the other order: the line keeps the
        // order of their places, and each is still found where it waits.
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let busy = fetch("a", in: &state)
        state.join(busy)
        var flight = try #require(started(state.takeActions()).first)
        let members = (0..<4).map { _ in fetch("a", in: &state) }
        for index in [2, 0, 3, 1] { state.join(members[index]) }
        state.leave(members[3])
        #expect(confirmed(state.takeActions()) == [members[3]])
        var order: [StubMember] = []
        for _ in 0..<3 {
            end(flight, &state)
            flight = try #require(started(state.takeActions()).first)
            order.append(flight.first)
        }
        #expect(order == [members[0], members[1], members[2]])
    }

    @Test func aSweepHoldsGrantsAndWithdrawsWhatItChose() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let running = fetch("a", in: &state)
        let chosen = fetch("a", in: &state)
        let spared = fetch("a", in: &state)
        state.join(running)
        state.join(chosen)
        state.join(spared)
        let flight = started(state.takeActions())[0]
        let swept = state.beginSweep()
        #expect(swept.count == 3)
        end(flight, &state)
        #expect(started(state.takeActions()).isEmpty, "nothing is granted while a predicate runs")
        let toCancel = state.endSweep(choosing: [chosen.id])
        #expect(toCancel == ["fetch \(chosen.id)"])
        #expect(started(state.takeActions()).map(\.first) == [spared], "the slot skips the chosen fetch")
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
        // The chosen fetch's cancel stops its attempt, which hears of it once.
        state.leave(chosen)
        #expect(confirmed(state.takeActions()) == [chosen])
        state.leave(chosen)
        #expect(state.takeActions().isEmpty)
    }

    @Test func aSweptFetchThatJoinsLaterGetsNoSlotAndHearsOfItsCancel() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        let member = fetch("a", in: &state)
        _ = state.beginSweep()
        _ = state.endSweep(choosing: [member.id])
        state.join(member)
        #expect(started(state.takeActions()).isEmpty)
        #expect(state.transferCounts == .init(inFlight: 0, waiting: 0))
        state.leave(member)
        #expect(confirmed(state.takeActions()) == [member])
        state.unregister(member.id)
        #expect(state.swept.isEmpty && state.withdrawn.isEmpty, "a finished fetch leaves nothing behind")
    }

    @Test func keepAliveFollowsWorkAndSuspension() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: false)
        #expect(!state.wantsKeepAlive, "an empty queue is its owner's to keep")
        let member = fetch("a", in: &state)
        #expect(state.wantsKeepAlive)
        state.join(member)
        state.changeScheduler { $0.isPaused = true }
        #expect(state.wantsKeepAlive, "a transfer in flight keeps even a suspended queue")
        let flight = started(state.takeActions())[0]
        end(flight, &state)
        #expect(!state.wantsKeepAlive, "suspended with nothing in flight: freed when dropped")
        state.changeScheduler { $0.isPaused = false }
        #expect(state.wantsKeepAlive)
        state.unregister(member.id)
        #expect(state.registry[member.id] == nil)
        #expect(!state.wantsKeepAlive)
        #expect(state.releaseAll().isEmpty)
    }

    @Test func networkActivityGoesOffOnlyAfterTheHideDelayWithNothingStarted() throws {
        var state = StubState(maximumTotal: 2, maximumPerHost: 2, coalesces: false)
        _ = state.activityHandlers.add(Callback(on: .immediate) { _ in })
        let first = fetch("a", in: &state)
        state.join(first)
        let flight = started(state.takeActions())[0]
        #expect(state.isNetworkActive)
        end(flight, &state)
        let hide = state.takeActions().compactMap { if case .hideActivityLater(let generation) = $0 { generation } else { nil } }
        #expect(hide.count == 1)
        // Another transfer starts before the delay passes: the pending hide is stale.
        let second = fetch("a", in: &state)
        state.join(second)
        _ = state.takeActions()
        state.hideActivity(generation: hide[0])
        #expect(state.isNetworkActive)
        #expect(state.takeActions().isEmpty)
    }

    @Test func aRetryAfterPausesTheHostAndSchedulesAWakeUp() throws {
        var state = StubState(maximumTotal: 4, maximumPerHost: 4, coalesces: false)
        let first = fetch("a", in: &state)
        let later = fetch("a", in: &state)
        let other = fetch("b", in: &state)
        state.join(first)
        let flight = started(state.takeActions())[0]
        end(flight, &state, backOff: 30)
        #expect(state.takeActions().allSatisfy { if case .wake = $0 { false } else { true } },
                "no wake-up while nothing waits for the paused host")
        state.join(later)
        state.join(other)
        let actions = state.takeActions()
        #expect(started(actions).map(\.first.host) == ["b"], "the paused host waits; another host does not")
        let wake = actions.compactMap { if case .wake(_, let token) = $0 { token } else { nil } }
        #expect(wake.count == 1, "the queue looks again when the pause ends")
        let fired = state.wakeFired(wake[0])
        let firedAgain = state.wakeFired(wake[0])
        #expect(fired)
        #expect(!firedAgain, "a wake-up counts once")
    }
}
