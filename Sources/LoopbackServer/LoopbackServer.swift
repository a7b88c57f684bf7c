import Foundation

/// An HTTP/1.1 server on 127.0.0.1, on an ephemeral port, for tests, demos and benchmarks.
///
/// It starts accepting as soon as it is created and runs until ``stop()`` (or until it is
/// deinitialized). Each connection is served by its own thread with blocking socket I/O and
/// keep-alive; pattern bodies are streamed from a shared buffer, so bodies of any size cost
/// no memory.
///
/// ```swift
/// let server = try LoopbackServer()
/// defer { server.stop() }
/// server.route("/hello") { _ in .text("hi") }
/// let (data, _) = try await URLSession.shared.data(from: server.url("/bytes/1024"))
/// ```
///
/// Requests are answered by custom routes (``route(_:_:)``, exact path match) first, then by
/// the built-in endpoints (`/bytes/{n}`, `/delay/{ms}`, `/status/{code}`, fault injection
/// such as `/reset-mid-body/{n}`, and so on; see the package's documentation of the
/// endpoints), and otherwise get a 404.
///
/// All members are thread-safe.
public final class LoopbackServer: @unchecked Sendable {
    private let core: ServerCore

    /// The port the server listens on (on 127.0.0.1).
    public let port: UInt16

    /// Starts a server on 127.0.0.1 and an ephemeral port; it accepts connections at once.
    ///
    /// - Parameters:
    ///   - recordRequests: whether to keep every request received (including its
    ///     body) for ``recordedRequests`` and ``requests(path:)``. Turn off for benchmarks.
    ///   - sendBufferSize: `SO_SNDBUF` for each accepted connection, or `nil` (the default)
    ///     for the kernel's, which grows to megabytes on loopback. A small one keeps what the
    ///     server hands to the kernel (``ServerCounters/patternBytesSent``) within that much of
    ///     what went on the wire; ``bytesAcknowledged`` measures the wire with any buffer.
    ///   - responder: Answers every request, in place of the routes and the built-in
    ///     endpoints (FetchKitTesting's `TestServer` routes with it); `nil` (the default) for
    ///     those.
    /// - Throws: if the listening socket cannot be created.
    public init(recordRequests: Bool = true, sendBufferSize: Int? = nil,
                responder: (@Sendable (HTTPRequest) -> HTTPResponse)? = nil) throws {
        core = try ServerCore(recordRequests: recordRequests, sendBufferSize: sendBufferSize, responder: responder)
        port = core.port
    }

    deinit {
        core.stop()
    }

    /// `http://127.0.0.1:<port>`.
    public var baseURL: URL {
        URL(string: "http://127.0.0.1:\(port)")!
    }

    /// The URL of `pathAndQuery` on this server, e.g. `url("/bytes/10?x=1")`. A missing
    /// leading `/` is added.
    public func url(_ pathAndQuery: String) -> URL {
        let suffix = pathAndQuery.hasPrefix("/") ? pathAndQuery : "/" + pathAndQuery
        return URL(string: "http://127.0.0.1:\(port)" + suffix)!
    }

    /// Stops the server: closes the listening socket, shuts down every open connection
    /// (clients see the connection end), interrupts every waiting endpoint (`/delay`,
    /// `/never`, `/stall-mid-body`, `.sleep`, `.stall`, ...), and waits (a few seconds at
    /// most, normally a few milliseconds) for the server's threads to finish.
    ///
    /// Idempotent; may be called from any thread, including from a route handler.
    public func stop() {
        core.stop()
    }

    /// Whether ``stop()`` has been called.
    public var isStopped: Bool { core.isStopping }

    // MARK: Counters

    /// All counters, read together.
    public var counters: ServerCounters { core.snapshot }

    /// The bytes that clients acknowledged, over all connections since the start or the last
    /// ``resetCounters()``: what crossed the wire and reached the clients' kernels (response
    /// heads included), read from each connection's `TCP_INFO` (`tcpi_bytes_acked`) and kept
    /// for the closed ones. Unlike ``ServerCounters/patternBytesSent`` (what the server handed
    /// its own kernel, which with the default send buffer runs megabytes ahead on loopback), it
    /// measures a client's receive rate at the server whatever the buffers. `nil` where the
    /// kernel does not report it (not Linux).
    ///
    /// Each read asks the kernel once per open connection: sample it, not in a tight loop.
    public var bytesAcknowledged: Int? { core.bytesAcknowledged }

