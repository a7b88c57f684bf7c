import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Observes the life of every fetch: for logging and metrics.
///
/// Give monitors to a queue, `FetchQueue(monitors:)`, to hear of the fetches it holds; or to a
/// session, `FetchSession(monitors:)`, to hear of every fetch that uses it — in a
/// ``FetchQueue``, in a plain `OperationQueue`, or started on its own. A fetch in a queue whose
/// session has monitors is heard by both, with the same ``FetchID``. Every method has a default
/// that does nothing, so a monitor implements only what it needs. For each fetch the calls come
/// in this order, on the monitor's ``queue``:
///
/// 1. ``fetchWasEnqueued(_:)`` once: when a ``FetchQueue`` took it, or, outside one, when it
///    started (its `OperationQueue` ran it, or you called `start()`);
/// 2. ``fetchDidStart(_:request:)`` once, when its first request goes out — in a queue, when
///    its first transfer gets a slot (never for a fetch that finished without one: cancelled
///    while waiting, a failed dependency);
/// 3. for each attempt, ``fetch(_:didRedirect:to:)`` per redirect followed and
///    ``fetch(_:didReceive:)`` when an accepted response head arrives, then
///    ``fetch(_:didProgress:)`` as the body (or a request body) moves — throttled, see that
///    method; between attempts, ``fetch(_:willRetry:)``;
///    ``fetchDidPause(_:)`` and ``fetchDidResume(_:)`` when it is paused and resumed
///    (``AnyFetchOperation/pause()``), at any time before its end;
///    ``fetchDidJoinSharedTransfer(_:)`` when an attempt joins an identical request's transfer
///    (``FetchQueue/coalescesIdenticalRequests``), before that transfer's events;
/// 4. ``fetch(_:didCollect:)`` once, with the fetch's ``FetchMetrics``;
/// 5. ``fetch(_:didFinishWith:)`` once, last.
///
/// Every fetch a monitor hears of is heard of from 1 to 5: its log always begins with
/// ``fetchWasEnqueued(_:)`` and ends with ``fetch(_:didCollect:)`` and
/// ``fetch(_:didFinishWith:)``. A fetch that finished without sending a request — cancelled
/// while it waited for a slot, for its queue (a suspended one included) or for a
/// dependency, or failed before it was sent (a failed dependency, a request
/// ``AnyFetchOperation/makeRequest()`` could not make) — produces exactly those three:
/// ``fetchWasEnqueued(_:)``, ``fetch(_:didCollect:)`` with ``FetchMetrics/attempts`` 0, and
/// ``fetch(_:didFinishWith:)``. It has no ``fetchDidStart(_:request:)``, because nothing went
/// out.
///
/// (The one exception: a suspended queue that you let go of cancels the fetches it still holds
/// without telling its own monitors, which go with it; the monitors of their session still hear
/// their end.) A queue's fetch is reported to the
/// monitors of the session it had when it was enqueued.
///
/// ```swift
/// let logged = FetchSession(monitors: [FetchEventLogger()])    // every fetch that uses it
/// operation.configuration.session = logged
/// let queue = FetchQueue(monitors: [FetchEventLogger()])       // every fetch of this queue
/// ```
///
/// Monitors receive the real request and URLs, secrets included; redact before you write them
/// anywhere (``Redaction``, as ``FetchEventLogger`` does). A monitor is called after the queue
/// and the operation released their locks, so it may call them; it should return quickly.
public protocol FetchEventMonitor: Sendable {
    /// The serial queue the methods run on, in order. Default: one serial queue that every
    /// monitor without its own shares.
    var queue: DispatchQueue { get }

