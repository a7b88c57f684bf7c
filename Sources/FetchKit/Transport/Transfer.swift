import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a transfer reports, exactly once, when it ends.
enum TransferResult: Sendable {
    case success(HTTPURLResponse, ResponseBody)
    case failure(FetchError, HTTPURLResponse?)
}

/// The operation a transfer works for (or the flight that shares it among several).
protocol TransferOwner: AnyObject, Sendable {
    /// The URLSession task was created and resumed: the transfer's clocks run from now.
    func transferDidStart()
    /// `bytes` of the request body were sent, of `total` if known (never more). Called on the
    /// router queue, only when the count grew.
    func transferDidSend(bytes: Int64, of total: Int64?)
    /// The response head arrived and was accepted. Called on the router queue.
    func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?)
    /// The transfer follows a redirect: `response` is the 3xx, `request` the next. Called on
    /// the router queue.
    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest)
    /// More of the body arrived. Called on the router queue.
    func transferDidReceive(bytes: Int64, of expectedLength: Int64?)
    /// The transfer is over and has cleaned up. Called once, on the router queue.
    func transferDidEnd(_ result: TransferResult)
}

extension TransferOwner {
    func transferDidStart() {}
    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest) {}
}

/// The limits a transfer enforces itself.
///
/// Small (a waiting fetch's flight member holds one): what its fetch's configuration sets is
/// in one immutable ``Settings`` box, shared by every attempt of operations configured alike
/// (their ``AnyFetchOperation/ConfigurationBox`` makes it once); what an attempt adds is inline.
struct TransferLimits: Sendable {
    /// What a fetch's configuration sets.
    final class Settings: Sendable {
        let totalTimeout: TimeInterval?
        let maximumResponseSize: Int64
        let acceptableStatusCodes: Set<Int>
        let credentials: CredentialProvider?
        let redirectPolicy: RedirectPolicy

        init(totalTimeout: TimeInterval?, maximumResponseSize: Int64, acceptableStatusCodes: Set<Int>,
             credentials: CredentialProvider?, redirectPolicy: RedirectPolicy) {
            self.totalTimeout = totalTimeout
            self.maximumResponseSize = maximumResponseSize
            self.acceptableStatusCodes = acceptableStatusCodes
            self.credentials = credentials
            self.redirectPolicy = redirectPolicy
        }
    }

    private let settings: Settings
    /// The longest wait for the next byte. Enforced at sub-second precision by FetchKit;
    /// URLSession's own (whole-second, truncated) timeout is only a later backstop.
    var idleTimeout: TimeInterval
    /// ``fetchStartedAt`` (0 for none: an uptime is never 0) in the low 63 bits, and
    /// ``acceptsNotModified`` in the top one: one word, so that a waiting member's limits fit
    /// in three.
    private var startAndNotModified: UInt64 = 0

    /// When the fetch's first attempt started (uptime ns), for a later attempt: the total
    /// timeout counts from there. `nil` for a first attempt, whose clock starts with it.
    var fetchStartedAt: UInt64? {
        get {
            let start = startAndNotModified & ~Self.notModifiedBit
            return start == 0 ? nil : start
        }
        set { startAndNotModified = startAndNotModified & Self.notModifiedBit | (newValue ?? 0) & ~Self.notModifiedBit }
    }

    /// Whether a `304 Not Modified` is a success (the request carried validators).
    var acceptsNotModified: Bool {
        get { startAndNotModified & Self.notModifiedBit != 0 }
        set { startAndNotModified = newValue ? startAndNotModified | Self.notModifiedBit : startAndNotModified & ~Self.notModifiedBit }
    }

    private static var notModifiedBit: UInt64 { 1 << 63 }

    /// The most the whole fetch may take, every attempt and wait included, or `nil`.
    var totalTimeout: TimeInterval? { settings.totalTimeout }
    /// The largest body accepted.
    var maximumResponseSize: Int64 { settings.maximumResponseSize }
    /// Status codes that count as success.
    var acceptableStatusCodes: Set<Int> { settings.acceptableStatusCodes }
    /// Who answers authentication challenges, if anyone.
    var credentials: CredentialProvider? { settings.credentials }
    /// What to do with redirects.
    var redirectPolicy: RedirectPolicy { settings.redirectPolicy }

