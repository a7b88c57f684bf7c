import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The states of one ``Transfer``, as a pure value: URLSession's events in, actions out.
///
/// ```
/// idle ──start──▶ awaitingHead ──head──▶ receiving (accepted) ──completed──▶ writingOut ──written──┐
///  │                   │        └───────▶ refusing  (status not accepted: its body's prefix kept)    │
///  │                   │                  (another head, after an answered challenge, starts over)  │
///  └───────────────────┴── end: stop, failure, timeout, success ──▶ ended ◀────────────────────────┘
///                 receiving ── end, the disk fell behind ──▶ draining ──task completed──▶ ended
/// ```
///
/// `draining` is ended for the owner: the task stopped for a download's disk still delivers
/// the chunks it had (they continue the file) until it completes. Two flags sit beside the
/// state: `answeringRedirect` (ending must not cancel the task that waits for the answer) and
/// `declinedChallenge` (the 401 is the error). The transfer holds this value on the router
/// queue, applies one event, then performs the returned action (its task, sink and owner).
/// Every transition is in this file (the errors it ends with are in TransferFailure.swift); an
/// event that cannot happen in the current state is a bug in FetchKit and traps, in one place.
struct TransferStateMachine {
    enum State: Equatable {
        /// Made, not started: no task, no clock.
        case idle
        /// The task is sent; no head yet (or a redirect is being followed).
        case awaitingHead
        /// An accepted head arrived: the body goes to the sink.
        case receiving(HTTPURLResponse)
        /// A head whose status is not accepted: the body's first bytes are kept for the error.
        case refusing(HTTPURLResponse, bodyPrefix: Data)
        /// The task completed: the sink stores its last bytes. No timeout fires.
        case writingOut(HTTPURLResponse)
        /// Ended, stopped for the disk; the stopped task still delivers late chunks.
        case draining
        /// Ended: the owner has heard, exactly once.
        case ended
    }

    private(set) var state = State.idle
    let limits: TransferLimits
    /// The URL first asked for, for errors.
    let url: URL?
    /// The request body's length, if known (`httpBody`, or a stream's `Content-Length`).
    let bodyLength: Int64?
    /// The request last sent: the original, or the redirected one (its method and body).
    private(set) var currentRequest: URLRequest
    /// The URLs visited through redirects, first to last.
    private(set) var chain: [URL] = []
    private(set) var sentBytes: Int64 = 0
    private(set) var receivedBytes: Int64 = 0
    private var reportedBytes: Int64 = 0
    private(set) var expectedBytes: Int64?
    private var lastActivity: UInt64 = 0
    private var totalDeadline: UInt64?
    private(set) var answeringRedirect = false
    private(set) var declinedChallenge = false
    /// Whether the current task's handle has the connect timeout: a timeout before any response
    /// is then the connect timeout.
    private(set) var connectTimeoutSet = false
    private var progressFlushQueued = false

    /// A task was resumed for the current request, with the connect timeout on its handle or not.
    mutating func taskStarted(connectTimeoutSet: Bool) {
        self.connectTimeoutSet = connectTimeoutSet
    }

    init(request: URLRequest, limits: TransferLimits) {
        self.limits = limits
        url = request.url
        currentRequest = request
        if let body = request.httpBody {
            bodyLength = body.isEmpty ? nil : Int64(body.count)
        } else if request.httpBodyStream != nil, let text = request.value(forHTTPHeaderField: "Content-Length"),
                  let length = Int64(text.trimmingCharacters(in: .whitespaces)), length >= 0 {
            bodyLength = length
        } else {
            bodyLength = nil
        }
    }

    /// Ended for the owner (`ended`, or `draining`).
    var isEnded: Bool { state == .ended || state == .draining }

    /// The head the body belongs to, if any.
    var response: HTTPURLResponse? {
        switch state {
        case .receiving(let response), .refusing(let response, _), .writingOut(let response): return response
        case .idle, .awaitingHead, .draining, .ended: return nil
        }
    }

    // MARK: Events

    enum StartAction: Equatable {
        /// Make and resume the task; schedule ``nextDeadline``.
        case send
        /// End with this error before sending (the fetch's deadline passed while it waited).
        case fail(FetchError)
        /// Stopped before it started.
        case ignore
    }

