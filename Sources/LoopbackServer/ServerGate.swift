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

    /// Creates a closed gate.
    public init() {}

    /// Opens the gate for good; every waiter goes on.
    public func open() {
        condition.lock()
        opened = true
        condition.broadcast()
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