    /// The fetch was enqueued.
    ///
    /// - Parameter fetch: The fetch. Its request may not be built yet.
    func fetchWasEnqueued(_ fetch: MonitoredFetch)
    /// The fetch got a transfer slot and its request goes out.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - request: The request as sent, with its real URL and headers.
    func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest)
    /// The server redirected and the fetch follows.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - response: The 3xx response; its `url` is where it came from.
    ///   - request: The request that follows it.
    func fetch(_ fetch: MonitoredFetch, didRedirect response: HTTPURLResponse, to request: URLRequest)
    /// An accepted response head arrived; the body follows.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - response: Its status and headers.
    func fetch(_ fetch: MonitoredFetch, didReceive response: HTTPURLResponse)
    /// The transfer moved: body bytes arrived, or request body bytes were sent.
    ///
    /// Throttled, so that a monitor of many fast transfers is not called per chunk: for each
    /// fetch, the first report of each attempt (as its response head arrives, 0 bytes
    /// received), then at most one every 100 ms, and always the report that completes a body
    /// of known length. Each value is the fetch's progress at that moment, as its
    /// ``AnyFetchOperation/progressUpdates`` would yield it; between two calls, bytes may have
    /// arrived that no call reported. The totals of the whole fetch are in
    /// ``fetch(_:didCollect:)``.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - progress: Bytes received and expected, and request body bytes sent.
    func fetch(_ fetch: MonitoredFetch, didProgress progress: FetchProgress)
    /// An attempt failed and the fetch will try again after a wait (see ``RetryPolicy``).
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - event: The next attempt's number, the wait, and why the last attempt failed.
    func fetch(_ fetch: MonitoredFetch, willRetry event: RetryEvent)
    /// The fetch was paused (``AnyFetchOperation/pause()``): its transfer is stopped, and none
    /// starts until it is resumed. Not an end: ``fetch(_:didFinishWith:)`` still comes once.
    ///
    /// - Parameter fetch: The fetch.
    func fetchDidPause(_ fetch: MonitoredFetch)
    /// The fetch was resumed (``AnyFetchOperation/resume()``): it waits for a transfer again.
    ///
    /// - Parameter fetch: The fetch.
    func fetchDidResume(_ fetch: MonitoredFetch)
    /// The fetch's attempt joined the transfer of an identical request instead of sending its
    /// own (``FetchQueue/coalescesIdenticalRequests``): the server sees one request for both,
    /// and the fetch hears that transfer's events from now on (``fetchDidStart(_:request:)``
    /// when it gets its slot, if it had not started). The transfer may wait for its slot still,
    /// or be running.
    ///
    /// Once per attempt that joins, before any event of that transfer for the fetch; each
    /// joining counts in ``FetchQueue/Statistics/requestsCoalesced``. Only a
    /// ``FetchQueue`` shares transfers: a monitor of a session hears it for the fetches of such
    /// a queue.
    ///
    /// - Parameter fetch: The fetch that joined.
    func fetchDidJoinSharedTransfer(_ fetch: MonitoredFetch)
    /// What the fetch measured, just before ``fetch(_:didFinishWith:)``.
    ///
    /// - Parameters:
    ///   - fetch: The fetch.
    ///   - metrics: Its timings, attempts and byte counts.
    func fetch(_ fetch: MonitoredFetch, didCollect metrics: FetchMetrics)
    /// The fetch finished; the last call for it.
    ///
    /// - Parameters:
    ///   - fetch: The fetch; its typed result is on `fetch.operation`.
    ///   - error: Why it failed, or `nil` on success.
    func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?)
    /// The queue's ``FetchAuthentication`` started refreshing its credential, or the refresh
    /// ended (succeeded or failed), with the generation concerned: once each per refresh,
    /// however many fetches wait for it.
    ///
    /// - Parameters:
    ///   - fetch: The refresh operation, which the monitor also hears of as a fetch.
    ///   - event: What happened.
    func fetch(_ fetch: MonitoredFetch, didRefreshCredential event: CredentialRefreshEvent)
    /// The server refused the credential the fetch's request carried
    /// (``FetchAuthenticator/isRefused(_:)``), and the fetch will be sent again with a newer
    /// one: after the refresh it waits for, or at once if a newer credential is in use already.
    /// At most once per fetch; not a retry (``fetch(_:willRetry:)``), and not a new start.
    /// A refusal that ends the fetch instead is its ``fetch(_:didFinishWith:)``.
    ///
    /// - Parameters:
    ///   - fetch: The fetch that was refused.
    ///   - refusal: The refused credential's generation and the status the server answered.
    func fetch(_ fetch: MonitoredFetch, willResendAfterRefusal refusal: CredentialRefusal)
}

extension FetchEventMonitor {
    public var queue: DispatchQueue { MonitorDefaults.queue }
    public func fetchWasEnqueued(_ fetch: MonitoredFetch) {}
    public func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) {}
    public func fetch(_ fetch: MonitoredFetch, didRedirect response: HTTPURLResponse, to request: URLRequest) {}
    public func fetch(_ fetch: MonitoredFetch, didReceive response: HTTPURLResponse) {}
    public func fetch(_ fetch: MonitoredFetch, didProgress progress: FetchProgress) {}
    public func fetch(_ fetch: MonitoredFetch, willRetry event: RetryEvent) {}
    public func fetchDidPause(_ fetch: MonitoredFetch) {}
    public func fetchDidResume(_ fetch: MonitoredFetch) {}
    public func fetchDidJoinSharedTransfer(_ fetch: MonitoredFetch) {}
    public func fetch(_ fetch: MonitoredFetch, didCollect metrics: FetchMetrics) {}
    public func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?) {}
    public func fetch(_ fetch: MonitoredFetch, didRefreshCredential event: CredentialRefreshEvent) {}
    public func fetch(_ fetch: MonitoredFetch, willResendAfterRefusal refusal: CredentialRefusal) {}
}

enum MonitorDefaults {
    static let queue = DispatchQueue(label: "FetchKit.FetchEventMonitor")
}

