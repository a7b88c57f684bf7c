import Foundation
import FoundationNetworkingShims
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a transfer reports, exactly once, when it ends.
enum TransferResult: Sendable {
    /// The response, its body, and its trailer fields (names lowercased; empty when none).
    case success(HTTPURLResponse, ResponseBody, trailers: [String: String])
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
    func transferDidEnd(_ result: TransferResult, of handle: any TransferHandle)
}

extension TransferOwner {
    func transferDidStart() {}
    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest) {}
}

/// One HTTP exchange: a URLSession data task, its body, its timeouts and its limits.
///
/// Everything mutable here is confined to the session router's serial queue: URLSession
/// callbacks, the timer, ``start()`` and ``stop()`` all run there. Its states are a
/// ``TransferStateMachine``; this class wires it to URLSession and performs its actions. The
/// transfer reports to its owner exactly once, through ``TransferOwner/transferDidEnd(_:of:)``,
/// after it has stopped its task, timer and sink — whichever of completion, failure, timeout
/// or stop comes first.
final class Transfer: TransferHandle, @unchecked Sendable {
    let request: URLRequest
    /// Where the body's chunks wait for this transfer, counted as they arrive (``SessionRouter``).
    let inbox: TransferInbox
    let session: FetchSession
    private let sink: ResponseBodySink
    /// The sink, if it is a download's: backpressure and writing out.
    private let download: (any DownloadBodySink)?
    /// The sink's gate that holds the reading while its consumer is behind (any thread).
    let backlogGate: BacklogGate?

    // Confined to the router queue (and Transfer+Redirects.swift).
    var machine: TransferStateMachine
    var owner: (any TransferOwner)?
    /// The task in flight; once ended for the disk to catch up (draining), the stopped one.
    var task: URLSessionDataTask?
    /// The trailer fields that followed the body (``ResponseHeadFilter``), once the task completed.
    private var trailers: [String: String] = [:]

    var queue: DispatchQueue { session.router.queue }
    var limits: TransferLimits { machine.limits }

    /// The bandwidth limits it reads under (its queue's, its host's): none for most.
    let receiveBudgets: [ReceiveBudget]
    /// What its connection took off the wire, for its budgets.
    let wireMeter = WireMeter()

    /// The task whose reading a bandwidth limit paused, and URLSession's work queue where it
    /// was paused, until its next chunk (set there): a limit that changes meanwhile resumes it
    /// (``wakeFromLimitPause()``).
    let limitPause = Protected<(task: URLSessionDataTask, workQueue: DispatchQueue)?>(nil)

    /// A limit it reads under changed: a pause sized for the old one ends now, and the next
    /// chunk is held to the new one. Any thread.
    func wakeFromLimitPause() {
        if let paused = limitPause.withLock({ paused in defer { paused = nil }; return paused }) {
            ReceivePause.resumeReceiving(paused.task, on: paused.workQueue)
        }
    }

    /// The socket of the connection its response comes on, as libcurl watched it when the
    /// head arrived (`nil`: not known), for the idle deadline's look at the kernel.
    private let connectionSocket = Protected<Int32?>(nil)

    /// A response's head arrived on `socket` (URLSession's work queue).
    func noteConnectionSocket(_ socket: Int32?) {
        connectionSocket.withLock { $0 = socket }
    }

    /// The header fields its queue's ``FetchAuthenticator`` put on the request (beside
    /// `Authorization`): a redirect to another origin drops them with it.
    let credentialFields: [String]

    /// Whether it counts as a reader of its budgets (router queue).
    private var readsUnderBudgets = false

    init(request: URLRequest, session: FetchSession, limits: TransferLimits, sink: ResponseBodySink, owner: any TransferOwner,
         receiveBudgets: [ReceiveBudget] = [], credentialFields: [String] = []) {
        self.receiveBudgets = receiveBudgets
        self.credentialFields = credentialFields
        var request = request
        // URLSession on Linux truncates timeouts to whole seconds (0.5 s becomes ~1 ms). FetchKit
        // enforces the real one; this whole-second value, always later, is only a backstop —
        // 30 s later: when URLSession's own timer fires while a redirect waits for the
        // router's answer, FoundationNetworking ends the task, and the answer then traps in it
        // ("Received callback for HTTP redirection, but we're not waiting for it"). One second
        // of slack was reached on a loaded machine, whose router queue ran seconds behind.
        request.timeoutInterval = Self.backstop(idleTimeout: limits.idleTimeout, consumerMayHold: sink.backlogGate != nil,
                                                slack: sink.backlogGate?.backstopSlack ?? 30)
        self.request = request
        machine = TransferStateMachine(request: request, limits: limits)
        self.session = session
        self.sink = sink
        download = sink as? any DownloadBodySink
        backlogGate = sink.backlogGate
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
        queue.async { self.end(.failure(.cancelled(.init(url: self.request.url)), self.machine.response)) }
    }

