import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Attempts: one after another until one succeeds, the ``RetryPolicy`` gives up, the total
// timeout would be passed, or the operation is cancelled. Each is a step of the operation's
// own lifecycle (``LifecycleStateMachine``): prepared and attached like the first, and, when it
// ends with another to come, a wait in `executing(waiting)` that holds no transfer. The
// operation is the owner of each attempt's transfer; nothing stands between them.
//
// Which bound holds (documented for users on ``FetchConfiguration/idleTimeout``,
// ``FetchConfiguration/totalTimeout`` and ``RetryPolicy``): the idle timeout bounds the silence
// of each attempt, and an attempt that heard nothing from the server within it — no response
// head — is not retried, so a request's `timeoutInterval` of 1 s against a server that never
// answers ends the fetch after 1 s. The total timeout is one deadline from the first attempt's
// start over every attempt and every wait: no retry begins once it has passed or when its
// wait would pass it, and each attempt is stopped at it.
//
// Each attempt is a fresh ``Transfer`` (or a place in a ``FetchQueue``, which releases the
// slot during the wait), built from a fresh request — so a download resumes from what the last
// attempt wrote — and a fresh body sink.
extension AnyFetchOperation {
    /// Begins an attempt, in `executing(preparing)`: the first, once the request is prepared,
    /// or a later one once its wait is over.
    ///
    /// The setup runs in `executing(settingUp)`: a cancel meanwhile is reported once it is over,
    /// so that the attempt's record, its monitors' `started` and a download's partial file are
    /// all done before the operation finishes.
    ///
    /// - Parameters:
    ///   - prepared: The prepared request, for the first attempt; later ones start from the
    ///     one the operation keeps (``Core/preparedRequest``).
    ///   - continuing: The last attempt was stopped because the disk fell behind; this one
    ///     continues it (with `Range`, from what is on disk) and is not a retry.
    func beginAttempt(from prepared: URLRequest? = nil, continuing: Bool) {
        typealias Setup = (request: URLRequest, configuration: ConfigurationBox, attempt: Int, firstStart: UInt64,
                           coordinator: (any TransferCoordinator)?, claimed: Bool, id: FetchID)
        enum Begin { case setUp(Setup), stopped, unprepared }
        let begin = core.withLock { core -> Begin in
            guard let request = prepared ?? core.preparedRequest else { return .unprepared }
            // Cancelled first: the cancel completed it. Paused first: it is parked, and its
            // resume begins the attempt from the request kept here.
            guard core.machine.beginSetup() else {
                if core.machine.isParked, core.preparedRequest == nil { core.attemptBase = request }
                return .stopped
            }
            core.attempt.begin()
            // A continuation (or a resume) is the same attempt, unless none was made yet.
            return .setUp((request, core.settings.configurationBox, continuing && core.attempts > 0 ? core.attempts : core.attempts + 1,
                           core.attempt.firstStart, core.coordinator, core.claimed, FetchID(rawValue: claimedID)))
        }
        let setup: Setup
        switch begin {
        case .setUp(let made): setup = made
        case .stopped: return
        case .unprepared: preconditionFailure("FetchKit bug: an attempt began before its request was prepared")
        }
        let (request, configuration, attempt, firstStart, coordinator, claimed, id) = setup
        var limits = TransferLimits(configuration: configuration, request: request)
        var deadline: TimeInterval?
        if let total = limits.totalTimeout, firstStart != 0 {
            // The total timeout covers every attempt and every wait: this attempt ends at the
            // fetch's deadline, and its error names the total as set.
            let left = Self.timeLeft(of: total, since: firstStart)
            guard left > 0 else {
                abandonSetup(.timedOut(.init(kind: .total, interval: total, url: request.url)))
                return
            }
            limits.fetchStartedAt = firstStart
            deadline = left
        }
        // The credential, if the queue has one for this request: current now, or worth a wait.
        var credential: (FetchCredential, FetchAuthentication)?
        if let coordinator, let authentication = authentication(for: request, on: coordinator) {
            switch authentication.beginAttempt(url: request.url, on: coordinator) {
            case .send(let current):
                credential = (current, authentication)
            case .wait(let generation, _):
                waitForRefresh(of: generation, by: authentication, prepared: request)
                return
            case .fail(let error):
                abandonSetup(error)
                return
            }
        }
        var attemptSetup = prepareAttempt(request, attempt: attempt)
        var carried: AttemptCredential?
        if let (current, authentication) = credential {
            // Last, over the app's own headers; kept out of the request the operation records.
            // The queue puts the then-current credential on it when it grants the slot.
            carried = AttemptCredential(authentication: authentication, generation: current.generation,
                                        bareRequest: attemptSetup.request)
            authentication.authenticator.apply(current, to: &attemptSetup.request)
        }
        let priorityOverride = core.withLock { core in
            if let (current, _) = credential { core.attempt.carry(credential: current.generation) }
            return core.priorityOverride
        }
        limits.acceptsNotModified = attemptSetup.acceptsNotModified
        // Holds the attempt's handle, unless a cancel or a pause came during the setup (the
        // handle is then dropped unstarted, or stopped by its queue, and the cancel reported).
        let attach = { (handle: any TransferHandle) -> Bool in
            let attached = self.core.withLock { core -> (attached: Bool, parked: Bool, generation: Int32?) in
                guard core.machine.attachTransfer() else { return (false, core.machine.isParked, nil) }
                core.transfer = handle
                // A later attempt may wait for a queue slot, where no transfer clock runs: the
                // fetch's deadline still holds there.
                guard claimed, deadline != nil else { return (true, false, nil) }
                return (true, false, core.attempt.armDeadline())
            }
            guard attached.attached else {
                if !attached.parked { self.abandonSetup(.cancelled(.init(url: request.url))) }
                return false
            }
            if let generation = attached.generation, let deadline {
                DispatchQueue.global().asyncAfter(deadline: .now() + max(0, deadline)) { [weak self] in
                    self?.deadlinePassedWhileWaiting(generation: generation)
                }
            }
            return true
        }
        if let coordinator {
            // One call hands the attempt over. A body kept in memory gets its sink at grant.
            coordinator.enqueue(QueuedAttempt(
                owner: self, id: id, request: attemptSetup.request, limits: limits, session: configuration.value.session,
                priority: priorityOverride ?? queuePriority, sink: makeBodySinkBeforeGrant(),
                resumedFrom: attemptSetup.resumedFrom, credential: carried, ownBudget: ownReceiveBudget(limits.bandwidthLimit)
            ), attach: attach)
        } else if claimed {
            // Its queue was freed (and is cancelling it): no transfer outside the queue's limits.
            abandonSetup(.cancelled(.init(url: request.url)))
        } else {
            let transfer = Transfer(request: attemptSetup.request, session: configuration.value.session, limits: limits,
                                    sink: makeBodySink(), owner: self,
                                    receiveBudgets: ownReceiveBudget(limits.bandwidthLimit).map { [$0] } ?? [])
            if attach(transfer) { transfer.start() }
        }
    }

