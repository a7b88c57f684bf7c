import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// Workaround `socket-wakeups`: stops FoundationNetworking from waking up all the time while a
/// transfer waits (Linux).
///
/// - **Bug:** FoundationNetworking's `CURLMOPT_SOCKETFUNCTION` callback keeps a socket's write
///   source after libcurl asks for reading only; a connected socket is always writable, so a
///   waiting transfer burns a core. Not reported upstream as an issue of its own; present from
///   6.0 to 6.3.3 and on `main` of August 2026 (`MultiHandle.swift`, unchanged).
/// - **Versions:** every toolchain so far; no version gate.
/// - **Detected:** FoundationNetworking's callback found by name (`FoundationNetworkingCallbacks`)
///   and the session's multi handle by reflection (`FoundationNetworkingLayout`); `IdleCPUTests`
///   fails when it is not in effect (CPU while transfers wait, and the rewrites counted).
/// - **Not available:** nothing is installed; transfers that wait burn CPU as in a plain
///   `URLSession`, the report says `unavailable`, and the bandwidth limit's wire meter, which
///   needs the watched sockets, is unavailable too.
/// - **Swift 6.4 snapshots:** #5417, #5448 and #5474 do not touch `MultiHandle.swift`'s
///   callback; the fault is still there.
///
/// FoundationNetworking watches libcurl's sockets with dispatch sources, created in its
/// `CURLMOPT_SOCKETFUNCTION` callback (`URLSession/libcurl/MultiHandle.swift`,
/// `_MultiHandle.register(socket:for:what:socketSourcePtr:)`). It adds a source for each
/// direction libcurl asks for, but removes sources only when libcurl says `CURL_POLL_REMOVE`.
/// When libcurl goes from "wait until writable" (connecting, sending the request or a body) to
/// "wait until readable" (the response), the write source stays; a connected socket is always
/// writable, so it fires without end, each time running `curl_multi_socket_action` for
/// nothing: a waiting transfer burns a CPU core (strace shows the socket's epoll registration
/// flipping between `EPOLLIN` and `EPOLLIN|EPOLLOUT` thousands of times a second).
///
/// The fix goes between libcurl and FoundationNetworking's callback, which it still calls for
/// everything: when libcurl asks for one direction only (`CURL_POLL_IN` or `CURL_POLL_OUT`) on
/// a socket that already has sources, the callback first hears `CURL_POLL_REMOVE` for it (so
/// FoundationNetworking cancels both sources and releases its per-socket object), then the
/// request with no per-socket object, as for a new socket (so it makes a fresh object, hands
/// it to libcurl with `curl_multi_assign`, and creates exactly the sources asked for).
/// FoundationNetworking's own teardown defers the new sources until the old ones are
/// cancelled, as it does when libcurl removes a socket and registers it again at once; a
/// source created on a socket that is already readable fires at once, so no wake-up is lost.
/// `CURL_POLL_INOUT` (a superset: nothing to remove), `CURL_POLL_REMOVE` and `CURL_POLL_NONE`
/// pass through unchanged. The fix keeps no state of its own.
///
/// FoundationNetworking's callback is a local symbol (the `@convention(c)` thunk of the
/// closure in `_MultiHandle.setupCallbacks()`), found by its exact name in the library's
/// symbol table by the shims (`FoundationNetworkingCallbacks.socket`); if it is not there, or
/// any check fails, nothing is
/// installed and FoundationNetworking behaves as before.
package enum CurlSocketCallback {
    /// Installs the fix on `session`'s libcurl multi handle, where FoundationNetworking has one
    /// (Linux) and everything checks out; does nothing elsewhere. Call it before the session has
    /// a task, as `FetchSession.fixConnectionPoolSize(of:to:)`.
    ///
    /// - Returns: Whether the fix is installed.
    @discardableResult
    package static func install(on session: URLSession) -> Bool {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard foundationCallback != nil, let multi = FoundationNetworkingLayout.multiHandle(of: session) else { return false }
        return Curl.set(multi: multi, .socketFunction, quietingCallback)
        #else
        return false
        #endif
    }

    #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
    package typealias Callback = Curl.SocketCallback
    package typealias Poll = Curl.Poll

    /// FoundationNetworking's socket callback, found once per process; `nil` if it cannot be
    /// found safely.
    package static var foundationCallback: Callback? { FoundationNetworkingCallbacks.socket }

    /// How many registrations the fix has turned into a removal and a new registration, in
    /// all sessions of the process (for tests: a few per connection, never per wake-up).
    package static let rewrites = Mutex(0)

    /// The socket each easy handle last asked to be watched, while it is watched: libcurl
    /// answers `CURLINFO_ACTIVESOCKET` only after a transfer, so a bandwidth limit finds its
    /// transfer's connection here (``socket(of:)``). Touched on URLSession's work queue, where
    /// libcurl runs.
    private static let watchedSockets = Mutex(WatchedSockets())

    /// The socket that libcurl watches for `easy` now, if the fix is installed and it watches
    /// one. Call it on URLSession's work queue, as the handle's other uses.
    package static func socket(of easy: UnsafeMutableRawPointer) -> Int32? {
        watchedSockets.withLock { $0.socket(of: easy) }
    }

    /// Forgets what was watched for a handle at `easy`'s address: call it on URLSession's work
    /// queue when a new handle is made there, before libcurl uses it (FetchKit's `CurlTaskOptions`).
    package static func forget(_ easy: UnsafeMutableRawPointer) {
        watchedSockets.withLock { $0.forget(easy) }
    }

    /// What libcurl calls instead of FoundationNetworking's callback (see the type's comment).
    package static let quietingCallback: Callback = { easy, socket, what, clientp, socketp in
        // Installed only when `foundationCallback` was found.
        guard let original = CurlSocketCallback.foundationCallback else { return -1 }
        if let easy {
            // A paused transfer's socket is removed, and watched again when it resumes.
            CurlSocketCallback.watchedSockets.withLock { $0.record(easy, socket: socket, removed: what == Poll.remove) }
        }
        guard socketp != nil, what == Poll.readable || what == Poll.writable else {
            return original(easy, socket, what, clientp, socketp)
        }
        // One direction asked for on a socket that has sources (and perhaps the other one, which
        // FoundationNetworking would keep): remove them all, then register as a new socket,
        // whose object FoundationNetworking hands to libcurl with `curl_multi_assign`.
        CurlSocketCallback.rewrites.withLock { $0 &+= 1 }
        let removed = original(easy, socket, Poll.remove, clientp, socketp)
        guard removed == 0 else { return removed }
        return original(easy, socket, what, clientp, nil)
    }
    #endif
}

