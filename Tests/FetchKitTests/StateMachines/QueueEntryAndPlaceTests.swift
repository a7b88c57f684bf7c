import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// Where shared flights wait in the scheduler: flights whose first member left, raises, sweeps
/// and counts (pure, on plain values); and operations offered to two queues or left by a freed
/// one.
@Suite("Scheduler places of shared flights (pure)", .timeLimit(.minutes(3)))
struct SharedFlightPlaceTests {
    let helper = QueueStateTests()

    func ended(_ flight: StubFlight, _ state: inout StubState) {
        helper.end(flight, &state)
    }

    /// One slot, taken by a running flight; behind it another fetch at `.normal`, and three
    /// identical shareable requests, made at `priorities` but not joined yet.
    func sameRequestsBehindABusySlot(_ state: inout StubState, priorities: [Operation.QueuePriority]) throws
        -> (busy: StubFlight, other: StubMember, same: [StubMember]) {
        let busy = helper.fetch("a", in: &state)
        state.join(busy)
        let busyFlight = try #require(helper.started(state.takeActions()).first)
        let other = helper.fetch("a", in: &state)
        state.join(other)
        let same = priorities.map { helper.fetch("a", in: &state, key: "same", priority: $0) }
        return (busyFlight, other, same)
    }

    @Test func aSharedFlightRaisedAfterItsFirstMemberLeftIsGrantedBeforeLowerOnes() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let (busyFlight, _, same) = try sameRequestsBehindABusySlot(&state, priorities: [.low, .low, .high])
        let (s1, s2, s3) = (same[0], same[1], same[2])
        state.join(s1)
        state.join(s2)
        state.leave(s1)             // the flight's first member (its ticket) leaves
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 2))
        state.join(s3)              // raises the flight
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 2))
        _ = state.takeActions()
        ended(busyFlight, &state)
        let next = try #require(helper.started(state.takeActions()).first)
        #expect(next.first == s1, "the shared flight, raised to .high, goes before .normal")
        #expect(next.members == [s2, s3], "with the members it still has")
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1))
    }

    @Test func aRaisedSharedFlightWhoseFirstLeftIsWithdrawnByItsLastLeaver() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let (busyFlight, other, same) = try sameRequestsBehindABusySlot(&state, priorities: [.veryLow, .low, .veryHigh])
        let (s1, s2, s3) = (same[0], same[1], same[2])
        state.join(s1)
        state.join(s2)      // raise 1
        state.leave(s1)
        state.join(s3)      // raise 2, after the first left
        state.leave(s2)
        state.leave(s3)
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1), "the flight is out of line")
        _ = state.takeActions()
        ended(busyFlight, &state)
        #expect(helper.started(state.takeActions()).map(\.first) == [other])
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 0))
    }

    @Test func aSweepWithdrawsARaisedSharedFlightWhoseFirstLeft() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let (busyFlight, other, same) = try sameRequestsBehindABusySlot(&state, priorities: [.low, .low, .high])
        let (s1, s2, s3) = (same[0], same[1], same[2])
        state.join(s1)
        state.join(s2)
        state.leave(s1)
        state.join(s3)
        _ = state.beginSweep()
        let chosen = state.endSweep(choosing: [s2.id, s3.id])
        #expect(chosen.count == 2)
        #expect(state.transferCounts == .init(inFlight: 1, waiting: 1))
        _ = state.takeActions()
        ended(busyFlight, &state)
        #expect(helper.started(state.takeActions()).map(\.first) == [other])
        state.leave(s2)
        state.leave(s3)
        #expect(helper.confirmed(state.takeActions()) == [s2, s3], "each chosen caller hears of its cancel once")
    }

    @Test func fifoWithinAPriorityHoldsAcrossRaisesAndWithdrawals() throws {
        var state = StubState(maximumTotal: 1, maximumPerHost: 1, coalesces: true)
        let busy = helper.fetch("a", in: &state)
        state.join(busy)
        var flight = try #require(helper.started(state.takeActions()).first)
        var members: [StubMember] = []
        for index in 0..<6 {
            let member = helper.fetch("a", in: &state, key: "/\(index)")
            state.join(member)
            members.append(member)
        }
        // A joiner raises /2 to .high; /4 leaves.
        let joiner = helper.fetch("a", in: &state, key: "/2", priority: .high)
        state.join(joiner)
        state.leave(members[4])
        _ = state.takeActions()
        var order: [StubMember] = []
        for _ in 0..<5 {
            ended(flight, &state)
            flight = try #require(helper.started(state.takeActions()).first)
            order.append(flight.first)
        }
        #expect(order == [2, 0, 1, 3, 5].map { members[$0] })
    }
}