    init(idleTimeout: TimeInterval, totalTimeout: TimeInterval? = nil, acceptsNotModified: Bool = false,
         maximumResponseSize: Int64, acceptableStatusCodes: Set<Int>, credentials: CredentialProvider? = nil,
         redirectPolicy: RedirectPolicy = .default, fetchStartedAt: UInt64? = nil) {
        self.init(settings: Settings(totalTimeout: totalTimeout, maximumResponseSize: maximumResponseSize,
                                     acceptableStatusCodes: acceptableStatusCodes, credentials: credentials,
                                     redirectPolicy: redirectPolicy),
                  idleTimeout: idleTimeout)
        self.acceptsNotModified = acceptsNotModified
        self.fetchStartedAt = fetchStartedAt
    }

    init(settings: Settings, idleTimeout: TimeInterval) {
        self.settings = settings
        self.idleTimeout = idleTimeout
    }

    func accepts(_ statusCode: Int) -> Bool {
        acceptableStatusCodes.contains(statusCode) || (statusCode == 304 && acceptsNotModified)
    }
}

/// One HTTP exchange: a URLSession data task, its body, its timeouts and its limits.
///
/// Everything mutable here is confined to the session router's serial queue: URLSession
/// callbacks, the timer, ``start()`` and ``stop()`` all run there. The transfer reports to its
/// owner exactly once, through ``TransferOwner/transferDidEnd(_:)``, after it has stopped its
/// task, timer and sink — whichever of completion, failure, timeout or stop comes first.
final class Transfer: TransferHandle, @unchecked Sendable {
    let request: URLRequest
    /// Where the body's chunks wait for this transfer, counted as they arrive (``SessionRouter``).
    let inbox: TransferInbox
    private let session: FetchSession
    private let limits: TransferLimits
    private let sink: ResponseBodySink

    // Confined to the router queue.
    private var owner: (any TransferOwner)?
    private var task: URLSessionDataTask?
    private var response: HTTPURLResponse?
    private var errorBodyPrefix: Data?
    private var receivedBytes: Int64 = 0
    private var reportedBytes: Int64 = 0
    private var progressFlushQueued = false
    private var expectedBytes: Int64?
    /// The request body's length, if known (`httpBody`, or a stream's `Content-Length`), and
    /// what has been reported sent of it.
    private let bodyLength: Int64?
    private var sentBytes: Int64 = 0
    private var totalDeadline: UInt64?
    private var lastActivity: UInt64 = 0
    private var declinedChallenge = false
    /// The URLs visited through redirects, first to last.
    private var chain: [URL] = []
    /// The request last sent: the original, or the redirected one (its method and body).
    private var currentRequest: URLRequest
    /// Inside the redirect callback: ending must not cancel the task.
    private var answeringRedirect = false
    private var ended = false
    /// The task completed and the sink is writing its last bytes out: no timeout fires.
    private var writingOut = false
    /// Stopped for the disk to catch up: the task, kept registered until it completes.
    private var stoppedTask: URLSessionDataTask?

    private var queue: DispatchQueue { session.router.queue }

    init(request: URLRequest, session: FetchSession, limits: TransferLimits, sink: ResponseBodySink, owner: any TransferOwner) {
        var request = request
        // URLSession on Linux truncates timeouts to whole seconds (0.5 s becomes ~1 ms). FetchKit
        // enforces the real one; this whole-second value, always later, is only a backstop —
        // 30 s later: when URLSession's own timer fires while a redirect waits for the
        // router's answer, FoundationNetworking ends the task, and the answer then traps in it
        // ("Received callback for HTTP redirection, but we're not waiting for it"). One second
        // of slack was reached on a loaded machine, whose router queue ran seconds behind.
        request.timeoutInterval = (limits.idleTimeout.rounded(.up) + 30).clamped(to: 1...(7 * 24 * 3600))
        self.request = request
        currentRequest = request
        bodyLength = Self.bodyLength(of: request)
        self.session = session
        self.limits = limits
        self.sink = sink
        self.owner = owner
        inbox = TransferInbox(limit: limits.maximumResponseSize)
    }

    /// Creates and resumes the task. The clocks start now, not while the operation was queued.
    ///
    /// On the router queue already (the next transfer of a queue, started as the last one
    /// ended), it starts at once: the number in flight does not dip, and no hop is spent.
    func start() {
        if session.router.isCurrent {
            startOnQueue()
        } else {
            queue.async { self.startOnQueue() }
        }
    }

    /// Stops the transfer; the owner hears ``FetchError/cancelled(_:)`` once it has cleaned up.
    /// Safe from any thread, at any time, any number of times.
    func stop() {
        queue.async { self.end(.failure(.cancelled(.init(url: self.request.url)), self.response)) }
    }

