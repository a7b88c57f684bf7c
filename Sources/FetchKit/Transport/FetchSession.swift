import Foundation
import FoundationNetworkingShims
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One long-lived `URLSession` and its routing delegate, shared by every operation that uses it.
///
/// Connections are reused across the tasks of one session only, and session teardown is the
/// crash-prone path of FoundationNetworking, so FetchKit keeps one session per configuration for
/// the life of the process. Most programs use ``shared``; make your own to change the
/// `URLSessionConfiguration` (headers, cookies, proxy), and assign it to
/// ``FetchConfiguration/session``.
///
/// The session's delegate queue is serial: callbacks for one task arrive in order, and
/// completion never overtakes data (a concurrent delegate queue breaks both).
///
/// ```swift
/// let configuration = FetchSession.defaultConfiguration()
/// configuration.httpAdditionalHeaders = ["X-Client": "reader/2.1"]
/// let session = FetchSession(configuration: configuration)       // keep it for the process
/// operation.configuration.session = session
/// ```
///
/// To observe every fetch of a program in one place — whether it runs in a ``FetchQueue``, in
/// an `OperationQueue` or on its own — give the session event monitors:
///
/// ```swift
/// let observed = FetchSession(monitors: [FetchEventLogger()])
/// operation.configuration.session = observed
/// ```
///
/// One session is one connection pool. On Linux, where FoundationNetworking leaves libcurl's pool
/// at four connections per transfer in flight (so that a lull closes the rest), a `FetchSession`
/// keeps up to max(64, `httpMaximumConnectionsPerHost`) connections over all hosts; more
/// transfers than that in flight to several hosts close the excess as they end.
///
/// A transfer that waits on the network costs no CPU. On Linux, FoundationNetworking (Swift
/// 6.3.1 and earlier) keeps a socket's "writable" dispatch source after libcurl has sent the
/// request and waits for the response; a connected socket is always writable, so it fires
/// without end, and eight transfers waiting on a slow server kept a CPU core busy. A
/// `FetchSession` replaces libcurl's socket callback with one that removes a socket's sources
/// before it registers a smaller set, then calls FoundationNetworking's own callback, found by
/// name in its symbol table (through the multi handle, as for the pool size above): transfers
/// waiting on a silent server use next to no processor time, where plain URLSession's keep a
/// core busy (figures in the Benchmarks article). Where the callback cannot be found and checked
/// (another layout of FoundationNetworking, a stripped library), the session behaves as
/// URLSession does.
///
/// Cookies work as the configuration says. On Linux a session without a URL cache (the
/// default) stores the cookies that responses set itself — into the configuration's
/// `httpCookieStorage`, from each response with `Set-Cookie`, a redirect's before it is
/// followed — instead of FoundationNetworking, which parses every header line of every
/// response for them (a quarter of a small request's CPU). A cookie from a server at an IP
/// address is kept for that address only. On Linux a session also adds the stored cookies to
/// each request it sends, a redirected one included, as RFC 6265 §5.4 and URLSession on Apple
/// platforms do — FoundationNetworking matches them by host alone, so a `Secure` cookie went
/// over plain HTTP — and none to a request with `httpShouldHandleCookies = false`.
/// ``configuration`` reports the configuration as you gave it.
///
/// What belongs where: a `FetchSession` holds what URLSession shares between requests —
/// connections, cookies, proxy, extra headers, TLS settings (``TrustSettings``: a private CA,
/// pinned keys), and monitors that observe them all. ``FetchConfiguration`` holds what
/// is per fetch — limits, timeouts, policies, credentials. A ``FetchQueue`` holds what is per
/// group of fetches — the concurrency bounds. Create few sessions and keep them: each has its
/// own connection pool, and connections are never shared between sessions.
public final class FetchSession: @unchecked Sendable {
    /// The session every operation uses unless told otherwise.
    public static let shared = FetchSession()

    let router: SessionRouter
    private let urlSession: URLSession
    private let invalidated = Protected(false)
    /// A copy of the configuration as given (its `URLSession`'s own copy may say `.never` for
    /// cookies on Linux: ``CookieJar``). Never changed, only copied.
    let given: URLSessionConfiguration
    /// Who observes every fetch that uses this session, in the order given.
    public let monitors: [any FetchEventMonitor]
    /// Delivers to ``monitors``; `nil` when there are none.
    let monitorChannel: MonitorChannel?

