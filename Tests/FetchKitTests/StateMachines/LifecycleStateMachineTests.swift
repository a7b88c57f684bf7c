import Foundation
import Testing
@testable import FetchKit

/// The lifecycle as a pure value: every transition, no network.
@Suite("Lifecycle state machine", .timeLimit(.minutes(3)))
struct LifecycleStateMachineTests {
    typealias Machine = LifecycleStateMachine

    private func isCancelledOutcome(_ outcome: Machine.Outcome?) -> Bool {
        if case .failure(.cancelled)? = outcome { return true }
        return false
    }

    @Test func startsPendingAndNotCancelled() {
        let machine = Machine()
        #expect(machine.phase == .pending)
        #expect(!machine.isCancelled)
        #expect(!machine.isExecuting)
        #expect(!machine.isFinished)
        #expect(machine.outcome == nil)
    }

    @Test func successPathVisitsEveryPhaseInOrder() {
        var machine = Machine()
        #expect(machine.start() == .begin)
        #expect(machine.phase == .executing)
        #expect(machine.isExecuting)
        let attached = machine.attachTransfer()
        #expect(attached)
        #expect(machine.attemptEnded(.success) == .parse)
        #expect(machine.phase == .finishing)
        #expect(machine.isExecuting, "isExecuting stays true while parsing")
        machine.parseEnded(nil)
        guard case .success = machine.complete() else {
            Issue.record("expected success")
            return
        }
        #expect(machine.phase == .finished)
        #expect(!machine.isExecuting)
        #expect(machine.isFinished)
    }

