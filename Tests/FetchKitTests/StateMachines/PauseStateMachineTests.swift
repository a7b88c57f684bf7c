import Foundation
import Testing
@testable import FetchKit

/// Pausing and resuming in the lifecycle, as a pure value: every race the operation meets is a
/// sequence of events here.
@Suite("Lifecycle state machine: pause and resume", .timeLimit(.minutes(3)))
struct PauseStateMachineTests {
    typealias Machine = LifecycleStateMachine

    let stopped = Machine.Outcome.failure(.cancelled(.init(url: nil)))

    /// A machine whose first transfer is attached.
    func transferring() -> Machine {
        var machine = Machine()
        _ = machine.start()
        _ = machine.beginSetup()
        _ = machine.attachTransfer()
        return machine
    }

    @Test func pausingATransferStopsItParksAndResumeBeginsTheNextAttempt() {
        var machine = transferring()
        let r1 = machine.pause()
        #expect(r1 == .stopTransfer)
        #expect(machine.isPaused)
        #expect(machine.isStoppingForPause)
        let r2 = machine.attemptEnded(stopped)
        #expect(r2 == .park, "the stop's report parks it: no completion")
        #expect(machine.isParked && machine.isPaused && machine.phase == .executing)
        let r3 = machine.attemptEnded(.success)
        #expect(r3 == .ignore, "nothing is attached while parked")
        let r4 = machine.resume()
        #expect(r4 == .beginAttempt)
        #expect(!machine.isPaused && !machine.isParked)
        let r5 = machine.beginSetup()
        #expect(r5)
        let r6 = machine.attachTransfer()
        #expect(r6)
        let r7 = machine.attemptEnded(.success)
        #expect(r7 == .parse)
        machine.parseEnded(nil)
        guard case .success = machine.complete() else {
            Issue.record("expected success")
            return
        }
    }

    @Test func aBodyThatCompletedAsItWasPausedCompletesTheFetch() {
        var machine = transferring()
        let r8 = machine.pause()
        #expect(r8 == .stopTransfer)
        let r9 = machine.attemptEnded(.success)
        #expect(r9 == .parse, "the file is whole: completion, not pause")
        #expect(!machine.isPaused, "a fetch whose transfer ended is not paused")
        let r10 = machine.resume()
        #expect(r10 == .none)
        machine.parseEnded(nil)
        guard case .success = machine.complete() else {
            Issue.record("expected success")
            return
        }
    }

    @Test func aTransferThatFailedForGoodAsItWasPausedEndsTheFetch() {
        var machine = transferring()
        _ = machine.pause()
        let failure = Machine.Outcome.failure(.transport(.init(.cannotConnectToHost)))
        let r11 = machine.attemptEnded(failure)
        #expect(r11 == .complete)
        guard case .failure(.transport) = machine.complete() else {
            Issue.record("expected the transport error")
            return
        }
    }

    @Test func pausingTwiceAndResumingWithoutAPauseChangeNothing() {
        var machine = transferring()
        let r12 = machine.resume()
        #expect(r12 == .none, "not paused")
        let r13 = machine.pause()
        #expect(r13 == .stopTransfer)
        let r14 = machine.pause()
        #expect(r14 == .none, "paused already: no second stop")
        _ = machine.attemptEnded(stopped)
        let r15 = machine.pause()
        #expect(r15 == .none)
        let r16 = machine.resume()
        #expect(r16 == .beginAttempt)
        let r17 = machine.resume()
        #expect(r17 == .none, "resumed already: no second attempt")
    }

    @Test func cancellingWhileParkedCompletesOnceAsCancelled() {
        var machine = transferring()
        _ = machine.pause()
        _ = machine.attemptEnded(stopped)
        let r18 = machine.cancel(url: nil)
        #expect(r18 == .stopPreparing, "nothing to stop: complete now")
        #expect(!machine.isPaused)
        let r19 = machine.resume()
        #expect(r19 == .none, "a cancelled fetch does not resume")
        guard case .failure(.cancelled) = machine.complete() else {
            Issue.record("expected cancelled")
            return
        }
        let r20 = machine.cancel(url: nil)
        #expect(r20 == .none)
    }

    @Test func cancellingWhileTheStopIsUnderWayCompletesWhenItEnds() {
        var machine = transferring()
        _ = machine.pause()
        let r21 = machine.cancel(url: nil)
        #expect(r21 == .flagOnly, "the stop is under way already")
        let r22 = machine.attemptEnded(stopped)
        #expect(r22 == .complete)
        guard case .failure(.cancelled) = machine.complete() else {
            Issue.record("expected cancelled")
            return
        }
    }