/// The fetch a ``FetchEventMonitor`` hears about.
public struct MonitoredFetch: Sendable {
    /// Its identifier in its queue.
    public let id: FetchID
    /// Its operation.
    public let operation: AnyFetchOperation

    /// Creates a value, for tests of your monitors.
    public init(id: FetchID, operation: AnyFetchOperation) {
        self.id = id
        self.operation = operation
    }
}

/// What FetchKit measured of one fetch, reported by ``FetchEventMonitor/fetch(_:didCollect:)``.
///
/// FetchKit measures these itself (FoundationNetworking on Linux never delivers
/// `URLSessionTaskMetrics`). Durations are in seconds, from a monotonic clock.
public struct FetchMetrics: Sendable, Equatable {
    /// From enqueued to its first transfer getting a slot: time spent waiting for dependencies,
    /// the queue's limits and a host's back-off. For a fetch that never started: until it finished.
    /// Outside a queue: from its start to its first request (the time its request took to make).
    public var queueWait: TimeInterval
    /// From the slot to the first accepted response head (of any attempt), or `nil` if none came.
    public var timeToFirstByte: TimeInterval?
    /// From enqueued to finished.
    public var totalDuration: TimeInterval
    /// Attempts made: 0 for a fetch that never started, 1 plus its retries otherwise.
    public var attempts: Int
    /// Body bytes the last attempt received (for a resumed download, those of this transfer).
    public var bytesReceived: Int64
    /// Bytes of request body the fetch sent, summed over its attempts (a body of known length;
    /// 0 for none or a stream).
    public var bytesSent: Int64

    /// Creates metrics, for tests of your monitors.
    public init(queueWait: TimeInterval, timeToFirstByte: TimeInterval?, totalDuration: TimeInterval,
                attempts: Int, bytesReceived: Int64, bytesSent: Int64) {
        self.queueWait = queueWait
        self.timeToFirstByte = timeToFirstByte
        self.totalDuration = totalDuration
        self.attempts = attempts
        self.bytesReceived = bytesReceived
        self.bytesSent = bytesSent
    }
}

extension FetchMetrics {
    /// The metrics of a fetch from its clocks (uptime ns): enqueued (or started, outside a queue)
    /// at `enqueuedAt`, first request at `startedAt` (`nil` if none went out), first accepted
    /// head at `firstResponseAt`, finished `now`; `attempts` made if it started, each sending
    /// `bodyLength` bytes of body.
    init(enqueuedAt: UInt64, startedAt: UInt64?, firstResponseAt: UInt64?, now: UInt64,
         attempts: Int, bytesReceived: Int64, bodyLength: Int64) {
        func seconds(_ from: UInt64, _ to: UInt64) -> TimeInterval { Double(to &- from) / 1e9 }
        let began = startedAt ?? now
        let attempts = startedAt == nil ? 0 : max(1, attempts)
        self.init(queueWait: seconds(enqueuedAt, began),
                  timeToFirstByte: firstResponseAt.map { seconds(began, $0) },
                  totalDuration: seconds(enqueuedAt, now),
                  attempts: attempts, bytesReceived: bytesReceived, bytesSent: bodyLength * Int64(attempts))
    }
}

/// One event of a fetch, queued under the queue's (or the operation's) lock and delivered after it.
enum MonitorEvent: Sendable {
    case enqueued
    case started(URLRequest)
    case redirected(HTTPURLResponse, URLRequest)
    case response(HTTPURLResponse)
    case progress(FetchProgress)
    case retry(RetryEvent)
    case paused
    case resumed
    case joinedSharedTransfer
    case metrics(FetchMetrics)
    case finished(FetchError?)
    case credentialRefresh(CredentialRefreshEvent)
    case credentialRefused(CredentialRefusal)

    func deliver(_ fetch: MonitoredFetch, to monitor: any FetchEventMonitor) {
        switch self {
        case .enqueued: monitor.fetchWasEnqueued(fetch)
        case .started(let request): monitor.fetchDidStart(fetch, request: request)
        case .redirected(let response, let request): monitor.fetch(fetch, didRedirect: response, to: request)
        case .response(let response): monitor.fetch(fetch, didReceive: response)
        case .progress(let progress): monitor.fetch(fetch, didProgress: progress)
        case .retry(let event): monitor.fetch(fetch, willRetry: event)
        case .paused: monitor.fetchDidPause(fetch)
        case .resumed: monitor.fetchDidResume(fetch)
        case .joinedSharedTransfer: monitor.fetchDidJoinSharedTransfer(fetch)
        case .metrics(let metrics): monitor.fetch(fetch, didCollect: metrics)
        case .finished(let error): monitor.fetch(fetch, didFinishWith: error)
        case .credentialRefresh(let event): monitor.fetch(fetch, didRefreshCredential: event)
        case .credentialRefused(let refusal): monitor.fetch(fetch, willResendAfterRefusal: refusal)
        }
    }
}