    private func startOnQueue() {
        guard !ended else { return }
        let now = Self.now()
        if let total = limits.totalTimeout {
            let deadline = (limits.fetchStartedAt ?? now) &+ Self.nanoseconds(total)
            // A later attempt that got its slot only after the fetch's deadline sends nothing.
            guard deadline > now else {
                end(.failure(.timedOut(.init(kind: .total, interval: total, url: request.url)), nil))
                return
            }
            totalDeadline = deadline
        }
        guard let task = makeTask(for: request) else { return }
        lastActivity = now
        session.router.deadlines.schedule(self, at: nextDeadline())
        if let url = request.url { chain = [url] }
        task.resume()
        owner?.transferDidStart()
    }

    // MARK: URLSession callbacks (router queue)

    /// URLSession sent more of the request body. On Linux its count over-reports (3,000,021
    /// bytes for a 3,000,000-byte body): it is clamped to the body's length, and only growth
    /// is reported.
    func didSendBodyData(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        guard !ended else { return }
        lastActivity = Self.now()
        let total = bodyLength ?? (totalBytesExpectedToSend > 0 ? totalBytesExpectedToSend : nil)
        let sent = total.map { min(totalBytesSent, $0) } ?? totalBytesSent
        guard sent > sentBytes else { return }
        sentBytes = sent
        owner?.transferDidSend(bytes: sent, of: total)
    }

    /// The request body's length, when known before sending.
    private static func bodyLength(of request: URLRequest) -> Int64? {
        if let body = request.httpBody { return body.isEmpty ? nil : Int64(body.count) }
        guard request.httpBodyStream != nil,
              let text = request.value(forHTTPHeaderField: "Content-Length"),
              let length = Int64(text.trimmingCharacters(in: .whitespaces)), length >= 0 else { return nil }
        return length
    }

    func didReceive(response: URLResponse) {
        guard !ended else { return }
        lastActivity = Self.now()
        guard let http = response as? HTTPURLResponse else {
            end(.failure(.transport(urlError(.badServerResponse)), nil))
            return
        }
        // A new head (after an answered challenge) starts the body over.
        errorBodyPrefix = nil
        receivedBytes = 0
        reportedBytes = 0
        self.response = http
        switch ResponseFraming.read(http, method: currentRequest.httpMethod, hasBody: limits.accepts(http.statusCode)) {
        case .success(let framing):
            expectedBytes = framing.contentLength
        case .failure(let problem):
            end(.failure(.invalidResponse(.init(reason: problem.reason, url: http.url ?? request.url)), http))
            return
        }
        guard limits.accepts(http.statusCode) else {
            // Keep a bounded prefix of the error body for the error; discard the rest.
            errorBodyPrefix = Data()
            return
        }
        if let expected = expectedBytes, expected > limits.maximumResponseSize {
            end(.failure(tooLarge(), http))
            return
        }
        do {
            try sink.open(response: http, expectedLength: expectedBytes)
        } catch {
            end(.failure(error, http))
            return
        }
        // An accepted response means the server took the whole request body.
        if let bodyLength, sentBytes < bodyLength {
            sentBytes = bodyLength
            owner?.transferDidSend(bytes: bodyLength, of: bodyLength)
        }
        owner?.transferDidReceive(response: http, expectedLength: expectedBytes)
    }

    /// Takes every chunk waiting in ``inbox``, in order.
    func takeArrivals() {
        for chunk in inbox.take() {
            didReceive(data: chunk)
        }
    }

    func didReceive(data: Data) {
        guard !ended else {
            // Stopped for the disk to catch up: what the task still delivers continues the file.
            if stoppedTask != nil { sink.writeLate(data) }
            return
        }
        guard let response else { return }
        lastActivity = Self.now()
        receivedBytes += Int64(data.count)
        if errorBodyPrefix != nil {
            let room = FetchError.StatusFailure.bodyPrefixLimit - errorBodyPrefix!.count
            if room > 0 { errorBodyPrefix!.append(data.prefix(room)) }
            if receivedBytes > limits.maximumResponseSize {
                end(.failure(.unacceptableStatus(statusFailure(response)), response))
            }
            return
        }
        guard receivedBytes <= limits.maximumResponseSize else {
            end(.failure(tooLarge(), response))
            return
        }
        do {
            try sink.write(data)
        } catch {
            end(.failure(error, response))
            return
        }
        reportProgress()
        if sink.shouldStopTransfer() {
            // The disk fell behind the network: stop; the owner continues from what is stored.
            end(.failure(.cancelled(.init(url: request.url)), response))
        }
    }

