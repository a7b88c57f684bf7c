import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The credential of the operation's queue (see ``FetchAuthentication``), in the operation's
// own lifecycle: an attempt that must wait for a refresh waits in `executing(waiting)`, like a
// retry's delay — no transfer, no slot — and the refresh's end resumes it (or fails it).
// Each attempt records the generation it carries (``AttemptState/credentialGeneration``); a
// refused one is sent again once (``AttemptState/resentAfterRefusal``).
extension AnyFetchOperation {
    /// The queue's authentication, if it applies to `request`: a configured origin, and a
    /// fetch that does not opt out.
    func authentication(for request: URLRequest, on coordinator: any TransferCoordinator) -> FetchAuthentication? {
        guard let authentication = coordinator.authentication, authentication.covers(request.url),
              core.withLock({ $0.settings.configurationBox.value.authenticates })
        else { return nil }
        return authentication
    }

    /// During an attempt's setup, before anything is recorded or sent: wait for the refresh of
    /// `generation`, then begin the attempt again from `prepared`.
    func waitForRefresh(of generation: UInt64, by authentication: FetchAuthentication, prepared: URLRequest) {
        let waiting = core.withLock { core -> Bool in
            guard core.machine.waitDuringSetup() else { return false }
            // The first attempt waits before its request was recorded: the next starts from it.
            if core.preparedRequest == nil { core.attemptBase = prepared }
            return true
        }
        guard waiting else {
            // Cancelled during the setup: reported now.
            abandonSetup(.cancelled(.init(url: prepared.url)))
            return
        }
        joinRefresh(of: generation, by: authentication)
    }

    /// In `executing(waiting)`: the next attempt begins when the refresh of `generation` is
    /// over, or the fetch fails with the refresh's error. A cancel meanwhile completes it at
    /// once, and the refresh's end then changes nothing.
    func joinRefresh(of generation: UInt64, by authentication: FetchAuthentication) {
        // The fetch's total timeout holds while it waits: a refresh slower than what is left
        // of it does not hold the fetch past its deadline. A fetch that waits before its first
        // request was sent starts its clock now: its total time includes waiting for its
        // credential (documented on ``FetchConfiguration/totalTimeout``).
        let (total, firstStart) = core.withLock { core -> (TimeInterval?, UInt64) in
            (core.settings.configurationBox.transferSettings.totalTimeout, core.attempt.startClock(at: Transfer.now()))
        }
        if let total {
            let left = Self.timeLeft(of: total, since: firstStart)
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, left)) { [self] in
                failWaiting(.timedOut(.init(kind: .total, interval: total, url: nil)))
            }
        }
        authentication.join(generation: generation) { [self] error in
            if let error {
                failWaiting(error)
            } else {
                waitEnded(continuing: false)
            }
        }
    }

    /// The queue granted the attempt's slot (the one `handle` waited for) while the refresh of
    /// `generation` ran: nothing was sent, the slot went back, and the attempt ends to wait for
    /// the refresh like a refused one (``NextAttempt/authenticate(_:generation:)``), without
    /// counting as a refusal.
    func slotGrantedDuringRefresh(of generation: UInt64, by authentication: FetchAuthentication, handle: any TransferHandle) {
        let url = core.withLock { core -> URL?? in
            guard core.transfer === handle else { return .none }
            core.attempt.grantedDuringRefresh(of: generation, by: authentication)
            return .some(core.preparedRequest?.url)
        }
        guard let url else { return }
        transferDidEnd(.failure(.cancelled(.init(url: url)), nil), of: handle)
    }

    /// The queue granted the attempt's slot with a newer credential than the one it was made
    /// with (see ``FlightMember/requestAtGrant()``): a refusal now concerns that one.
    func credentialChangedAtGrant(to generation: UInt64) {
        core.withLock { $0.attempt.carry(credential: generation) }
    }

    private func failWaiting(_ error: FetchError) {
        let complete = core.withLock { core -> Bool in
            var named = error
            if case .authenticationFailed(var failure) = error {
                failure.url = core.preparedRequest?.url
                named = .authenticationFailed(failure)
            } else if case .timedOut(let timeout) = error {
                named = .timedOut(.init(kind: timeout.kind, interval: timeout.interval, url: core.preparedRequest?.url))
            }
            return core.machine.failWhileWaiting(named)
        }
        if complete { completeNow() }
    }

    /// What follows an attempt whose `response` ended it with `error`, if the server refused
    /// the credential it carried; `nil` if it did not carry one, or was not refused.
    ///
    /// Only a covered origin's answer to a request that carried the credential is a refusal:
    /// a `401` after a redirect to another origin (which dropped the credential) is that
    /// server's own answer, and the fetch fails with it.
    func afterRefusal(_ response: HTTPURLResponse, error: FetchError) -> (next: NextAttempt, result: TransferResult)? {
        let (generation, resent, coordinator, request, cancelled) = core.withLock { core in
            (core.attempt.credentialGeneration, core.attempt.resentAfterRefusal, core.coordinator, core.preparedRequest, core.machine.isCancelled)
        }
        // A cancelled fetch starts no refresh: `cancelAll` would not reach it.
        guard !cancelled, generation != 0, let coordinator, let authentication = coordinator.authentication,
              authentication.covers(response.url), authentication.authenticator.isRefused(response)
        else { return nil }
        // A stream cannot be sent again: the refusal stands.
        if request?.httpBodyStream != nil { return nil }
        let url = request?.url
        // Refused again after it was sent with a newer credential: one refresh per fetch.
        if resent {
            let failure = FetchError.AuthenticationFailure(reason: .refused(statusCode: response.statusCode),
                                                           generation: generation, url: url)
            return (.none, .failure(.authenticationFailed(failure), response))
        }
        let next: NextAttempt
        switch authentication.refused(generation: generation, url: url, on: coordinator) {
        case .send:
            next = .authenticate(nil, generation: generation)
        case .wait(let refreshing, _):
            next = .authenticate(authentication, generation: refreshing)
        case .fail(let failure):
            return (.none, .failure(failure, response))
        }
        core.withLock { core in
            core.attempt.resendAfterRefusal()
            core.observed?.send(.credentialRefused(CredentialRefusal(generation: generation, statusCode: response.statusCode)), self)
        }
        return (next, .failure(error, response))
    }
}
