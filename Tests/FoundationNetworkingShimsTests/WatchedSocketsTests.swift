import FoundationNetworkingShims
import Testing

/// What ``CurlSocketCallback`` remembers of libcurl's socket callback, for a bandwidth limit to
/// find a transfer's connection (``ReceivePause/connectionReceipt(_:)``): never another
/// connection's socket. libcurl calls the callback only for the handle whose transfer changed
/// what it waits for, so the cases below are sequences it makes (two HTTP/2 streams on one
/// socket, a socket closed under another handle, a handle freed and its address reused).
@Suite("Watched sockets", .timeLimit(.minutes(3)))
struct WatchedSocketsTests {
    /// Two distinct handle addresses (never dereferenced).
    let a = UnsafeMutableRawPointer(bitPattern: 0x1000)!
    let b = UnsafeMutableRawPointer(bitPattern: 0x2000)!

    @Test func aHandleHasTheSocketItAskedForUntilItIsRemoved() {
        var sockets = WatchedSockets()
        sockets.record(a, socket: 7, removed: false)
        #expect(sockets.socket(of: a) == 7)
        sockets.record(a, socket: 7, removed: true)     // paused, or done
        #expect(sockets.socket(of: a) == nil)
        sockets.record(a, socket: 7, removed: false)    // resumed
        #expect(sockets.socket(of: a) == 7)
    }

    @Test func aNewHandleAtAFreedHandlesAddressStartsWithNoSocket() {
        var sockets = WatchedSockets()
        // Stream `a` opens socket 7; stream `b` joins it (libcurl calls nothing: already
        // watched); `a` ends (nothing either: `b` still uses the socket) and is freed.
        sockets.record(a, socket: 7, removed: false)
        // A new handle is made at `a`'s address, for a transfer whose connection is not 7.
        sockets.forget(a)
        #expect(sockets.socket(of: a) == nil, "socket 7 is another transfer's connection")
    }

    @Test func aSocketRemovedUnderAnotherHandleIsNoHandlesAnyMore() {
        var sockets = WatchedSockets()
        sockets.record(a, socket: 7, removed: false)
        // The last stream on the connection, `b`, ends: libcurl removes socket 7 under `b`;
        // its number may serve a new connection next.
        sockets.record(b, socket: 7, removed: true)
        #expect(sockets.socket(of: a) == nil)
    }

    @Test func aSocketBelongsToTheHandleThatLastAskedForIt() {
        var sockets = WatchedSockets()
        sockets.record(a, socket: 7, removed: false)
        // Socket 7 closed unseen by `a`, and a new connection for `b` took the number.
        sockets.record(b, socket: 7, removed: false)
        #expect(sockets.socket(of: a) == nil)
        #expect(sockets.socket(of: b) == 7)
        #expect(sockets.count == 1, "one entry per watched socket")
    }

    @Test func removingOneOfTwoConnectionAttemptsKeepsTheOther() {
        var sockets = WatchedSockets()
        // Two attempts (IPv6 and IPv4) for one handle; the first loses.
        sockets.record(a, socket: 7, removed: false)
        sockets.record(a, socket: 8, removed: false)
        sockets.record(a, socket: 7, removed: true)
        #expect(sockets.socket(of: a) == 8)
    }
}
