import Foundation

/// The lifecycle of one ``FetchOperation``, as a pure value: events in, actions out.
///
/// ```
///                        ┌──────── resumeAfterWait ◀──────── executing(waiting) ◀───┐
///                        ▼                                                           │ attemptEnded
/// pending ──start──▶ executing(preparing) ──beginSetup──▶ executing(settingUp)      │ (another attempt)
///    │                    │                                   │ attachTransfer      │
///    │                    │                                   ▼                     │
///    │                    │                         executing(transferring) ────────┘
///    │ (cancelled)        │ failBeforeTransfer / cancel       │ attemptEnded / cancel
///    ▼                    ▼                                   ▼
/// finished ◀──complete── finishing(completing) ◀──── finishing(parsing | stoppingTransfer)
/// ```
///
/// An operation makes one attempt after another (see AnyFetchOperation+Attempts.swift): each
/// is prepared and attached like the first, and one that ends with another to come waits in
/// `executing(waiting)` — a retry's delay, or a download's wait for its disk — holding no
/// transfer (a cancel there completes at once, as while preparing). Whether the policy allows another is worked out where the attempt ends and handed
/// to ``attemptEnded(_:anotherAttempt:)``, which alone decides what follows (a cancel wins).
///
/// **Pausing.** ``pause()`` and ``resume()`` set and clear a wish beside the state
/// (``wantsPause``), as `cancelled` is a flag beside it. Where no transfer is attached the wish
/// takes effect at the next step: an attempt about to be set up, attached or begun after a
/// wait parks in `executing(paused)` instead, holding no transfer. A transfer attached is
/// stopped (`executing(stoppingForPause)`) and its end decides: a success is parsed as ever (the
/// body was complete: the fetch completes, it does not pause), a stopped or failed attempt
/// parks, or — if the wish was taken back meanwhile — the next attempt begins at once. While
/// paused, ``resume()`` prepares the next attempt and ``cancel(url:)`` completes at once.
///
/// ```
/// executing(transferring) ──pause──▶ executing(stoppingForPause) ──attemptEnded──▶ executing(paused)
///                                         │ success: parse                          │ resume
///                                         ▼                                          ▼
///                                  finishing(parsing)                      executing(preparing)
/// ```
///
/// `cancelled` is a flag beside the state, as in Foundation. The operation holds this value
/// under its lock, applies one event, and performs the returned action after unlocking —
/// Foundation notifications, task cancellation and user callbacks never run under the lock.
/// Every transition is in this file; an event that cannot happen in the current state is a
/// bug in FetchKit and traps here, in one place.
struct LifecycleStateMachine: Sendable {
    /// How an operation ended.
    ///
    /// A failure's error is boxed (`indirect`), so that the machine is a few words wide until
    /// something fails: every waiting operation holds one.
    enum Outcome: Sendable {
        case success
        indirect case failure(FetchError)
    }

    /// What the operation is doing while it executes.
    enum Execution: Sendable, Equatable {
        /// Checking dependencies and building the request. No transfer exists yet.
        case preparing
        /// An attempt is being set up: its request recorded, its body sink and handle made. A
        /// cancel now is reported when the setup is over (``attachTransfer()`` then fails, and
        /// ``attemptEnded(_:anotherAttempt:)`` completes it), so that nothing of the attempt
        /// happens after the operation finished.
        case settingUp
        /// A transfer is attached: waiting for a slot in a ``FetchQueue`` (no URLSession task,
        /// no clock yet), or in flight.
        case transferring
        /// Between attempts: a retry's delay, or a download's wait for its disk to catch up.
        /// No transfer exists; ``resumeAfterWait()`` prepares the next attempt.
        case waiting
        /// Paused: its transfer was asked to stop, and its end is awaited. A success is still
        /// parsed; anything else parks it in ``paused`` (or, resumed meanwhile, begins the
        /// next attempt).
        case stoppingForPause
        /// Paused, holding no transfer and no slot: ``resume()`` prepares the next attempt.
        case paused
    }

    /// What remains to do once the transfer is over.
    enum Finishing: Sendable {
        /// The transfer succeeded; the parse hook runs. The outcome is decided when it returns.
        case parsing
        /// Cancelled mid-transfer; waiting for the transfer to confirm it stopped and cleaned up.
        case stoppingTransfer(Outcome)
        /// The outcome is decided; ``LifecycleStateMachine/complete()`` comes next.
        case completing(Outcome)
    }