    /// The attempt's setup ends without a transfer: with `error`, or, if a cancel came during
    /// the setup, as cancelled (the cancel left the reporting to the setup).
    func abandonSetup(_ error: FetchError) {
        let complete = core.withLock { core in
            core.machine.failBeforeTransfer(error)
                || core.machine.attemptEnded(.failure(error)) == .complete
        }
        if complete { completeNow() }
    }

    /// The fetch's deadline came: stop the attempt that timer `generation` watches if it is
    /// still the current one and waits for its slot (one that started is stopped by its own
    /// transfer's clock).
    private func deadlinePassedWhileWaiting(generation: Int32) {
        let waiting = core.withLock { core -> (any TransferHandle)? in
            guard core.machine.isTransferring, let current = core.transfer,
                  core.attempt.deadlinePassed(generation: generation)
            else { return nil }
            return current
        }
        waiting?.stop()
    }

    /// A retry's delay, or a continuation's wait for the disk, is over: the next attempt
    /// begins, unless a cancel ended the wait first.
    func waitEnded(continuing: Bool) {
        if core.withLock({ $0.machine.resumeAfterWait() }) {
            beginAttempt(continuing: continuing)
        }
    }

    /// What is left of the total timeout `total` that started at `start` (uptime ns).
    static func timeLeft(of total: TimeInterval, since start: UInt64) -> TimeInterval {
        total - Double(Transfer.now() &- start) / 1e9
    }

