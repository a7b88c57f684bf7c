import Foundation

/// How an operation fetches: its session, limits, timeouts, policies and queues — every setting
/// that freezes when the fetch is enqueued, in one value.
///
/// Change an operation's configuration before you enqueue it:
///
/// ```swift
/// let operation = JSONFetchOperation<[String]>(url: tagsURL)
/// operation.configuration.retryPolicy = .none
/// operation.configuration.idleTimeout = 5
/// ```
///
/// or build one and hand it to several operations. Once a ``FetchQueue`` has accepted the
/// operation (or it started, when run another way), its configuration is fixed: setting it then
/// is a programming error, and traps with a message naming the operation, every time, rather
/// than take effect or not depending on whether the queue got to it yet (see
/// ``AnyFetchOperation/configuration``).
public struct FetchConfiguration: Sendable {
    /// The session whose `URLSession` carries the transfer. Default: ``FetchSession/shared``.
    public var session: FetchSession

    /// The status codes that count as success. Default: 200–299. Any other status finishes the
    /// operation with ``FetchError/unacceptableStatus(_:)``, and the parse hook is not called.
    public var acceptableStatusCodes: Set<Int>

    /// The largest response body accepted, in bytes, counted after decoding (a gzip body is
    /// counted as it inflates). Default: ``defaultMaximumResponseSize`` (512 MiB); for a
    /// ``DownloadOperation``, ``DownloadOperation/defaultMaximumDownloadSize``, counting the
    /// whole file. A larger body stops the transfer as soon as it is known — from
    /// `Content-Length`, or when the bytes received pass the limit — with
    /// ``FetchError/responseTooLarge(_:)``. Negative values count as 0.
    public var maximumResponseSize: Int64 {
        get { storedMaximumResponseSize }
        set { storedMaximumResponseSize = max(0, newValue) }
    }
    private var storedMaximumResponseSize: Int64

    /// The most response-body bytes per second this fetch reads, over all its attempts, or
    /// `nil` (the default) for no limit of its own. Values below 1 count as 1.
    ///
    /// It is enforced as a ``FetchQueue``'s ``FetchQueue/bandwidthLimit`` is (read pauses on
    /// libcurl's handle, HTTP/1.1, a small receive window at low rates), and with the same
    /// reservations where that cannot be done; a fetch in a queue with limits reads under all of
    /// them, whichever is lowest at each moment. This is `curl --limit-rate`: one download's
    /// limit, whatever else runs. A fetch with a limit of its own never shares its transfer
    /// with an identical request (``FetchQueue/coalescesIdenticalRequests``).
    public var bandwidthLimit: Int? {
        get { storedBandwidthLimit }
        set { storedBandwidthLimit = newValue.map { max(1, $0) } }
    }
    private var storedBandwidthLimit: Int?

    /// The longest one attempt may go without hearing from the server, in seconds, at
    /// sub-second precision: until the response head is complete, then between bytes of the
    /// body. (A head that trickles in over longer than this counts as no answer, as Go's
    /// `ResponseHeaderTimeout` does: a server cannot hold an attempt open a byte at a time
    /// before its body begins.) `nil`
    /// (the default) uses the request's `timeoutInterval` (60 s unless set). When it passes,
    /// the attempt fails with ``FetchError/timedOut(_:)`` of kind
    /// ``FetchError/Timeout/Kind/idle``, naming this interval.
    ///
    /// It is what a request's `timeoutInterval` means to URLSession, and it holds for the whole
    /// fetch when the server never answers: an attempt that got no response head within it is
    /// **not retried**, so `timeoutInterval = 1` against a silent server fails after about
    /// 1 s, with the server asked once. An attempt whose server answered and then stalled
    /// mid-body may be retried by the ``retryPolicy`` (it often succeeds, and a
    /// ``DownloadOperation`` resumes where it stopped); each retry has the full interval again.
    /// To bound the whole fetch, retries and their waits included, set ``totalTimeout``.
    ///
    /// FetchKit enforces it itself: URLSession on Linux truncates timeouts to whole seconds.
    /// The clock starts when the transfer starts, never while the operation waits in a queue.
    public var idleTimeout: TimeInterval?