    /// Creates a session.
    ///
    /// - Parameters:
    ///   - configuration: The configuration to copy. Defaults to ``defaultConfiguration()``.
    ///   - monitors: Who observes every fetch that uses this session — started on its own, in
    ///     an `OperationQueue` or in a ``FetchQueue`` — called in this order for each event
    ///     (see ``FetchEventMonitor``). Default none.
    public convenience init(configuration: URLSessionConfiguration = FetchSession.defaultConfiguration(),
                            monitors: [any FetchEventMonitor] = []) {
        self.init(configuration: configuration, monitors: monitors,
                  quietsWaitingSockets: ComparisonSwitches.quietsWaitingSockets)
    }

    /// Creates a session that trusts what `trust` adds and requires the keys it pins, or
    /// refuses to be made.
    ///
    /// Certificate verification stays on whatever the settings say (see ``TrustSettings``).
    ///
    /// **How they are enforced.** On Apple platforms, in URLSession's server-trust challenge:
    /// the chain is evaluated with the system's anchors and the added ones, for the host name,
    /// then the leaf certificate's key is checked against the host's pins. On Linux, where
    /// FoundationNetworking offers neither a challenge nor a setting, FetchKit sets libcurl's
    /// `CURLOPT_CAINFO_BLOB` (the system bundle, read when the session is made, followed by the
    /// added CAs) and `CURLOPT_PINNEDPUBLICKEY` on each task's own libcurl handle before the
    /// task starts — through the session's URL cache slot, the one point at which
    /// FoundationNetworking hands over a new task's handle before it uses it. libcurl reuses a
    /// connection only for a request with the same CAs and pin, so a pooled connection made
    /// without a pin never carries a pinned request. A pin mismatch fails with
    /// ``FetchError/tls(_:)`` and ``FetchError/TLSFailure/Reason/pinMismatch`` before the
    /// request is sent; a server whose chain ends at no trusted CA with
    /// ``FetchError/TLSFailure/Reason/untrusted``.
    ///
    /// **When it is refused.** The settings are never silently ignored: where FetchKit cannot
    /// be sure to enforce them, this initializer throws and no session exists. On Linux the
    /// whole path (the handle found by reflection, libcurl's functions found at run time,
    /// both options taking) is proved on a task that is cancelled before it is resumed, so
    /// nothing is sent; a FoundationNetworking of another layout makes it throw
    /// ``TrustConfigurationError/Reason/notEnforceable(_:)``. So does a `configuration` with a
    /// `urlCache` (FetchKit needs that slot). And on Linux, two uses of such a session fail
    /// before sending anything rather than go unprotected: an operation with
    /// ``FetchConfiguration/credentials`` (FoundationNetworking answers a challenge on a new
    /// handle FetchKit cannot reach) fails with
    /// ``FetchError/InvalidRequest/Reason/trustNotEnforceable(_:)``; a redirect to a host with
    /// other pins is sent in a task of its own, set up for that host.
    ///
    /// Settings are fixed for the session's life; the system bundle is read once, when it is
    /// made. Create the session once and keep it.
    ///
    /// - Parameters:
    ///   - configuration: The configuration to copy. Defaults to ``defaultConfiguration()``.
    ///   - monitors: Who observes every fetch that uses this session (see
    ///     ``init(configuration:monitors:)``).
    ///   - trust: The CAs to trust besides the system's, and the keys to pin.
    /// - Throws: ``TrustConfigurationError`` when the settings cannot be enforced here.
    public convenience init(configuration: URLSessionConfiguration = FetchSession.defaultConfiguration(),
                            monitors: [any FetchEventMonitor] = [],
                            trust: TrustSettings) throws(TrustConfigurationError) {
        try self.init(configuration: configuration, monitors: monitors, trust: trust, handleLookup: nil)
    }

    /// Creates a session with `trust`; `handleLookup` replaces how a task's libcurl handle is
    /// found (tests: one that finds none, to see the refusal).
    convenience init(configuration: URLSessionConfiguration, monitors: [any FetchEventMonitor], trust: TrustSettings,
                     handleLookup: (@Sendable (URLSessionTask) -> CurlTaskOptions.EasyHandle?)?) throws(TrustConfigurationError) {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        var hook: CurlTaskOptions?
        if !trust.isEmpty {
            guard configuration.urlCache == nil else {
                throw TrustConfigurationError(.notEnforceable(
                    "the session's configuration has a urlCache, and FetchKit needs that slot to set the trust options on each task"))
            }
            hook = try CurlTaskOptions(trust: trust, lookup: handleLookup ?? FoundationNetworkingLayout.easyHandle(of:))
        }
        self.init(configuration: configuration, monitors: monitors, quietsWaitingSockets: ComparisonSwitches.quietsWaitingSockets,
                  trust: trust, taskOptions: hook)
        // The probe ran before any other task: it proved that each task's handle takes the options.
        if let failure = hook?.probeFailure { throw TrustConfigurationError(.notEnforceable(failure)) }
        #else
        self.init(configuration: configuration, monitors: monitors, quietsWaitingSockets: ComparisonSwitches.quietsWaitingSockets,
                  trust: trust)
        #endif
    }