    /// ``bytesAcknowledged`` for each connection, by its ID (``RecordedRequest/connectionID``
    /// of the requests it carried): the open ones and those closed since the start or the last
    /// ``resetCounters()``. `nil` where the kernel does not report it (not Linux).
    ///
    /// Each read asks the kernel once per open connection: sample it, not in a tight loop.
    public var bytesAcknowledgedByConnection: [Int: Int]? { core.bytesAcknowledgedByConnection }

    /// TCP connections accepted since the start or the last ``resetCounters()``.
    public var connectionsAccepted: Int { core.snapshot.connectionsAccepted }

    /// Requests whose head was read and whose response has not been completely written (or
    /// abandoned) yet. See ``ServerCounters/requestsInFlight``.
    public var requestsInFlight: Int { core.snapshot.requestsInFlight }

    /// The highest ``requestsInFlight`` since the start or the last ``resetCounters()``.
    public var peakRequestsInFlight: Int { core.snapshot.peakRequestsInFlight }

    /// Request heads parsed since the start or the last ``resetCounters()``.
    public var requestsReceived: Int { core.snapshot.requestsReceived }

    /// Resets the counters: ``peakRequestsInFlight`` becomes the current
    /// ``requestsInFlight``; ``connectionsAccepted`` and ``requestsReceived`` become 0; the
    /// recorded requests are cleared too, so ``requestCount(path:)`` counts from here on.
    /// The state of `/flaky` keys is kept.
    public func resetCounters() {
        core.resetCounters()
    }

    /// Wakes every ``waitUntil(timeout:_:)`` and ``blockingWait(timeout:until:)``, so that
    /// their predicates are evaluated again. Call it from a route handler after changing state
    /// of the test's own that such a predicate reads: the server wakes its waiters only when its
    /// own counters change.
    public func wakeWaiters() {
        core.wakeWaiters()
    }

    /// Blocks the calling thread until `predicate` holds for the counters or `timeout`
    /// seconds pass. Returns whether the predicate held. The predicate runs under the
    /// server's lock, so it must be quick and must not call back into the server.
    @discardableResult
    public func blockingWait(timeout: TimeInterval = 10, until predicate: (ServerCounters) -> Bool) -> Bool {
        core.wait(timeout: timeout, until: predicate)
    }

    /// Suspends until `predicate` holds for the counters or `timeout` seconds pass. Returns
    /// whether the predicate held. The wait blocks a thread of its own, neither a Dispatch
    /// worker nor a Swift concurrency thread. The predicate runs under the server's lock, so it must be quick
    /// and must not call back into the server.
    @discardableResult
    public func waitUntil(
        timeout: TimeInterval = 10,
        _ predicate: @escaping @Sendable (ServerCounters) -> Bool
    ) async -> Bool {
        let core = self.core
        // A thread of its own, not a Dispatch worker: with many tests waiting at once, blocked
        // workers starve the pool (on Linux libdispatch adds threads only as its monitor sees the
        // queue stuck, about once a second), and a wait then ends seconds after its predicate held.
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            Thread {
                continuation.resume(returning: core.wait(timeout: timeout, until: predicate))
            }.start()
        }
    }

    // MARK: Recorded requests

    /// Every request received, in the order their bodies finished arriving (empty when the
    /// server was created with `recordRequests: false`).
    public var recordedRequests: [RecordedRequest] { core.recordedRequests }

    /// The recorded requests whose path (without query) is `path`.
    public func requests(path: String) -> [RecordedRequest] {
        core.recordedRequests.filter { $0.path == path }
    }

    /// The number of recorded requests whose path (without query) is `path`.
    public func requestCount(path: String) -> Int {
        core.recordedRequests.reduce(0) { $0 + ($1.path == path ? 1 : 0) }
    }

    // MARK: Routes

    /// Answers requests whose path (without query) is exactly `path` with `handler`, which
    /// runs on the connection's thread. Custom routes are checked before the built-in
    /// endpoints and may replace them; registering a path again replaces its handler.
    /// The server keeps the handler until it is deinitialized, so a handler that needs the
    /// server should capture it weakly.
    public func route(_ path: String, _ handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        core.setRoute(path, handler)
    }

    /// Removes the custom route for `path`, if any.
    public func removeRoute(_ path: String) {
        core.setRoute(path, nil)
    }

    /// The `Last-Modified` value of `/bytes`, `/bytes-norange` and `/etag` responses:
    /// `Wed, 21 Oct 2026 07:28:00 GMT`.
    public static let fixedLastModified = BuiltinRoutes.lastModified
}
