import Foundation

/// The state of one ``FetchAuthentication``, as a pure value: events in, decisions out.
///
/// ```
///             refused(current) / needs refresh
///  idle ──────────────────────────────────────▶ refreshing(g, waiters)
///   ▲  ▲                                          │ refreshEnded(.success)  → new credential g+1, idle
///   │  └──────────── set(credential) ─────────────┤ refreshEnded(.cancelled) → idle (also a timeout)
///   │                                             ▼ refreshEnded(.failure)  → failed(g)
///   └──────────── set(credential) ──────────── failed(g, error)
/// ```
///
/// Every attempt carries the generation it was sent with. A refusal of an older generation is
/// sent again at once with the current credential; a refusal of the current one starts the
/// refresh, or joins the one running; while a generation's refresh failed, its fetches fail
/// at once. Setting a credential re-arms it. Waiters are generic, so that tests use plain values.
struct AuthenticationState<Waiter> {
    enum Refresh {
        case idle
        case refreshing(generation: UInt64, waiters: [Waiter])
        case failed(generation: UInt64, error: FetchError)
    }

    private(set) var credential: FetchCredential?
    private(set) var refresh: Refresh = .idle
    private var lastGeneration: UInt64 = 0
    /// When the refreshes of the current window started (uptime ns).
    private var refreshStarts: [UInt64] = []
    let maximumRefreshes: Int
    let window: TimeInterval

    init(credential: FetchCredential?, maximumRefreshes: Int, window: TimeInterval) {
        self.maximumRefreshes = max(1, maximumRefreshes)
        self.window = max(0, window)
        if let credential { _ = set(credential) }
    }

    /// What an attempt, or a refusal, leads to.
    enum Decision: Equatable {
        /// Send with this credential.
        case send(FetchCredential)
        /// Wait for the refresh of this generation; `start` is the credential to refresh when
        /// the caller must start the refresh (`nil`: another caller started it).
        case wait(generation: UInt64, start: FetchCredential?)
        /// Fail with this error; nothing is sent.
        case fail(FetchError)
    }

    /// The credential changed (logged in, logged out, refreshed): a new generation. A refresh
    /// running or failed for the old one no longer matters; its waiters are handed back to go
    /// on with the new one.
    mutating func set(_ new: FetchCredential?) -> [Waiter] {
        var waiters: [Waiter] = []
        if case .refreshing(_, let waiting) = refresh { waiters = waiting }
        refresh = .idle
        guard var new else {
            credential = nil
            return waiters
        }
        lastGeneration += 1
        new.generation = lastGeneration
        credential = new
        return waiters
    }

    /// An attempt is about to be made: send, wait for a refresh (proactive, if `needsRefresh`
    /// says so of the current credential), or fail.
    mutating func beginAttempt(url: URL?, now: UInt64, needsRefresh: (FetchCredential) -> Bool) -> Decision {
        guard let credential else { return .fail(Self.failure(.noCredential, url: url, generation: 0)) }
        switch refresh {
        case .refreshing(let generation, _) where generation == credential.generation:
            return .wait(generation: generation, start: nil)
        case .failed(let generation, let error) where generation == credential.generation:
            return .fail(Self.failure(.refreshFailed(error), url: url, generation: generation))
        default:
            break
        }
        guard needsRefresh(credential) else { return .send(credential) }
        return startRefresh(url: url, now: now)
    }

    /// The server refused the credential of `generation`.
    mutating func refused(generation: UInt64, url: URL?, now: UInt64) -> Decision {
        guard let credential else { return .fail(Self.failure(.noCredential, url: url, generation: generation)) }
        // A late answer to an older credential: the current one may well be accepted.
        if generation < credential.generation { return .send(credential) }
        switch refresh {
        case .refreshing(let running, _) where running == generation:
            return .wait(generation: generation, start: nil)
        case .failed(let failed, let error) where failed == generation:
            return .fail(Self.failure(.refreshFailed(error), url: url, generation: generation))
        default:
            return startRefresh(url: url, now: now)
        }
    }

    private mutating func startRefresh(url: URL?, now: UInt64) -> Decision {
        guard let credential else { return .fail(Self.failure(.noCredential, url: url, generation: 0)) }
        let span = UInt64(window * 1e9)
        refreshStarts.removeAll { now &- $0 >= span }
        if refreshStarts.count >= maximumRefreshes {
            return .fail(Self.failure(.refreshLimitReached(maximum: maximumRefreshes, window: window), url: url,
                                      generation: credential.generation))
        }
        refreshStarts.append(now)
        refresh = .refreshing(generation: credential.generation, waiters: [])
        return .wait(generation: credential.generation, start: credential)
    }

    /// What an attempt made with the credential of `carried` does when its queue grants it
    /// its slot.
    enum GrantDecision: Equatable {
        /// Send the request as it was made.
        case sendAsMade
        /// Send it with this newer credential.
        case send(FetchCredential)
        /// Send nothing: give the slot back and wait for the refresh of this generation (or,
        /// if it is no longer running, begin the attempt again and decide then).
        case wait(generation: UInt64)
    }

    /// The queue granted the slot of an attempt made with the credential of `carried`: a
    /// credential that is being refreshed, whose refresh failed, or that was forgotten is not
    /// sent (see ``FetchAuthentication``).
    func atGrant(carried: UInt64) -> GrantDecision {
        guard let credential else { return .wait(generation: carried) }
        switch refresh {
        case .refreshing(let generation, _) where generation == credential.generation:
            return .wait(generation: generation)
        case .failed(let generation, _) where generation == credential.generation:
            return .wait(generation: generation)
        default:
            return credential.generation == carried ? .sendAsMade : .send(credential)
        }
    }

    /// A waiter for the refresh of `generation` joins it.
    ///
    /// - Returns: `false` if that refresh is no longer running (it ended, or the credential
    ///   changed): the waiter goes on at once, and decides again.
    mutating func join(generation: UInt64, _ waiter: Waiter) -> Bool {
        guard case .refreshing(let running, var waiters) = refresh, running == generation else { return false }
        waiters.append(waiter)
        refresh = .refreshing(generation: running, waiters: waiters)
        return true
    }

    /// How a refresh ended.
    enum RefreshResult {
        case success(FetchCredential)
        case cancelled(FetchError)
        case failure(FetchError)
    }

    /// The refresh of `generation` ended.
    ///
    /// - Returns: Its waiters, and the error they fail with (`nil`: go on with the new
    ///   credential); and the new credential's generation, if it was taken.
    mutating func refreshEnded(generation: UInt64, _ result: RefreshResult) -> (waiters: [Waiter], error: FetchError?, newGeneration: UInt64?) {
        // The credential changed meanwhile: this refresh is stale, and its waiters went on.
        guard case .refreshing(let running, let waiters) = refresh, running == generation else { return ([], nil, nil) }
        switch result {
        case .success(let credential):
            _ = set(credential)
            return (waiters, nil, self.credential?.generation)
        case .cancelled(let error):
            refresh = .idle
            return (waiters, Self.failure(.refreshFailed(error), url: nil, generation: generation), nil)
        case .failure(let error):
            refresh = .failed(generation: generation, error: error)
            return (waiters, Self.failure(.refreshFailed(error), url: nil, generation: generation), nil)
        }
    }

    static func failure(_ reason: FetchError.AuthenticationFailure.Reason, url: URL?, generation: UInt64) -> FetchError {
        .authenticationFailed(.init(reason: reason, generation: generation, url: url))
    }
}
