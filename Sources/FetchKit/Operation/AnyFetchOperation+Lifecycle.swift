import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The lifecycle, step by step. Each step applies one event to the state machine under the lock,
// posts the resulting state changes for ordered delivery, and acts after unlocking.
extension AnyFetchOperation {
    func lifecycleStart() {
        // Reading isReady also reports a readiness change to observers before "executing".
        let ready = isReady
        var deliver = false
        var streams: [AsyncStream<FetchProgress>.Continuation] = []
        let action = core.withLock { core in
            let action = core.machine.start()
            // Cancelled before start, it was heard of at the cancel, which released its handlers.
            if action != .ignore, !core.completionsReleased {
                observeAlone(&core)
            }
            switch action {
            case .begin:
                deliver = core.post(.change(StateChange(key: .executing, oldValue: false, newValue: true)))
            case .finishCancelled:
                // Cancelled before it started: finished now, inside start() as Foundation requires.
                streams = core.endProgressStreams(succeeded: false)
                deliver = core.post(.change(StateChange(key: .finished, oldValue: false, newValue: true)), .releaseCompletions)
            case .ignore:
                break
            }
            return action
        }
        for stream in streams { stream.finish() }
        if deliver { deliverEvents() }
        guard action == .begin else { return }
        guard ready else {
            failBeforeTransfer(.invalidRequest(.init(reason: .startedBeforeReady, url: request?.url)))
            return
        }
        prepareAndSend()
    }

    /// On its own (in no ``FetchQueue``), an operation tells its session's monitors itself: it
    /// makes its record when it starts, or when it is cancelled before that. (A queue's fetch
    /// has its record from the queue's claim.)
    private func observeAlone(_ core: inout Core) {
        guard !core.claimed, core.observed == nil,
              let observed = ObservedFetch.make(id: FetchID.next(), queueMonitors: nil,
                                                sessionMonitors: core.settings.configuration.session.monitorChannel)
        else { return }
        core.observed = observed
        observed.send(.enqueued, self)
    }

    /// - Returns: Whether the cancel changed anything (the caller then tells Foundation).
    func lifecycleCancel(foundationCancel: () -> Void) {
        var deliver = false
        var streams: [AsyncStream<FetchProgress>.Continuation] = []
        let (action, transfer) = core.withLock { core in
            let action = core.machine.cancel(url: (core.sentRequest ?? core.settings.request)?.url)
            switch action {
            case .none:
                break
            case .completeBeforeStart:
                // Not started (its queue may be suspended): the outcome is decided, so whoever
                // waits hears it now; `isFinished` follows when the queue starts it.
                observeAlone(&core)
                streams = core.endProgressStreams(succeeded: false)
                deliver = core.post(.change(StateChange(key: .cancelled, oldValue: false, newValue: true)),
                                    .releaseCompletions)
            case .flagOnly, .stopPreparing, .stopTransfer:
                deliver = core.post(.change(StateChange(key: .cancelled, oldValue: false, newValue: true)))
            }
            return (action, core.transfer)
        }
        for stream in streams { stream.finish() }
        guard action != .none else { return }
        // Foundation's own flag, and readiness: a cancelled operation becomes ready so that its
        // queue starts it, and start() then finishes it.
        foundationCancel()
        if deliver { deliverEvents() }
        switch action {
        case .stopPreparing:
            completeNow()
        case .stopTransfer:
            transfer?.stop()
        case .none, .flagOnly, .completeBeforeStart:
            break
        }
    }

    // MARK: Preparing

    private func prepareAndSend() {
        if let failure = dependencyFailure() {
            failBeforeTransfer(failure)
            return
        }
        let request: URLRequest
        do {
            guard let made = try makeRequest() else {
                failBeforeTransfer(.invalidRequest(.init(reason: .missing, url: nil)))
                return
            }
            request = made
        } catch {
            failBeforeTransfer(.invalidRequest(.init(reason: .preparationFailed(.init(error)), url: self.request?.url)))
            return
        }
        if let problem = RequestValidation.problem(with: request) {
            failBeforeTransfer(.invalidRequest(problem))
            return
        }
        let prepared: URLRequest
        do {
            prepared = try prepareTransferRequest(request)
        } catch {
            failBeforeTransfer(error)
            return
        }
        beginTransfer(prepared)
    }

    private func dependencyFailure() -> FetchError? {
        guard core.withLock({ $0.settings.configuration.requiresSuccessfulDependencies }) else { return nil }
        for dependency in dependencies {
            let name = dependency.name.map { "'\($0)'" } ?? String(describing: type(of: dependency))
            if let fetch = dependency as? AnyFetchOperation, let error = fetch.error {
                return .dependencyFailed(.init(dependency: name, dependencyError: .init(error)))
            }
            if dependency.isCancelled {
                return .dependencyFailed(.init(dependency: name, dependencyError: nil))
            }
        }
        return nil
    }