    /// Progress goes to the owner every 64 KiB, with the last byte, and whenever the router
    /// queue catches up: a 256 MiB body costs about 4,096 reports instead of 16,384. (URLSession
    /// hands over 16 KiB at a time with no backpressure, so per-chunk work lets chunks pile up
    /// in memory.) A flush queued behind the chunks already waiting reports the latest count
    /// once they are done — so a transfer that stalls shows every byte that arrived.
    private func reportProgress(final: Bool = false) {
        guard receivedBytes > reportedBytes else { return }
        let complete = expectedBytes.map { receivedBytes >= $0 } ?? false
        guard final || complete || receivedBytes - reportedBytes >= Self.progressStep else {
            if !progressFlushQueued {
                progressFlushQueued = true
                queue.async {
                    self.progressFlushQueued = false
                    if !self.ended { self.reportProgress(final: true) }
                }
            }
            return
        }
        reportedBytes = receivedBytes
        owner?.transferDidReceive(bytes: receivedBytes, of: expectedBytes)
    }

    static let progressStep: Int64 = 64 << 10

    func didComplete(error: (any Error)?) {
        guard !ended else {
            stoppedTaskDidComplete(bodyComplete: error == nil)
            return
        }
        if let error {
            end(.failure(failure(for: error), response))
            return
        }
        guard let response else {
            end(.failure(.transport(urlError(.badServerResponse)), nil))
            return
        }
        if errorBodyPrefix != nil {
            end(.failure(.unacceptableStatus(statusFailure(response)), response))
            return
        }
        // The numbers first: whether the length is checkable reads the head (a case-insensitive
        // search of its fields), which only a mismatch needs.
        if let expected = expectedBytes, receivedBytes != expected, bodyLengthIsCheckable(response) {
            end(.failure(.lengthMismatch(.init(expected: expected, received: receivedBytes, url: response.url ?? request.url)), response))
            return
        }
        reportProgress(final: true)
        guard sink.storesLater else {
            closeSink(response)     // a body in memory is all there: no hop
            return
        }
        // A file's last bytes may still wait for the disk. The close waits for them off this
        // queue — every transfer of the session shares it, so a slow disk must not hold them
        // all up — and the transfer ends back here. No timeout runs meanwhile: every byte
        // arrived.
        writingOut = true
        sink.whenWritten { [self] in
            queue.async { self.closeSink(response) }
        }
    }

    /// Closes the sink once every byte is written, and ends the transfer. On the router queue.
    private func closeSink(_ response: HTTPURLResponse) {
        writingOut = false
        guard !ended else { return }
        do {
            let body = try sink.close()
            end(.success(response, body))
        } catch {
            end(.failure(error, response))
        }
    }

    /// What to tell URLSession about a redirect.
    enum RedirectDecision {
        /// Follow this request.
        case follow(URLRequest)
        /// Do not follow: the 3xx response ends the task.
        case stop
        /// The transfer already ended and cancelled its task: leave the callback unanswered.
        /// (Answering a redirect of a cancelled task traps in FoundationNetworking:
        /// "Received callback for HTTP redirection, but we're not waiting for it".)
        case abandon
    }

    func redirect(_ response: HTTPURLResponse, to next: URLRequest) -> RedirectDecision {
        guard !ended else { return .abandon }
        // Whatever ends the transfer from here must not cancel the task: the task is waiting for
        // this answer, and cancelling it first makes the answer trap. Answering `nil` ends it.
        answeringRedirect = true
        defer { answeringRedirect = false }
        guard let request = decideRedirect(response, to: next) else { return .stop }
        currentRequest = request
        owner?.transferDidRedirect(response, to: request)
        guard request.httpBody?.isEmpty == false || request.httpBodyStream != nil else {
            return .follow(request)
        }
        // FoundationNetworking sends a redirected request without its body (it drops the
        // task's body on every redirect), so a request that keeps its body goes on in a new
        // task. The old one is answered `nil` and left to finish unheard: its 3xx is drained.
        if let task {
            session.router.unregister(task)
            self.task = nil
        }
        queue.async { self.resend(request) }
        return .stop
    }

    /// Sends the redirected `request`, with its body, in a task of its own.
    private func resend(_ request: URLRequest) {
        guard !ended, let task = makeTask(for: request) else { return }
        lastActivity = Self.now()
        task.resume()
    }