    mutating func start(now: UInt64) -> StartAction {
        switch state {
        case .idle: break
        case .ended: return .ignore
        case .awaitingHead, .receiving, .refusing, .writingOut, .draining: impossible("start")
        }
        if let total = limits.totalTimeout {
            let deadline = (limits.fetchStartedAt ?? now) &+ Transfer.nanoseconds(total)
            guard deadline > now else { return .fail(.timedOut(.init(kind: .total, interval: total, url: url))) }
            totalDeadline = deadline
        }
        if let url { chain = [url] }
        lastActivity = now
        state = .awaitingHead
        return .send
    }

    /// URLSession sent more of the request body. On Linux its count over-reports (3,000,021
    /// bytes for a 3,000,000-byte body): it is clamped to the body's length.
    ///
    /// - Returns: What to report, only when the count grew.
    mutating func sent(_ totalBytesSent: Int64, of expected: Int64, now: UInt64) -> (bytes: Int64, total: Int64?)? {
        guard !isEnded else { return nil }
        lastActivity = now
        let total = bodyLength ?? (expected > 0 ? expected : nil)
        let sent = total.map { min(totalBytesSent, $0) } ?? totalBytesSent
        guard sent > sentBytes else { return nil }
        sentBytes = sent
        return (sent, total)
    }

    enum HeadAction: Equatable {
        case ignore, fail(FetchError)
        /// Not accepted: the body is kept as the error's prefix (``State/refusing(_:bodyPrefix:)``).
        case refuse
        /// Open the sink; report `bodySent` (an accepted head means the server took the whole
        /// request body), then the head.
        case open(expectedLength: Int64?, bodySent: Int64?)
    }

    /// A head arrived. A new one (after an answered challenge) starts the body over.
    mutating func head(_ response: HTTPURLResponse, now: UInt64) -> HeadAction {
        switch state {
        case .awaitingHead, .receiving, .refusing: break
        case .draining, .ended: return .ignore
        case .idle, .writingOut: impossible("head")
        }
        lastActivity = now
        receivedBytes = 0
        reportedBytes = 0
        let accepted = limits.accepts(response.statusCode)
        state = accepted ? .receiving(response) : .refusing(response, bodyPrefix: Data())
        switch ResponseFraming.read(response, method: currentRequest.httpMethod, hasBody: accepted) {
        case .success(let framing):
            expectedBytes = framing.contentLength
        case .failure(let problem):
            return .fail(.invalidResponse(.init(reason: problem.reason, url: response.url ?? url)))
        }
        guard accepted else { return .refuse }
        // A part of the resource, for a request that asked for all of it.
        if response.statusCode == 206, currentRequest.value(forHTTPHeaderField: "Range") == nil {
            return .fail(.invalidResponse(.init(reason: .unsolicitedPartialContent, url: response.url ?? url)))
        }
        if let expected = expectedBytes, expected > limits.maximumResponseSize { return .fail(tooLarge(response)) }
        guard let bodyLength, sentBytes < bodyLength else { return .open(expectedLength: expectedBytes, bodySent: nil) }
        sentBytes = bodyLength
        return .open(expectedLength: expectedBytes, bodySent: bodyLength)
    }

    enum ChunkAction: Equatable {
        /// Nothing to do: no body is expected, or it went into an error's prefix.
        case ignore, fail(FetchError)
        /// Write it to the sink; report progress; ask a download's sink whether to stop.
        case write
        /// The stopped task's late chunk: it continues the download's file.
        case writeLate
    }

    mutating func receive(_ chunk: Data, now: UInt64) -> ChunkAction {
        switch state {
        case .receiving(let response):
            lastActivity = now
            receivedBytes += Int64(chunk.count)
            return receivedBytes <= limits.maximumResponseSize ? .write : .fail(tooLarge(response))
        case .refusing(let response, var prefix):
            lastActivity = now
            receivedBytes += Int64(chunk.count)
            let room = FetchError.StatusFailure.bodyPrefixLimit - prefix.count
            if room > 0 {
                prefix.append(chunk.prefix(room))
                state = .refusing(response, bodyPrefix: prefix)
            }
            return receivedBytes > limits.maximumResponseSize ? .fail(statusFailure(response, bodyPrefix: prefix)) : .ignore
        case .draining:
            return .writeLate
        case .idle, .awaitingHead, .writingOut, .ended:
            return .ignore
        }
    }

