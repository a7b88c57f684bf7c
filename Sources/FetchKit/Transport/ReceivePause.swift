import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Stops libcurl reading a task's response at once, from inside the callback that delivers a
/// chunk of it (Linux).
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
/// FoundationNetworking offers no way to it, so the task's libcurl handle is found by
/// reflection (`URLSessionTask._protocolStorage` → `.existing(protocol)` →
/// `_NativeProtocol.easyHandle` → `_EasyHandle.rawHandle`), and `curl_easy_pause` is looked
/// up at run time — as ``FetchSession`` sizes the connection pool. If the layout differs, or
/// elsewhere, nothing happens: the cancel lands when it can, as before.
enum ReceivePause {
    /// Pauses receiving for `task`.
    ///
    /// Call it only on URLSession's work queue, from a data callback that FoundationNetworking
    /// made inside libcurl's write callback for this task (``ArrivalDelegateQueue``): libcurl
    /// handles are not thread-safe.
    ///
    /// - Returns: Whether libcurl accepted the pause.
    @discardableResult
    static func pauseReceiving(_ task: URLSessionTask) -> Bool {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let pause = curlEasyPause, let handle = easyHandle(of: task) else { return false }
        let receive: Int32 = 1   // CURLPAUSE_RECV
        return pause(handle, receive) == 0    // CURLE_OK
        #else
        return false
        #endif
    }

    /// Pauses receiving for `task`, and resumes it once URLSession's work queue has handled
    /// everything queued on it meanwhile. Same rules as ``pauseReceiving(_:)``.
    static func breathe(_ task: URLSessionTask) {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let pause = curlEasyPause, let handle = easyHandle(of: task),
              let workQueue = CurlTaskOptions.child("workQueue", of: task) as? DispatchQueue,
              pause(handle, 1) == 0 else { return }
        workQueue.async {
            // The task may have ended meanwhile: its handle is looked up again, on this queue.
            guard let handle = easyHandle(of: task) else { return }
            _ = pause(handle, 0)    // CURLPAUSE_CONT
        }
        #endif
    }

    /// Pauses receiving for `task` until the returned closure is called (from any thread; the
    /// resume runs on URLSession's work queue), for a download whose disk is behind
    /// (``DiskGate``). Same rules as ``pauseReceiving(_:)``.
    ///
    /// - Returns: The resume, or `nil` if libcurl's handle could not be reached (the reading
    ///   goes on).
    static func pauseUntilResumed(_ task: URLSessionTask) -> (@Sendable () -> Void)? {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let pause = curlEasyPause, let handle = easyHandle(of: task),
              let workQueue = CurlTaskOptions.child("workQueue", of: task) as? DispatchQueue,
              pause(handle, 1) == 0 else { return nil }
        return {
            workQueue.async {
                // The task may have ended meanwhile: its handle is looked up again, on this queue.
                guard let handle = easyHandle(of: task) else { return }
                _ = pause(handle, 0)    // CURLPAUSE_CONT
            }
        }
        #else
        return nil
        #endif
    }

    /// Pauses receiving for `task` now and resumes it `seconds` later, on URLSession's work
    /// queue (a bandwidth limit, ``ReceiveBudget``). Same rules as ``pauseReceiving(_:)``.
    ///
    /// - Returns: URLSession's work queue, where ``resumeReceiving(_:on:)`` may end the pause
    ///   early, if libcurl accepted the pause (`nil`: the handle could not be reached, and the
    ///   reading goes on).
    static func pause(_ task: URLSessionTask, for seconds: TimeInterval) -> DispatchQueue? {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let pause = curlEasyPause, let handle = easyHandle(of: task),
              let workQueue = CurlTaskOptions.child("workQueue", of: task) as? DispatchQueue,
              pause(handle, 1) == 0 else { return nil }
        workQueue.asyncAfter(deadline: .now() + seconds) {
            // The task may have ended meanwhile: its handle is looked up again, on this queue.
            guard let handle = easyHandle(of: task) else { return }
            _ = pause(handle, 0)    // CURLPAUSE_CONT
        }
        return workQueue
        #else
        return nil
        #endif
    }

    /// Resumes receiving for `task`, paused by ``pause(_:for:)``, on `workQueue` (the one that
    /// call returned): a bandwidth limit changed. Any thread. Nothing happens if the task has
    /// ended meanwhile.
    static func resumeReceiving(_ task: URLSessionTask, on workQueue: DispatchQueue) {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let pause = curlEasyPause else { return }
        workQueue.async {
            guard let handle = easyHandle(of: task) else { return }
            _ = pause(handle, 0)    // CURLPAUSE_CONT
        }
        #endif
    }