@Suite("Queue entries on operations", .timeLimit(.minutes(3)))
struct QueueEntryTests {
    @Test func anOperationRefusedByAnotherQueueKeepsItsEntryInTheFirst() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let first = makeFetchQueue()
        let other = makeFetchQueue()
        first.isSuspended = true
        let operation = server.operation("/json")
        let id = first.enqueue(operation)
        let refused = Countdown(2)
        other.enqueue(operation) { _ in refused.signal() }
        let batch = other.enqueue(batch: [operation], on: .global, completion: { _ in refused.signal() })
        _ = batch
        #expect(await refused.wait())
        #expect(first.id(of: operation) == id)
        #expect(other.id(of: operation) == nil)
        #expect(first.count == 1 && other.count == 0)
        first.isSuspended = false
        try await operation.finished()
        #expect(await first.recorder?.waitUntil(timeout: 10) { events in
            events.filter { $0.id == id }.map(\.kind) == [.enqueue, .start, .response, .metrics, .finish]
        } == true)
        #expect(first.id(of: operation) == nil && first.count == 0)
    }

    /// `id(of:)` on a queue the operation does not belong to must not read the operation's
    /// `queueEntry`, which the owning queue writes under its own lock (here: `register` as it
    /// is enqueued). A race only ThreadSanitizer sees (`swift test --sanitize=thread`).
    @Test func idOfAnOperationOfAnotherQueueDoesNotReadItsEntry() async throws {
        let owner = makeFetchQueue(monitors: [])
        let stranger = makeFetchQueue(monitors: [])
        owner.isSuspended = true    // nothing starts: the entries are only written as registered
        let url = try #require(URL(string: "http://127.0.0.1:9/never"))
        let handedOver = Locked<[FetchOperation<Data>]>([])
        let done = Countdown(2)
        let rounds = 400
        let handed = DispatchSemaphore(value: 0)
        let writer = Thread {
            for _ in 0..<rounds {
                let operation = FetchOperation<Data>(url: url)
                handedOver.withLock { $0.append(operation) }
                handed.signal()               // the reader asks about it as it is enqueued
                owner.enqueue(operation)      // writes its entry under the owner's lock only
            }
            done.signal()
        }
        let seen = Locked(0)
        // One question per operation handed over, waiting (not spinning) for each: nothing
        // here starves the tests running beside it.
        let reader = Thread {
            for _ in 0..<rounds {
                guard handed.wait(timeout: .now() + 30) == .success else { break }
                // Reads its entry under the stranger's lock only.
                if let operation = handedOver.withLock({ $0.last }), stranger.id(of: operation) != nil {
                    seen.withLock { $0 += 1 }
                }
            }
            done.signal()
        }
        writer.start()
        reader.start()
        #expect(await done.wait())
        #expect(seen.current == 0)
        owner.cancelAll()
        owner.isSuspended = false     // the cancelled operations finish
    }

    /// A suspended queue its owner drops is freed and cancels what it holds; its operations
    /// finish without it. The queue's record of each (and with it its batch and session
    /// monitors) goes with the queue, not with the operation.
    @Test func aFreedQueueTakesItsEntriesOffItsOperations() async throws {
        let weakBatch = WeakBox()
        let finished = Countdown(1)
        let operation = FetchOperation<Data>(url: try #require(URL(string: "http://127.0.0.1:9/never")))
        let weakQueue = WeakBox()
        do {
            let queue = makeFetchQueue(monitors: [])
            weakQueue.value = queue
            queue.isSuspended = true
            let batch = queue.enqueue(batch: [operation], on: .global, completion: { _ in finished.signal() })
            weakBatch.value = batch
        }
        #expect(await queueReleased { weakQueue.value == nil }, "the suspended queue was freed")
        #expect(await finished.wait(timeout: 10), "the batch completed: its member was cancelled")
        await #expect(throws: FetchError.self) { try await operation.finished() }
        #expect(await queueReleased { weakBatch.value == nil }, "the finished batch is not kept alive by its member")
        #expect(operation.core.withLock { $0.observed == nil }, "the finished fetch keeps no record of the freed queue's")
    }
}