    /// A data task for `request`, registered with the router as this transfer's; `nil`, with the
    /// transfer ended, when the session has been invalidated.
    private func makeTask(for request: URLRequest) -> URLSessionDataTask? {
        guard let task = session.makeDataTask(with: request) else {
            end(.failure(.invalidRequest(.init(reason: .sessionInvalidated, url: request.url)), nil))
            return nil
        }
        self.task = task
        session.router.register(self, for: task)
        return task
    }

    private func decideRedirect(_ response: HTTPURLResponse, to next: URLRequest) -> URLRequest? {
        lastActivity = Self.now()
        var next = next
        let from = response.url ?? chain.last ?? request.url
        if !Self.sameOrigin(from, next.url) {
            // Credentials belong to the origin they were meant for.
            for header in ["Authorization", "Proxy-Authorization", "Cookie"] {
                next.setValue(nil, forHTTPHeaderField: header)
            }
        } else {
            // The `Cookie` carried over is the one sent last, with the stored cookies of the
            // path it left; the request keeps the one it had before the session added them (the
            // caller's, unless an earlier hop left its origin and dropped it), and the session
            // adds the stored cookies of the new URL as it sends it.
            next.setValue(currentRequest.value(forHTTPHeaderField: "Cookie"), forHTTPHeaderField: "Cookie")
        }
        guard let target = next.url else { return decline(response) }
        if chain.contains(target) {
            end(.failure(.redirectFailed(.init(kind: .loop, chain: chain + [target])), response))
            return nil
        }
        switch RedirectPolicy.carryOver(status: response.statusCode, from: currentRequest, into: &next) {
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
        if let url = next.url { chain.append(url) }
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
        if challenge.previousFailureCount == 0, let credentials = limits.credentials, Self.canAnswer(space.authenticationMethod) {
            let question = CredentialProvider.Challenge(
                host: space.host, port: space.port, realm: space.realm,
                authenticationMethod: space.authenticationMethod, previousFailureCount: challenge.previousFailureCount
            )
            if let credential = credentials.answer(question) {
                return (.useCredential, credential)
            }
        }
        // Declining ends the task at once. Swift 6.3.1's default handling of a 401 with
        // `WWW-Authenticate` and no credential never completes the task (corelibs #5456).
        // The 401 response has already arrived; it becomes the operation's status error.
        declinedChallenge = true
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

    // MARK: Ending

    private func end(_ result: TransferResult) {
        guard !ended else { return }
        ended = true
        session.router.deadlines.cancel(self)
        if let task, sink.stoppedForBackpressure {
            // Its chunks still come (a cancel lands late on Linux): each is part of the body, in
            // order, so the sink writes them, and the next task asks for what follows the last.
            // The sink hears when the task ends. Its reading is not paused meanwhile: what libcurl
            // does not read before the cancel lands, the close throws away.
            stoppedTask = task
            inbox.takeLastChunks()
        } else {
            // Whatever waits, and whatever the task still delivers, is dropped as it arrives.
            if let task { session.router.unregister(task) }
            inbox.close()
        }
        if let task {
            if case .failure = result, task.state != .completed, !answeringRedirect {
                // Never cancel a task on the delegate queue: in 6.3.1 cancel() waits on
                // URLSession's work queue, which may be waiting to deliver to this one.
                DispatchQueue.global().async { task.cancel() }
            }
        }
        task = nil
        if case .failure = result { sink.abandon() }
        let owner = self.owner
        self.owner = nil
        owner?.transferDidEnd(result)
    }

    /// The task stopped for the disk to catch up has completed (`bodyComplete`: without an
    /// error — every byte of the body arrived before the cancel landed).
    private func stoppedTaskDidComplete(bodyComplete: Bool) {
        guard let task = stoppedTask else { return }
        stoppedTask = nil
        session.router.unregister(task)
        inbox.close()
        sink.stoppedTaskDidComplete(bodyComplete: bodyComplete)
    }

    // MARK: Timeouts

    /// The earliest moment a timeout could fire: idle (from the last activity) or total.
    private func nextDeadline() -> UInt64 {
        let idleDeadline = lastActivity &+ Self.nanoseconds(limits.idleTimeout)
        return min(idleDeadline, totalDeadline ?? .max)
    }

    /// Called by the session's ``Deadlines`` when ``nextDeadline()`` (as it was) has come.
    func deadlineReached() {
        guard !ended, !writingOut else { return }
        let now = Self.now()
        if let totalDeadline, now >= totalDeadline {
            end(.failure(.timedOut(.init(kind: .total, interval: limits.totalTimeout ?? 0, url: request.url)), response))
        } else if now >= lastActivity &+ Self.nanoseconds(limits.idleTimeout) {
            // Let what is already queued here run first: when this queue was busy past the
            // deadline, the server's answer may be waiting behind the timer, and "no answer"
            // decides whether the fetch is retried.
            queue.async { self.confirmIdleTimeout() }
        } else {
            // Data arrived since: wait for the new idle deadline.
            session.router.deadlines.schedule(self, at: nextDeadline())
        }
    }

    /// The idle deadline passed: end the transfer, unless data that was queued meanwhile moved it.
    private func confirmIdleTimeout() {
        guard !ended else { return }
        if Self.now() >= lastActivity &+ Self.nanoseconds(limits.idleTimeout) {
            end(.failure(.timedOut(.init(kind: .idle, interval: limits.idleTimeout, url: request.url)), response))
        } else {
            session.router.deadlines.schedule(self, at: nextDeadline())
        }
    }

    // MARK: Helpers

    private func failure(for error: any Error) -> FetchError {
        if declinedChallenge, let response, !limits.accepts(response.statusCode) {
            return .unacceptableStatus(statusFailure(response))
        }
        guard let error = error as? URLError else {
            return .transport(urlError(.unknown, underlying: error))
        }
        // The server closed before the announced length: on Linux libcurl says so only in words
        // ("transfer closed with N bytes remaining", URLError -1). The numbers say it better.
        if let response, let expected = expectedBytes, receivedBytes < expected, bodyLengthIsCheckable(response),
           [.unknown, .networkConnectionLost, .cannotParseResponse].contains(error.code) {
            return .lengthMismatch(.init(expected: expected, received: receivedBytes, url: response.url ?? request.url))
        }
        switch error.code {
        case .cancelled:
            // Not ours (ours end the transfer before URLSession reports): the session was
            // invalidated and cancelled its tasks.
            return .cancelled(.init(url: request.url))
        case .timedOut:
            return .timedOut(.init(kind: .idle, interval: limits.idleTimeout, url: request.url))
        case .httpTooManyRedirects:
            // Foundation's own limit (20) was reached before the policy's.
            return .redirectFailed(.init(kind: .tooMany(20), chain: chain))
        default:
            return .transport(error.failingURL == nil ? urlError(error.code, underlying: error) : error)
        }
    }

    private func urlError(_ code: URLError.Code, underlying: (any Error)? = nil) -> URLError {
        var info: [String: Any] = [:]
        if let url = request.url {
            info[NSURLErrorFailingURLErrorKey] = url
        }
        if let underlying {
            info[NSUnderlyingErrorKey] = underlying
            info[NSLocalizedDescriptionKey] = (underlying as? URLError)?.localizedDescription ?? String(describing: underlying)
        }
        return URLError(code, userInfo: info)
    }

    private func statusFailure(_ response: HTTPURLResponse) -> FetchError.StatusFailure {
        var headers: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            headers[String(describing: name)] = String(describing: value)
        }
        return .init(statusCode: response.statusCode, headers: headers, bodyPrefix: errorBodyPrefix ?? Data(), url: response.url ?? request.url)
    }

    private func tooLarge() -> FetchError {
        .responseTooLarge(.init(limit: limits.maximumResponseSize, expectedLength: expectedBytes, url: response?.url ?? request.url))
    }

    /// Whether `Content-Length` describes the bytes URLSession hands over: not for HEAD, not for
    /// bodiless statuses, and not when a content coding was decoded on the way.
    private func bodyLengthIsCheckable(_ response: HTTPURLResponse) -> Bool {
        if currentRequest.httpMethod?.uppercased() == "HEAD" { return false }
        if response.statusCode == 204 || response.statusCode == 304 || (100..<200).contains(response.statusCode) { return false }
        let coding = (response.value(forHTTPHeaderField: "Content-Encoding") ?? "identity").lowercased()
        return coding == "identity" || coding.isEmpty
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

    static func now() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds
    }

    static func nanoseconds(_ interval: TimeInterval) -> UInt64 {
        guard interval > 0 else { return 0 }
        return interval >= Double(UInt64.max / 2) / 1e9 ? UInt64.max / 2 : UInt64(interval * 1e9)
    }
}

extension Comparable {
    func clamped(to range: ClosedRange<Self>) -> Self {
        min(max(self, range.lowerBound), range.upperBound)
    }
}
