import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Workaround for `URLSessionTask.cancel()` landing late, and the mechanism under the bandwidth
/// limit and the disk's backpressure: stops libcurl reading a task's response at once, from
/// inside the callback that delivers a chunk of it (Linux), and resumes it later.
///
/// - **Bug:** FoundationNetworking offers no pause (`suspend()` must never be used on Linux:
///   it stops the task's timers, not libcurl's reading), and a cancel waits behind a work queue
///   that a fast body keeps busy.
/// - **Versions:** every toolchain so far; #5417 (6.4 snapshots) makes `cancel()` asynchronous,
///   which does not make it land sooner: the pause is still what stops the reading.
/// - **Detected:** each call finds the task's handle through `FoundationNetworkingLayout` and
///   calls `curl_easy_pause` from `Curl`; `EndlessBodyMemoryTests` (a cancel that lands at
///   once), `BackpressureTests` and `BandwidthLimitTests` fail when it is not in effect.
/// - **Not available:** each call answers `false` or `nil`; FetchKit then lets the reading go on
///   (a cancel lands when it can; a bandwidth limit is not held on the wire, and
///   `FetchQueue.bandwidthLimitShortfall` says so; a slow disk buffers more).
///
/// Why: `URLSessionTask.cancel()` waits for URLSession's serial work queue
/// (`workQueue.sync`), and a body that arrives faster than FoundationNetworking hands it over
/// — an endless body in 256-byte chunks over loopback costs it more than the network does —
/// keeps that queue busy: libcurl reads on (a hundred reads per call), and asks to be called
/// again at once. Measured (Swift 6.3.1, libcurl 7.88): a cancel issued after 64 MiB of such
/// a body landed 29 s later, the process meanwhile growing by 25 MB/s and the server sending
/// all along. Pausing the receive (`curl_easy_pause` with `CURLPAUSE_RECV`), which libcurl
/// allows from inside its write callback, ends the reads there: the queue drains, and the
/// cancel lands within milliseconds and closes the connection.
///
/// FoundationNetworking offers no way to it, so the task's libcurl handle is found through the
/// shims (`FoundationNetworkingLayout.easyHandle(of:)`, reflection) and `curl_easy_pause` is
/// called from their table (`Curl`), as ``FetchSession`` sizes the connection pool. If the layout differs, or
/// elsewhere, nothing happens: the cancel lands when it can, as before.
package enum ReceivePause {
    /// Pauses receiving for `task`.
    ///
    /// Call it only on URLSession's work queue, from a data callback that FoundationNetworking
    /// made inside libcurl's write callback for this task (FetchKit's `ArrivalDelegateQueue`): libcurl
    /// handles are not thread-safe.
    ///
    /// - Returns: Whether libcurl accepted the pause.
    @discardableResult
    package static func pauseReceiving(_ task: URLSessionTask) -> Bool {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let handle = easyHandle(of: task) else { return false }
        return Curl.pause(handle, receiving: false)
        #else
        return false
        #endif
    }

    /// Pauses receiving for `task`, and resumes it once URLSession's work queue has handled
    /// everything queued on it meanwhile. Same rules as ``pauseReceiving(_:)``.
    package static func breathe(_ task: URLSessionTask) {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let handle = easyHandle(of: task), let workQueue = FoundationNetworkingLayout.workQueue(of: task),
              Curl.pause(handle, receiving: false) else { return }
        workQueue.async {
            // The task may have ended meanwhile: its handle is looked up again, on this queue.
            guard let handle = easyHandle(of: task) else { return }
            _ = Curl.pause(handle, receiving: true)
        }
        #endif
    }

    /// Pauses receiving for `task` until the returned closure is called (from any thread; the
    /// resume runs on URLSession's work queue), for a consumer that is behind (FetchKit's
    /// `BacklogGate`). Same rules as ``pauseReceiving(_:)``.
    ///
    /// - Returns: The resume, or `nil` if libcurl's handle could not be reached (the reading
    ///   goes on). Its argument runs on the work queue once the reading has gone on again —
    ///   after the unpause, and after libcurl's read that it asks for (queued on the work
    ///   queue) — or the task has ended: the queue may be busy with other transfers, and the
    ///   consumer's hold lasts until then.
    package static func pauseUntilResumed(
        _ task: URLSessionTask,
        stall: TimeInterval = 0
    ) -> (@Sendable (_ resumed: @escaping @Sendable () -> Void) -> Void)? {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let handle = easyHandle(of: task), let workQueue = FoundationNetworkingLayout.workQueue(of: task),
              Curl.pause(handle, receiving: false) else { return nil }
        return { resumed in
            workQueue.async {
                // The task may have ended meanwhile: its handle is looked up again, on this queue.
                if let handle = easyHandle(of: task) { _ = Curl.pause(handle, receiving: true) }
                resumed()
                guard stall > 0, let handle = easyHandle(of: task), Curl.pause(handle, receiving: false) else { return }
                workQueue.asyncAfter(deadline: .now() + stall) {
                    if let handle = easyHandle(of: task) { _ = Curl.pause(handle, receiving: true) }
                }
            }
        }
        #else
        return nil
        #endif
    }

    /// The socket of the connection of `handle` (a task's libcurl handle), if it is an HTTP/1
    /// one (which carries this transfer alone) and the shims know it (the `socket-wakeups` workaround records what libcurl
    /// watches): for a look at what waits in the kernel unread (``unreadBytes(onSocket:)``).
    /// Same rules as ``pauseReceiving(_:)``.
    package static func http1Socket(ofHandle handle: UnsafeMutableRawPointer) -> Int32? {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let version = Curl.long(handle, .httpVersion),
              version == Curl.HTTPVersion.http1_0 || version == Curl.HTTPVersion.http1_1 else { return nil }
        return CurlSocketCallback.socket(of: handle)
        #else
        return nil
        #endif
    }

    /// The bytes that wait unread in `socket`'s receive queue (`FIONREAD`); `nil` if the kernel
    /// does not say (a closed socket). Any thread: it reads the kernel's count, nothing of libcurl's.
    package static func unreadBytes(onSocket socket: Int32) -> Int? {
        #if os(Linux) && (canImport(Glibc) || canImport(Musl))
        Sockets.unreadBytes(socket)
        #else
        nil
        #endif
    }

    /// Pauses receiving for `task` now and resumes it `seconds` later, on URLSession's work
    /// queue (a bandwidth limit, FetchKit's `ReceiveBudget`). Same rules as ``pauseReceiving(_:)``.
    ///
    /// - Returns: URLSession's work queue, where ``resumeReceiving(_:on:)`` may end the pause
    ///   early, if libcurl accepted the pause (`nil`: the handle could not be reached, and the
    ///   reading goes on).
    package static func pause(_ task: URLSessionTask, for seconds: TimeInterval) -> DispatchQueue? {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let handle = easyHandle(of: task), let workQueue = FoundationNetworkingLayout.workQueue(of: task),
              Curl.pause(handle, receiving: false) else { return nil }
        workQueue.asyncAfter(deadline: .now() + seconds) {
            // The task may have ended meanwhile: its handle is looked up again, on this queue.
            guard let handle = easyHandle(of: task) else { return }
            _ = Curl.pause(handle, receiving: true)
        }
        return workQueue
        #else
        return nil
        #endif
    }

    /// Resumes receiving for `task`, paused by ``pause(_:for:)``, on `workQueue` (the one that
    /// call returned): a bandwidth limit changed. Any thread. Nothing happens if the task has
    /// ended meanwhile.
    package static func resumeReceiving(_ task: URLSessionTask, on workQueue: DispatchQueue) {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        workQueue.async {
            guard let handle = easyHandle(of: task) else { return }
            _ = Curl.pause(handle, receiving: true)
        }
        #endif
    }

    /// What can be read of `task`'s connection for a bandwidth limit (FetchKit's `WireMeter`).
    package enum Connection: Equatable, Sendable {
        /// An HTTP/1 connection, which carries this transfer alone: the bytes its socket
        /// received in all, and those of them still unread in its receive queue.
        case receipt(received: Int, unread: Int)
        /// An HTTP/2 or HTTP/3 connection, which may carry other streams: nothing to read of
        /// it for one transfer, and no way to hold its stream to a limit on the wire.
        case multiplexed
        /// Nothing could be read (another platform or layout, or the socket is not known).
        case unknown

        /// The receipt, if there is one.
        package var receipt: (received: Int, unread: Int)? {
            if case .receipt(let received, let unread) = self { return (received, unread) }
            return nil
        }
    }

    /// What `task`'s connection has taken off the wire: for HTTP/1, the bytes its socket
    /// received in all (`TCP_INFO`'s `tcpi_bytes_received`, Linux 4.1 and later) and those of
    /// them still unread in its receive queue (`FIONREAD`), for a bandwidth limit that counts
    /// what crossed the wire rather than what libcurl has read so far (FetchKit's `WireMeter`). Same
    /// rules as ``pauseReceiving(_:)``.
    package static func connection(of task: URLSessionTask) -> Connection {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let handle = easyHandle(of: task), let version = Curl.long(handle, .httpVersion) else { return .unknown }
        guard version == Curl.HTTPVersion.http1_0 || version == Curl.HTTPVersion.http1_1 else {
            return version == Curl.HTTPVersion.http2 || version == Curl.HTTPVersion.http3 ? .multiplexed : .unknown
        }
        guard let socket = CurlSocketCallback.socket(of: handle),
              let received = Sockets.bytesReceived(socket), let unread = Sockets.unreadBytes(socket) else { return .unknown }
        return .receipt(received: received, unread: unread)
        #else
        return .unknown
        #endif
    }

    #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
    /// The `CURL *` of `task`'s current protocol, if FoundationNetworking's layout is the one
    /// expected: the same guarded path that sets each task's options (FetchKit's `CurlTaskOptions`).
    package static func easyHandle(of task: URLSessionTask) -> UnsafeMutableRawPointer? {
        FoundationNetworkingLayout.easyHandle(of: task)?.raw
    }
    #endif
}
