import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A credential shared by the fetches of a ``FetchQueue``, refreshed once however many of them
/// the server refuses.
///
/// Give it to a queue (``FetchQueue/init(name:maximumConcurrentTransfers:maximumTransfersPerHost:monitors:coalescesIdenticalRequests:networkActivityHideDelay:authentication:bandwidthLimit:bandwidthLimitPerHost:)``):
/// every fetch of that queue to one of its ``origins`` then carries the current credential,
/// applied by your ``FetchAuthenticator`` to each attempt's request just before it waits for
/// its slot — after ``AnyFetchOperation/makeRequest()``, so your own headers cannot overwrite
/// it — and again when the slot is granted if the credential changed meanwhile (so
/// ``FetchAuthenticator/apply(_:to:)`` must be quick: it may run on the session's queue). A fetch to another origin, or one whose ``FetchConfiguration/authenticates`` is `false`,
/// is left alone and never waits for a refresh. A redirect to another origin drops it.
///
/// Each attempt remembers the ``FetchCredential/generation`` it was sent with. When the server
/// refuses it (``FetchAuthenticator/isRefused(_:)``, a `401` by default, from one of ``origins``
/// to a request that carried the credential — a `401` after a redirect to another origin is that
/// server's own ``FetchError/unacceptableStatus(_:)``):
///
/// - for the current generation, the first refusal starts the refresh — your
///   ``FetchAuthenticator/makeRefreshOperation(for:)``, run on the same queue ahead of the other
///   fetches, without a credential — and every other refused fetch joins it. A waiting fetch
///   holds no transfer slot. When the refresh succeeds, each is sent again, with its body's
///   bytes as they were, under the new credential; a fetch about to be sent meanwhile — its
///   attempt beginning, or its slot granted — waits for it instead of being sent with a
///   credential known to be refused (given its slot, it gives it back unsent), so only the
///   fetches already in flight get a `401`;
/// - for an older generation (a late answer, sent before the refresh), it is sent again at once
///   with the current credential: no refresh;
/// - a fetch that was already sent again after a refresh and is refused once more fails with
///   ``FetchError/AuthenticationFailure/Reason/refused(statusCode:)``: one refresh per fetch.
///
/// A failed refresh fails every fetch waiting for it once, with
/// ``FetchError/AuthenticationFailure/Reason/refreshFailed(_:)``; later fetches of that
/// generation fail the same way at once, sending nothing, until you set a new credential
/// (``setCredential(_:)``), which re-arms it. More than ``maximumRefreshes`` refreshes within
/// ``refreshWindow`` — every refresh that starts counts, failed, timed out or cancelled ones
/// too — fail with ``FetchError/AuthenticationFailure/Reason/refreshLimitReached(maximum:window:)``:
/// nothing is ever sent without the credential. A credential that
/// ``FetchAuthenticator/needsRefresh(_:)`` (about to expire) is refreshed the same way before
/// it is sent, so the server sees no refusal. A request whose body is a stream cannot be sent
/// again: its refusal stands.
///
/// A fetch's ``FetchConfiguration/totalTimeout`` includes waiting for its credential, before its
/// first request too. A refresh is bounded by ``refreshTimeout``.
///
/// Cancelling a waiting fetch does not cancel the refresh; ``FetchQueue/cancelAll()`` cancels
/// both, and each fetch completes once. The queue's monitors hear of each refresh
/// (``FetchEventMonitor/fetch(_:didRefreshCredential:)``).
public final class FetchAuthentication: Sendable {
    typealias Waiter = @Sendable (FetchError?) -> Void