    @Test func transferFailureSkipsParse() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        #expect(machine.attemptEnded(.failure(.transport(.init(.cannotConnectToHost)))) == .complete)
        guard case .failure(.transport(let error)) = machine.complete() else {
            Issue.record("expected the transport error")
            return
        }
        #expect(error.code == .cannotConnectToHost)
    }

    @Test func parseFailureBecomesTheOutcome() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        _ = machine.attemptEnded(.success)
        machine.parseEnded(.parseFailed(.init(underlying: .init(CancellationError()), url: nil)))
        guard case .failure(.parseFailed) = machine.complete() else {
            Issue.record("expected parseFailed")
            return
        }
    }

    @Test func cancelBeforeStartDecidesTheOutcomeButDoesNotFinish() {
        var machine = Machine()
        #expect(machine.cancel(url: nil) == .completeBeforeStart)
        #expect(machine.isCancelled)
        #expect(machine.phase == .pending, "never finished without being started")
        #expect(!machine.isFinished)
        #expect(isCancelledOutcome(machine.outcome), "completion handlers may hear it now")
        #expect(machine.start() == .finishCancelled)
        #expect(machine.isFinished)
        #expect(isCancelledOutcome(machine.outcome))
    }

    @Test func cancelWhilePreparingCompletesWithoutATransfer() {
        var machine = Machine()
        _ = machine.start()
        #expect(machine.cancel(url: nil) == .stopPreparing)
        let attached = machine.attachTransfer()
        #expect(!attached, "a transfer created after the cancel must be discarded")
        let failed = machine.failBeforeTransfer(.invalidRequest(.init(reason: .missing, url: nil)))
        #expect(!failed, "the cancel already decided")
        #expect(isCancelledOutcome(machine.complete()))
    }

    @Test func cancelDuringTransferWaitsForTheTransferToStop() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        #expect(machine.cancel(url: nil) == .stopTransfer)
        #expect(machine.phase == .finishing)
        #expect(machine.isExecuting)
        // The transfer confirms it stopped (whatever it reports, the cancel decided).
        #expect(machine.attemptEnded(.success) == .complete)
        #expect(isCancelledOutcome(machine.complete()))
    }

    @Test func cancelDuringParseWinsWhenTheParseReturns() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        _ = machine.attemptEnded(.success)
        #expect(machine.cancel(url: nil) == .flagOnly)
        machine.parseEnded(nil)
        #expect(isCancelledOutcome(machine.complete()))
    }

    @Test func cancelAfterFinishChangesNothing() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        _ = machine.attemptEnded(.success)
        machine.parseEnded(nil)
        _ = machine.complete()
        #expect(machine.cancel(url: nil) == .none)
        #expect(!machine.isCancelled)
        guard case .success? = machine.outcome else {
            Issue.record("outcome changed after finish")
            return
        }
    }

    @Test func secondCancelIsIgnored() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        #expect(machine.cancel(url: nil) == .stopTransfer)
        #expect(machine.cancel(url: nil) == .none)
    }

    /// Wherever the cancel arrives, the operation finishes with the URL given to it, and a
    /// second cancel (with another URL) changes nothing.
    @Test(arguments: ["pending", "preparing", "transferring", "parsing"])
    func cancelledOutcomeNamesTheURL(_ phase: String) throws {
        let url = try #require(URL(string: "http://127.0.0.1:9/item"))
        let later = try #require(URL(string: "http://127.0.0.1:9/other"))
        var machine = Machine()
        if phase != "pending" { #expect(machine.start() == .begin) }
        if phase == "transferring" || phase == "parsing" {
            let attached = machine.attachTransfer()
            #expect(attached)
        }
        if phase == "parsing" { #expect(machine.attemptEnded(.success) == .parse) }
        let first = machine.cancel(url: url)
        let second = machine.cancel(url: later)
        #expect(first != .none)
        #expect(second == .none)
        switch phase {
        case "pending": #expect(machine.start() == .finishCancelled)
        case "transferring": #expect(machine.attemptEnded(.failure(.cancelled(.init(url: nil)))) == .complete)
        case "parsing": machine.parseEnded(nil)
        default: break
        }
        if !machine.isFinished { _ = machine.complete() }
        guard case .failure(let error)? = machine.outcome else {
            Issue.record("expected a failure, got \(String(describing: machine.outcome))")
            return
        }
        #expect(error == .cancelled(.init(url: url)))
    }

    @Test func secondStartIsIgnored() {
        var machine = Machine()
        #expect(machine.start() == .begin)
        #expect(machine.start() == .ignore)
        _ = machine.failBeforeTransfer(.cancelled(.init(url: nil)))
        _ = machine.complete()
        #expect(machine.start() == .ignore)
    }

    @Test func lateTransferReportsAreIgnored() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        _ = machine.attemptEnded(.failure(.cancelled(.init(url: nil))))
        #expect(machine.attemptEnded(.success) == .ignore)
        _ = machine.complete()
        #expect(machine.attemptEnded(.success) == .ignore)
    }

    @Test func failureBeforeTransfer() {
        var machine = Machine()
        _ = machine.start()
        let failed = machine.failBeforeTransfer(.invalidRequest(.init(reason: .missing, url: nil)))
        #expect(failed)
        guard case .failure(.invalidRequest) = machine.complete() else {
            Issue.record("expected invalidRequest")
            return
        }
    }

    // MARK: Attempts: a wait between them is a state of the lifecycle

    @Test func aFailureWithAnotherAttemptToComeWaitsWithoutATransferThenPreparesIt() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        #expect(machine.isTransferring)
        let failure = Machine.Outcome.failure(.transport(.init(.networkConnectionLost)))
        #expect(machine.attemptEnded(failure, anotherAttempt: true) == .waitForNextAttempt)
        #expect(machine.phase == .executing, "still executing while it waits")
        #expect(!machine.isTransferring)
        #expect(machine.attemptEnded(.success) == .ignore, "no transfer is attached while it waits")
        let resumed = machine.resumeAfterWait()
        #expect(resumed)
        let resumedAgain = machine.resumeAfterWait()
        #expect(!resumedAgain, "the wait ends once")
        let attached = machine.attachTransfer()
        #expect(attached, "the next attempt is attached like the first")
        #expect(machine.attemptEnded(.success, anotherAttempt: true) == .parse, "a success never waits")
    }

    @Test func aCancelDuringTheWaitCompletesAtOnceAndTheWaitsEndChangesNothing() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        _ = machine.attemptEnded(.failure(.transport(.init(.timedOut))), anotherAttempt: true)
        #expect(machine.cancel(url: nil) == .stopPreparing, "no transfer to stop: complete now")
        #expect(isCancelledOutcome(machine.complete()))
        let resumed = machine.resumeAfterWait()
        #expect(!resumed)
        let attached = machine.attachTransfer()
        #expect(!attached)
    }

    @Test func aCancelDuringAnAttemptWinsOverAnotherAttempt() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        #expect(machine.cancel(url: nil) == .stopTransfer)
        #expect(machine.attemptEnded(.failure(.cancelled(.init(url: nil))), anotherAttempt: true) == .complete)
        #expect(isCancelledOutcome(machine.complete()))
    }

    @Test func aCancelDuringAnAttemptsSetupIsReportedWhenTheSetupEnds() {
        var machine = Machine()
        _ = machine.start()
        let settingUp = machine.beginSetup()
        #expect(settingUp)
        #expect(machine.cancel(url: nil) == .stopTransfer, "no completion yet: the setup reports it")
        #expect(!machine.isFinished)
        let attached = machine.attachTransfer()
        #expect(!attached, "the handle is dropped unstarted")
        #expect(machine.attemptEnded(.failure(.cancelled(.init(url: nil)))) == .complete)
        #expect(isCancelledOutcome(machine.complete()))
    }

    @Test func anAttemptsSetupCanFailOrBeAttached() {
        var machine = Machine()
        _ = machine.start()
        _ = machine.beginSetup()
        let attached = machine.attachTransfer()
        #expect(attached)
        var failing = Machine()
        _ = failing.start()
        _ = failing.beginSetup()
        let failed = failing.failBeforeTransfer(.timedOut(.init(kind: .total, interval: 1, url: nil)))
        #expect(failed, "an attempt past the deadline fails in its setup")
        var cancelled = Machine()
        _ = cancelled.cancel(url: nil)
        _ = cancelled.start()
        let began = cancelled.beginSetup()
        #expect(!began, "a stopped operation sets up nothing")
    }

    @Test func aFailureBeforeALaterAttemptEndsTheFetch() {
        // A later attempt is prepared like the first: its deadline may have passed, or its
        // queue may be gone.
        var machine = Machine()
        _ = machine.start()
        _ = machine.attachTransfer()
        _ = machine.attemptEnded(.failure(.transport(.init(.timedOut))), anotherAttempt: true)
        _ = machine.resumeAfterWait()
        let failed = machine.failBeforeTransfer(.timedOut(.init(kind: .total, interval: 1, url: nil)))
        #expect(failed)
        guard case .failure(.timedOut) = machine.complete() else {
            Issue.record("expected the total timeout")
            return
        }
    }

    /// Random event sequences with waits between attempts: `finished` at most once, and a
    /// wait ends at most once per attempt that asked for one.
    @Test(arguments: 0..<200)
    func randomSequencesWithWaitsFinishAtMostOnce(seed: Int) {
        var generator = SplitMix64(seed: UInt64(seed))
        var machine = Machine()
        var finishes = 0
        var waits = 0
        var resumes = 0
        for _ in 0..<16 {
            let wasFinished = machine.isFinished
            switch generator.next() % 5 {
            case 0:
                _ = machine.start()
            case 1:
                if machine.cancel(url: nil) == .stopPreparing { _ = machine.complete() }
            case 2:
                _ = machine.attachTransfer()
            case 3:
                switch machine.attemptEnded(.failure(.cancelled(.init(url: nil))), anotherAttempt: generator.next() % 2 == 0) {
                case .complete: _ = machine.complete()
                case .waitForNextAttempt: waits += 1
                default: break
                }
            default:
                if machine.resumeAfterWait() { resumes += 1 }
            }
            if !wasFinished && machine.isFinished { finishes += 1 }
        }
        #expect(finishes <= 1)
        #expect(resumes <= waits)
    }

    /// Random event sequences: the machine reaches `finished` at most once, only through
    /// `complete()` or a cancelled start, and never from `pending` without `start()`.
    @Test(arguments: 0..<200)
    func randomEventSequencesFinishAtMostOnce(seed: Int) {
        var generator = SplitMix64(seed: UInt64(seed))
        var machine = Machine()
        var finishes = 0
        var started = false
        for _ in 0..<12 {
            let wasFinished = machine.isFinished
            switch generator.next() % 6 {
            case 0:
                let action = machine.start()
                if action != .ignore { started = true }
            case 1:
                switch machine.cancel(url: nil) {
                case .stopPreparing: _ = machine.complete()
                default: break
                }
            case 2:
                _ = machine.attachTransfer()
            case 3:
                if machine.attemptEnded(generator.next() % 2 == 0 ? .success : .failure(.cancelled(.init(url: nil)))) == .complete {
                    _ = machine.complete()
                }
            case 4:
                if case .finishing(.parsing) = machine.state {
                    machine.parseEnded(nil)
                    _ = machine.complete()
                }
            default:
                if machine.failBeforeTransfer(.cancelled(.init(url: nil))) { _ = machine.complete() }
            }
            if !wasFinished && machine.isFinished { finishes += 1 }
            if machine.isFinished { #expect(started, "finished without being started") }
        }
        #expect(finishes <= 1)
    }
}
