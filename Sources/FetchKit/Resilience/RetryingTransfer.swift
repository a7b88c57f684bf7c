import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The transfer an operation holds: one attempt after another until one succeeds, its
/// ``RetryPolicy`` gives up, the total timeout would be passed, or the operation stops it.
///
/// Which bound holds (documented for users on ``FetchConfiguration/idleTimeout``,
/// ``FetchConfiguration/totalTimeout`` and ``RetryPolicy``): the idle timeout bounds the silence of
/// each attempt, and an attempt that heard nothing from the server within it — no response
/// head — is not retried, so a request's `timeoutInterval` of 1 s against a server that never
/// answers ends the fetch after 1 s. The total timeout is one deadline from the first attempt's
/// start over every attempt and every wait: no retry begins once it has passed or when its
/// wait would pass it, and each attempt is stopped at it.
///
/// Each attempt is a fresh ``Transfer`` (or a place in a ``FetchQueue``, which releases the
/// slot during the wait), built from a fresh request — so a download resumes from what the last
/// attempt wrote — and a fresh body sink. The operation hears of each retry before its wait,
/// and of the end exactly once.
final class RetryingTransfer: TransferHandle, TransferOwner, @unchecked Sendable {
    private let operation: AnyFetchOperation
    private let request: URLRequest
    /// The operation's configuration, shared (its retry policy, session and limits are read
    /// from it when needed): a waiting fetch keeps one reference, not copies of them.
    private let configuration: AnyFetchOperation.ConfigurationBox

    // The fields are ordered to pack (a waiting fetch holds this): words first, then the
    // odd-sized ones, the flags last.
    private struct State {
        var attempt: Int32 = 0
        /// Counts attempts begun (continuations included), so that a deadline timer knows
        /// whether the attempt it watches is still the current one.
        var generation: Int32 = 0
        var current: (any TransferHandle)?
        /// The current attempt's body sink, if it writes a file: it says whether it stopped the
        /// transfer to let the disk catch up. (A memory sink never does.)
        var sink: (any ResponseBodySink)?
        /// When the first attempt's transfer started: the total timeout counts from there.
        var firstStart: UInt64?
        /// A retry's wait, or a continuation's wait for the disk, is under way. Only one can be:
        /// the next begins after the attempt this one starts; a stop ends it for good.
        var waiting = false
        var stopped = false
        var finished = false
        /// Whether the current attempt got a response head: a server that answered and then
        /// stalled is worth another attempt; one that stayed silent for the whole idle timeout
        /// is not.
        var answered = false
        /// Whether the current attempt's transfer has started (it may wait for a queue slot).
        var attemptStarted = false
        /// The fetch's deadline passed while the current attempt waited for a slot: it was
        /// stopped, and ends as a total timeout rather than a cancel.
        var overdue = false
    }

    /// Guarded by the operation's lock (``AnyFetchOperation/core``), so that the loop needs no
    /// lock of its own: a waiting fetch holds one lock, not two. Nothing calls out while holding
    /// it, and the operation never calls into the loop while holding it.
    private var state = State()
    /// Whether attempts go through a coordinator (then none goes around it once it is gone).
    /// The coordinator itself is the operation's (``AnyFetchOperation/Core/coordinator``, weak:
    /// a queue is not kept alive by what it holds), read for each attempt.
    private let coordinated: Bool

    private func withState<Result>(_ body: (inout State) -> Result) -> Result {
        operation.core.withLock { _ in body(&state) }
    }

    init(operation: AnyFetchOperation, request: URLRequest, configuration: AnyFetchOperation.ConfigurationBox,
         coordinator: (any TransferCoordinator)?) {
        self.operation = operation
        self.request = request
        self.configuration = configuration
        coordinated = coordinator != nil
    }

    /// The limits every attempt starts from.
    private var limits: TransferLimits {
        TransferLimits(configuration: configuration, request: request)
    }

    func start() {
        beginAttempt(continuing: false)
    }