    /// What can be read of `task`'s connection for a bandwidth limit (``WireMeter``).
    enum Connection: Equatable {
        /// An HTTP/1 connection, which carries this transfer alone: the bytes its socket
        /// received in all, and those of them still unread in its receive queue.
        case receipt(received: Int, unread: Int)
        /// An HTTP/2 or HTTP/3 connection, which may carry other streams: nothing to read of
        /// it for one transfer, and no way to hold its stream to a limit on the wire.
        case multiplexed
        /// Nothing could be read (another platform or layout, or the socket is not known).
        case unknown

        /// The receipt, if there is one.
        var receipt: (received: Int, unread: Int)? {
            if case .receipt(let received, let unread) = self { return (received, unread) }
            return nil
        }
    }

    /// What `task`'s connection has taken off the wire: for HTTP/1, the bytes its socket
    /// received in all (`TCP_INFO`'s `tcpi_bytes_received`, Linux 4.1 and later) and those of
    /// them still unread in its receive queue (`FIONREAD`), for a bandwidth limit that counts
    /// what crossed the wire rather than what libcurl has read so far (``WireMeter``). Same
    /// rules as ``pauseReceiving(_:)``.
    static func connection(of task: URLSessionTask) -> Connection {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        guard let getLong = curlEasyGetLong, let handle = easyHandle(of: task) else { return .unknown }
        var version = 0
        let httpVersion: Int32 = 0x200000 + 46      // CURLINFO_HTTP_VERSION (CURLINFO_LONG + 46)
        // CURL_HTTP_VERSION_1_0 is 1, _1_1 is 2; 2.0 (3) and 3 (30) multiplex.
        guard getLong(handle, httpVersion, &version) == 0 else { return .unknown }
        guard version == 1 || version == 2 else { return version == 3 || version == 30 ? .multiplexed : .unknown }
        guard let socket = CurlSocketCallback.socket(of: handle) else { return .unknown }
        // `struct tcp_info` (linux/tcp.h): `tcpi_bytes_received`, a `__u64`, at 128 (8 one-byte
        // fields, 24 `__u32`, then pacing_rate, max_pacing_rate, bytes_acked); read as raw bytes
        // with a size check, as Glibc's declaration of the struct is older.
        let offset = 128
        var info = [UInt8](repeating: 0, count: 256)
        var length = socklen_t(info.count)
        let tcpInfo: Int32 = 11                     // TCP_INFO
        guard info.withUnsafeMutableBytes({ getsockopt(socket, Int32(IPPROTO_TCP), tcpInfo, $0.baseAddress, &length) }) == 0,
              Int(length) >= offset + 8 else { return .unknown }
        let received = info.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        var unread: Int32 = 0
        guard ioctl(socket, UInt(FIONREAD), &unread) == 0 else { return .unknown }
        return .receipt(received: Int(clamping: received), unread: Int(unread))
        #else
        return .unknown
        #endif
    }

    #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
    /// `CURLcode curl_easy_getinfo(CURL *, CURLINFO, long *)`.
    private typealias EasyGetLong = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<Int>) -> Int32

    private static let curlEasyGetLong: EasyGetLong? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_getinfo") else { return nil }
        return unsafeBitCast(symbol, to: EasyGetLong.self)
    }()

    /// `CURLcode curl_easy_setopt(CURL *, CURLoption, long)`.
    private typealias EasySetLong = @convention(c) (UnsafeMutableRawPointer, Int32, Int) -> Int32

    private static let curlEasySetOption: EasySetLong? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_setopt") else { return nil }
        return unsafeBitCast(symbol, to: EasySetLong.self)
    }()

    /// `CURLcode curl_easy_pause(CURL *handle, int bitmask)`.
    private typealias EasyPause = @convention(c) (UnsafeMutableRawPointer, Int32) -> Int32

    private static let curlEasyPause: EasyPause? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_pause") else { return nil }
        return unsafeBitCast(symbol, to: EasyPause.self)
    }()

    /// The `CURL *` of `task`'s current protocol, if FoundationNetworking's layout is the one
    /// expected: the same guarded path that sets each task's options (``CurlTaskOptions``).
    static func easyHandle(of task: URLSessionTask) -> UnsafeMutableRawPointer? {
        CurlTaskOptions.easyHandle(of: task)?.raw
    }
    #endif
}
