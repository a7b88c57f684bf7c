import Foundation
import LoopbackServer

/// A gate your test opens to let a held answer go on: the server waits at it, so the test
/// decides when the head or the rest of a body goes out — no timing involved.
///
/// ```swift
/// let gate = TestGate()
/// server.route("GET", "/slow") { _ in .json("{}").held(by: gate) }
/// // … start the fetch, wait until the request is in flight, cancel it or check progress …
/// gate.open()
/// ```
///
/// A server waiting at a gate stops waiting when the client goes away or the server shuts
/// down, so a gate never opened does not keep a test's connections alive.
public final class TestGate: Sendable {
    let gate = ServerGate()

    /// A closed gate.
    public init() {}

    /// Opens the gate for good: every answer waiting at it goes on, and later ones do not wait.
    public func open() {
        gate.open()
    }

    /// Whether the gate is open.
    public var isOpen: Bool {
        gate.wait(timeout: 0)
    }

    /// Blocks the calling thread until the gate opens or `timeout` seconds pass — for a
    /// route's responder, which runs on the connection's own thread and may wait there.
    ///
    /// - Returns: Whether the gate is open.
    @discardableResult
    public func wait(timeout: TimeInterval) -> Bool {
        gate.wait(timeout: timeout)
    }
}