    func stop() {
        enum Action { case none, stopCurrent(any TransferHandle), finishCancelled }
        let action = withState { state -> Action in
            state.stopped = true
            if state.waiting {
                state.waiting = false
                return .finishCancelled
            }
            if let current = state.current { return .stopCurrent(current) }
            // An attempt is being set up: it sees `stopped` and reports the cancel.
            return .none
        }
        switch action {
        case .none: break
        case .stopCurrent(let current): current.stop()
        case .finishCancelled: finish(.failure(.cancelled(.init(url: request.url)), nil))
        }
    }

    // MARK: Attempts

    /// - Parameter continuing: The last attempt was stopped because the disk fell behind; this
    ///   one continues it (with `Range`, from what is on disk) and is not a retry.
    private func beginAttempt(continuing: Bool) {
        // Under the operation's lock, which guards this loop's state too.
        let (attempt, firstStart, generation, coordinator) = operation.core.withLock { core in
            if !continuing { state.attempt += 1 }
            state.answered = false
            state.attemptStarted = false
            state.generation &+= 1
            return (Int(state.attempt), state.firstStart, state.generation, core.coordinator)
        }
        var limits = self.limits
        if let total = limits.totalTimeout, let firstStart {
            // The total timeout covers every attempt and every wait: this attempt ends at the
            // fetch's deadline, and its error names the total as set.
            guard Self.timeLeft(of: total, since: firstStart) > 0 else {
                finish(.failure(.timedOut(.init(kind: .total, interval: total, url: request.url)), nil))
                return
            }
            limits.fetchStartedAt = firstStart
        }
        let setup = operation.prepareAttempt(request, attempt: attempt)
        limits.acceptsNotModified = setup.acceptsNotModified
        let handle: any TransferHandle
        let sink: (any ResponseBodySink)?
        if let coordinator {
            // A body kept in memory gets its sink when the queue grants the slot.
            sink = operation.makeBodySinkBeforeGrant()
            handle = coordinator.makeTransfer(for: operation, request: setup.request, limits: limits, sink: sink, owner: self)
        } else if coordinated {
            // Its queue was freed, cancelling what it held.
            finish(.failure(.cancelled(.init(url: request.url)), nil))
            return
        } else {
            let made = operation.makeBodySink()
            sink = made
            handle = Transfer(request: setup.request, session: configuration.value.session, limits: limits, sink: made, owner: self)
        }
        let go = withState { state -> Bool in
            guard !state.stopped else { return false }
            state.current = handle
            state.sink = sink
            return true
        }
        guard go else {
            finish(.failure(.cancelled(.init(url: request.url)), nil))
            return
        }
        if coordinated, let total = limits.totalTimeout, let firstStart {
            // A later attempt may wait for a queue slot, where no transfer clock runs: the
            // fetch's deadline still holds there.
            let remaining = Self.timeLeft(of: total, since: firstStart)
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, remaining)) { [weak self] in
                self?.deadlinePassedWhileWaiting(generation: generation)
            }
        }
        handle.start()
    }

    /// The fetch's deadline came: stop the attempt `generation` if it is still waiting for its
    /// slot (one that started is stopped by its own transfer's clock).
    private func deadlinePassedWhileWaiting(generation: Int32) {
        let waiting = withState { state -> (any TransferHandle)? in
            guard state.generation == generation, !state.attemptStarted, !state.stopped, let current = state.current else { return nil }
            state.overdue = true
            return current
        }
        waiting?.stop()
    }

    /// A retry's delay, or a continuation's wait for the disk, is over: the next attempt
    /// begins, unless a stop ended the wait first.
    private func waitEnded(continuing: Bool) {
        let go = withState { state -> Bool in
            guard state.waiting, !state.stopped else { return false }
            state.waiting = false
            return true
        }
        if go { beginAttempt(continuing: continuing) }
    }

    /// What is left of the total timeout `total` that started at `start` (uptime ns).
    private static func timeLeft(of total: TimeInterval, since start: UInt64) -> TimeInterval {
        total - Double(Transfer.now() &- start) / 1e9
    }

    private func finish(_ result: TransferResult) {
        let first = withState { state -> Bool in
            defer { state.finished = true }
            return !state.finished
        }
        guard first else { return }
        operation.transferDidEnd(result)
    }

    // MARK: TransferOwner (the current attempt)

    func transferDidStart() {
        withState { state in
            state.attemptStarted = true
            if state.firstStart == nil { state.firstStart = Transfer.now() }
        }
    }

    func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?) {
        withState { $0.answered = true }
        operation.transferDidReceive(response: response, expectedLength: expectedLength)
    }

    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest) {
        operation.transferDidRedirect(response, to: request)
    }

    func transferDidReceive(bytes: Int64, of expectedLength: Int64?) {
        operation.transferDidReceive(bytes: bytes, of: expectedLength)
    }

    func transferDidSend(bytes: Int64, of total: Int64?) {
        operation.transferDidSend(bytes: bytes, of: total)
    }

    func transferDidEnd(_ result: TransferResult) {
        enum Decision { case finish, retry(RetryEvent), continueTransfer(any ResponseBodySink) }
        let method = request.httpMethod ?? "GET"
        let (policy, limits) = (configuration.value.retryPolicy, self.limits)
        let overdue = withState { state -> Bool in
            defer { state.overdue = false }
            return state.overdue
        }
        if overdue, case .failure(let error, _) = result, error.isCancellation, let total = limits.totalTimeout {
            // Stopped in the queue at the fetch's deadline.
            withState { state in
                state.current = nil
                state.sink = nil
            }
            finish(.failure(.timedOut(.init(kind: .total, interval: total, url: request.url)), nil))
            return
        }
        let sink = withState { $0.sink }
        let fellBehind = sink?.stoppedForBackpressure ?? false
        let decision = withState { state -> Decision in
            state.current = nil
            state.sink = nil
            // Stopped for the disk to catch up: continue as the same attempt once it has. A stop
            // meanwhile ends the wait at once, as it ends a retry's.
            if fellBehind, let sink, !state.stopped, case .failure = result {
                state.waiting = true
                return .continueTransfer(sink)
            }
            guard !state.stopped, case .failure(let error, _) = result,
                  let delay = policy.delay(after: error, attempt: Int(state.attempt), method: method)
            else { return .finish }
            // Silent for the whole idle timeout without a word: the timeout the user set is
            // how long they wait for an answer, and asking again would multiply it.
            if case .timedOut(let timeout) = error, timeout.kind == .idle, !state.answered { return .finish }
            if let total = limits.totalTimeout, let firstStart = state.firstStart {
                // A wait that would end past the deadline is not begun: the last error stands.
                guard delay < Self.timeLeft(of: total, since: firstStart) else { return .finish }
            }
            state.waiting = true
            return .retry(RetryEvent(attempt: Int(state.attempt) + 1, delay: delay, error: error))
        }
        switch decision {
        case .finish:
            finish(result)
        case .continueTransfer(let sink):
            // From what is on disk, once the writer has caught up and the stopped task is over.
            sink.whenReadyToContinue { self.waitEnded(continuing: true) }
        case .retry(let event):
            operation.willRetry(event)
            DispatchQueue.global().asyncAfter(deadline: .now() + event.delay) { [weak self] in
                self?.waitEnded(continuing: false)
            }
        }
    }
}

extension TransferLimits {
    /// The limits of a fetch of `request` under `configuration`, before any attempt adds its own.
    init(configuration: AnyFetchOperation.ConfigurationBox, request: URLRequest) {
        let idle = configuration.value.idleTimeout ?? (request.timeoutInterval > 0 ? request.timeoutInterval : 60)
        self.init(settings: configuration.transferSettings, idleTimeout: max(0.001, idle))
    }
}

extension TransferLimits.Settings {
    /// What `configuration` sets for every transfer.
    convenience init(configuration: FetchConfiguration) {
        self.init(
            totalTimeout: configuration.totalTimeout.map { max(0.001, $0) },
            maximumResponseSize: configuration.maximumResponseSize,
            acceptableStatusCodes: configuration.acceptableStatusCodes,
            credentials: configuration.credentials,
            redirectPolicy: configuration.redirectPolicy
        )
    }
}
