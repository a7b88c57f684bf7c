import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import FetchKit

/// The queue's state machine as a value: transitions in, actions out. No lock, no network, no
/// thread: each test applies transitions to a `QueueState` and reads what it asks for.
@Suite("Queue state machine (pure)", .timeLimit(.minutes(3)))
struct QueueStateTests {
    /// The queue the flights name (only as their identity's home: transitions never call it).
    let queue = FetchQueue(name: "pure")
    static let limits = TransferLimits(idleTimeout: 30, maximumResponseSize: 1 << 20, acceptableStatusCodes: [200])

    /// A fetch registered in `state`, and the handle of its first attempt.
    func fetch(_ url: String, in state: inout QueueState, shareable: Bool = false) -> (FetchID, FlightMember) {
        let operation = FetchOperation<Data>(url: URL(string: url) ?? URL(filePath: "/"))   // never started
        let id = FetchID.next()
        state.register(operation, id: id, sessionMonitors: nil)
        let request = URLRequest(url: operation.request?.url ?? URL(filePath: "/"))
        let sink = MemoryBodySink()
        let key = shareable ? FlightKey(request: request, limits: Self.limits, session: .shared, sink: sink) : nil
        let member = FlightMember(operation: operation, request: request, limits: Self.limits, sink: sink,
                                  key: key, queue: queue)
        return (id, member)
    }

    /// Two identical shareable fetches, enqueued; the first's flight granted and its transfer
    /// created. The second has not joined yet.
    func runningSharedFlight(in state: inout QueueState) throws -> (flight: Flight, first: FlightMember, second: FlightMember) {
        let (firstID, first) = fetch("http://a.example/same", in: &state, shareable: true)
        let (secondID, second) = fetch("http://a.example/same", in: &state, shareable: true)
        state.activated(firstID)
        state.activated(secondID)
        join(first, &state)
        let flight = try #require(started(state.takeActions()).first)
        let transfer = Transfer(request: flight.request, session: .shared, limits: Self.limits, sink: flight.makeSink(), owner: flight)
        _ = state.transferCreated(transfer, for: flight)
        return (flight, first, second)
    }

    func ok() throws -> HTTPURLResponse {
        try #require(HTTPURLResponse(url: URL(filePath: "/"), statusCode: 200, httpVersion: "HTTP/1.1", headerFields: nil))
    }

    func join(_ member: FlightMember, _ state: inout QueueState) {
        state.join(member, priority: member.operation.queuePriority)
    }

    func started(_ actions: [QueueAction]) -> [Flight] {
        actions.compactMap { if case .startTransfer(let flight) = $0 { flight } else { nil } }
    }

    func stopped(_ actions: [QueueAction]) -> Int {
        actions.filter { if case .stopTransfer = $0 { true } else { false } }.count
    }

    func confirmed(_ actions: [QueueAction]) -> [FlightMember] {
        actions.compactMap { if case .confirmCancel(let member) = $0 { member } else { nil } }
    }

    func monitorEvents(_ actions: [QueueAction]) -> [String] {
        actions.compactMap { action in
            guard case .monitor(let event, _, _) = action else { return nil }
            switch event {
            case .enqueued: return "enqueued"
            case .started: return "started"
            case .redirected: return "redirected"
            case .response: return "response"
            case .retry: return "retry"
            case .metrics: return "metrics"
            case .finished: return "finished"
            }
        }
    }

