import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The one delegate of a ``FetchSession``'s `URLSession`: it implements every callback and
/// forwards each, by task identifier, to the ``Transfer`` that owns the task.
///
/// Why one delegate that routes, rather than a delegate per task: on Linux, delegate methods
/// declared only in a subclass are never called, and `task.delegate` receives no data callbacks
/// for `dataTask(with:)`. All callbacks run on ``queue``, a serial queue that the transfers'
/// timers share, so a transfer's state is touched by one thread at a time without a lock.
final class SessionRouter: NSObject, @unchecked Sendable {
    /// The serial queue every callback and every transfer timer runs on.
    let queue = DispatchQueue(label: "FetchKit.SessionRouter")
    /// The `URLSession` delegate queue, serial, running on ``queue``.
    let delegateQueue: OperationQueue
    /// The transfers' timeouts, on one timer. Used on ``queue`` only.
    let deadlines: Deadlines
    /// Stores the cookies that responses set (in place of FoundationNetworking, on Linux).
    let cookies: CookieJar
    private let transfers = Protected([Int: Transfer]())
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    init(cookies: CookieJar) {
        self.cookies = cookies
        delegateQueue = OperationQueue()
        delegateQueue.name = "FetchKit.SessionRouter.delegate"
        delegateQueue.maxConcurrentOperationCount = 1
        delegateQueue.underlyingQueue = queue
        deadlines = Deadlines(queue: queue)
        super.init()
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
}

extension SessionRouter: URLSessionDataDelegate {
    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        // Nothing to release: every task of the session has already completed, and each
        // transfer unregistered itself then.
    }

    func urlSession(
        _ session: URLSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        // Session-level challenges are server trust; the system's evaluation decides.
        completionHandler(.performDefaultHandling, nil)
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        guard let transfer = transfer(for: task) else {
            completionHandler(.cancelAuthenticationChallenge, nil)
            return
        }
        let (disposition, credential) = transfer.answer(challenge)
        completionHandler(disposition, credential)
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // Before the answer: the next request carries the cookies this response set.
        cookies.store(from: response, of: task)
        guard let transfer = transfer(for: task) else {
            // Its transfer ended, which cancels the task: answering now would trap in
            // FoundationNetworking. Make sure of the cancel and leave the answer unsent.
            task.cancel()
            return
        }
        switch transfer.redirect(response, to: request) {
        case .follow(let next): completionHandler(cookies.sending(next))
        case .stop: completionHandler(nil)
        case .abandon: task.cancel()
        }
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        // A body stream cannot be rewound; a request that needs it again fails instead.
        completionHandler(nil)
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didSendBodyData bytesSent: Int64,
        totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        transfer(for: task)?.didSendBodyData(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {}

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        cookies.storeFromWithheldHead(of: task)
        transfer(for: task)?.didComplete(error: error)
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        if let http = response as? HTTPURLResponse { cookies.store(from: http, of: dataTask) }
        // The disposition is ignored on Linux (libcurl cannot pause), so always allow and let
        // the transfer cancel the task itself when it rejects the response.
        transfer(for: dataTask)?.didReceive(response: response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        transfer(for: dataTask)?.didReceive(data: data)
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
