import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A ready-made ``FetchEventMonitor`` that writes one line per event, with secrets redacted.
///
/// ```swift
/// let queue = FetchQueue(monitors: [FetchEventLogger()])   // to standard error
/// ```
///
/// A fetch's lines, each starting with its ``FetchID``:
///
/// ```text
/// fetch-12 enqueued GET https://api.example.com/items?token=REDACTED
/// fetch-12 started GET https://api.example.com/items?token=REDACTED
/// fetch-12 redirected 302 https://api.example.com/items?token=REDACTED → https://cdn.example.com/items
/// fetch-12 response 200, 4.2 KiB expected
/// fetch-12 retry 2 in 0.50 s after: …
/// fetch-12 metrics: waited 1 ms, first byte 12 ms, total 83 ms, 1 attempt, 4.2 KiB received, 0 B sent
/// fetch-12 GET https://api.example.com/items?token=REDACTED → 200 in 83 ms, 4.2 KiB
/// ```
///
/// A fetch whose credential the server refuses, and the refresh it waits for (a fetch of its
/// own, here `fetch-13`), with the queue's ``FetchAuthentication``:
///
/// ```text
/// fetch-12 response 401
/// fetch-12 credential 1 refused (HTTP 401): it is sent again with the refreshed credential
/// fetch-13 refreshing credential 1
/// fetch-13 enqueued POST https://api.example.com/refresh
/// …
/// fetch-13 credential 1 refreshed: credential 2 is in use
/// fetch-12 response 200, 1.1 KiB expected
/// ```
///
/// Before the first fetch it hears start on a ``FetchSession``, it writes that session's
/// ``FetchSession/workarounds`` in a line (``FetchSessionReport/summary``):
///
/// ```text
/// session workarounds: active: socket-wakeups, connection-pool, task-options, …; trust-settings (not needed: this session has no trust settings)
/// ```
///
/// URLs go through ``Redaction/redacted(_:)-(URL)`` and error descriptions through
/// ``Redaction/redacted(text:mentioning:)``. To send the lines to a logging system (swift-log,
/// `os.Logger`), pass a handler that does.
public struct FetchEventLogger: FetchEventMonitor {
    /// The serial queue the logger formats and writes on.
    public let queue: DispatchQueue
    private let write: @Sendable (String) -> Void
    /// The metrics of fetches not yet finished, for their last line.
    private let pending = Protected<[FetchID: FetchMetrics]>([:])
    /// The sessions whose report was written (weakly: a session freed is forgotten).
    private let reported = Protected<[ReportedSession]>([])

    private struct ReportedSession {
        weak var session: FetchSession?
    }

    /// Whether `session` is heard of for the first time (and remembers it).
    private func isFirstSight(of session: FetchSession) -> Bool {
        reported.withLock { sessions in
            sessions.removeAll { $0.session == nil }
            guard !sessions.contains(where: { $0.session === session }) else { return false }
            sessions.append(ReportedSession(session: session))
            return true
        }
    }

    /// Creates a logger.
    ///
    /// - Parameters:
    ///   - queue: A serial queue where lines are formatted and `write` runs, in order. Default: a
    ///     queue of its own.
    ///   - write: Receives each line, without a trailing newline. Default: writes it to standard
    ///     error (standard output often carries a program's own output).
    public init(queue: DispatchQueue = DispatchQueue(label: "FetchKit.FetchEventLogger"),
                write: @escaping @Sendable (String) -> Void = FetchEventLogger.writeToStandardError) {
        self.queue = queue
        self.write = write
    }

    /// Writes `line` and a newline to standard error.
    public static let writeToStandardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    public func fetchWasEnqueued(_ fetch: MonitoredFetch) {
        write("\(fetch.id) enqueued \(Self.describe(fetch.operation.request))")
    }

