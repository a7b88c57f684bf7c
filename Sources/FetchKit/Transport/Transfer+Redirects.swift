import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Redirects and authentication challenges: what URLSession is told, on the router queue.
extension Transfer {
    /// What to tell URLSession about a redirect.
    enum RedirectDecision {
        /// Follow this request.
        case follow(URLRequest)
        /// Answer `nil`: the transfer sends this request in a task of its own
        /// (``Transfer/followsInANewTask(_:)``).
        case resend(URLRequest)
        /// Do not follow: the 3xx response ends the task.
        case stop
        /// The transfer already ended and cancelled its task: leave the callback unanswered.
        /// (Answering a redirect of a cancelled task traps in FoundationNetworking:
        /// "Received callback for HTTP redirection, but we're not waiting for it".)
        case abandon

        /// The request that goes on, in this task or a new one.
        var followed: URLRequest? {
            switch self {
            case .follow(let request), .resend(let request): return request
            case .stop, .abandon: return nil
            }
        }
    }

    func redirect(_ response: HTTPURLResponse, to next: URLRequest) -> RedirectDecision {
        // Whatever ends the transfer from here must not cancel the task: the task is waiting for
        // this answer, and cancelling it first makes the answer trap. Answering `nil` ends it.
        guard machine.beginRedirect(now: Self.now()) else { return .abandon }
        defer { machine.endRedirect() }
        guard let request = decideRedirect(response, to: next) else { return .stop }
        machine.follow(request)
        owner?.transferDidRedirect(response, to: request)
        guard Self.followsInANewTask(request) else { return .follow(request) }
        // The old task is answered `nil` and left to finish unheard: its 3xx is drained.
        if let task {
            session.router.unregister(task)
            self.task = nil
        }
        queue.async { self.resend(request) }
        return .resend(request)
    }

    /// Whether the redirected `request` goes on in a task of its own rather than in the task
    /// that got the 3xx.
    ///
    /// On Linux, always. FoundationNetworking follows a redirect by reconfiguring the task's
    /// libcurl handle, and libcurl (7.88) keeps a transfer's receive buffer while its HTTP/2
    /// connection still carries other streams: setting the buffer size then fails (error 43)
    /// and FoundationNetworking's `try!` kills the process — any redirect over a shared HTTP/2
    /// connection (`TLSRedirectTests`). It also sends a redirected request without its body.
    /// And a session's ``TrustSettings`` rely on it there: FetchKit sets the pins of the host a
    /// task starts with on its handle (``CurlTaskOptions``), so a redirect to a host with other pins
    /// must not go on in the same task (`TrustSettingsTLSTests`). Swift 6.4's FoundationNetworking
    /// no longer sets the buffer size (swift-corelibs-foundation #5448), so the `try!` is gone
    /// there; the body and the pins still need the new task.
    /// Elsewhere, only a request that keeps its body.
    static func followsInANewTask(_ request: URLRequest) -> Bool {
        #if canImport(FoundationNetworking)
        return true
        #else
        return request.httpBody?.isEmpty == false || request.httpBodyStream != nil
        #endif
    }

    /// Sends the redirected `request`, with its body, in a task of its own.
    private func resend(_ request: URLRequest) {
        guard machine.resend(now: Self.now()), let task = makeTask(for: request) else { return }
        resumeProtected(task)
    }

    /// The server's certificate was refused by the session's trust settings (Apple platforms,
    /// in the server-trust challenge, already answered): the transfer fails with the reason.
    func refuseServerTrust(_ reason: FetchError.TLSFailure.Reason) {
        let message = reason == .pinMismatch ? "the server's public key does not match a key pinned for \(request.url?.host ?? "the host")"
                                             : "the server's certificate chain was not trusted"
        end(.failure(.tls(.init(reason: reason, message: message, url: machine.currentRequest.url)), nil))
    }