    private func startOnQueue() {
        switch machine.start(now: Self.now()) {
        case .ignore:
            return
        case .fail(let error):
            end(.failure(error, nil))
        case .send:
            if session.setsTrustPerTask, limits.credentials != nil {
                end(.failure(.invalidRequest(.init(reason: .trustNotEnforceable(Self.credentialsRefusal), url: request.url)), nil))
                return
            }
            guard let task = makeTask(for: request) else { return }
            if !receiveBudgets.isEmpty, !readsUnderBudgets {
                readsUnderBudgets = true
                let reader = ObjectIdentifier(self)
                for budget in receiveBudgets {
                    budget.join(reader) { [weak self] in self?.wakeFromLimitPause() }
                }
            }
            session.router.deadlines.schedule(self, at: machine.nextDeadline)
            guard resumeProtected(task) else { return }
            owner?.transferDidStart()
        }
    }

    /// Why a session that sets its trust options per task (Linux) refuses credentials.
    static let credentialsRefusal = "on Linux, FoundationNetworking answers an authentication challenge on a libcurl handle of its own making, "
        + "which FetchKit cannot set the session's trust settings on; set no credentials, or send an Authorization header yourself"

    /// Resumes `task` through the session, which makes sure its trust settings were set on it
    /// (Linux); if they were not, the task is already cancelled and the transfer fails.
    @discardableResult
    func resumeProtected(_ task: URLSessionDataTask) -> Bool {
        // Under a bandwidth limit: HTTP/1.1, as an HTTP/2 stream cannot be held to it on the
        // wire, and a small receive window at a low share (see `FetchQueue.bandwidthLimit`).
        switch session.resume(task, connectTimeout: limits.connectTimeout,
                              bandwidthShare: receiveBudgets.status.limited ? receiveBudgets.share : nil) {
        case .refused:
            end(.failure(.invalidRequest(.init(reason: .trustNotEnforceable(
                "the session's trust settings were not set on this request's libcurl handle, so it was cancelled at once"),
                url: request.url)), nil))
            return false
        case .started(let connectTimeoutSet):
            machine.taskStarted(connectTimeoutSet: connectTimeoutSet)
            return true
        }
    }

    // MARK: URLSession callbacks (router queue)

    /// URLSession sent more of the request body (``TransferStateMachine/sent(_:of:now:)``).
    func didSendBodyData(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        guard let (sent, total) = machine.sent(totalBytesSent, of: totalBytesExpectedToSend, now: Self.now()) else { return }
        owner?.transferDidSend(bytes: sent, of: total)
    }

    func didReceive(response: URLResponse) {
        guard let http = response as? HTTPURLResponse else {
            end(.failure(.transport(TransferStateMachine.urlError(.badServerResponse, url: request.url)), nil))
            return
        }
        switch machine.head(http, now: Self.now()) {
        case .ignore, .refuse:
            return
        case .fail(let error):
            end(.failure(error, http))
        case .open(let expectedLength, let bodySent):
            do {
                try sink.open(response: http, expectedLength: expectedLength)
            } catch {
                end(.failure(error, http))
                return
            }
            if let bodySent { owner?.transferDidSend(bytes: bodySent, of: bodySent) }
            owner?.transferDidReceive(response: http, expectedLength: expectedLength)
        }
    }

    /// Takes every chunk waiting in ``inbox``, in order.
    func takeArrivals() {
        for chunk in inbox.take() {
            didReceive(data: chunk)
        }
    }

    func didReceive(data: Data) {
        switch machine.receive(data, now: Self.now()) {
        case .ignore:
            return
        case .writeLate:
            // Stopped for the disk to catch up: what the task still delivers continues the file.
            download?.writeLate(data)
        case .fail(let error):
            end(.failure(error, machine.response))
        case .write:
            do {
                try sink.write(data)
            } catch {
                end(.failure(error, machine.response))
                return
            }
            perform(machine.progress())
            if download?.shouldStopTransfer() == true {
                // The disk fell behind the network: stop; the owner continues from what is stored.
                end(.failure(.cancelled(.init(url: request.url)), machine.response))
            }
        }
    }

    /// Reports progress (``TransferStateMachine/progress(final:)``).
    private func perform(_ action: TransferStateMachine.ProgressAction) {
        switch action {
        case .none:
            break
        case .report(let bytes, let expected):
            owner?.transferDidReceive(bytes: bytes, of: expected)
        case .flushLater:
            queue.async { self.perform(self.machine.flushProgress()) }
        }
    }

    static let progressStep: Int64 = 64 << 10

    func didComplete(error: (any Error)?, head: ResponseHeadFilter? = nil) {
        if let head { trailers = head.trailers }
        switch machine.complete(error: error, refusedHead: head?.failure) {
        case .ignore:
            break
        case .stoppedTaskCompleted(let bodyComplete):
            if let task { session.router.unregister(task) }
            task = nil
            inbox.close()
            download?.stoppedTaskDidComplete(bodyComplete: bodyComplete)
        case .fail(let error):
            end(.failure(error, machine.response))
        case .close:
            perform(machine.progress(final: true))
            guard let download, download.storesLater else {
                closeSink()     // a body in memory is all there: no hop
                return
            }
            // A file's last bytes may still wait for the disk. The close waits for them off this
            // queue — every transfer of the session shares it, so a slow disk must not hold them
            // all up — and the transfer ends back here. No timeout runs meanwhile: every byte
            // arrived.
            download.whenWritten { [self] in
                queue.async { self.closeSink() }
            }
        }
    }