    /// Creates a session, with or without the fix for the socket wake-ups of FoundationNetworking
    /// (see ``quietsWaitingSockets``): tests and the benchmark compare both. `taskOptions` is the
    /// hook that sets the trust settings on each task (Linux); without one, a session whose
    /// configuration has no `urlCache` makes its own, for connect timeouts.
    init(configuration: URLSessionConfiguration, monitors: [any FetchEventMonitor], quietsWaitingSockets quiet: Bool,
         trust: TrustSettings = TrustSettings(), taskOptions: AnyObject? = nil) {
        self.monitors = monitors
        self.trust = trust
        monitorChannel = MonitorChannel(monitors, label: "FetchKit.FetchSession.monitors")
        // URLSession copies the configuration it is given; so does this, to change its copy only.
        given = configuration.copy() as? URLSessionConfiguration ?? configuration
        let own = configuration.copy() as? URLSessionConfiguration ?? configuration
        router = SessionRouter(cookies: CookieJar(takingOverFrom: own), trust: trust)
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        let hook = taskOptions as? CurlTaskOptions
            ?? (configuration.urlCache == nil ? try? CurlTaskOptions(trust: TrustSettings()) : nil)
        self.taskOptions = hook
        if let hook { own.urlCache = hook }
        #endif
        urlSession = URLSession(configuration: own, delegate: router, delegateQueue: router.delegateQueue)
        // Before any task exists, so that nothing else touches libcurl's handle yet.
        sizesConnectionPool = Self.fixConnectionPoolSize(of: urlSession,
                                                         to: max(Self.connectionPoolSize, configuration.httpMaximumConnectionsPerHost))
        quietsWaitingSockets = quiet && CurlSocketCallback.install(on: urlSession)
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        // Before any other task: proves that each task's handle takes the options.
        hook?.probe(urlSession)
        #endif
    }

    /// What this session trusts beyond the system's CAs, and the keys it pins (empty unless
    /// made with ``init(configuration:monitors:trust:)``).
    public let trust: TrustSettings

    #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
    /// Sets ``trust`` and connect timeouts on each task's libcurl handle (Linux); `nil` when the
    /// given configuration has a `urlCache` (the slot the hook takes) and no trust settings.
    let taskOptions: CurlTaskOptions?
    #endif

    /// Whether the trust settings are set on each task's libcurl handle, by FetchKit (Linux with
    /// settings): then a request needs a task of its own for each set of pins, and challenges
    /// cannot be answered (FoundationNetworking answers on a handle of its own making).
    var setsTrustPerTask: Bool {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        return !trust.isEmpty && taskOptions != nil
        #else
        return false
        #endif
    }

    /// Whether this session enforces ``FetchConfiguration/connectTimeout``.
    ///
    /// On Linux, FetchKit sets libcurl's `CURLOPT_CONNECTTIMEOUT_MS` on each task's own handle,
    /// from the slot of the configuration's `urlCache`: `true` unless the configuration you
    /// gave has a `urlCache` of its own, or this FoundationNetworking's layout is not the one
    /// FetchKit knows (checked once, when the session is made). On Apple platforms URLSession
    /// has no connect timeout: `false`. Where it is `false`, a connection being made is bounded
    /// by ``FetchConfiguration/idleTimeout`` alone.
    public var enforcesConnectTimeouts: Bool {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        return taskOptions.map { $0.probeFailure == nil } ?? false
        #else
        return false
        #endif
    }