    private func failBeforeTransfer(_ error: FetchError) {
        if core.withLock({ $0.machine.failBeforeTransfer(error) }) {
            completeNow()
        }
    }

    /// The request is prepared: the first attempt begins (AnyFetchOperation+Attempts.swift).
    private func beginTransfer(_ request: URLRequest) {
        beginAttempt(from: request, continuing: false)
    }

    /// A retry is about to wait: tell the monitors and the retry handlers.
    func willRetry(_ event: RetryEvent) {
        let handlers = core.withLock { core in
            core.observed?.send(.retry(event), self)
            return core.retryHandlers
        }
        for entry in handlers {
            entry.queue.perform { entry.handler(event) }
        }
    }

    // MARK: Parsing and finishing

    /// - Parameter onGlobal: It runs on a thread of ``CallbackQueue/global``.
    func runParse(onGlobal: Bool) {
        var failure: FetchError?
        if !isCancelled {
            let body = core.withLock { core in
                core.parses += 1
                return core.body
            }
            do {
                try process(body)
            } catch {
                failure = error
            }
        }
        let discarded = core.withLock { core -> (any Sendable)? in
            core.machine.parseEnded(failure)
            // A cancel that arrived while parsing wins: the output that parse made is nobody's.
            guard core.machine.isCancelled else { return nil }
            defer { core.output = nil }
            return core.output
        }
        withExtendedLifetime(discarded) {}      // released here, outside the lock
        completeNow(onGlobal: onGlobal)
    }

    /// The one terminal transition: finishing → finished, then notifications and completions.
    ///
    /// - Parameter onGlobal: It runs on a thread of ``CallbackQueue/global``, where a completion
    ///   handler for that queue may then run without another hand-off.
    func completeNow(onGlobal: Bool = false) {
        let (deliver, progress, succeeded, streams, relays) = core.withLock { core in
            let outcome = core.machine.complete()
            let relays = core.progressRelays
            core.dropHandlers(observers: false)
            let succeeded: Bool
            if case .success = outcome { succeeded = true } else { succeeded = false }
            let streams = core.endProgressStreams(succeeded: succeeded)
            let deliver = core.post(
                .change(StateChange(key: .executing, oldValue: true, newValue: false)),
                .change(StateChange(key: .finished, oldValue: false, newValue: true)),
                .releaseCompletions
            )
            return (deliver, core.progress.flatMap { progress in core.progressWrites.map { (progress, $0) } }, succeeded, streams, relays)
        }
        for stream in streams { stream.finish() }
        // The last update waits for no interval, and is handed over before the completions.
        for relay in relays { relay.finish() }
        if succeeded, let (progress, writes) = progress {
            writes.write {
                if progress.totalUnitCount < 0 { progress.totalUnitCount = progress.completedUnitCount }
            }
        }
        if deliver { deliverEvents(onGlobal: onGlobal) }
    }
}

extension AnyFetchOperation: TransferOwner {
    func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?) {
        // A 206 continues a partial download: progress counts the bytes already on disk.
        core.withLock { core in
            core.attempt.answered(statusCode: response.statusCode)
            core.updateObserved { $0.received(response, self) }
        }
        reportProgress(received: 0, expected: expectedLength)
    }

    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest) {
        core.withLock { core in
            // The redirect dropped the credential (see ``Transfer``): from here on the attempt
            // carries none, and a `401` is the answer of a server it was not meant for.
            if !Transfer.sameOrigin(response.url, request.url) { core.attempt.carry(credential: 0) }
            core.observed?.send(.redirected(response, request), self)
        }
    }

    func transferDidReceive(bytes: Int64, of expectedLength: Int64?) {
        reportProgress(received: bytes, expected: expectedLength)
    }
}

/// Checks that a request can be sent at all.
enum RequestValidation {
    static func problem(with request: URLRequest) -> FetchError.InvalidRequest? {
        guard let url = request.url else {
            return .init(reason: .missing, url: nil)
        }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            return .init(reason: .unsupportedScheme(url.scheme), url: url)
        }
        guard let host = url.host, !host.isEmpty else {
            return .init(reason: .malformed("the URL has no host"), url: url)
        }
        let method = request.httpMethod ?? "GET"
        if method.isEmpty || !method.unicodeScalars.allSatisfy(isTokenCharacter) {
            return .init(reason: .malformed("'\(method)' is not a valid HTTP method"), url: url)
        }
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            if name.isEmpty || !name.unicodeScalars.allSatisfy(isTokenCharacter) {
                return .init(reason: .malformed("'\(name)' is not a valid header name"), url: url)
            }
            if value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
                return .init(reason: .malformed("the value of header '\(name)' contains a line break"), url: url)
            }
        }
        return nil
    }

    /// RFC 9110 `tchar`.
    private static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9": return true
        case "!", "#", "$", "%", "&", "'", "*", "+", "-", ".", "^", "_", "`", "|", "~": return true
        default: return false
        }
    }
}