    /// A deadline for the whole fetch, in seconds, at sub-second precision, or `nil` (the
    /// default) for none.
    ///
    /// The clock starts when the first attempt's transfer starts (never while the operation
    /// waits in a queue for a slot), or, if it comes first, when the fetch begins waiting for
    /// its queue's credential to be refreshed (``FetchAuthentication``: a credential about to
    /// expire, a refresh already running, a slot granted during one): a fetch's total time
    /// includes waiting for its credential. It runs through every attempt and every wait
    /// between them: an attempt still running at the deadline is stopped, a fetch waiting for a
    /// refresh ends at it without waiting for the refresh's end, and a retry is not begun
    /// once the deadline has passed or when its wait would pass it (the last failure then
    /// stands). A fetch stopped at the deadline fails with ``FetchError/timedOut(_:)`` of kind
    /// ``FetchError/Timeout/Kind/total``, naming this interval. Enforced by FetchKit
    /// (URLSession on Linux ignores its resource timeout).
    public var totalTimeout: TimeInterval?

    /// The longest each attempt may take to make a new connection — name lookup, the TCP
    /// handshake and the TLS handshake — in seconds, or `nil` (the default) for no limit of its
    /// own (the ``idleTimeout`` then bounds it).
    ///
    /// It tells a host that is down or unreachable from one that is slow to answer: set it
    /// short (curl's and wget's `--connect-timeout`) and keep the idle timeout for the server's
    /// answer. An attempt over a connection that is already open (a kept-alive one, or an HTTP/2
    /// connection it shares) has no connect phase. When it passes, the attempt fails with
    /// ``FetchError/timedOut(_:)`` of kind ``FetchError/Timeout/Kind/connect``, which the
    /// ``retryPolicy`` may retry (nothing was sent).
    ///
    /// Enforced on Linux, by libcurl, on each request's own handle, at millisecond precision
    /// (``FetchSession/enforcesConnectTimeouts``); URLSession on Apple platforms has no connect
    /// timeout, so there only the idle timeout bounds a connection being made.
    public var connectTimeout: TimeInterval?

    /// Where the parse (``FetchOperation/parseResponseBody(_:)``) runs. Default:
    /// ``CallbackQueue/global``.
    ///
    /// Name a serial queue to serialise every parse that touches a shared store (the "one
    /// managed-object context" case): parses then never run at the same time.
    public var parseQueue: CallbackQueue

    /// Whether a failed or cancelled dependency stops the operation. Default: `true`.
    ///
    /// When `true` and a dependency that is a fetch operation finished with an error, or any
    /// dependency was cancelled, the operation sends no request and finishes with
    /// ``FetchError/dependencyFailed(_:)``. Set `false` to run regardless, as plain
    /// `Operation`s do.
    public var requiresSuccessfulDependencies: Bool

    /// When and how soon a failed attempt is tried again. Default: ``RetryPolicy/default``: two
    /// retries with backoff, for idempotent requests and transient failures only.
    public var retryPolicy: RetryPolicy

    /// What to do with redirects. Default: ``RedirectPolicy/default``, following up to 10.
    public var redirectPolicy: RedirectPolicy

    /// Whether a redirect from `https` to plain `http` is followed. Default `false`: such a
    /// redirect fails with ``FetchError/RedirectFailure/Kind/insecureRedirect``, and nothing is
    /// sent over plain HTTP. When `true`, the downgraded request carries no `Authorization`,
    /// `Proxy-Authorization` or `Cookie` the fetch had (it leaves the origin), the session's
    /// `Secure` cookies are not sent, and ``credentials`` answer no challenge after it.
    public var allowsInsecureRedirects: Bool

