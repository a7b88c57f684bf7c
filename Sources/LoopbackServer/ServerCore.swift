import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The state a running server shares between the accept thread, the connection threads and
/// callers of the public API, and the accept loop itself.
///
/// Every mutable property is guarded by `condition` (an `NSCondition`, i.e. a mutex plus a
/// condition variable). State changes `broadcast()`, which both the counter waiters and
/// `stop()` wait on. The threads retain this object, not the `LoopbackServer` facade, so the
/// facade's `deinit` can run (and stop everything) while connections are still open.
final class ServerCore: @unchecked Sendable {
    typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse

    let port: UInt16
    let recordRequests: Bool

    private let condition = NSCondition()
    private let listenFD: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32

    // Guarded by `condition`:
    private var stopping = false
    private var counters = ServerCounters()
    private var recorded: [RecordedRequest] = []
    private var flakyCounts: [String: Int] = [:]
    private var routes: [String: Handler] = [:]
    private var openConnections: [Int: Int32] = [:] // connection ID -> descriptor
    private var connectionSequence = 0
    private var liveThreads = 0 // the accept thread plus connection threads
    private var acknowledgedByClosed = 0 // bytes acknowledged on connections closed since the last reset
    private var acknowledgedByClosedConnection: [Int: Int] = [:] // the same, by connection ID

    /// How long `stop()` waits for threads to finish.
    private static let stopGracePeriod: TimeInterval = 3
    /// Thread-dictionary key marking a thread as one of this server's.
    private static let threadKey = "LoopbackServer.core"

    /// `SO_SNDBUF` of each accepted connection, if set (see ``LoopbackServer/init(recordRequests:sendBufferSize:responder:)``).
    let sendBufferSize: Int?
    /// Answers every request when set (``LoopbackServer/init(recordRequests:sendBufferSize:responder:)``).
    let responder: Handler?

    init(recordRequests: Bool, sendBufferSize: Int? = nil, responder: Handler? = nil) throws {
        self.recordRequests = recordRequests
        self.sendBufferSize = sendBufferSize
        self.responder = responder
        let (fd, port) = try Socket.makeListener(backlog: 1024)
        // Non-blocking, so a connection that vanished between poll and accept cannot
        // block the accept thread; accepted sockets are made blocking again.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let wake: (read: Int32, write: Int32)
        do {
            wake = try Socket.makePipe()
        } catch {
            Socket.close(fd)
            throw error
        }
        listenFD = fd
        self.port = port
        wakeRead = wake.read
        wakeWrite = wake.write
        liveThreads = 1
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "LoopbackServer:\(port) accept"
        thread.start()
    }

    // MARK: Accepting

    private func acceptLoop() {
        Thread.current.threadDictionary[Self.threadKey] = ObjectIdentifier(self).hashValue
        var descriptors = [
            pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            descriptors[0].revents = 0
            descriptors[1].revents = 0
            _ = poll(&descriptors, 2, -1)
            condition.lock()
            if stopping {
                Socket.close(listenFD)
                Socket.close(wakeRead)
                Socket.close(wakeWrite)
                liveThreads -= 1
                condition.broadcast()
                condition.unlock()
                return
            }
            condition.unlock()
            guard descriptors[0].revents != 0 else { continue }
            // Take everything pending.
            while let fd = Socket.accept(listenFD) {
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
                if let sendBufferSize { Socket.setIntOption(fd, SOL_SOCKET, SO_SNDBUF, Int32(clamping: sendBufferSize)) }
                condition.lock()
                if stopping {
                    condition.unlock()
                    Socket.close(fd)
                    break
                }
                connectionSequence += 1
                let id = connectionSequence
                openConnections[id] = fd
                liveThreads += 1
                counters.connectionsAccepted += 1
                counters.connectionsOpen += 1
                condition.broadcast()
                condition.unlock()
                let thread = Thread { [self] in
                    Thread.current.threadDictionary[Self.threadKey] = ObjectIdentifier(self).hashValue
                    Connection(core: self, fd: fd, id: id).run()
                }
                thread.name = "LoopbackServer:\(port) connection \(id)"
                thread.start()
            }
            // Out of descriptors or memory: the pending connection stays queued, so back off
            // briefly (interruptibly) instead of spinning on poll.
            let code = errno
            if code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM {
                _ = sleep(milliseconds: 10)
            }
        }
    }

    /// Closes a connection's descriptor and unregisters it: the last thing a connection
    /// thread does. `reset` arms `SO_LINGER {1, 0}` first, so the peer gets an RST.
    func closeConnection(id: Int, fd: Int32, reset: Bool) {
        condition.lock()
        if reset { Socket.armReset(fd) }
        let acknowledged = Socket.bytesAcknowledged(fd) ?? 0
        acknowledgedByClosed += acknowledged
        acknowledgedByClosedConnection[id] = acknowledged
        Socket.close(fd)
        openConnections[id] = nil
        counters.connectionsOpen -= 1
        liveThreads -= 1
        condition.broadcast()
        condition.unlock()
    }

    // MARK: Stopping