    enum ProgressAction: Equatable {
        case none, report(bytes: Int64, of: Int64?)
        /// Queue ``flushProgress()`` behind the chunks already waiting.
        case flushLater
    }

    /// Progress goes to the owner every 64 KiB (``Transfer/progressStep``), with the last byte,
    /// and whenever the router queue catches up: a 256 MiB body costs about 4,096 reports
    /// instead of 16,384. (URLSession hands over 16 KiB at a time with no backpressure, so
    /// per-chunk work lets chunks pile up in memory.) A flush queued behind the chunks already
    /// waiting reports the latest count once they are done — so a stalled transfer shows every
    /// byte that arrived.
    mutating func progress(final: Bool = false) -> ProgressAction {
        guard receivedBytes > reportedBytes else { return .none }
        let complete = expectedBytes.map { receivedBytes >= $0 } ?? false
        guard final || complete || receivedBytes - reportedBytes >= Transfer.progressStep else {
            guard !progressFlushQueued else { return .none }
            progressFlushQueued = true
            return .flushLater
        }
        reportedBytes = receivedBytes
        return .report(bytes: receivedBytes, of: expectedBytes)
    }

    /// The flush that ``progress(final:)`` queued runs.
    mutating func flushProgress() -> ProgressAction {
        progressFlushQueued = false
        return isEnded ? .none : progress(final: true)
    }

    enum CompletionAction: Equatable {
        case ignore, fail(FetchError)
        /// The task stopped for the disk has completed (`bodyComplete`: without an error, so
        /// every byte of the body arrived): unregister it, close the inbox, tell the sink.
        case stoppedTaskCompleted(bodyComplete: Bool)
        /// Report the last progress; close the sink once it has stored every byte (``written()``).
        case close(HTTPURLResponse)
    }

    /// The task completed, with `error` or without.
    mutating func complete(error: (any Error)?, refusedHead: ResponseHeadFilter.Failure? = nil) -> CompletionAction {
        switch (state, error) {
        case (.ended, _):
            return .ignore
        case (.draining, _):
            state = .ended
            return .stoppedTaskCompleted(bodyComplete: error == nil)
        case (.idle, _), (.writingOut, _):
            impossible("completion")
        case (_, let error?):
            // FetchKit's filter refused the head (libcurl says only "Failed writing header").
            if let refusedHead { return .fail(.invalidResponse(.init(reason: .init(refusedHead), url: response?.url ?? url))) }
            return .fail(failure(for: error))
        case (.awaitingHead, nil):
            return .fail(.transport(Self.urlError(.badServerResponse, url: url)))
        case (.refusing(let response, let prefix), nil):
            return .fail(statusFailure(response, bodyPrefix: prefix))
        case (.receiving(let response), nil):
            // The numbers first: whether the length is checkable reads the head (a
            // case-insensitive search of its fields), which only a mismatch needs.
            if let expected = expectedBytes, receivedBytes != expected, bodyLengthIsCheckable(response) {
                return .fail(.lengthMismatch(.init(expected: expected, received: receivedBytes, url: response.url ?? url)))
            }
            state = .writingOut(response)
            return .close(response)
        }
    }

    /// The sink has stored every byte: the response to close it with, unless the transfer
    /// ended meanwhile (stopped while writing out).
    func written() -> HTTPURLResponse? {
        switch state {
        case .writingOut(let response): return response
        case .draining, .ended: return nil
        case .idle, .awaitingHead, .receiving, .refusing: impossible("written")
        }
    }

    /// What ending asks of the task; `nil` from ``end(failed:taskCompleted:stoppedForBackpressure:)``
    /// when it had ended already.
    struct Ending: Equatable {
        /// Keep the task registered until it completes (``State/draining``): its late chunks
        /// continue the file. Otherwise unregister it and drop what it still delivers.
        var drainTask: Bool
        /// Cancel the task (never on the router queue).
        var cancelTask: Bool
    }