    /// What follows an attempt that ended with `result`.
    enum NextAttempt {
        /// None: the fetch ends with this result (unless a cancel stopped it).
        case none
        /// A retry after the event's delay.
        case retry(RetryEvent)
        /// A download continues once the disk has caught up with `sink`.
        case continuation(any DownloadBodySink)
        /// The server refused the credential: send again with the current one, once the refresh
        /// of `generation` is over (at once for `nil`).
        case authenticate(FetchAuthentication?, generation: UInt64)
    }

    /// Whether another attempt follows one that ended with `result`, by the policy, the total
    /// timeout, and whether the attempt heard an answer or stopped for the disk; and the result
    /// the fetch ends with if none does. Decided outside the lock (the policy is the user's
    /// code); the lifecycle then decides whether a cancel wins (``LifecycleStateMachine/attemptEnded(_:anotherAttempt:)``).
    private func nextAttempt(after result: TransferResult) -> (next: NextAttempt, result: TransferResult) {
        let (request, configuration, attempt, ending, firstStart) = core.withLock { core in
            (core.preparedRequest, core.settings.configurationBox, core.attempts, core.attempt.end(), core.attempt.firstStart)
        }
        let (answered, overdue) = (ending.answered, ending.overdue)
        // Granted its slot while its credential was being refreshed: it sent nothing, and waits.
        if let atGrant = ending.refreshAtGrant { return (.authenticate(atGrant.authentication, generation: atGrant.generation), result) }
        guard case .failure(let error, _) = result else { return (.none, result) }
        // A stream whose reader got a byte: the error is its end.
        guard repeatsAttempts else { return (.none, result) }
        let total = configuration.transferSettings.totalTimeout
        if overdue, error.isCancellation, let total {
            // Stopped in the queue at the fetch's deadline.
            return (.none, .failure(.timedOut(.init(kind: .total, interval: total, url: request?.url)), nil))
        }
        // Stopped for the disk to catch up: continue as the same attempt once it has.
        if let sink = sinkThatFellBehind() { return (.continuation(sink), result) }
        if case .failure(_, let response?) = result, let refused = afterRefusal(response, error: error) {
            return refused
        }
        // The source changed under a resume: the whole file, now, unless the deadline passed.
        if startsOver(after: error), total.map({ firstStart == 0 || Self.timeLeft(of: $0, since: firstStart) > 0 }) ?? true {
            return (.retry(RetryEvent(attempt: attempt + 1, delay: 0, error: error)), result)
        }
        guard let delay = configuration.value.retryPolicy.delay(after: error, attempt: attempt, method: request?.httpMethod ?? "GET")
        else { return (.none, result) }
        // Silent for the whole idle timeout without a word: the timeout the user set is how
        // long they wait for an answer, and asking again would multiply it.
        if case .timedOut(let timeout) = error, timeout.kind == .idle, !answered { return (.none, result) }
        // A wait that would end past the deadline is not begun: the last error stands.
        if let total, firstStart != 0, delay >= Self.timeLeft(of: total, since: firstStart) { return (.none, result) }
        return (.retry(RetryEvent(attempt: attempt + 1, delay: delay, error: error)), result)
    }

    // MARK: Reports from the current attempt's transfer

    func transferDidStart() {
        core.withLock { core in
            core.attempt.started(attempt: core.attempts, request: core.sentRequest, at: Transfer.now())
        }
    }

    /// The current attempt got its transfer slot from its queue.
    func attemptGranted() {
        core.withLock { $0.attemptGranted(self) }
    }

