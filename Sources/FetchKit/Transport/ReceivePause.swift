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
              let workQueue = field("workQueue", of: task) as? DispatchQueue,
              pause(handle, 1) == 0 else { return }
        workQueue.async {
            // The task may have ended meanwhile: its handle is looked up again, on this queue.
            guard let handle = easyHandle(of: task) else { return }
            _ = pause(handle, 0)    // CURLPAUSE_CONT
        }
        #endif
    }

    /// Pauses receiving for `task` now and resumes it `seconds` later, on URLSession's work
    /// queue (a bandwidth limit, ``ReceiveBudget``). Same rules as ``pauseReceiving(_:)``.
    ///
    /// - Returns: Whether libcurl accepted the pause (`false`: the handle could not be reached,
    ///   and the reading goes on).
    @discardableResult
    static func pause(_ task: URLSessionTask, for seconds: TimeInterval) -> Bool {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let pause = curlEasyPause, let handle = easyHandle(of: task),
              let workQueue = field("workQueue", of: task) as? DispatchQueue,
              pause(handle, 1) == 0 else { return false }
        workQueue.asyncAfter(deadline: .now() + seconds) {
            // The task may have ended meanwhile: its handle is looked up again, on this queue.
            guard let handle = easyHandle(of: task) else { return }
            _ = pause(handle, 0)    // CURLPAUSE_CONT
        }
        return true
        #else
        return false
        #endif
    }

    /// Makes `task`'s connection hold little unread data, so that a paused reading slows the
    /// server at once: the socket's receive buffer is set to `bytes` (`SO_RCVBUF`, which also
    /// ends the kernel's growing of it — on loopback it grew to megabytes, which the server
    /// filled at full speed), and the connection is closed when the transfer ends rather than
    /// kept for another (`CURLOPT_FORBID_REUSE`), which would inherit the small buffer. Same
    /// rules as ``pauseReceiving(_:)``.
    ///
    /// - Returns: Whether both took.
    @discardableResult
    static func narrowReceiveBuffer(_ task: URLSessionTask, to bytes: Int) -> Bool {
        #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
        guard let getInfo = curlEasyGetInfo, let setOption = curlEasySetOption, let handle = easyHandle(of: task) else { return false }
        var socket: Int32 = -1
        let activeSocket: Int32 = 0x500000 + 44     // CURLINFO_ACTIVESOCKET (CURLINFO_SOCKET + 44)
        guard getInfo(handle, activeSocket, &socket) == 0, socket >= 0 else { return false }
        var size = Int32(clamping: bytes)
        guard setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) == 0 else { return false }
        let forbidReuse: Int32 = 75                 // CURLOPT_FORBID_REUSE (CURLOPTTYPE_LONG + 75)
        return setOption(handle, forbidReuse, 1) == 0
        #else
        return false
        #endif
    }

    #if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
    /// `CURLcode curl_easy_getinfo(CURL *, CURLINFO, curl_socket_t *)`: a variadic pointer
    /// travels like a fixed one on the Linux ABIs Swift supports.
    private typealias EasyGetSocket = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<Int32>) -> Int32
    /// `CURLcode curl_easy_setopt(CURL *, CURLoption, long)`.
    private typealias EasySetLong = @convention(c) (UnsafeMutableRawPointer, Int32, Int) -> Int32

    private static let curlEasyGetInfo: EasyGetSocket? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_getinfo") else { return nil }
        return unsafeBitCast(symbol, to: EasyGetSocket.self)
    }()

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
    /// expected.
    static func easyHandle(of task: URLSessionTask) -> UnsafeMutableRawPointer? {
        guard let storage = field("_protocolStorage", of: task),
              let urlProtocol = Mirror(reflecting: storage).children.first(where: { $0.label == "existing" })?.value,
              let wrapped = field("easyHandle", of: urlProtocol)
        else { return nil }
        // `easyHandle` is an implicitly unwrapped optional.
        let mirror = Mirror(reflecting: wrapped)
        let easy: Any? = mirror.displayStyle == .optional ? mirror.children.first?.value : wrapped
        guard let easy, let raw = field("rawHandle", of: easy) else { return nil }
        return raw as? UnsafeMutableRawPointer
    }

    /// The stored property `label` of `value`, looked for in its class and its superclasses.
    private static func field(_ label: String, of value: Any) -> Any? {
        var mirror: Mirror? = Mirror(reflecting: value)
        while let current = mirror {
            if let child = current.children.first(where: { $0.label == label }) { return child.value }
            mirror = current.superclassMirror
        }
        return nil
    }
    #endif
}
