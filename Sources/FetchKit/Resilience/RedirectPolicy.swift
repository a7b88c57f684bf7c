import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a fetch does when the server redirects it.
///
/// Whatever the policy, FetchKit never forwards `Authorization`, `Proxy-Authorization` or
/// `Cookie` headers, nor any header a queue's ``FetchAuthenticator`` put on the request, to
/// another origin (scheme, host and port), a redirect to a scheme other than `http` and `https`
/// fails with ``FetchError/RedirectFailure/Kind/unsupportedScheme(_:)``, a chain that comes back to a URL
/// it already visited fails at once with ``FetchError/redirectFailed(_:)``, and a redirect from
/// `https` to plain `http` fails with ``FetchError/RedirectFailure/Kind/insecureRedirect``
/// unless ``FetchConfiguration/allowsInsecureRedirects`` is set.
///
/// ## Method and body
///
/// A followed redirect keeps or changes the request's method and body the way browsers and
/// curl do (RFC 9110 §15.4), on every platform:
///
/// - **307 and 308** keep the method and the body. (FoundationNetworking on Linux would
///   resend a redirected `POST` without its body; FetchKit sends the body again itself.)
/// - **303** turns any method but `HEAD` into a `GET` without a body; `HEAD` stays `HEAD`.
/// - **301 and 302** turn a `POST` into a `GET` without a body; other methods are kept, with
///   their body.
///
/// When the body is dropped, so are the header fields that describe it (`Content-Type`,
/// `Content-Length`, `Content-Encoding`, `Content-Language`, `Content-Location`). A body that
/// must be sent again has to be `httpBody` data: a body stream (`httpBodyStream`) cannot be
/// replayed, and such a redirect fails with
/// ``FetchError/RedirectFailure/Kind/bodyNotReplayable(_:)``. With ``ask(_:)``, the proposed
/// request already follows these rules.
public enum RedirectPolicy: Sendable {
    /// Follows up to `maximum` redirects (default 10); one more fails with
    /// ``FetchError/RedirectFailure/Kind/tooMany(_:)``.
    case follow(maximum: Int = 10)
    /// Follows none: the 3xx response is the result (an ``FetchError/unacceptableStatus(_:)``
    /// unless you add its status to ``FetchConfiguration/acceptableStatusCodes``).
    case doNotFollow
    /// Asks `decide`: return the request to follow (as is, or changed), or `nil` to stop and take
    /// the 3xx response as the result. Called on FetchKit's network queue: keep it quick.
    case ask(@Sendable (RedirectContext) -> URLRequest?)

    /// The default: follow up to 10.
    public static let `default` = RedirectPolicy.follow(maximum: 10)
}

extension RedirectPolicy {
    /// Whether a redirected request could be given what it must carry over.
    enum CarryOver {
        /// `next` has the method and body it must have.
        case ready
        /// The body must be sent again, and it is a stream.
        case bodyNotReplayable
    }

    /// Whether a redirect from `from` to `to` leaves HTTPS for plain HTTP.
    static func isDowngrade(from: URL?, to: URL?) -> Bool {
        from?.scheme?.lowercased() == "https" && to?.scheme?.lowercased() == "http"
    }

    /// The header fields that describe a body, dropped with it.
    static let bodyHeaderFields = ["Content-Type", "Content-Length", "Content-Encoding", "Content-Language", "Content-Location"]

    /// Gives `next` (the redirected request URLSession proposes) the method and body that a
    /// redirect with `status` keeps from `previous` (the request that was redirected), by the
    /// rules in the type's documentation.
    static func carryOver(status: Int, from previous: URLRequest, into next: inout URLRequest) -> CarryOver {
        let method = (previous.httpMethod ?? "GET").uppercased()
        let becomesGET: Bool
        switch status {
        case 303: becomesGET = method != "GET" && method != "HEAD"
        case 301, 302: becomesGET = method == "POST"
        default: becomesGET = false
        }
        if becomesGET {
            next.httpMethod = "GET"
            next.httpBody = nil
            next.httpBodyStream = nil
            for field in bodyHeaderFields {
                next.setValue(nil, forHTTPHeaderField: field)
            }
            return .ready
        }
        next.httpMethod = previous.httpMethod
        if let body = previous.httpBody {
            next.httpBody = body
        } else if previous.httpBodyStream != nil {
            return .bodyNotReplayable
        }
        return .ready
    }
}

/// A redirect on its way, for ``RedirectPolicy/ask(_:)``.
public struct RedirectContext: @unchecked Sendable {
    /// The 3xx response.
    public let response: HTTPURLResponse
    /// The request FetchKit would send next: credentials already removed if it leaves the
    /// origin, method and body already kept or dropped by the rules of ``RedirectPolicy``.
    public let proposedRequest: URLRequest
    /// The URLs visited so far, first to last.
    public let chain: [URL]
}

/// How a fetch answers an authentication challenge (a `401` with `WWW-Authenticate`).
///
/// Without one — and whenever it has no answer, or its answer was refused once — the challenge
/// is declined and the operation fails with the 401, at once. (On Swift 6.3.1 on Linux an
/// unanswered challenge would otherwise never complete.)
///
/// ```swift
/// operation.configuration.credentials = .perHost(["api.example.com": URLCredential(user: "alice", password: "s3cret", persistence: .none)])
/// ```
///
/// **How credentials are keyed.** ``perHost(_:)`` keys them by host name alone, compared
/// without regard to case: `api.example.com` answers a challenge from that host on any port and
/// over either scheme, and no other host — not a subdomain, not the host a redirect leads to.
/// To tell ports or realms apart, decide in your own closure with ``init(_:)``, which sees each
/// ``Challenge``'s host, port, realm, method and earlier failures. A provider is asked once per
/// challenge; an answer the server refuses is not given again. Credentials never follow a
/// redirect to another origin (see ``RedirectPolicy``), and the `URLCredential`'s persistence
/// is not used: FetchKit keeps no credential store.
///
/// On Linux, FoundationNetworking can only answer HTTP Basic, which sends the password encoded,
/// not encrypted: use HTTPS. FetchKit declines other schemes there (answering Digest traps
/// inside Foundation).
public struct CredentialProvider: @unchecked Sendable {
    /// A challenge to answer.
    public struct Challenge: Sendable {
        /// The host asking.
        public let host: String
        /// Its port.
        public let port: Int
        /// The realm, if the server named one.
        public let realm: String?
        /// The authentication method (`NSURLAuthenticationMethodHTTPBasic`…).
        public let authenticationMethod: String
        /// How many answers to this challenge were refused already.
        public let previousFailureCount: Int
    }

    let answer: @Sendable (Challenge) -> URLCredential?

    /// A provider that asks `answer` for each challenge.
    public init(_ answer: @escaping @Sendable (Challenge) -> URLCredential?) {
        self.answer = answer
    }

    /// A provider that answers each host with its own credential (host names match without
    /// regard to case), and no other host.
    public static func perHost(_ credentials: [String: URLCredential]) -> CredentialProvider {
        let table = Dictionary(credentials.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        let box = UncheckedBox(table)
        return CredentialProvider { challenge in box.value[challenge.host.lowercased()] }
    }
}

/// Carries a value FetchKit only reads, across threads.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
