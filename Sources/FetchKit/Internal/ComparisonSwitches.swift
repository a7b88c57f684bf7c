/// What `fetchkit-bench` turns off to measure FetchKit against itself without a fix: `package`
/// API, not the environment, so that nothing a user's process inherits changes what FetchKit
/// does. Each switch is read where its fix is applied (a session, a hasher), so set it before.
package enum ComparisonSwitches {
    private static let sockets = Protected(true)
    private static let systemDigest = Protected(true)
    private static let receiveWindow = Protected(true)

    /// Whether new sessions quiet FoundationNetworking's socket wake-ups
    /// (``FetchSession/quietsWaitingSockets``); `true` unless a benchmark turns it off.
    package static var quietsWaitingSockets: Bool {
        get { sockets.snapshot }
        set { sockets.withLock { $0 = newValue } }
    }

    /// Whether transfers resumed from now on under a low bandwidth limit get a small receive
    /// window (``ReceiveWindow``); `true` unless a benchmark turns it off.
    package static var boundsReceiveWindow: Bool {
        get { receiveWindow.snapshot }
        set { receiveWindow.withLock { $0 = newValue } }
    }

    /// Whether new hashers use the system's digests (libcrypto) where they are loaded; `false`
    /// makes them use FetchKit's own Swift implementations, for comparison.
    package static var usesSystemDigests: Bool {
        get { systemDigest.snapshot }
        set { systemDigest.withLock { $0 = newValue } }
    }
}