    /// The one transition to the end, whatever ends the transfer: the first wins.
    ///
    /// - Parameters:
    ///   - taskCompleted: Whether the task, if there is one, has completed (`nil`: no task).
    ///   - stoppedForBackpressure: Whether a download's sink stopped the transfer for its disk.
    mutating func end(failed: Bool, taskCompleted: Bool?, stoppedForBackpressure: Bool) -> Ending? {
        guard !isEnded else { return nil }
        let drain = taskCompleted != nil && stoppedForBackpressure
        state = drain ? .draining : .ended
        // Not while answering a redirect: the task waits for the answer, and cancelling it first
        // makes the answer trap (answering `nil` ends it).
        return Ending(drainTask: drain, cancelTask: failed && taskCompleted == false && !answeringRedirect)
    }

    /// A redirect's answer is being decided, until ``endRedirect()``: `false` if the transfer
    /// has ended (leave it unanswered).
    mutating func beginRedirect(now: UInt64) -> Bool {
        guard !isEnded else { return false }
        lastActivity = now
        answeringRedirect = true
        return true
    }

    mutating func endRedirect() {
        answeringRedirect = false
    }

    /// The transfer follows the redirect to `request`.
    mutating func follow(_ request: URLRequest) {
        if let url = request.url { chain.append(url) }
        currentRequest = request
    }

    /// A redirected request is sent again in a task of its own: `false` if the transfer ended
    /// (or never started: a redirect comes only to a transfer awaiting its head).
    mutating func resend(now: UInt64) -> Bool {
        guard case .awaitingHead = state else { return false }
        lastActivity = now
        return true
    }

    /// A challenge was declined: the 401 that asked is the error.
    mutating func declineChallenge() {
        declinedChallenge = true
    }

    // MARK: Timeouts

    enum DeadlineAction: Equatable {
        case ignore, fail(FetchError), reschedule(at: UInt64)
        /// Confirm the idle timeout behind what is already queued (``confirmIdleTimeout(now:)``):
        /// the server's answer may be waiting behind the timer, and "no answer" decides retries.
        case confirmIdle
    }

    /// The earliest moment a timeout could fire: idle (from the last activity) or total.
    var nextDeadline: UInt64 { min(idleDeadline, totalDeadline ?? .max) }

    private var idleDeadline: UInt64 { lastActivity &+ Transfer.nanoseconds(limits.idleTimeout) }

    /// Started, and neither ended nor writing out (every byte arrived).
    private var canTimeOut: Bool {
        switch state {
        case .awaitingHead, .receiving, .refusing: return true
        case .idle, .writingOut, .draining, .ended: return false
        }
    }

    /// The silence until `moment` was not the server's — the body's consumer held the reading
    /// (``BacklogGate``), or the server's bytes waited unread in the kernel: no idle time
    /// passed before it.
    mutating func silenceWasNotTheServers(until moment: UInt64) {
        if canTimeOut, moment > lastActivity { lastActivity = moment }
    }

    /// ``nextDeadline`` (as it was) has come.
    func deadlineReached(now: UInt64) -> DeadlineAction {
        guard canTimeOut else { return .ignore }
        if let totalDeadline, now >= totalDeadline {
            return .fail(.timedOut(.init(kind: .total, interval: limits.totalTimeout ?? 0, url: url)))
        }
        return now >= idleDeadline ? .confirmIdle : .reschedule(at: nextDeadline)
    }

    /// The idle deadline passed: end, unless data that was queued meanwhile moved it.
    func confirmIdleTimeout(now: UInt64) -> DeadlineAction {
        guard canTimeOut else { return .ignore }
        guard now >= idleDeadline else { return .reschedule(at: nextDeadline) }
        return .fail(.timedOut(.init(kind: .idle, interval: limits.idleTimeout, url: url)))
    }

    private func impossible(_ event: String) -> Never {
        preconditionFailure("FetchKit bug: transfer \(event) in state \(state)")
    }
}