    /// What puts the credential on requests and refreshes it.
    public let authenticator: any FetchAuthenticator
    /// The origins — scheme, host and port — whose requests carry the credential.
    public let origins: [URL]
    /// At most this many refreshes start within ``refreshWindow``, whatever became of them.
    public let maximumRefreshes: Int
    /// The window of ``maximumRefreshes``, in seconds.
    public let refreshWindow: TimeInterval
    /// The longest a refresh may take, in seconds, from when its request is sent: the
    /// refresh operation's ``FetchConfiguration/totalTimeout``, unless it sets a shorter one.
    ///
    /// A refresh stopped at it fails its waiting fetches once with
    /// ``FetchError/AuthenticationFailure/Reason/refreshFailed(_:)`` (whose error is the
    /// ``FetchError/timedOut(_:)``), and, unlike another failure, does not stand for its
    /// credential: the next fetch that needs a refresh starts one (within ``maximumRefreshes``).
    public let refreshTimeout: TimeInterval

    private let originKeys: Set<String>
    private let state: Protected<AuthenticationState<Waiter>>

    /// Creates the authentication of an API.
    ///
    /// - Parameters:
    ///   - authenticator: What applies, checks and refreshes the credential.
    ///   - credential: The credential to start with; `nil` (the default) until you log in
    ///     (fetches that need one fail with ``FetchError/AuthenticationFailure/Reason/noCredential``).
    ///   - origins: The URLs whose origins (scheme, host and port) get the credential; the path
    ///     does not matter.
    ///   - maximumRefreshes: How many refreshes may start within `refreshWindow`, each counted
    ///     as it starts, whether it then succeeds or fails. Default 5.
    ///   - refreshWindow: In seconds. Default 60.
    ///   - refreshTimeout: The longest a refresh may take once sent (``refreshTimeout``), in
    ///     seconds. Default 30.
    public init(authenticator: some FetchAuthenticator, credential: FetchCredential? = nil, origins: [URL],
                maximumRefreshes: Int = 5, refreshWindow: TimeInterval = 60, refreshTimeout: TimeInterval = 30) {
        self.authenticator = authenticator
        self.origins = origins
        self.maximumRefreshes = max(1, maximumRefreshes)
        self.refreshWindow = max(0, refreshWindow)
        self.refreshTimeout = max(0.001, refreshTimeout)
        originKeys = Set(origins.compactMap(Self.originKey))
        state = Protected(AuthenticationState(credential: credential, maximumRefreshes: maximumRefreshes,
                                              window: refreshWindow))
    }

    /// The current credential (with its ``FetchCredential/generation``), or `nil` if none is set.
    public var credential: FetchCredential? {
        state.withLock { $0.credential }
    }

    /// Sets the credential: after logging in, or `nil` to log out. It gets a new generation;
    /// fetches sent from now on carry it, and a failed or running refresh of the old one no
    /// longer holds anything up: fetches waiting for it go on with this one.
    ///
    /// - Parameter credential: The new credential, or `nil`.
    public func setCredential(_ credential: FetchCredential?) {
        let waiters = state.withLock { $0.set(credential) }
        for waiter in waiters { waiter(nil) }
    }

    /// Forgets the credential: fetches that need one fail until the next ``setCredential(_:)``.
    public func logOut() {
        setCredential(nil)
    }

    // MARK: For the operations

    /// Whether requests to `url` get the credential.
    func covers(_ url: URL?) -> Bool {
        guard let key = url.flatMap(Self.originKey) else { return false }
        return originKeys.contains(key)
    }

