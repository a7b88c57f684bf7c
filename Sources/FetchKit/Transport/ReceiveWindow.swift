import Foundation
import FoundationNetworkingShims

/// Keeps the TCP receive window of a connection made for a transfer under a low bandwidth
/// limit small from its first packet (Linux), so that what the server sends ahead of the
/// limit is a fraction of a second's worth, not the kernel's default window.
///
/// **Why.** A limited transfer pauses its reading (``ReceivePause``) and is charged for what
/// its socket received (``WireMeter``), but before the first pause the server fills the
/// connection's whole receive window: some 190 kB on loopback with the kernel's default
/// buffers, more than a second's worth below 190 kB/s. The limit then pays that back as debt,
/// and the 5-second windows measured at the server that start after it fall to 0.64× (50 kB/s,
/// one transfer) or 0.38× (two), or the first exceeds the limit by 54 %.
///
/// **How.** `SO_RCVBUF`, set on the socket before it connects (libcurl's
/// `CURLOPT_SOCKOPTFUNCTION`, set on the task's handle by ``CurlTaskOptions``), fixes the
/// window the connection announces in its SYN and its window scale (0: windows stay under
/// 64 KiB), and the sender's segment size follows half the largest window it has seen, so the
/// connection never waits for TCP's persist timer. (Narrowing the buffer after the connection
/// is made left the window scale and the sender's 64 KiB segments in place: the server waited
/// for the persist timer, 0.59× at 150 kB/s. `TCP_WINDOW_CLAMP` set before connecting, tried
/// beside it, did not bound the first window on Linux 6.18 and stalled transfers: a 5-second
/// window with nothing sent at 50 kB/s.)
///
/// **How much.** ``bytes(forShare:)``: a tenth of a second of the transfer's share of its
/// limit, at least 4 KiB, and nothing above ``threshold`` (1 MB/s). A connection with such a window carries no more than
/// it can hold per round trip: a path whose round trip is longer than about a tenth of a
/// second holds the transfer below its share (the window, not the limit, paces it).
///
/// **Which connections.** Such a transfer gets a new connection of its own
/// (`CURLOPT_FRESH_CONNECT`: one from the pool would keep its default window), closed when it
/// ends (`CURLOPT_FORBID_REUSE`: no later transfer, limited or not, inherits the small window
/// from the pool). So each transfer up to the threshold costs a connection (and a TLS
/// handshake over HTTPS). A limited transfer keeps to HTTP/1.1 (``CurlTaskOptions``), so no
/// other stream shares it.
enum ReceiveWindow {
    /// Shares above this many bytes per second get no bound. The kernel's default buffers,
    /// which its autotuning grows as a resumed transfer drains them, held the limit within
    /// ±15 % from about 250 kB/s on loopback, but not at 400 kB/s with Ethernet's segments
    /// (MTU 1500, in a network namespace): 0.85–1.14×, against 0.99–1.03× with the window;
    /// at 1 MB/s, 0.96–1.06× without it, 0.99–1.03× with it.
    static let threshold = 1_000_000

    /// The window, in seconds of the transfer's share.
    static let seconds = 0.1

    /// The smallest window asked for, in bytes.
    static let minimumBytes = 4096

    /// The receive buffer, in bytes, for a new connection of a transfer whose share of its
    /// bandwidth limit is `share` bytes per second; `nil` when it needs none.
    static func bytes(forShare share: Int) -> Int? {
        guard share <= threshold, ComparisonSwitches.boundsReceiveWindow else { return nil }
        return max(minimumBytes, Int(Double(max(0, share)) * seconds))
    }

    #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
    /// libcurl's `curl_sockopt_callback`.
    typealias Callback = Curl.SocketOptionCallback

    /// What libcurl hands ``callback`` for a buffer of `bytes`: the size itself, as the
    /// pointer's bits (nothing to allocate or free).
    static func callbackData(bytes: Int) -> UnsafeMutableRawPointer? {
        UnsafeMutableRawPointer(bitPattern: min(max(bytes, 1), 1 << 30))
    }

    /// Sets `SO_RCVBUF` on a connection's new socket, before libcurl connects it. Replaces
    /// FoundationNetworking's own callback, which sets nothing (read in 6.3.1:
    /// `_EasyHandle.setSocketOptions(for:)` is empty).
    static let callback: Callback = { data, socket, purpose in
        // A connection's socket; nothing else is touched.
        guard purpose == Curl.socketTypeConnection else { return Curl.socketOptionOK }
        // The kernel doubles what it is given (for its bookkeeping), and on loopback the
        // window takes about all of that: half is asked for.
        _ = Sockets.setReceiveBuffer(socket, bytes: Int32(clamping: max(1, Int(bitPattern: data) / 2)))
        return Curl.socketOptionOK    // a buffer that could not be set leaves the default one
    }
    #endif
}