    enum State: Sendable {
        case pending
        case executing(Execution)
        case finishing(Finishing)
        case finished(Outcome)
    }

    /// The state without its payloads, for tests and diagnostics.
    enum Phase: Sendable, Equatable {
        case pending, executing, finishing, finished
    }

    /// Set by the first ``cancel(url:)``: the error a cancelled operation finishes with.
    var cancellation: FetchError? {
        if case .failure(let error)? = storedCancellation { return error }
        return nil
    }
    /// The cancellation, boxed (see ``Outcome``).
    private var storedCancellation: Outcome? {
        if case .cancelled(let outcome)? = mark { return outcome }
        return nil
    }
    /// What is set beside the state: a pause wished for, or the cancellation — in one word, as
    /// they exclude each other (a cancelled operation is no longer paused, and is not paused).
    private enum Mark: Sendable {
        case pauseWanted
        case cancelled(Outcome)
    }
    private var mark: Mark?
    // After the cancellation: the machine then ends in the state's odd tag byte, and the core's
    // next fields fill its tail (OperationFootprintTests.theCoreIsAFewWordsNotAPage).
    private(set) var state: State = .pending

    /// Someone paused the operation and has not resumed it (see ``pause()``). A wish beside the
    /// state, like the cancellation: it takes effect at the next step where no transfer runs.
    var wantsPause: Bool {
        if case .pauseWanted? = mark { return true }
        return false
    }

    var isCancelled: Bool { cancellation != nil }

    var phase: Phase {
        switch state {
        case .pending: return .pending
        case .executing: return .executing
        case .finishing: return .finishing
        case .finished: return .finished
        }
    }

    /// Foundation's `isExecuting`: true from `start()` until the operation is finished.
    var isExecuting: Bool { phase == .executing || phase == .finishing }

    /// Foundation's `isFinished`.
    var isFinished: Bool { phase == .finished }

    /// The outcome, once decided: finished, or cancelled before it started (Foundation's
    /// `isFinished` then waits for `start()`, but the outcome can no longer change).
    var outcome: Outcome? {
        switch state {
        case .finished(let outcome): return outcome
        case .pending: return storedCancellation
        default: return nil
        }
    }

    // MARK: Events

    enum StartAction: Sendable, Equatable {
        /// Now executing: notify `isExecuting`, then prepare and send.
        case begin
        /// Cancelled before start: now finished as cancelled; notify `isFinished` only.
        case finishCancelled
        /// Already started: nothing to do.
        case ignore
    }

    mutating func start() -> StartAction {
        guard case .pending = state else { return .ignore }
        if let storedCancellation {
            state = .finished(storedCancellation)
            return .finishCancelled
        }
        state = .executing(.preparing)
        return .begin
    }

    enum CancelAction: Sendable, Equatable {
        /// Already cancelled, or finished: nothing changed.
        case none
        /// The flag is now set; the state is unchanged (already finishing).
        case flagOnly
        /// Cancelled before start: the outcome is decided, so completion handlers and awaiting
        /// callers hear it now; the state stays pending until `start()`, which Foundation
        /// requires before `isFinished` (an `OperationQueue` that is suspended starts it later).
        case completeBeforeStart
        /// Cancelled while preparing or between attempts (no transfer): ``complete()`` now.
        case stopPreparing
        /// Cancelled mid-transfer: stop the transfer; it reports back with ``attemptEnded(_:anotherAttempt:)``.
        case stopTransfer
    }

    /// - Parameter url: The URL being fetched, for ``FetchError/Cancellation``.
    mutating func cancel(url: URL?) -> CancelAction {
        if isCancelled || isFinished { return .none }
        // One box, shared by the flag and the outcome.
        let cancelled = Outcome.failure(.cancelled(.init(url: url)))
        mark = .cancelled(cancelled)
        switch state {
        case .pending:
            return .completeBeforeStart
        case .finishing:
            return .flagOnly
        case .executing(.preparing), .executing(.waiting), .executing(.paused):
            state = .finishing(.completing(cancelled))
            return .stopPreparing
        case .executing(.transferring), .executing(.settingUp):
            state = .finishing(.stoppingTransfer(cancelled))
            return .stopTransfer
        case .executing(.stoppingForPause):
            // The stop is under way already: its end completes the operation.
            state = .finishing(.stoppingTransfer(cancelled))
            return .flagOnly
        case .finished:
            preconditionFailure("unreachable: finished was handled above")
        }
    }