    /// Whether this session keeps every response's framing from reaching FoundationNetworking's
    /// traps (Linux).
    ///
    /// FoundationNetworking (Swift 6.3.x) parses each header line libcurl hands over as part of
    /// a head: trailer fields after a chunked body ended the process (`Fatal error: Transfer
    /// completed, but there's no response`), a `1xx` head before the final one was announced as a
    /// response of its own, and a status line in the wrong case was taken for a `200` with no
    /// body. Where this is `true`, FetchKit passes each task's head through a filter of its own
    /// first, on the task's libcurl handle: one final head reaches FoundationNetworking, its
    /// status line checked (a malformed one fails with
    /// ``FetchError/InvalidResponse/Reason/malformedStatusLine(_:)``); interim heads and a
    /// proxy's answer to `CONNECT` never do; trailers are kept aside
    /// (``AnyFetchOperation/responseTrailers``). It is `false` where FetchKit cannot install the
    /// filter: a configuration with a `urlCache` of its own (FetchKit needs that slot), a
    /// FoundationNetworking whose header callback is not where FetchKit looks (a stripped or
    /// statically linked library, another layout) — there a response with trailers still ends
    /// the process on Swift 6.3.x. Always `false` on Apple platforms, where URLSession needs none
    /// of this.
    public var guardsResponseHeads: Bool {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        return taskOptions?.guardsResponseHeads ?? false
        #else
        return false
        #endif
    }

    /// How `resume(_:connectTimeout:http1:)` went.
    enum Resumption {
        /// The trust settings could not be set: the task is already cancelled.
        case refused
        /// The task started; with the connect timeout asked for, or without it.
        case started(connectTimeoutSet: Bool)
    }

    /// Resumes `task`, with `connectTimeout` (seconds) on its handle where the session can set
    /// it, what a transfer under a bandwidth limit whose share is `bandwidthShare` bytes per
    /// second needs on it (HTTP/1.1, and a small receive window at a low share: ``ReceiveWindow``)
    /// where the session can, and, where FetchKit sets the trust options per task, makes sure they were set —
    /// FoundationNetworking asks for them inside `resume()`. If not, cancels the task at once
    /// (`.refused`). (A defence in depth: the session's probe proved the same path in the same
    /// process; if it failed all the same, the cancel is queued behind the task's start on
    /// URLSession's queue, not before it.)
    func resume(_ task: URLSessionTask, connectTimeout: TimeInterval? = nil, bandwidthShare: Int? = nil) -> Resumption {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        let request = CurlTaskOptions.TaskRequest(connectTimeout: connectTimeout.flatMap(Self.milliseconds), bandwidthShare: bandwidthShare)
        // Nothing to set (the common case): the hook has nothing to record, nor this to take.
        guard let taskOptions, !trust.isEmpty || request != CurlTaskOptions.TaskRequest() else {
            task.resume()
            return .started(connectTimeoutSet: false)
        }
        taskOptions.willResume(task, request)
        task.resume()
        let outcome = taskOptions.take(task)
        if !trust.isEmpty, outcome?.trust != true {
            task.cancel()
            return .refused
        }
        return .started(connectTimeoutSet: outcome?.connectTimeout == true)
        #else
        task.resume()
        return .started(connectTimeoutSet: false)
        #endif
    }

    /// `seconds` as libcurl's whole milliseconds, rounded up, at least 1 and at most a year;
    /// `nil` for a value that is not a number.
    static func milliseconds(_ seconds: TimeInterval) -> Int? {
        guard !seconds.isNaN else { return nil }
        return Int((min(max(seconds, 0.001), 31_536_000) * 1000).rounded(.up))
    }

    /// Whether this session's transfers wait without waking up (on Linux): whether the fix for
    /// FoundationNetworking's socket callback is installed (``CurlSocketCallback``).
    let quietsWaitingSockets: Bool

    /// Whether libcurl's connection pool behind this session was given its size
    /// (``connectionPoolSize``; Linux).
    let sizesConnectionPool: Bool

    /// How many connections a session keeps, in use and idle, over all hosts (on Linux).
    ///
    /// FoundationNetworking never sets libcurl's `CURLMOPT_MAXCONNECTS`, and libcurl's default
    /// is four connections per transfer in flight (`conncache.c`: `num_easy * 4`), counted each
    /// time a transfer ends. Every task's handle leaves libcurl when it ends, so a moment with
    /// few transfers in flight — one at a time, or a queue whose next transfers are a few
    /// microseconds late — closed all but a few connections, and the next burst opened new
    /// ones: hundreds or thousands of connections for a run that needs as many as its
    /// concurrency. A fixed bound keeps them: this one, or the configuration's
    /// `httpMaximumConnectionsPerHost` if that is higher. (libcurl's own bound grows with the
    /// transfers in flight; a session with more than this many in flight to several hosts at
    /// once closes the excess as they end.)
    static let connectionPoolSize = 64