    private func decideRedirect(_ response: HTTPURLResponse, to next: URLRequest) -> URLRequest? {
        let chain = machine.chain
        var next = next
        let from = response.url ?? chain.last ?? request.url
        if !Self.sameOrigin(from, next.url) {
            // Credentials belong to the origin they were meant for.
            for header in ["Authorization", "Proxy-Authorization", "Cookie"] + credentialFields {
                next.setValue(nil, forHTTPHeaderField: header)
            }
        } else {
            // The `Cookie` carried over is the one sent last, with the stored cookies of the
            // path it left; the request keeps the one it had before the session added them (the
            // caller's, unless an earlier hop left its origin and dropped it), and the session
            // adds the stored cookies of the new URL as it sends it.
            next.setValue(machine.currentRequest.value(forHTTPHeaderField: "Cookie"), forHTTPHeaderField: "Cookie")
        }
        guard let target = next.url else { return decline(response) }
        if chain.contains(target) {
            end(.failure(.redirectFailed(.init(kind: .loop, chain: chain + [target])), response))
            return nil
        }
        switch RedirectPolicy.carryOver(status: response.statusCode, from: machine.currentRequest, into: &next) {
        case .ready:
            break
        case .bodyNotReplayable:
            end(.failure(.redirectFailed(.init(kind: .bodyNotReplayable(response.statusCode), chain: chain + [target])), response))
            return nil
        }
        switch limits.redirectPolicy {
        case .doNotFollow:
            return decline(response)
        case .follow(let maximum):
            guard chain.count <= maximum else {
                end(.failure(.redirectFailed(.init(kind: .tooMany(maximum), chain: chain + [target])), response))
                return nil
            }
        case .ask(let decide):
            guard let decided = decide(RedirectContext(response: response, proposedRequest: next, chain: chain)) else {
                return decline(response)
            }
            next = decided
        }
        // Only to HTTP: never another protocol libcurl speaks, nor the client's own files. The
        // `Location` the server sent is what is checked, with the URL to be sent: given
        // `file:///etc/hostname`, FoundationNetworking proposes the same path on the server.
        let location = response.value(forHTTPHeaderField: "Location").flatMap { URL(string: $0, relativeTo: from) }?.absoluteURL
        for url in [location, next.url].compactMap({ $0 }) {
            let scheme = url.scheme?.lowercased() ?? ""
            guard scheme == "http" || scheme == "https" else {
                end(.failure(.redirectFailed(.init(kind: .unsupportedScheme(scheme), chain: chain + [url])), response))
                return nil
            }
        }
        if RedirectPolicy.isDowngrade(from: from, to: next.url), !limits.allowsInsecureRedirects {
            end(.failure(.redirectFailed(.init(kind: .insecureRedirect, chain: chain + [next.url ?? target])), response))
            return nil
        }
        return next
    }

    /// Not following: the 3xx response is the result. (URLSession reports no response head for
    /// a redirect it was told not to follow, so it is recorded here.)
    private func decline(_ response: HTTPURLResponse) -> URLRequest? {
        didReceive(response: response)
        return nil
    }

    func answer(_ challenge: URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?) {
        let space = challenge.protectionSpace
        // Credentials meant for HTTPS are not given over plain HTTP after a downgrade.
        let downgraded = RedirectPolicy.isDowngrade(from: machine.url, to: machine.currentRequest.url)
        if challenge.previousFailureCount == 0, !downgraded, let credentials = limits.credentials,
           Self.canAnswer(space.authenticationMethod) {
            let question = CredentialProvider.Challenge(
                host: space.host, port: space.port, realm: space.realm,
                authenticationMethod: space.authenticationMethod, previousFailureCount: challenge.previousFailureCount
            )
            if let credential = credentials.answer(question) {
                return (.useCredential, credential)
            }
        }
        // Declining ends the task at once. Before Swift 6.3.2, the default handling of a 401
        // with `WWW-Authenticate` and no credential never completed the task (corelibs #5457,
        // ``ToolchainFixes/challengeWithoutCredentialCompletes``); from 6.3.2 the decline ends
        // it as the default handling would.
        // The 401 response has already arrived; it becomes the operation's status error.
        machine.declineChallenge()
        return (.cancelAuthenticationChallenge, nil)
    }

    /// FoundationNetworking answers only HTTP Basic; answering Digest traps inside it.
    private static func canAnswer(_ method: String) -> Bool {
        #if canImport(FoundationNetworking)
        return method == NSURLAuthenticationMethodHTTPBasic
        #else
        return true
        #endif
    }

    static func sameOrigin(_ a: URL?, _ b: URL?) -> Bool {
        guard let a, let b else { return false }
        return a.scheme?.lowercased() == b.scheme?.lowercased()
            && a.host?.lowercased() == b.host?.lowercased()
            && effectivePort(a) == effectivePort(b)
    }

    static func effectivePort(_ url: URL) -> Int? {
        if let port = url.port { return port }
        switch url.scheme?.lowercased() {
        case "http": return 80
        case "https": return 443
        default: return nil
        }
    }
}
