import Foundation
import FoundationNetworkingShims
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The one delegate of a ``FetchSession``'s `URLSession`: it implements every callback and
/// forwards each, by task identifier, to the ``Transfer`` that owns the task.
///
/// Why one delegate that routes, rather than a delegate per task: on Linux, delegate methods
/// declared only in a subclass are never called, and `task.delegate` receives no data callbacks
/// for `dataTask(with:)`. All callbacks are handled on ``queue``, a serial queue that the
/// transfers' timers share, so a transfer's state is touched by one thread at a time without
/// a lock.
///
/// How a callback gets there. On Linux the session's delegate queue is an
/// ``ArrivalDelegateQueue``: URLSession hands it each callback on its own serial work queue,
/// and it runs the callback there at once; the router then queues the work on ``queue``
/// itself, in the order the callbacks came. A body chunk is first put in its transfer's
/// ``TransferInbox``, which counts it against the size limit as it arrives — the earliest
/// moment FetchKit can see it: FoundationNetworking counts no received bytes of a data task
/// (`countOfBytesReceived` stays 0) and offers no hook before the delegate queue. Elsewhere,
/// or if FoundationNetworking hands a callback over some other way, it runs on ``queue``
/// through the `OperationQueue` and is handled there directly.
final class SessionRouter: NSObject, @unchecked Sendable {
    /// The serial queue every callback and every transfer timer runs on.
    let queue = DispatchQueue(label: "FetchKit.SessionRouter")
    /// The `URLSession` delegate queue, serial, running on ``queue`` what it does not run at
    /// once (``ArrivalDelegateQueue``).
    let delegateQueue: OperationQueue
    /// The transfers' timeouts, on one timer. Used on ``queue`` only.
    let deadlines: Deadlines
    /// Stores the cookies that responses set (in place of FoundationNetworking, on Linux).
    let cookies: CookieJar
    private let transfers = Protected([Int: Transfer]())
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    /// What the session trusts (Apple platforms evaluate it in the server-trust challenge).
    let trust: TrustSettings

    init(cookies: CookieJar, trust: TrustSettings = TrustSettings()) {
        self.cookies = cookies
        self.trust = trust
        #if canImport(FoundationNetworking)
        let delegateQueue = ArrivalDelegateQueue()
        #else
        let delegateQueue = OperationQueue()
        #endif
        delegateQueue.name = "FetchKit.SessionRouter.delegate"
        delegateQueue.maxConcurrentOperationCount = 1
        delegateQueue.underlyingQueue = queue
        self.delegateQueue = delegateQueue
        deadlines = Deadlines(queue: queue)
        super.init()
        #if canImport(FoundationNetworking)
        delegateQueue.router = self
        #endif
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
    }

    /// Whether the caller runs on ``queue``.
    var isCurrent: Bool {
        DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self)
    }

    func register(_ transfer: Transfer, for task: URLSessionTask) {
        transfers.withLock { $0[task.taskIdentifier] = transfer }
    }

    func unregister(_ task: URLSessionTask) {
        _ = transfers.withLock { $0.removeValue(forKey: task.taskIdentifier) }
    }

    /// How many transfers are registered (tests and diagnostics).
    var activeTransferCount: Int {
        transfers.withLock { $0.count }
    }

    private func transfer(for task: URLSessionTask) -> Transfer? {
        transfers.withLock { $0[task.taskIdentifier] }
    }

    /// Runs `work` on ``queue``: at once if the callback already runs there, else queued
    /// behind the callbacks that came before it.
    private func handle(_ work: @escaping @Sendable () -> Void) {
        if isCurrent {
            work()
        } else {
            queue.async(execute: work)
        }
    }
}

#if canImport(FoundationNetworking)
/// The delegate queue of a ``SessionRouter`` on Linux: runs each callback that
/// FoundationNetworking adds, at once, on the thread that adds it — URLSession's serial work
/// queue — so that the router sees a body chunk as soon as libcurl has read it, and queues the
/// rest of the work on its own queue. (FoundationNetworking adds every callback with
/// `addOperation(_:)` of a block, from its work queue; each becomes a `BlockOperation` that
/// waits in this queue otherwise.) The router's own methods never block there and never
/// call into URLSession.
///
/// A block added from the router's queue itself (no FoundationNetworking version does) goes
/// through the `OperationQueue` as before, behind what runs now, never inside it.
final class ArrivalDelegateQueue: OperationQueue, @unchecked Sendable {
    weak var router: SessionRouter?

    override func addOperation(_ block: @escaping @Sendable () -> Void) {
        if let router, !router.isCurrent {
            block()
        } else {
            super.addOperation(block)
        }
    }
}
#endif