    /// Who answers authentication challenges. `nil` (the default) declines them: the operation
    /// fails with the 401 at once. See ``CredentialProvider`` for how credentials are keyed.
    public var credentials: CredentialProvider?

    /// Where the validators for conditional GETs live; `nil` (the default) sends none. See
    /// ``ValidatorStore``.
    public var validatorStore: ValidatorStore?

    /// Whether the ``FetchQueue/authentication`` of the queue that runs the fetch applies to it
    /// (when its URL is one of the authentication's origins). Default `true`; `false` sends it
    /// without the credential, and it never waits for a refresh. FetchKit sets it to `false` on
    /// the refresh operation it runs.
    public var authenticates = true

    /// The default ``maximumResponseSize``: 512 MiB.
    public static let defaultMaximumResponseSize: Int64 = 512 << 20

    /// The default ``acceptableStatusCodes``: 200–299.
    public static let defaultAcceptableStatusCodes: Set<Int> = Set(200..<300)

    /// A configuration; every parameter has the default its property documents.
    public init(
        session: FetchSession = .shared,
        acceptableStatusCodes: Set<Int> = FetchConfiguration.defaultAcceptableStatusCodes,
        maximumResponseSize: Int64 = FetchConfiguration.defaultMaximumResponseSize,
        idleTimeout: TimeInterval? = nil,
        totalTimeout: TimeInterval? = nil,
        connectTimeout: TimeInterval? = nil,
        parseQueue: CallbackQueue = .global,
        requiresSuccessfulDependencies: Bool = true,
        retryPolicy: RetryPolicy = .default,
        redirectPolicy: RedirectPolicy = .default,
        allowsInsecureRedirects: Bool = false,
        credentials: CredentialProvider? = nil,
        validatorStore: ValidatorStore? = nil
    ) {
        self.session = session
        self.acceptableStatusCodes = acceptableStatusCodes
        storedMaximumResponseSize = max(0, maximumResponseSize)
        self.idleTimeout = idleTimeout
        self.totalTimeout = totalTimeout
        self.connectTimeout = connectTimeout
        self.parseQueue = parseQueue
        self.requiresSuccessfulDependencies = requiresSuccessfulDependencies
        self.retryPolicy = retryPolicy
        self.redirectPolicy = redirectPolicy
        self.allowsInsecureRedirects = allowsInsecureRedirects
        self.credentials = credentials
        self.validatorStore = validatorStore
    }
}

extension FetchConfiguration {
    /// Whether `other` holds the same settings: equal values, and the same session, queue and
    /// store objects. Compared without calling anything, so `false` whenever a setting holds
    /// a closure (a redirect policy that asks, credentials). Operations configured alike share
    /// one stored copy (``AnyFetchOperation/ConfigurationBox``).
    func isIdentical(to other: FetchConfiguration) -> Bool {
        guard session === other.session,
              maximumResponseSize == other.maximumResponseSize,
              idleTimeout == other.idleTimeout,
              totalTimeout == other.totalTimeout,
              connectTimeout == other.connectTimeout,
              requiresSuccessfulDependencies == other.requiresSuccessfulDependencies,
              validatorStore === other.validatorStore,
              credentials == nil, other.credentials == nil,
              retryPolicy == other.retryPolicy,
              allowsInsecureRedirects == other.allowsInsecureRedirects,
              authenticates == other.authenticates,
              acceptableStatusCodes == other.acceptableStatusCodes,
              bandwidthLimit == other.bandwidthLimit
        else { return false }
        switch (parseQueue.target, other.parseQueue.target) {
        case (.dispatch(let a), .dispatch(let b)) where a === b: break
        case (.operation(let a), .operation(let b)) where a === b: break
        case (.immediate, .immediate): break
        default: return false
        }
        switch (redirectPolicy, other.redirectPolicy) {
        case (.follow(let a), .follow(let b)): return a == b
        case (.doNotFollow, .doNotFollow): return true
        default: return false
        }
    }
}