    /// How the attempt that `handle` stands for ended: ignored unless `handle` is the current
    /// attempt's (a cancel that raced with the end may stop an attempt that its freed queue had
    /// already told).
    func transferDidEnd(_ reported: TransferResult, of handle: any TransferHandle) {
        guard core.withLock({ $0.transfer === handle }) else { return }
        let (next, result) = nextAttempt(after: reported)
        let stored = storedBodyIfNotModified(result)
        let outcome: LifecycleStateMachine.Outcome
        switch result {
        case .success: outcome = .success
        case .failure(let error, _): outcome = .failure(error)
        }
        let anotherAttempt: Bool
        if case .none = next { anotherAttempt = false } else { anotherAttempt = true }
        let (action, parseQueue) = core.withLock { core in
            core.transfer = nil
            let action = core.machine.attemptEnded(outcome, anotherAttempt: anotherAttempt)
            if action == .parse || action == .complete {
                switch result {
                case .success(let response, let body, let trailers):
                    core.response = response
                    core.trailers = trailers
                    if response.statusCode == 304 && core.sentConditionalRequest {
                        // Nothing changed: the output is made from the body the store kept.
                        core.isNotModified = true
                        core.body = stored.map(ResponseBody.data)
                    } else {
                        core.body = body
                    }
                case .failure(_, let response):
                    core.response = response
                }
            }
            return (action, core.settings.configurationBox.value.parseQueue)
        }
        switch action {
        case .parse:
            parseQueue.perform { self.runParse(onGlobal: parseQueue.isGlobal) }
        case .complete:
            // Off the router queue: observers and Foundation's bookkeeping must not hold up
            // other transfers' callbacks.
            DispatchQueue.global().async { self.completeNow(onGlobal: true) }
        case .waitForNextAttempt:
            switch next {
            case .retry(let event):
                willRetry(event)
                // Holds the operation: a fetch started by hand and not kept by its caller must
                // still finish (a cancelled one is freed when the delay ends).
                DispatchQueue.global().asyncAfter(deadline: .now() + event.delay) {
                    self.waitEnded(continuing: false)
                }
            case .continuation(let sink):
                // From what is on disk, once the writer has caught up and the stopped task is over.
                sink.whenReadyToContinue { self.waitEnded(continuing: true) }
            case .authenticate(let authentication?, let generation):
                joinRefresh(of: generation, by: authentication)
            case .authenticate(nil, _):
                DispatchQueue.global().async { self.waitEnded(continuing: false) }
            case .none:
                preconditionFailure("unreachable: the lifecycle waits only when another attempt follows")
            }
        case .park, .ignore:
            break
        case .beginNextAttempt:
            // Paused and resumed before the stop took: the next attempt goes on from here.
            DispatchQueue.global().async { self.beginAttempt(continuing: true) }
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
            connectTimeout: configuration.connectTimeout.map { max(0.001, $0) },
            maximumResponseSize: configuration.maximumResponseSize,
            acceptableStatusCodes: configuration.acceptableStatusCodes,
            credentials: configuration.credentials,
            redirectPolicy: configuration.redirectPolicy,
            allowsInsecureRedirects: configuration.allowsInsecureRedirects,
            bandwidthLimit: configuration.bandwidthLimit
        )
    }
}

extension AnyFetchOperation {
    /// The budget of the fetch's own bandwidth limit, one for all its attempts (made at the
    /// first); none without a limit.
    func ownReceiveBudget(_ limit: Int?) -> ReceiveBudget? {
        guard let limit else { return nil }
        return core.withLock { core in
            if let budget = core.ownBudget, budget.rate == limit { return budget }
            let budget = ReceiveBudget(bytesPerSecond: limit)
            core.ownBudget = budget
            return budget
        }
    }
}

extension AnyFetchOperation.Core {
    /// The current attempt got its transfer: the fetch's monitors hear that it started, once.
    func attemptGranted(_ operation: AnyFetchOperation) {
        guard let request = sentRequest else { return }
        updateObserved { $0.began(request, operation) }
    }
}
