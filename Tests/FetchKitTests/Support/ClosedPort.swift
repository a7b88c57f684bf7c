import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A port on 127.0.0.1 that refuses connections for as long as this object lives: bound, so no
/// other test's server can take it, but never listening.
///
/// (A stopped server's port is no good for this: tests run in parallel, and another server may
/// be given the same ephemeral port a moment later.)
final class ClosedPort: @unchecked Sendable {
    private let descriptor: Int32
    let port: UInt16

    init() throws {
        (descriptor, port) = try boundLoopbackSocket()
    }

    func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)")!
    }

    deinit {
        close(descriptor)
    }
}

/// A port on 127.0.0.1 that listens and never accepts, for as long as this object lives.
///
/// - ``Kind/connectStalls``: its accept queue (backlog 0) is already full with a connection of
///   its own, so the kernel drops every further SYN: a client's TCP handshake never completes
///   (it retransmits its SYN for minutes), as with a host that is down behind a firewall.
/// - ``Kind/neverAnswers``: the kernel completes TCP handshakes into a roomy accept queue, but
///   nothing ever reads or writes: an HTTPS client's TLS handshake never completes.
final class SilentPort: @unchecked Sendable {
    enum Kind {
        case connectStalls
        case neverAnswers
    }

    private let listener: Int32
    private var filler: Int32 = -1
    let port: UInt16

    init(_ kind: Kind) throws {
        let (fd, port) = try boundLoopbackSocket()
        guard listen(fd, kind == .connectStalls ? 0 : 64) == 0 else {
            close(fd)
            throw ParseTestError(reason: "listen: \(errno)")
        }
        listener = fd
        self.port = port
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        if kind == .connectStalls {
            // Fills the accept queue: the kernel completes this one, then drops every SYN.
            #if canImport(Glibc)
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            #else
            let client = socket(AF_INET, SOCK_STREAM, 0)
            #endif
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) }
            }
            guard client >= 0, connected == 0 else {
                if client >= 0 { close(client) }
                // Every property is set: deinit closes the listener.
                throw ParseTestError(reason: "connect: \(errno)")
            }
            filler = client
            // The client's connect() returns once it has sent its ACK; the listener queues the
            // connection when it processes that ACK, which a loaded machine may defer. A SYN that
            // came first would be answered, and its client would connect: wait for the queue.
            #if os(Linux)
            guard waitForFullAcceptQueue() else {
                throw ParseTestError(reason: "the accept queue did not fill within 10 s")
            }
            #endif
        }
    }

    #if os(Linux)
    /// Whether the listener's accept queue holds the filler, within 10 s (Linux reports a
    /// listening socket's queue length as `tcpi_unacked`).
    private func waitForFullAcceptQueue() -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            var info = tcp_info()
            var length = socklen_t(MemoryLayout<tcp_info>.size)
            guard getsockopt(listener, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return false }
            if info.tcpi_unacked >= 1 { return true }
            usleep(1_000)
        }
        return false
    }
    #endif

    func url(_ path: String, scheme: String = "http") -> URL {
        URL(string: "\(scheme)://127.0.0.1:\(port)\(path)")!
    }

    deinit {
        if filler >= 0 { close(filler) }
        close(listener)
    }
}

/// A TCP socket bound to 127.0.0.1 on a port the kernel picks, and that port.
private func boundLoopbackSocket() throws -> (descriptor: Int32, port: UInt16) {
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw ParseTestError(reason: "socket: \(errno)") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    guard bound == 0 else {
        close(fd)
        throw ParseTestError(reason: "bind: \(errno)")
    }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}