extension SessionRouter: URLSessionDataDelegate {
    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        // Nothing to release: every task of the session has already completed, and each
        // transfer unregistered itself then.
    }

    // No session-level challenge method: without one, URLSession (Apple platforms) hands the
    // server-trust challenge to the task-level method below, where the transfer is known.
    // FoundationNetworking delivers no server-trust challenge at all.

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        #if !canImport(FoundationNetworking)
        switch challenge.protectionSpace.authenticationMethod {
        case NSURLAuthenticationMethodServerTrust:
            // The system's evaluation decides, unless the session has trust settings.
            guard !trust.isEmpty, let serverTrust = challenge.protectionSpace.serverTrust else {
                completionHandler(.performDefaultHandling, nil)
                return
            }
            if let refusal = ServerTrustEvaluation.refusal(of: serverTrust, host: challenge.protectionSpace.host, settings: trust) {
                completionHandler(.cancelAuthenticationChallenge, nil)
                handle { [self] in transfer(for: task)?.refuseServerTrust(refusal) }
            } else {
                completionHandler(.useCredential, URLCredential(trust: serverTrust))
            }
            return
        case NSURLAuthenticationMethodClientCertificate, NSURLAuthenticationMethodNTLM, NSURLAuthenticationMethodNegotiate:
            // Session-level kinds, which FetchKit leaves to the system as before.
            completionHandler(.performDefaultHandling, nil)
            return
        default:
            break
        }
        #endif
        handle { [self] in
            guard let transfer = transfer(for: task) else {
                completionHandler(.cancelAuthenticationChallenge, nil)
                return
            }
            let (disposition, credential) = transfer.answer(challenge)
            completionHandler(disposition, credential)
        }
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        handle { [self] in
            // Before the answer: the next request carries the cookies this response set.
            cookies.store(from: response, of: task)
            guard let transfer = transfer(for: task) else {
                // Its transfer ended, which cancels the task: answering now would trap in
                // FoundationNetworking. Make sure of the cancel and leave the answer unsent.
                task.cancel()
                return
            }
            let decision = transfer.redirect(response, to: request)
            // A task that stopped waiting meanwhile (a cancel that reached URLSession's queue
            // first) traps if answered; this queue may be seconds behind that one.
            guard task.state == .running else { return }
            switch decision {
            case .follow(let next): completionHandler(cookies.sending(next))
            case .stop, .resend: completionHandler(nil)
            case .abandon: task.cancel()
            }
        }
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        // A body stream cannot be rewound; a request that needs it again fails instead.
        // (FoundationNetworking asks on its work queue and waits for the answer.)
        completionHandler(nil)
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didSendBodyData bytesSent: Int64,
        totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        handle { [self] in
            transfer(for: task)?.didSendBodyData(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {}

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        handle { [self] in
            cookies.storeFromWithheldHead(of: task)
            #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
            transfer(for: task)?.didComplete(error: error, head: CurlHeaderCallback.take(task))
            #else
            transfer(for: task)?.didComplete(error: error)
            #endif
        }
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        // In order with the chunks: the body that follows is counted from here.
        if let transfer = transfer(for: dataTask) {
            transfer.inbox.headArrived()
            // Where the body will come from, for the idle deadline's look at what the kernel
            // holds unread (on the work queue, where the shims may look up the handle).
            #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
            if !isCurrent, let handle = CurlHeaderCallback.easyHandle(of: dataTask) {
                transfer.noteConnectionSocket(ReceivePause.http1Socket(ofHandle: handle))
            }
            #endif
        }
        handle { [self] in
            if let http = response as? HTTPURLResponse { cookies.store(from: http, of: dataTask) }
            // The disposition is ignored on Linux (libcurl cannot pause), so always allow and let
            // the transfer cancel the task itself when it rejects the response.
            transfer(for: dataTask)?.didReceive(response: response)
            completionHandler(.allow)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        // A chunk of a task that no transfer waits for (it ended) costs a lookup, nothing more.
        guard let transfer = transfer(for: dataTask) else { return }
        guard !isCurrent else {
            // Not where libcurl reads: a bandwidth limit cannot pause the reading here.
            if transfer.receiveBudgets.status.limited { transfer.receiveBudgets.markUnenforced(.readOffLibcurlThread) }
            transfer.didReceive(data: data)
            return
        }
        // Where the chunk arrives (URLSession's work queue, inside libcurl's write callback):
        // counted and kept, or dropped.
        guard case .kept(let wake, let reading) = transfer.inbox.arrive(data) else { return }
        switch reading {
        case .goOn, .breathe:
            transfer.holdToBandwidthLimits(dataTask, chunk: data.count, breathing: reading == .breathe)
        case .stopPastLimit:
            // Past the limit: stop reading now, not once the router queue gets to this chunk.
            // libcurl stops at once; the cancel, which waits for this queue, closes the
            // connection once the queue has drained. (The transfer ends when it takes this
            // chunk, and cancels too; a second cancel does nothing.) Never on this queue.
            transfer.limitPause.withLock { $0 = nil }
            ReceivePause.pauseReceiving(dataTask)
            DispatchQueue.global().async { dataTask.cancel() }
        }
        // A consumer that is behind (a download's disk, a stream's reader): the reading waits (``BacklogGate``).
        if let gate = transfer.backlogGate {
            gate.holdIfBehind(waiting: { transfer.inbox.waiting }) { ReceivePause.pauseUntilResumed(dataTask, stall: gate.readingStall) }
        }
        if wake {
            queue.async { transfer.takeArrivals() }
        }
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(nil)
    }
}
