import Foundation

/// A gate a test opens to let scripted responses (``ScriptAction/wait(_:)``) or route handlers
/// go on, so that a test controls exactly when the server proceeds — no timing involved.
///
/// ```swift
/// let gate = ServerGate()
/// server.route("/held") { _ in
///     .script([.write(HTTPResponse.rawHead(status: 200, headers: ["Content-Length": "4"])),
///              .wait(gate), .write(Data("done".utf8))])
/// }
/// // … the client has the head and waits for the body …
/// gate.open()
/// ```
public final class ServerGate: @unchecked Sendable {
    private let condition = NSCondition()
    private var opened = false
    /// The write ends of the pipes of connections waiting at the gate, poked when it opens.
    private var wakers: Set<Int32> = []

    /// Creates a closed gate.
    public init() {}

    /// Opens the gate for good; every waiter goes on.
    public func open() {
        condition.lock()
        opened = true
        condition.broadcast()
        // Under the lock: a waiter unregisters (under it) before it closes its pipe.
        for waker in wakers { Socket.poke(waker) }
        wakers.removeAll()
        condition.unlock()
    }

    /// Registers the write end of a waiting connection's pipe, poked when the gate opens.
    ///
    /// - Returns: `false` if the gate is open already (nothing was registered).
    func register(waker: Int32) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !opened else { return false }
        wakers.insert(waker)
        return true
    }

    /// Forgets a waker registered with ``register(waker:)``, before its pipe is closed.
    func unregister(waker: Int32) {
        condition.lock()
        wakers.remove(waker)
        condition.unlock()
    }

    /// Blocks until the gate opens or `timeout` passes.
    ///
    /// - Returns: Whether the gate is open.
    @discardableResult
    public func wait(timeout: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !opened {
            if !condition.wait(until: deadline) { return opened }
        }
        return true
    }
}