    static func originKey(_ url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : -1)
        return "\(scheme)://\(host):\(port)"
    }

    typealias Decision = AuthenticationState<Waiter>.Decision

    /// An attempt of a fetch to `url` is about to be made.
    func beginAttempt(url: URL?, on coordinator: any TransferCoordinator) -> Decision {
        let authenticator = authenticator
        let decision = state.withLock { $0.beginAttempt(url: url, now: Transfer.now(), needsRefresh: authenticator.needsRefresh) }
        startIfAsked(decision, on: coordinator)
        return decision
    }

    /// The server refused the credential of `generation`.
    func refused(generation: UInt64, url: URL?, on coordinator: any TransferCoordinator) -> Decision {
        let decision = state.withLock { $0.refused(generation: generation, url: url, now: Transfer.now()) }
        startIfAsked(decision, on: coordinator)
        return decision
    }

    /// What an attempt made with the credential of `carried` does at its slot's grant.
    func atGrant(carried: UInt64) -> AuthenticationState<Waiter>.GrantDecision {
        state.withLock { $0.atGrant(carried: carried) }
    }

    /// Waits for the refresh of `generation`; `waiter` runs once it ended (`nil`: go on), or
    /// at once if it already has.
    func join(generation: UInt64, _ waiter: @escaping Waiter) {
        if !state.withLock({ $0.join(generation: generation, waiter) }) { waiter(nil) }
    }

    /// Whether the refresh of `generation` is still wanted: it has not ended, been cancelled,
    /// or been made moot by a credential set meanwhile.
    func isRefreshing(_ generation: UInt64) -> Bool {
        state.withLock { state in
            if case .refreshing(let running, _) = state.refresh { return running == generation }
            return false
        }
    }

    private func startIfAsked(_ decision: Decision, on coordinator: any TransferCoordinator) {
        guard case .wait(let generation, let credential?) = decision else { return }
        // Off the caller's thread (the session's queue): the operation is your code.
        DispatchQueue.global().async {
            let operation = self.authenticator.makeRefreshOperation(for: credential)
            coordinator.runRefresh(operation, generation: generation, for: self)
        }
    }

    /// The refresh of `generation` ended.
    ///
    /// - Returns: What the monitors hear.
    @discardableResult
    func refreshEnded(generation: UInt64, _ result: Result<FetchCredential, FetchError>) -> CredentialRefreshEvent {
        let ended: AuthenticationState<Waiter>.RefreshResult
        switch result {
        case .success(let credential): ended = .success(credential)
        case .failure(let error) where error.isCancellation: ended = .cancelled(error)
        // A hung refresh stopped at its timeout may well succeed next time.
        case .failure(let error) where error.code == .timedOut: ended = .cancelled(error)
        case .failure(let error): ended = .failure(error)
        }
        let (waiters, error, newGeneration) = state.withLock { $0.refreshEnded(generation: generation, ended) }
        for waiter in waiters { waiter(error) }
        switch result {
        case .success: return .succeeded(generation: generation, newGeneration: newGeneration)
        case .failure(let error): return .failed(generation: generation, error: error)
        }
    }
}

/// A refresh of a ``FetchAuthentication``'s credential, as the queue's monitors hear of it.
public enum CredentialRefreshEvent: Sendable, Equatable {
    /// The refresh of the credential of `generation` started.
    case started(generation: UInt64)
    /// It succeeded: the new credential has `newGeneration` (`nil` if it was not taken,
    /// because a credential was set meanwhile).
    case succeeded(generation: UInt64, newGeneration: UInt64?)
    /// It failed with `error`.
    case failed(generation: UInt64, error: FetchError)
}

/// A server's refusal of the credential a fetch carried, as the queue's monitors hear of it
/// (``FetchEventMonitor/fetch(_:willResendAfterRefusal:)``).
public struct CredentialRefusal: Sendable, Equatable {
    /// The ``FetchCredential/generation`` of the refused credential.
    public let generation: UInt64
    /// The status the server answered (usually `401`).
    public let statusCode: Int

    /// Creates a value, for tests of your monitors.
    ///
    /// - Parameters:
    ///   - generation: The refused credential's generation.
    ///   - statusCode: The status the server answered.
    public init(generation: UInt64, statusCode: Int) {
        self.generation = generation
        self.statusCode = statusCode
    }
}

/// The credential an attempt's request carries, and the request without it: when the queue
/// grants the attempt's slot, the current credential replaces it if it changed meanwhile.
struct AttemptCredential: Sendable {
    let authentication: FetchAuthentication
    /// The generation of the credential the request was made with.
    let generation: UInt64
    /// The request as the operation made it, before the credential was applied.
    let bareRequest: URLRequest
}
