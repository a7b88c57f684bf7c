import Testing
@testable import FetchKit

private let millisecond: UInt64 = 1_000_000

/// The relay's rules as a value: one delivery in flight, the newest value, the interval, and
/// the final value without it.
@Suite("Coalescing relay rules", .timeLimit(.minutes(3)))
struct CoalescingRelayTests {
    @Test func aValueWhileADeliveryIsInFlightWaitsAndOnlyTheNewestIsDelivered() {
        var machine = CoalescingRelayMachine<Int>(interval: 0)
        #expect(machine.post(1, at: 0) == .deliver)
        #expect(machine.take(at: 0) == 1)
        // The handler runs: what arrives meanwhile waits, the newest replacing the others.
        #expect(machine.post(2, at: 1) == .none)
        #expect(machine.post(3, at: 2) == .none)
        let (action, inline) = machine.delivered(at: 3)
        #expect(action == .deliver && inline == nil, "the next delivery is scheduled once the handler returned")
        #expect(machine.take(at: 4) == 3)
        #expect(machine.delivered(at: 5) == (.none, nil))
        #expect(machine.phase == .idle)
    }

    @Test func aValueSoonerThanTheIntervalWaitsForTheTimer() {
        var machine = CoalescingRelayMachine<Int>(interval: 100 * millisecond)
        #expect(machine.post(1, at: 0) == .deliver, "the first value goes at once")
        #expect(machine.take(at: 0) == 1)
        #expect(machine.delivered(at: millisecond) == (.none, nil))
        #expect(machine.post(2, at: 10 * millisecond) == .arm(deadline: 100 * millisecond, timer: 1))
        #expect(machine.post(3, at: 20 * millisecond) == .none)
        #expect(machine.timerFired(1) == .deliver)
        #expect(machine.take(at: 100 * millisecond) == 3)
        #expect(machine.delivered(at: 101 * millisecond) == (.none, nil))
        #expect(machine.post(4, at: 250 * millisecond) == .deliver, "an interval later: at once")
    }

    @Test func aValueThatWaitedForTheHandlerThenWaitsForTheRestOfTheInterval() {
        var machine = CoalescingRelayMachine<Int>(interval: 100 * millisecond)
        _ = machine.post(1, at: 0)
        _ = machine.take(at: 0)
        _ = machine.post(2, at: 10 * millisecond)
        #expect(machine.delivered(at: 30 * millisecond) == (.arm(deadline: 100 * millisecond, timer: 1), nil))
        #expect(machine.timerFired(1) == .deliver)
        #expect(machine.take(at: 100 * millisecond) == 2)
    }

    @Test func finishingDeliversTheWaitingValueWithoutTheInterval() {
        var machine = CoalescingRelayMachine<Int>(interval: 100 * millisecond)
        _ = machine.post(1, at: 0)
        _ = machine.take(at: 0)
        _ = machine.delivered(at: millisecond)
        #expect(machine.post(2, at: 10 * millisecond) == .arm(deadline: 100 * millisecond, timer: 1))
        #expect(machine.finish() == .deliver)
        #expect(machine.take(at: 11 * millisecond) == 2)
        #expect(machine.timerFired(1) == .none, "the timer that fires later finds nothing to do")
        #expect(machine.delivered(at: 12 * millisecond) == (.none, nil))
    }

    @Test func aFinalValueThatArrivesDuringADeliveryFollowsItInTheSameHandOff() {
        var machine = CoalescingRelayMachine<Int>(interval: 100 * millisecond)
        _ = machine.post(1, at: 0)
        _ = machine.take(at: 0)
        _ = machine.post(2, at: millisecond)
        #expect(machine.finish() == .none, "a delivery is in flight")
        #expect(machine.delivered(at: 2 * millisecond) == (.none, 2), "at once, without another hand-off")
        #expect(machine.delivered(at: 3 * millisecond) == (.none, nil))
        #expect(machine.phase == .idle)
        #expect(machine.post(3, at: 4 * millisecond) == .deliver, "after the end, nothing waits")
    }
}