/// Which socket libcurl watches for each easy handle, from its socket callback.
///
/// libcurl calls the callback with the handle whose transfer changed what it waits for, and
/// not for every handle on a socket: a second HTTP/2 stream joins a socket already watched
/// without a call, and a handle that leaves a socket others still use hears nothing. So an
/// entry can outlive its handle's use of the socket (and the handle itself: its address may
/// serve a new handle later), or name a socket that was closed and whose number a new
/// connection took. The map never answers with a socket another handle was seen on since:
/// a socket belongs to the handle that last asked for it (a socket number is watched for at
/// most one handle here, which is right for the HTTP/1 connections it serves: one transfer at
/// a time), its removal drops it whoever asks, and a new handle at an old address starts
/// empty (``forget(_:)``). So it also holds at most one entry per socket libcurl watches.
package struct WatchedSockets: Sendable {
    /// Handles by address (a number: the map is `Sendable`, and never dereferences one).
    private var socketByHandle: [UInt: Int32] = [:]
    private var handleBySocket: [Int32: UInt] = [:]

    package init() {}

    /// The socket watched for `easy`, if any.
    package func socket(of easy: UnsafeMutableRawPointer) -> Int32? {
        socketByHandle[UInt(bitPattern: easy)]
    }

    /// libcurl asked, for `easy`, to watch `socket` (`removed`: to stop watching it).
    package mutating func record(_ easy: UnsafeMutableRawPointer, socket: Int32, removed: Bool) {
        // The socket is no other handle's now (nor any handle's, once removed).
        if let previous = handleBySocket.removeValue(forKey: socket) { socketByHandle[previous] = nil }
        // A removal of another socket (the loser of two connection attempts) leaves `easy`'s.
        guard !removed else { return }
        let handle = UInt(bitPattern: easy)
        if let previous = socketByHandle.updateValue(socket, forKey: handle) { handleBySocket[previous] = nil }
        handleBySocket[socket] = handle
    }

    /// A new handle is made at `easy`'s address: nothing watched before is its.
    package mutating func forget(_ easy: UnsafeMutableRawPointer) {
        if let previous = socketByHandle.removeValue(forKey: UInt(bitPattern: easy)) { handleBySocket[previous] = nil }
    }

    /// How many handles have an entry (for tests: at most one per socket).
    package var count: Int { socketByHandle.count }
}
