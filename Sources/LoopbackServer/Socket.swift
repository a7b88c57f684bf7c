#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Thin, platform-neutral wrappers around the POSIX socket calls the server makes.
///
/// Everything here works on raw file descriptors. Ownership rules (who may `close` a
/// descriptor, and when) are enforced by the callers: `ServerCore` closes connection
/// descriptors only under its lock, so that `stop()` can never `shutdown(2)` a descriptor
/// number that has already been recycled.
enum Socket {
    /// The error a socket call failed with.
    struct Failure: Error, CustomStringConvertible {
        /// The call that failed, e.g. `"bind"`.
        let call: String
        /// The `errno` it left behind.
        let code: Int32

        var description: String { "\(call) failed: \(String(cString: strerror(code))) (errno \(code))" }
    }

    /// `send(2)` flags that keep a vanished peer from raising `SIGPIPE` (Linux); on Apple
    /// platforms the `SO_NOSIGPIPE` socket option does that job instead.
    #if canImport(Glibc)
    static let sendFlags = Int32(MSG_NOSIGNAL)
    #else
    static let sendFlags: Int32 = 0
    #endif

    // MARK: Listening

    /// Creates a TCP socket bound to 127.0.0.1 on an ephemeral port and listening with the
    /// given backlog. Returns the descriptor and the port the kernel picked.
    static func makeListener(backlog: Int32) throws -> (fd: Int32, port: UInt16) {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw Failure(call: "socket", code: errno) }
        var ok = false
        defer { if !ok { close(fd) } }

        setIntOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        noSigPipe(fd)

        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw Failure(call: "bind", code: errno) }
        guard listen(fd, backlog) == 0 else { throw Failure(call: "listen", code: errno) }

        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw Failure(call: "getsockname", code: errno) }
        ok = true
        return (fd, UInt16(bigEndian: actual.sin_port))
    }

    /// Accepts one pending connection (the listener is non-blocking) and sets `TCP_NODELAY`
    /// on it. Returns `nil` when none is pending or the call failed (`errno` tells which);
    /// the caller polls again.
    static func accept(_ listener: Int32) -> Int32? {
        #if canImport(Glibc)
        let fd = Glibc.accept(listener, nil, nil)
        #else
        let fd = Darwin.accept(listener, nil, nil)
        #endif
        guard fd >= 0 else { return nil }
        setIntOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        noSigPipe(fd)
        return fd
    }

    /// Creates a pipe, used to wake the accept thread out of `poll(2)`.
    static func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw Failure(call: "pipe", code: errno) }
        return (fds[0], fds[1])
    }

    // MARK: Options

    static func setIntOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) {
        var value = value
        _ = setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    static func noSigPipe(_ fd: Int32) {
        #if canImport(Darwin)
        setIntOption(fd, SOL_SOCKET, SO_NOSIGPIPE, 1)
        #endif
    }

    /// The bytes of `fd`'s output that its peer acknowledged (`tcpi_bytes_acked` of Linux's
    /// `TCP_INFO`): what crossed the wire and reached the peer's kernel, whatever was queued
    /// in the send buffer behind it. `nil` where the kernel does not report it (not Linux, or
    /// a kernel older than 4.1, whose `struct tcp_info` ends before the field).
    static func bytesAcknowledged(_ fd: Int32) -> Int? {
        #if os(Linux)
        // `struct tcp_info` of linux/tcp.h: 8 one-byte fields, 24 `__u32` (rto ... total_retrans),
        // then the `__u64`s pacing_rate, max_pacing_rate and bytes_acked: at 8 + 96 + 16 = 120
        // (`offsetof` says the same on x86-64 and arm64). Read as raw bytes with a size check,
        // so that no struct declaration (Glibc's netinet/tcp.h is older) has to match.
        let offset = 120
        var buffer = [UInt8](repeating: 0, count: 256)
        var length = socklen_t(buffer.count)
        let level = Int32(IPPROTO_TCP), option: Int32 = 11   // TCP_INFO
        let result = buffer.withUnsafeMutableBytes { getsockopt(fd, level, option, $0.baseAddress, &length) }
        guard result == 0, Int(length) >= offset + 8 else { return nil }
        return buffer.withUnsafeBytes { Int(UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self))) }
        #else
        return nil
        #endif
    }

    /// Arms `SO_LINGER {1, 0}` so that the next `close(2)` sends a TCP RST instead of a FIN.
    static func armReset(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }

    // MARK: I/O

    /// Receives up to `count` bytes into `buffer`. Returns the number of bytes read, `0` at
    /// end of stream, or `-1` on an error other than `EINTR` (which is retried).
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawPointer, count: Int, flags: Int32 = 0) -> Int {
        while true {
            let n = recv(fd, buffer, count, flags)
            if n >= 0 { return n }
            if errno == EINTR { continue }
            return -1
        }
    }

    /// Sends all bytes of `pieces`, in order, gathering them with `sendmsg(2)` so that a
    /// response head and its first body slice leave in one system call. Returns `false` if
    /// the peer went away or the socket was shut down.
    static func sendAll(_ fd: Int32, _ pieces: [UnsafeRawBufferPointer]) -> Bool {
        var index = 0
        var consumed = 0 // bytes of pieces[index] already sent
        while index < pieces.count {
            if pieces[index].count == consumed {
                index += 1
                consumed = 0
                continue
            }
            let sent: Int
            if index == pieces.count - 1 {
                let piece = pieces[index]
                sent = send(fd, piece.baseAddress! + consumed, piece.count - consumed, sendFlags)
            } else {
                var vectors: [iovec] = []
                vectors.reserveCapacity(pieces.count - index)
                for i in index..<pieces.count where pieces[i].count > (i == index ? consumed : 0) {
                    let skip = i == index ? consumed : 0
                    vectors.append(iovec(
                        iov_base: UnsafeMutableRawPointer(mutating: pieces[i].baseAddress! + skip),
                        iov_len: pieces[i].count - skip))
                }
                sent = vectors.withUnsafeMutableBufferPointer { vectorBuffer in
                    var message = msghdr()
                    message.msg_iov = vectorBuffer.baseAddress
                    #if canImport(Glibc)
                    message.msg_iovlen = vectorBuffer.count
                    #else
                    message.msg_iovlen = Int32(vectorBuffer.count)
                    #endif
                    return sendmsg(fd, &message, sendFlags)
                }
            }
            if sent < 0 {
                if errno == EINTR { continue }
                return false
            }
            // Advance through the pieces by `sent` bytes.
            var remaining = sent
            while remaining > 0, index < pieces.count {
                let left = pieces[index].count - consumed
                if remaining >= left {
                    remaining -= left
                    index += 1
                    consumed = 0
                } else {
                    consumed += remaining
                    remaining = 0
                }
            }
        }
        return true
    }

    /// Sends all of `bytes`. Returns `false` if the peer went away or the socket was shut down.
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        sendAll(fd, [bytes])
    }

    /// Waits up to `milliseconds` for `fd` to become readable (data, end of stream, error or
    /// a local `shutdown(2)`). Returns `true` if it did.
    static func waitReadable(_ fd: Int32, milliseconds: Int32) -> Bool {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let n = poll(&descriptor, 1, milliseconds)
        return n > 0
    }

    /// After `waitReadable` fired: tells whether the peer is gone (end of stream or error),
    /// as opposed to having sent more bytes, which are left in place.
    static func peerIsGone(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
            if n > 0 { return false }
            if n == 0 { return true }
            if errno == EINTR { continue }
            return !(errno == EAGAIN || errno == EWOULDBLOCK)
        }
    }

    /// `shutdown(2)` both directions: wakes any thread blocked in `recv`/`send`/`poll` on it.
    static func shutdownBoth(_ fd: Int32) {
        #if canImport(Glibc)
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
        #else
        _ = Darwin.shutdown(fd, SHUT_RDWR)
        #endif
    }

    /// `shutdown(2)` the sending direction: the peer sees a FIN.
    static func shutdownWrite(_ fd: Int32) {
        #if canImport(Glibc)
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        #else
        _ = Darwin.shutdown(fd, SHUT_WR)
        #endif
    }

    /// `close(2)`.
    static func close(_ fd: Int32) {
        #if canImport(Glibc)
        _ = Glibc.close(fd)
        #else
        _ = Darwin.close(fd)
        #endif
    }

    /// Writes one byte to a pipe (used to wake the accept thread).
    static func poke(_ fd: Int32) {
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)
    }
}