    /// An attempt's setup begins (see ``Execution/settingUp``).
    ///
    /// - Returns: `false` if the operation stopped first (a cancel completes it), or parked,
    ///   paused (a ``resume()`` begins the attempt again).
    mutating func beginSetup() -> Bool {
        guard case .executing(.preparing) = state else { return false }
        return proceed(to: .settingUp)
    }

    /// Parks the operation if a pause is wanted (`false`), else moves it to `next` (`true`).
    private mutating func proceed(to next: Execution) -> Bool {
        state = .executing(wantsPause ? .paused : next)
        return !wantsPause
    }

    /// A transfer was created for the prepared request.
    ///
    /// - Returns: `false` if the operation stopped meanwhile (cancelled, failed): the caller
    ///   must discard the transfer without starting it, and, if a cancel came during the
    ///   setup, report it with ``attemptEnded(_:anotherAttempt:)``.
    ///   A pause that came during the setup parks the operation instead (``isParked``): the
    ///   caller discards the transfer unstarted, and reports nothing.
    mutating func attachTransfer() -> Bool {
        switch state {
        case .executing(.preparing), .executing(.settingUp):
            return proceed(to: .transferring)
        default:
            return false
        }
    }

    /// Preparation failed (a failed dependency, an invalid request, an attempt past the
    /// fetch's deadline…) before any transfer.
    ///
    /// - Returns: `true` if the caller must now ``complete()``; `false` if the operation had
    ///   already stopped (a cancel won the race and completes it, or is reported by the setup).
    mutating func failBeforeTransfer(_ error: FetchError) -> Bool {
        switch state {
        case .executing(.preparing), .executing(.settingUp):
            state = .finishing(.completing(.failure(error)))
            return true
        default:
            return false
        }
    }

    enum AttemptEndAction: Sendable, Equatable {
        /// Run the parse hook, then ``parseEnded(_:)``.
        case parse
        /// ``complete()`` now.
        case complete
        /// Wait, then ``resumeAfterWait()`` and begin the next attempt.
        case waitForNextAttempt
        /// Stopped for a pause: parked in `executing(paused)` until ``resume()``.
        case park
        /// Stopped for a pause that was taken back meanwhile: begin the next attempt now (it
        /// is in `executing(preparing)`).
        case beginNextAttempt
        /// A late or duplicate report; nothing to do.
        case ignore
    }

    /// An attempt ended: its transfer succeeded or failed, or confirmed it stopped after a cancel.
    ///
    /// - Parameter anotherAttempt: Whether another attempt follows this failed one (a retry the
    ///   ``RetryPolicy`` allows, or a download's continuation): then the operation waits for it,
    ///   unless a cancel stopped it meanwhile. Ignored for a success.
    mutating func attemptEnded(_ result: Outcome, anotherAttempt: Bool = false) -> AttemptEndAction {
        switch state {
        case .executing(.transferring), .executing(.stoppingForPause):
            let stoppingForPause = isStoppingForPause
            switch result {
            case .success:
                // Stopping for a pause: the body was complete before the stop took.
                state = .finishing(.parsing)
                return .parse
            case .failure where anotherAttempt:
                // A retry or a continuation waits as ever (a continuation waits for the stopped
                // task's last bytes to reach the disk); if a pause stopped it, the wait's end parks it.
                state = .executing(.waiting)
                return .waitForNextAttempt
            case .failure(let error) where !stoppingForPause || !error.isCancellation:
                // The attempt failed for good (before a pause's stop took): that is its end.
                state = .finishing(.completing(result))
                return .complete
            case .failure:
                return proceed(to: .preparing) ? .beginNextAttempt : .park
            }
        case .finishing(.stoppingTransfer(let decided)):
            state = .finishing(.completing(decided))
            return .complete
        default:
            return .ignore
        }
    }

    enum PauseAction: Sendable, Equatable {
        /// Not paused: already paused, cancelled, finishing or finished.
        case none
        /// Paused: it takes effect at the next step (pending, preparing, setting up, waiting),
        /// or the stop under way parks it.
        case flagOnly
        /// Paused mid-transfer: stop the transfer; its end comes to ``attemptEnded(_:anotherAttempt:)``.
        case stopTransfer
    }