    public func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) {
        let session = fetch.operation.configuration.session
        if isFirstSight(of: session) { write("session workarounds: \(session.workarounds.summary)") }
        write("\(fetch.id) started \(Self.describe(request))")
    }

    public func fetch(_ fetch: MonitoredFetch, didRedirect response: HTTPURLResponse, to request: URLRequest) {
        write("\(fetch.id) redirected \(response.statusCode) \(Self.redacted(response.url)) → \(Self.redacted(request.url))")
    }

    public func fetch(_ fetch: MonitoredFetch, didReceive response: HTTPURLResponse) {
        let length = response.expectedContentLength
        write("\(fetch.id) response \(response.statusCode)" + (length >= 0 ? ", \(Self.format(bytes: length)) expected" : ""))
    }

    public func fetch(_ fetch: MonitoredFetch, willRetry event: RetryEvent) {
        let reason = Redaction.redacted(text: event.error.description, mentioning: [fetch.operation.request?.url])
        write("\(fetch.id) retry \(event.attempt) in \(String(format: "%.2f", event.delay)) s after: \(reason)")
    }

    public func fetch(_ fetch: MonitoredFetch, willResendAfterRefusal refusal: CredentialRefusal) {
        write("\(fetch.id) credential \(refusal.generation) refused (HTTP \(refusal.statusCode)): it is sent again with the refreshed credential")
    }

    public func fetch(_ fetch: MonitoredFetch, didRefreshCredential event: CredentialRefreshEvent) {
        switch event {
        case .started(let generation):
            write("\(fetch.id) refreshing credential \(generation)")
        case .succeeded(let generation, let newGeneration?):
            write("\(fetch.id) credential \(generation) refreshed: credential \(newGeneration) is in use")
        case .succeeded(let generation, nil):
            write("\(fetch.id) credential \(generation) refreshed, not taken: a credential was set meanwhile")
        case .failed(let generation, let error):
            let reason = Redaction.redacted(text: error.description, mentioning: [fetch.operation.request?.url])
            write("\(fetch.id) refreshing credential \(generation) failed: \(reason)")
        }
    }

    public func fetchDidPause(_ fetch: MonitoredFetch) {
        write("\(fetch.id) paused")
    }

    public func fetchDidResume(_ fetch: MonitoredFetch) {
        write("\(fetch.id) resumed")
    }

    public func fetchDidJoinSharedTransfer(_ fetch: MonitoredFetch) {
        write("\(fetch.id) joined an identical request's transfer")
    }

    public func fetch(_ fetch: MonitoredFetch, didCollect metrics: FetchMetrics) {
        pending.withLock { $0[fetch.id] = metrics }
        let firstByte = metrics.timeToFirstByte.map { "first byte \(Self.format(seconds: $0)), " } ?? ""
        write("\(fetch.id) metrics: waited \(Self.format(seconds: metrics.queueWait)), \(firstByte)"
              + "total \(Self.format(seconds: metrics.totalDuration)), "
              + "\(metrics.attempts) attempt\(metrics.attempts == 1 ? "" : "s"), "
              + "\(Self.format(bytes: metrics.bytesReceived)) received, \(Self.format(bytes: metrics.bytesSent)) sent")
    }

    public func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?) {
        let metrics = pending.withLock { $0.removeValue(forKey: fetch.id) }
        let duration = metrics.map { " in \(Self.format(seconds: $0.totalDuration))" } ?? ""
        let subject = "\(fetch.id) \(Self.describe(fetch.operation.request))"
        if let error {
            let reason = Redaction.redacted(text: error.description, mentioning: [fetch.operation.request?.url])
            write("\(subject) failed\(duration): \(reason)")
        } else {
            let status = fetch.operation.response.map { " → \($0.statusCode)" } ?? " → done"
            let size = metrics.map { ", \(Self.format(bytes: $0.bytesReceived))" } ?? ""
            write("\(subject)\(status)\(duration)\(size)")
        }
    }

    // MARK: Formatting

    static func describe(_ request: URLRequest?) -> String {
        guard let request else { return "(request not built yet)" }
        return "\(request.httpMethod ?? "GET") \(redacted(request.url))"
    }

    static func redacted(_ url: URL?) -> String {
        url.map(Redaction.redacted) ?? "(no URL)"
    }

    /// `0 B`, `1023 B`, `4.2 KiB`, `5.0 MiB`, `3.0 GiB`.
    static func format(bytes: Int64) -> String {
        guard bytes >= 1024 else { return "\(bytes) B" }
        var value = Double(bytes) / 1024
        for unit in ["KiB", "MiB", "GiB"] {
            if value < 1024 || unit == "GiB" { return "\(String(format: "%.1f", value)) \(unit)" }
            value /= 1024
        }
        return "\(bytes) B"
    }

    static func format(seconds: TimeInterval) -> String {
        "\(Int((seconds * 1000).rounded())) ms"
    }
}