    /// Sets the size of the libcurl connection cache behind `session`, where FoundationNetworking
    /// has one (Linux); does nothing elsewhere, or if its layout is not the expected one.
    ///
    /// FoundationNetworking offers no setting for it, so the multi handle is found through the
    /// shims (`FoundationNetworkingLayout.multiHandle(of:)`, reflection) and the option set with
    /// `curl_multi_setopt` from their table. Call it before the session has a task.
    ///
    /// - Returns: Whether the option was set.
    @discardableResult
    static func fixConnectionPoolSize(of session: URLSession, to size: Int) -> Bool {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let multi = FoundationNetworkingLayout.multiHandle(of: session) else { return false }
        return Curl.set(multi: multi, .maximumConnections, size)
        #else
        return false
        #endif
    }

    /// The configuration FetchKit uses by default: `URLSessionConfiguration.default` with
    ///
    /// - no `URLCache` (FetchKit does its own conditional GET; a cache would hold a second copy
    ///   of every body in memory), and
    /// - `httpMaximumConnectionsPerHost` raised to 64. FetchKit bounds concurrency itself, before
    ///   a task exists; a lower cap would make libcurl queue tasks internally, where their
    ///   timeout clocks already run.
    /// - ``defaultUserAgent`` as the `User-Agent` (in `httpAdditionalHeaders`), which a
    ///   request's own `User-Agent` overrides.
    public static func defaultConfiguration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpMaximumConnectionsPerHost = 64
        var headers = configuration.httpAdditionalHeaders ?? [:]
        if !headers.keys.contains(where: { ($0 as? String)?.lowercased() == "user-agent" }) {
            headers["User-Agent"] = defaultUserAgent
        }
        configuration.httpAdditionalHeaders = headers
        return configuration
    }

    /// The `User-Agent` that ``defaultConfiguration()`` sets: `FetchKit/<version> (<OS>)`,
    /// for example `FetchKit/0.1.0 (Linux)`.
    ///
    /// A request's own `User-Agent` wins over it, and so does one in the
    /// `httpAdditionalHeaders` of a configuration you pass to ``init(configuration:monitors:)``. A
    /// configuration that does not start from ``defaultConfiguration()`` sends URLSession's
    /// default instead (on Linux `<process name> (unknown version) curl/<version>`).
    public static let defaultUserAgent = "FetchKit/\(version) (\(operatingSystem))"

    /// FetchKit's version, as the `User-Agent` announces it.
    static let version = "0.1.0"

    static var operatingSystem: String {
        #if os(Linux)
        return "Linux"
        #elseif os(macOS)
        return "macOS"
        #elseif os(iOS)
        return "iOS"
        #elseif os(tvOS)
        return "tvOS"
        #elseif os(watchOS)
        return "watchOS"
        #elseif os(visionOS)
        return "visionOS"
        #elseif os(Windows)
        return "Windows"
        #elseif os(Android)
        return "Android"
        #elseif os(FreeBSD)
        return "FreeBSD"
        #else
        return "unknown OS"
        #endif
    }

    /// A copy of the session's configuration, as it was given: each read is a new copy, and
    /// changing it changes neither the session nor a later read.
    public var configuration: URLSessionConfiguration {
        given.copy() as? URLSessionConfiguration ?? URLSessionConfiguration.default
    }

    /// Whether ``invalidate(cancellingTransfers:)`` was called.
    public var isInvalidated: Bool {
        invalidated.snapshot
    }

    /// Ends the session. Operations that start afterwards fail with
    /// ``FetchError/InvalidRequest/Reason/sessionInvalidated``.
    ///
    /// - Parameter cancellingTransfers: `true` cancels transfers in flight (their operations
    ///   finish with ``FetchError/cancelled(_:)``); `false` lets them finish first.
    public func invalidate(cancellingTransfers: Bool = false) {
        let first = invalidated.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        guard first else { return }
        if cancellingTransfers {
            urlSession.invalidateAndCancel()
        } else {
            urlSession.finishTasksAndInvalidate()
        }
    }

    /// Creates a data task, unless the session is invalidated (creating a task on an invalidated
    /// `URLSession` is a fatal error in Foundation).
    func makeDataTask(with request: URLRequest) -> URLSessionDataTask? {
        // The cookies are read outside the lock: the cookie storage takes a lock of its own.
        let request = router.cookies.sending(request)
        return invalidated.withLock { isInvalidated in
            isInvalidated ? nil : urlSession.dataTask(with: request)
        }
    }
}