    /// Pauses the operation: from now on it starts no transfer, and a transfer attached is
    /// stopped. Too late once the transfer has ended (finishing or finished), or once cancelled.
    mutating func pause() -> PauseAction {
        guard mark == nil else { return .none }
        switch state {
        case .pending, .executing(.preparing), .executing(.settingUp), .executing(.waiting),
             .executing(.stoppingForPause):
            mark = .pauseWanted
            return .flagOnly
        case .executing(.transferring):
            mark = .pauseWanted
            state = .executing(.stoppingForPause)
            return .stopTransfer
        case .executing(.paused):
            preconditionFailure("FetchKit bug: parked without a pause")
        case .finishing, .finished:
            return .none
        }
    }

    enum ResumeAction: Sendable, Equatable {
        /// Not paused, or over: nothing changed.
        case none
        /// No longer paused; whatever it was doing goes on (its stop under way begins the next
        /// attempt when it ends).
        case flagOnly
        /// It was parked: it is preparing again; begin the next attempt.
        case beginAttempt
    }

    /// Takes a ``pause()`` back.
    mutating func resume() -> ResumeAction {
        guard wantsPause else { return .none }
        mark = nil
        switch state {
        case .executing(.paused):
            state = .executing(.preparing)
            return .beginAttempt
        case .finishing, .finished:
            return .none
        default:
            return .flagOnly
        }
    }

    /// Whether it is paused and holds no transfer: parked in `executing(paused)`.
    var isParked: Bool { execution == .paused }

    /// Whether a stop for a pause is under way (its end is awaited).
    var isStoppingForPause: Bool { execution == .stoppingForPause }

    /// Where it is while executing; `nil` before and after.
    private var execution: Execution? {
        if case .executing(let execution) = state { return execution }
        return nil
    }

    /// Whether it is paused: asked to pause and not resumed, and not over.
    var isPaused: Bool {
        guard wantsPause else { return false }
        switch state {
        case .finishing, .finished: return false
        default: return true
        }
    }

    /// The wait between attempts is over: the next attempt is prepared (and attached like the
    /// first, with ``attachTransfer()``).
    ///
    /// - Returns: `false` if a cancel ended the wait first: nothing more to do.
    ///   A pause that came during the wait parks it instead (``resume()`` then begins it).
    mutating func resumeAfterWait() -> Bool {
        guard case .executing(.waiting) = state else { return false }
        return proceed(to: .preparing)
    }

    /// The attempt's setup found that it must wait before anything is sent (for the refresh
    /// of its credential): `executing(waiting)`, which ``resumeAfterWait()`` or
    /// ``failWhileWaiting(_:)`` ends.
    ///
    /// - Returns: `false` if a cancel came during the setup (report it as for ``attachTransfer()``).
    mutating func waitDuringSetup() -> Bool {
        guard case .executing(.settingUp) = state else { return false }
        state = .executing(.waiting)
        return true
    }

    /// What the operation waited for failed (its credential's refresh): it ends with `error`.
    ///
    /// - Returns: `true` if the caller must now ``complete()``; `false` if a cancel ended the
    ///   wait first.
    mutating func failWhileWaiting(_ error: FetchError) -> Bool {
        guard case .executing(.waiting) = state else { return false }
        state = .finishing(.completing(.failure(error)))
        return true
    }

    /// Whether an attempt's transfer is attached and no cancel has stopped it.
    var isTransferring: Bool { execution == .transferring }

    /// The parse hook returned (`nil`) or threw. A cancel that arrived while it ran wins.
    mutating func parseEnded(_ error: FetchError?) {
        guard case .finishing(.parsing) = state else {
            preconditionFailure("FetchKit bug: parse ended in state \(phase)")
        }
        if let storedCancellation {
            state = .finishing(.completing(storedCancellation))
        } else if let error {
            state = .finishing(.completing(.failure(error)))
        } else {
            state = .finishing(.completing(.success))
        }
    }

    /// The one terminal transition: finishing → finished.
    mutating func complete() -> Outcome {
        guard case .finishing(.completing(let outcome)) = state else {
            preconditionFailure("FetchKit bug: complete() in state \(phase)")
        }
        state = .finished(outcome)
        return outcome
    }
}