    /// Closes the sink once every byte is written, and ends the transfer. On the router queue.
    private func closeSink() {
        guard let response = machine.written() else { return }
        do {
            let body = try sink.close()
            end(.success(response, body, trailers: trailers))
        } catch {
            end(.failure(error, response))
        }
    }

    /// A data task for `request`, registered with the router as this transfer's; `nil`, with the
    /// transfer ended, when the session has been invalidated.
    func makeTask(for request: URLRequest) -> URLSessionDataTask? {
        guard let task = session.makeDataTask(with: request) else {
            end(.failure(.invalidRequest(.init(reason: .sessionInvalidated, url: request.url)), nil))
            return nil
        }
        self.task = task
        session.router.register(self, for: task)
        return task
    }

    // MARK: Ending

    func end(_ result: TransferResult) {
        let failed = if case .failure = result { true } else { false }
        guard let ending = machine.end(failed: failed, taskCompleted: task.map { $0.state == .completed },
                                       stoppedForBackpressure: task != nil && download?.stoppedForBackpressure == true) else { return }
        session.router.deadlines.cancel(self)
        if readsUnderBudgets {
            readsUnderBudgets = false
            for budget in receiveBudgets { budget.leave(ObjectIdentifier(self)) }
        }
        if ending.drainTask {
            // Its chunks still come (a cancel lands late on Linux): each is part of the body, in
            // order, so the sink writes them, and the next task asks for what follows the last.
            // The sink hears when the task ends. Its reading is not paused meanwhile: what libcurl
            // does not read before the cancel lands, the close throws away.
            inbox.takeLastChunks()
        } else {
            // Whatever waits, and whatever the task still delivers, is dropped as it arrives.
            if let task { session.router.unregister(task) }
            inbox.close()
        }
        if ending.cancelTask, let task {
            // Never cancel a task on the delegate queue: in 6.3.1 cancel() waits on
            // URLSession's work queue, which may be waiting to deliver to this one.
            DispatchQueue.global().async { task.cancel() }
        }
        if !ending.drainTask { task = nil }
        let owner = self.owner
        self.owner = nil
        if failed, !ending.drainTask, let download, download.storesLater {
            // A download keeps its partial file once the writer has written what it was handed
            // (a resume asks for what follows). That wait is off this queue — every transfer of
            // the session shares it, and a stalled disk must not stall them all — and the end is
            // reported back here, after the sink let go of the file.
            download.whenWritten { [self] in
                queue.async {
                    self.sink.abandon()
                    owner?.transferDidEnd(result, of: self)
                }
            }
            return
        }
        if failed { sink.abandon() }
        owner?.transferDidEnd(result, of: self)
    }

    // MARK: Timeouts

    /// Called by the session's ``Deadlines`` when ``TransferStateMachine/nextDeadline`` (as it
    /// was) has come.
    func deadlineReached() {
        perform(machine.deadlineReached(now: nowCountingOnlyTheServersSilence()))
    }

    /// Now; and where the silence was not the server's, the idle clock runs from its end:
    /// where the sink's consumer held the reading (``BacklogGate``), from the hold's end; where
    /// the kernel holds bytes of the response's connection unread, from now — the server sent
    /// them, and libcurl waits for URLSession's work queue, which every session of the process
    /// shares, to read them (a busy queue, or a reading just resumed).
    private func nowCountingOnlyTheServersSilence() -> UInt64 {
        let now = Self.now()
        if let gate = backlogGate { machine.silenceWasNotTheServers(until: gate.heldUntil(now: now)) }
        if let socket = connectionSocket.snapshot, let unread = ReceivePause.unreadBytes(onSocket: socket), unread > 0 {
            machine.silenceWasNotTheServers(until: now)
        }
        return now
    }

    private func perform(_ action: TransferStateMachine.DeadlineAction) {
        switch action {
        case .ignore:
            break
        case .fail(let error):
            end(.failure(error, machine.response))
        case .confirmIdle:
            queue.async { self.perform(self.machine.confirmIdleTimeout(now: self.nowCountingOnlyTheServersSilence())) }
        case .reschedule(let deadline):
            session.router.deadlines.schedule(self, at: deadline)
        }
    }

    // MARK: Helpers

    /// URLSession's own timeout for a transfer (a backstop: FetchKit enforces the real one):
    /// the idle timeout and `slack` (30 s), in whole seconds; a week for a transfer whose consumer may
    /// hold its reading (a stream's reader, a download's disk), since URLSession's timer, reset
    /// only by data, would otherwise end a hold longer than the idle timeout and 30 s — a
    /// reader that waits a minute — while FetchKit's idle clock rightly waits for it.
    static func backstop(idleTimeout: TimeInterval, consumerMayHold: Bool, slack: TimeInterval = 30) -> TimeInterval {
        let week: TimeInterval = 7 * 24 * 3600
        return consumerMayHold ? week : (idleTimeout.rounded(.up) + slack).clamped(to: 1...week)
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