    /// Whether `stop()` has begun.
    var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    /// Stops accepting, shuts down every open connection (waking blocked reads, writes and
    /// polls), wakes every waiting endpoint, then waits (at most a few seconds) for the accept
    /// and connection threads to finish. Idempotent; safe from any thread, including a
    /// route handler's.
    func stop() {
        let ownThread = (Thread.current.threadDictionary[Self.threadKey] as? Int) == ObjectIdentifier(self).hashValue
        condition.lock()
        if !stopping {
            stopping = true
            // Stops listening now, whenever the accept thread gets to close the descriptor: a
            // connection made after stop() returns is refused (Linux; elsewhere at the close).
            Socket.shutdownBoth(listenFD)
            Socket.poke(wakeWrite) // under the lock: the accept thread closes the pipe under it too
            for fd in openConnections.values { Socket.shutdownBoth(fd) }
            condition.broadcast()
        }
        let deadline = Date(timeIntervalSinceNow: Self.stopGracePeriod)
        let allowance = ownThread ? 1 : 0
        while liveThreads > allowance {
            if !condition.wait(until: deadline) { break }
        }
        condition.unlock()
    }

    /// Waits until `milliseconds` have passed (returns `true`) or the server is stopping
    /// (returns `false`).
    func sleep(milliseconds: Int) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(milliseconds) / 1000)
        condition.lock()
        defer { condition.unlock() }
        while !stopping {
            if !condition.wait(until: deadline) { return !stopping }
        }
        return false
    }

    // MARK: Counters

    /// Counts a request head as received and in flight.
    func requestStarted() {
        condition.lock()
        counters.requestsReceived += 1
        counters.requestsInFlight += 1
        if counters.requestsInFlight > counters.peakRequestsInFlight {
            counters.peakRequestsInFlight = counters.requestsInFlight
        }
        condition.broadcast()
        condition.unlock()
    }

    /// Counts a request as no longer in flight.
    func requestFinished() {
        condition.lock()
        counters.requestsInFlight -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Counts pattern body bytes handed to the kernel, and wakes whoever waits on the count.
    func patternSent(_ count: Int) {
        condition.lock()
        counters.patternBytesSent += count
        condition.broadcast()
        condition.unlock()
    }

    /// Wakes the counter waiters, to re-evaluate predicates over state outside the server.
    func wakeWaiters() {
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }

    var snapshot: ServerCounters {
        condition.lock()
        defer { condition.unlock() }
        return counters
    }

    /// The bytes clients acknowledged on every connection, open or closed since the start or
    /// the last reset (a connection open across a reset counts from its start); `nil` where
    /// the kernel does not tell (not Linux).
    var bytesAcknowledged: Int? {
        #if os(Linux)
        condition.lock()
        defer { condition.unlock() }
        return openConnections.values.reduce(acknowledgedByClosed) { $0 + (Socket.bytesAcknowledged($1) ?? 0) }
        #else
        return nil
        #endif
    }

    /// ``bytesAcknowledged`` by connection ID: the open connections and those closed since the
    /// start or the last reset.
    var bytesAcknowledgedByConnection: [Int: Int]? {
        #if os(Linux)
        condition.lock()
        defer { condition.unlock() }
        return openConnections.reduce(into: acknowledgedByClosedConnection) { $0[$1.key] = Socket.bytesAcknowledged($1.value) ?? 0 }
        #else
        return nil
        #endif
    }

    func resetCounters() {
        condition.lock()
        acknowledgedByClosed = 0
        acknowledgedByClosedConnection.removeAll()
        counters.connectionsAccepted = 0
        counters.requestsReceived = 0
        counters.patternBytesSent = 0
        counters.peakRequestsInFlight = counters.requestsInFlight
        recorded.removeAll()
        condition.broadcast()
        condition.unlock()
    }

    /// Blocks until `predicate` holds for the counters (returns `true`) or `timeout` passes
    /// (returns `false`). The predicate runs under the server's lock: keep it trivial.
    func wait(timeout: TimeInterval, until predicate: (ServerCounters) -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate(counters) {
            if !condition.wait(until: deadline) { return predicate(counters) }
        }
        return true
    }

    // MARK: Recording

    func record(_ request: HTTPRequest) {
        guard recordRequests else { return }
        let entry = RecordedRequest(request)
        condition.lock()
        recorded.append(entry)
        condition.broadcast()
        condition.unlock()
    }

    var recordedRequests: [RecordedRequest] {
        condition.lock()
        defer { condition.unlock() }
        return recorded
    }

    // MARK: Routes and per-key state

    func setRoute(_ path: String, _ handler: Handler?) {
        condition.lock()
        routes[path] = handler
        condition.unlock()
    }

    func route(for path: String) -> Handler? {
        condition.lock()
        defer { condition.unlock() }
        return routes[path]
    }

    /// Returns how many times `key` was seen before, and counts this time.
    func nextFlakyIndex(_ key: String) -> Int {
        condition.lock()
        defer { condition.unlock() }
        let index = flakyCounts[key, default: 0]
        flakyCounts[key] = index + 1
        return index
    }


    /// Answers `request`: the responder, if the server has one; else a custom route for its
    /// exact path, else the built-in endpoints.
    func respond(to request: HTTPRequest) -> HTTPResponse {
        if let responder { return responder(request) }
        if let handler = route(for: request.path) { return handler(request) }
        return BuiltinRoutes.respond(to: request, core: self)
    }
}
