#if os(Linux) && (canImport(Glibc) || canImport(Musl))
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The raw socket calls FetchKit makes on libcurl's connections (Linux): what a connection has
/// taken off the wire, for a bandwidth limit measured there, and a new connection's receive
/// buffer, for a small first window. Each answers `nil` or `false` where the kernel says no.
package enum Sockets {
    /// The bytes `socket` has received in all: `TCP_INFO`'s `tcpi_bytes_received` (Linux 4.1
    /// and later), a `__u64` at byte 128 of `struct tcp_info` (linux/tcp.h: 8 one-byte fields,
    /// 24 `__u32`, then pacing_rate, max_pacing_rate, bytes_acked). Read as raw bytes with a
    /// size check, as Glibc's declaration of the struct is older than the field.
    package static func bytesReceived(_ socket: Int32) -> Int? {
        let offset = 128
        var info = [UInt8](repeating: 0, count: 256)
        var length = socklen_t(info.count)
        let tcpInfo: Int32 = 11                     // TCP_INFO
        guard info.withUnsafeMutableBytes({ getsockopt(socket, Int32(IPPROTO_TCP), tcpInfo, $0.baseAddress, &length) }) == 0,
              Int(length) >= offset + 8 else { return nil }
        let received = info.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        return Int(clamping: received)
    }

    /// The bytes waiting unread in `socket`'s receive queue (`FIONREAD`).
    package static func unreadBytes(_ socket: Int32) -> Int? {
        var unread: Int32 = 0
        guard ioctl(socket, UInt(FIONREAD), &unread) == 0 else { return nil }
        return Int(unread)
    }

    /// Sets `SO_RCVBUF` on `socket` to `bytes` (the kernel doubles what it is given, for its
    /// bookkeeping). Whether the kernel took it.
    package static func setReceiveBuffer(_ socket: Int32, bytes: Int32) -> Bool {
        var value = bytes
        return setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
    }
}
#endif