    @Test func aFlightWaitsForItsSlotAndItsEndGrantsTheNext() throws {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: false)
        let (_, first) = fetch("http://a.example/1", in: &state)
        let (_, second) = fetch("http://a.example/2", in: &state)
        join(first, &state)
        let firstStarts = started(state.takeActions())
        #expect(firstStarts.map(\.request.url) == [first.request.url])
        join(second, &state)
        #expect(started(state.takeActions()).isEmpty, "the only slot is taken")
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1))
        #expect(state.wantsKeepAlive)

        let told = state.flightEnded(firstStarts[0], result: .failure(.cancelled(.init(url: nil)), nil))
        #expect(told.map { $0 === first } == [true], "the end goes to the flight's one member")
        #expect(started(state.takeActions()).map(\.request.url) == [second.request.url], "the freed slot goes to the next")
        let again = state.flightEnded(firstStarts[0], result: .failure(.cancelled(.init(url: nil)), nil))
        #expect(again.isEmpty, "a flight ends once")
    }

    @Test func leavingAWaitingFlightWithdrawsItAndConfirmsTheCancelOnce() {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: false)
        let (_, running) = fetch("http://a.example/1", in: &state)
        let (_, waiting) = fetch("http://a.example/2", in: &state)
        join(running, &state)
        join(waiting, &state)
        _ = state.takeActions()
        state.leave(waiting)
        #expect(confirmed(state.takeActions()).map { $0 === waiting } == [true])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
        state.leave(waiting)
        #expect(state.takeActions().isEmpty, "a second stop changes nothing")
    }

    @Test func theLastMemberLeavingARunningFlightStopsItsTransfer() throws {
        var state = QueueState(maximumTotal: 2, maximumPerHost: 2, coalesces: true, hasMonitors: false)
        let (_, first) = fetch("http://a.example/same", in: &state, shareable: true)
        let (_, second) = fetch("http://a.example/same", in: &state, shareable: true)
        join(first, &state)
        let flight = try #require(started(state.takeActions()).first)
        let transfer = Transfer(request: flight.request, session: .shared, limits: Self.limits, sink: flight.makeSink(), owner: flight)
        let created = state.transferCreated(transfer, for: flight)
        #expect(created)
        join(second, &state)
        let joined = state.takeActions()
        #expect(started(joined).isEmpty, "an identical request joins the running transfer")
        #expect(joined.contains { if case .replay(let member, _) = $0 { member === second } else { false } })
        #expect(state.statistics.requestsCoalesced == 1)

        _ = state.flightHeard(flight, received: (bytes: 500, expected: 1000))
        #expect(state.latest(of: flight).received?.bytes == 500, "a late joiner is brought to where the transfer is now")
        state.leave(first)
        #expect(stopped(state.takeActions()) == 0, "another caller still wants it")
        state.leave(second)
        let last = state.takeActions()
        #expect(stopped(last) == 1)
        // The last one hears of the end once the stopped transfer has ended (a download's
        // partial file is then kept), not before — and once.
        #expect(confirmed(last).isEmpty)
        let told = state.flightEnded(flight, result: .failure(.cancelled(.init(url: nil)), nil))
        #expect(told.map { $0 === second } == [true])
        #expect(state.flightEnded(flight, result: .failure(.cancelled(.init(url: nil)), nil)).isEmpty)
    }

    @Test func aJoinerHearsOfWhatCameBeforeItsReplayOnlyFromTheReplay() throws {
        // The head can reach a running flight after a caller joined it and before the replay
        // that brings the caller to where the transfer is: the caller hears of it once.
        var state = QueueState(maximumTotal: 2, maximumPerHost: 2, coalesces: true, hasMonitors: true)
        let (flight, first, second) = try runningSharedFlight(in: &state)
        join(second, &state)
        _ = state.takeActions()

        let head = try ok()
        let told = state.flightReceived(flight, response: head, expectedLength: 10, now: 1)
        #expect(told.map { $0 === first } == [true], "the joiner waits for its replay")
        #expect(monitorEvents(state.takeActions()) == ["response"], "for the first caller only")
        #expect(state.flightHeard(flight, received: (bytes: 4, expected: 10)).map { $0 === first } == [true])

        let replayed = state.replay(to: second, of: flight, now: 2)
        #expect(replayed?.response?.0 === head)
        #expect(replayed?.received?.bytes == 4)
        #expect(monitorEvents(state.takeActions()) == ["response"], "the joiner's, once, from its replay")
        #expect(Array(state.flightHeard(flight)).count == 2, "after its replay it hears the transfer's events")
    }

    @Test func aReplayAfterTheFlightEndedTellsNothing() throws {
        var state = QueueState(maximumTotal: 2, maximumPerHost: 2, coalesces: true, hasMonitors: false)
        let (flight, _, second) = try runningSharedFlight(in: &state)
        join(second, &state)
        _ = state.flightReceived(flight, response: try ok(), expectedLength: 0, now: 1)
        let ended = state.flightEnded(flight, result: .success(try ok(), .data(Data())))
        #expect(ended.count == 2, "both callers hear of the end")
        let replayed = state.replay(to: second, of: flight, now: 2)
        #expect(replayed == nil, "it is not told it started, nor anything else")
    }

    @Test func aJoinerStillWaitingForItsReplayGetsItBeforeTheEnd() throws {
        // The end can reach the flight before a joiner's queued replay: the joiner then hears
        // it started, and of the head, before it hears of the end, and its replay tells nothing.
        var state = QueueState(maximumTotal: 2, maximumPerHost: 2, coalesces: true, hasMonitors: true)
        let (flight, _, second) = try runningSharedFlight(in: &state)
        _ = state.flightReceived(flight, response: try ok(), expectedLength: 5, now: 1)
        join(second, &state)
        _ = state.takeActions()

        let replays = state.replaysBeforeEnd(of: flight, now: 2)
        #expect(replays.map { $0.member === second } == [true])
        #expect(replays.first?.latest.response?.0.statusCode == 200)
        #expect(monitorEvents(state.takeActions()) == ["response"], "the joiner's, once")
        let ended = state.flightEnded(flight, result: .success(try ok(), .data(Data())))
        #expect(ended.count == 2)
        let late = state.replay(to: second, of: flight, now: 3)
        #expect(late == nil, "its queued replay comes too late and tells nothing")
    }

    @Test func aGrantedFlightWhoseMembersAllLeftIsNotStarted() throws {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: false)
        let (_, member) = fetch("http://a.example/1", in: &state)
        join(member, &state)
        let flight = try #require(started(state.takeActions()).first)
        state.leave(member)
        _ = state.takeActions()
        let transfer = Transfer(request: flight.request, session: .shared, limits: Self.limits, sink: flight.makeSink(), owner: flight)
        let created = state.transferCreated(transfer, for: flight)
        #expect(!created, "every caller left before the transfer existed")
        let told = state.flightEnded(flight, result: .failure(.cancelled(.init(url: nil)), nil))
        #expect(told.isEmpty)
        #expect(state.transferCounts == .init(inFlight: 0, waiting: 0))
    }

    @Test func anAttemptStoppedBeforeItJoinsNeverJoins() {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: false)
        let (_, member) = fetch("http://a.example/1", in: &state)
        state.leave(member)
        #expect(confirmed(state.takeActions()).count == 1)
        join(member, &state)
        #expect(state.takeActions().isEmpty)
        #expect(state.transferCounts == .init(inFlight: 0, waiting: 0))
    }

    @Test func aSweepHoldsGrantsAndWithdrawsWhatItChose() throws {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: false)
        let (_, running) = fetch("http://a.example/1", in: &state)
        let (chosenID, chosen) = fetch("http://a.example/2", in: &state)
        let (_, spared) = fetch("http://a.example/3", in: &state)
        join(running, &state)
        join(chosen, &state)
        join(spared, &state)
        let flight = started(state.takeActions())[0]
        let swept = state.beginSweep()
        #expect(swept.count == 3)
        _ = state.flightEnded(flight, result: .success(try ok(), .data(Data())))
        #expect(started(state.takeActions()).isEmpty, "nothing is granted while a predicate runs")
        let toCancel = state.endSweep(choosing: [chosenID])
        #expect(toCancel.map { $0 === chosen.operation } == [true])
        #expect(started(state.takeActions()).map(\.request.url) == [spared.request.url], "the slot skips the chosen fetch")
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
        // The chosen fetch's cancel stops its attempt, which hears of it once: its withdrawn
        // flight is no ticket to look up (another flight may have its address by then).
        state.leave(chosen)
        #expect(confirmed(state.takeActions()).map { $0 === chosen } == [true])
        state.leave(chosen)
        #expect(state.takeActions().isEmpty)
    }

    @Test func keepAliveFollowsWorkAndSuspension() throws {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: false)
        #expect(!state.wantsKeepAlive, "an empty queue is its owner's to keep")
        let (id, member) = fetch("http://a.example/1", in: &state)
        #expect(state.wantsKeepAlive)
        join(member, &state)
        state.changeScheduler { $0.isPaused = true }
        #expect(state.wantsKeepAlive, "a transfer in flight keeps even a suspended queue")
        let flight = started(state.takeActions())[0]
        _ = state.flightEnded(flight, result: .success(try ok(), .data(Data())))
        #expect(!state.wantsKeepAlive, "suspended with nothing in flight: freed when dropped")
        state.changeScheduler { $0.isPaused = false }
        #expect(state.wantsKeepAlive)
        state.completed(member.operation, error: nil, now: 0)
        #expect(state.registry[id] == nil)
        #expect(!state.wantsKeepAlive)
    }

    @Test func networkActivityGoesOffOnlyAfterTheHideDelayWithNothingStarted() throws {
        var state = QueueState(maximumTotal: 2, maximumPerHost: 2, coalesces: false, hasMonitors: false)
        _ = state.activityHandlers.add(Callback(on: .immediate) { _ in })
        let (_, first) = fetch("http://a.example/1", in: &state)
        join(first, &state)
        let flight = started(state.takeActions())[0]
        #expect(state.isNetworkActive)
        _ = state.flightEnded(flight, result: .success(try ok(), .data(Data())))
        let hide = state.takeActions().compactMap { if case .hideActivityLater(let generation) = $0 { generation } else { nil } }
        #expect(hide.count == 1)
        // Another transfer starts before the delay passes: the pending hide is stale.
        let (_, second) = fetch("http://a.example/2", in: &state)
        join(second, &state)
        _ = state.takeActions()
        state.hideActivity(generation: hide[0])
        #expect(state.isNetworkActive)
        #expect(state.takeActions().isEmpty)
    }

    @Test func aRetryAfterPausesTheHostAndSchedulesAWakeUp() throws {
        var state = QueueState(maximumTotal: 4, maximumPerHost: 4, coalesces: false, hasMonitors: false)
        let (_, first) = fetch("http://a.example/1", in: &state)
        let (_, later) = fetch("http://a.example/2", in: &state)
        let (_, other) = fetch("http://b.example/1", in: &state)
        join(first, &state)
        let flight = started(state.takeActions())[0]
        let url = try #require(URL(string: "http://a.example/1"))
        let busy = try #require(HTTPURLResponse(url: url, statusCode: 503, httpVersion: "HTTP/1.1", headerFields: ["Retry-After": "30"]))
        _ = state.flightEnded(flight, result: .failure(.unacceptableStatus(.init(statusCode: 503, headers: ["Retry-After": "30"], url: url)), busy))
        #expect(state.takeActions().allSatisfy { if case .wake = $0 { false } else { true } },
                "no wake-up while nothing waits for the paused host")
        join(later, &state)
        join(other, &state)
        let actions = state.takeActions()
        #expect(started(actions).map(\.host) == [FlightMember.hostKey(of: URL(string: "http://b.example/1"))],
                "the paused host waits; another host does not")
        let wake = actions.compactMap { if case .wake(_, let token) = $0 { token } else { nil } }
        #expect(wake.count == 1, "the queue looks again when the pause ends")
        let fired = state.wakeFired(wake[0])
        let firedAgain = state.wakeFired(wake[0])
        #expect(fired)
        #expect(!firedAgain, "a wake-up counts once")
    }

    @Test func aFetchsMonitorEventsAreAskedForInOrder() throws {
        var state = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: true)
        let (id, member) = fetch("http://a.example/1", in: &state)
        state.activated(id)
        join(member, &state)
        let flight = try #require(started(state.takeActions().filter { !$0.isOrdered }).first)
        let url = try #require(member.request.url)
        let ok = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: nil))
        state.received(ok, for: member.operation, now: 1)
        _ = state.flightEnded(flight, result: .success(ok, .data(Data())))
        state.completed(member.operation, error: nil, now: 2)
        state.completed(member.operation, error: nil, now: 3)
        // `takeActions` was called once above, after the start: collect what came before too.
        var all = QueueState(maximumTotal: 1, maximumPerHost: 1, coalesces: false, hasMonitors: true)
        let (otherID, otherMember) = fetch("http://a.example/2", in: &all)
        all.activated(otherID)
        join(otherMember, &all)
        #expect(monitorEvents(all.takeActions()) == ["enqueued", "started"])
        #expect(monitorEvents(state.takeActions()) == ["response", "metrics", "finished"], "a fetch finishes once")
    }
}