    @Test func resumingBeforeTheStopEndedBeginsTheNextAttemptWhenItDoes() {
        var machine = transferring()
        _ = machine.pause()
        let r23 = machine.resume()
        #expect(r23 == .flagOnly)
        #expect(!machine.isPaused)
        let r24 = machine.attemptEnded(stopped)
        #expect(r24 == .beginNextAttempt)
        let r25 = machine.beginSetup()
        #expect(r25, "preparing the next attempt")
        let r26 = machine.pause()
        #expect(r26 == .flagOnly, "pausing during a setup waits for its end")
        let r27 = machine.attachTransfer()
        #expect(!r27, "the setup's transfer is dropped")
        #expect(machine.isParked)
    }

    @Test func aPendingOperationPausedStartsAndParksBeforeItsFirstAttempt() {
        var machine = Machine()
        let r28 = machine.pause()
        #expect(r28 == .flagOnly)
        #expect(machine.isPaused)
        #expect(machine.start() == .begin)
        let r29 = machine.beginSetup()
        #expect(!r29, "parked instead of setting up")
        #expect(machine.isParked)
        let r30 = machine.resume()
        #expect(r30 == .beginAttempt)
        let r31 = machine.beginSetup()
        #expect(r31)
    }

    @Test func aPauseDuringAWaitParksWhenTheWaitEnds() {
        var machine = transferring()
        let r32 = machine.attemptEnded(.failure(.transport(.init(.timedOut))), anotherAttempt: true)
        #expect(r32 == .waitForNextAttempt)
        let r33 = machine.pause()
        #expect(r33 == .flagOnly)
        let r34 = machine.resumeAfterWait()
        #expect(!r34, "the retry does not begin")
        #expect(machine.isParked)
        let r35 = machine.resume()
        #expect(r35 == .beginAttempt)
    }

    @Test func aRetryOrContinuationDueWhenTheStopEndsStillWaits() {
        var machine = transferring()
        _ = machine.pause()
        // A download's disk fell behind as it was paused: the stopped task's last bytes must
        // reach the disk before anything resumes.
        let r36 = machine.attemptEnded(stopped, anotherAttempt: true)
        #expect(r36 == .waitForNextAttempt)
        let r37 = machine.resumeAfterWait()
        #expect(!r37)
        #expect(machine.isParked)
    }

    @Test func pausingTooLateDoesNothing() {
        var parsing = transferring()
        _ = parsing.attemptEnded(.success)
        let r38 = parsing.pause()
        #expect(r38 == .none)
        var cancelled = transferring()
        _ = cancelled.cancel(url: nil)
        let r39 = cancelled.pause()
        #expect(r39 == .none)
        _ = cancelled.attemptEnded(stopped)
        _ = cancelled.complete()
        let r40 = cancelled.pause()
        #expect(r40 == .none && !cancelled.isPaused)
    }

    /// Random pauses, resumes, cancels and transfer ends: every run completes exactly once.
    @Test(arguments: 0..<8)
    func randomInterleavingsCompleteExactlyOnce(seed: UInt64) {
        var generator = SplitMix64(seed: seed)
        for _ in 0..<500 {
            var machine = Machine()
            var completions = 0
            var steps = 0
            _ = machine.start()
            while !machine.isFinished, steps < 200 {
                steps += 1
                switch generator.next() % 7 {
                case 0:
                    _ = machine.pause()
                case 1:
                    _ = machine.resume()
                case 2 where generator.next() % 4 == 0:
                    if machine.cancel(url: nil) == .stopPreparing {
                        _ = machine.complete()
                        completions += 1
                    }
                case 3:
                    _ = machine.beginSetup()
                case 4:
                    _ = machine.attachTransfer()
                case 5:
                    let outcome: Machine.Outcome = generator.next() % 3 == 0 ? .success : stopped
                    switch machine.attemptEnded(outcome, anotherAttempt: generator.next() % 4 == 0) {
                    case .parse:
                        machine.parseEnded(nil)
                        _ = machine.complete()
                        completions += 1
                    case .complete:
                        _ = machine.complete()
                        completions += 1
                    case .waitForNextAttempt, .park, .beginNextAttempt, .ignore:
                        break
                    }
                default:
                    _ = machine.resumeAfterWait()
                }
                #expect(!(machine.isParked && !machine.isPaused), "parked only while paused")
            }
            #expect(completions == (machine.isFinished ? 1 : 0))
        }
    }
}
