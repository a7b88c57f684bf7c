import Foundation
import LoopbackServer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a raw read or write failed.
enum RawClientError: Error, Equatable {
    /// The server closed the connection (FIN) before the expected bytes arrived.
    case closed
    /// The connection was reset (RST).
    case reset
    /// No bytes arrived within the client's timeout.
    case timedOut
    /// Any other socket error.
    case failed(Int32)
    /// The bytes received are not a well-formed HTTP response.
    case malformed(String)
}

/// How a connection ended when read to the end.
enum StreamEnd: Equatable {
    case fin
    case reset
}

/// A response read by `RawClient`.
struct RawResponse {
    var statusLine: String
    var status: Int
    var headers: HTTPHeaders
    var body: Data
    /// The chunk sizes of a chunked body, in order (without the terminating 0), or `nil`.
    var chunkSizes: [Int]?

    var text: String { String(decoding: body, as: UTF8.self) }
}

/// A tiny blocking HTTP/1.1 client over a raw TCP socket, so tests control exactly what is
/// sent and see exactly what arrives, including how the connection ends.
final class RawClient {
    let fd: Int32
    private var pending: [UInt8] = []

    /// Connects to 127.0.0.1:`port`. Every read or write gives up after `timeout` seconds.
    init(port: UInt16, timeout: TimeInterval = 15) throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw RawClientError.failed(errno) }
        var time = timeval(tv_sec: Int(timeout), tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        #if canImport(Darwin)
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            _ = close(fd)
            throw RawClientError.failed(code)
        }
        self.fd = fd
    }

    deinit {
        _ = close(fd)
    }

    /// Whether nothing is listening on 127.0.0.1:`port` any more.
    static func connectionRefused(port: UInt16) -> Bool {
        do {
            _ = try RawClient(port: port, timeout: 2)
            return false
        } catch RawClientError.failed(let code) {
            return code == ECONNREFUSED
        } catch {
            return false
        }
    }

    // MARK: Sending

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            #if canImport(Glibc)
            let flags = Int32(MSG_NOSIGNAL)
            #else
            let flags: Int32 = 0
            #endif
            let n = bytes.withUnsafeBytes { rawSend(fd, $0.baseAddress! + offset, bytes.count - offset, flags) }
            if n < 0 {
                if errno == EINTR { continue }
                throw errno == ECONNRESET ? RawClientError.reset : RawClientError.failed(errno)
            }
            offset += n
        }
    }

    func send(_ text: String) throws {
        try send(Array(text.utf8))
    }

    func send(_ data: Data) throws {
        try send([UInt8](data))
    }

    /// Sends a request with `Host` and (when there is a body) `Content-Length` added.
    func sendRequest(_ method: String = "GET", _ target: String, headers: [(String, String)] = [], body: Data = Data()) throws {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        try send(Array(head.utf8) + [UInt8](body))
    }

    /// Sends a request and reads its response.
    func get(_ target: String, headers: [(String, String)] = [], method: String = "GET", body: Data = Data()) throws -> RawResponse {
        try sendRequest(method, target, headers: headers, body: body)
        return try readResponse(bodyExpected: method != "HEAD")
    }

    // MARK: Receiving

    /// Receives once into `pending`. Throws `.closed` at end of stream.
    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n > 0 {
                pending.append(contentsOf: chunk[0..<n])
                return
            }
            if n == 0 { throw RawClientError.closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: throw RawClientError.timedOut
            case ECONNRESET: throw RawClientError.reset
            default: throw RawClientError.failed(errno)
            }
        }
    }

    /// Reads one line (without CRLF).
    func readLine() throws -> String {
        while true {
            if let lf = pending.firstIndex(of: 0x0A) {
                var end = lf
                if end > 0, pending[end - 1] == 0x0D { end -= 1 }
                let line = String(decoding: pending[0..<end], as: UTF8.self)
                pending.removeFirst(lf + 1)
                return line
            }
            try fill()
        }
    }

    /// Reads exactly `count` bytes.
    func readExactly(_ count: Int) throws -> Data {
        while pending.count < count { try fill() }
        let data = Data(pending[0..<count])
        pending.removeFirst(count)
        return data
    }

    /// Reads a status line and header fields.
    func readHead() throws -> (statusLine: String, status: Int, headers: HTTPHeaders) {
        let statusLine = try readLine()
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), let status = Int(parts[1]) else {
            throw RawClientError.malformed(statusLine)
        }
        var headers = HTTPHeaders()
        while true {
            let line = try readLine()
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else { throw RawClientError.malformed(line) }
            headers.add(name: String(line[..<colon]),
                        value: line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return (statusLine, status, headers)
    }

    /// Reads a whole response: `Content-Length` or chunked bodies (or none, for HEAD requests
    /// and 1xx/204/304 statuses), otherwise until the connection closes.
    func readResponse(bodyExpected: Bool = true) throws -> RawResponse {
        let (statusLine, status, headers) = try readHead()
        var response = RawResponse(statusLine: statusLine, status: status, headers: headers, body: Data())
        if !bodyExpected || (100..<200).contains(status) || status == 204 || status == 304 { return response }
        if let te = headers["Transfer-Encoding"], te.lowercased().contains("chunked") {
            var sizes: [Int] = []
            while true {
                let line = try readLine()
                guard let size = Int(line.split(separator: ";")[0], radix: 16) else { throw RawClientError.malformed(line) }
                if size == 0 { break }
                sizes.append(size)
                response.body.append(try readExactly(size))
                guard try readLine().isEmpty else { throw RawClientError.malformed("chunk terminator") }
            }
            while try !readLine().isEmpty {}
            response.chunkSizes = sizes
        } else if let length = headers["Content-Length"].flatMap({ Int($0) }) {
            response.body = try readExactly(length)
        } else {
            response.body = readToEnd().data
        }
        return response
    }

    /// Reads until the connection ends, returning what arrived and how it ended (`nil` end
    /// means the read timed out or failed otherwise).
    func readToEnd() -> (data: Data, end: StreamEnd?) {
        while true {
            do {
                try fill()
            } catch RawClientError.closed {
                let data = Data(pending)
                pending.removeAll()
                return (data, .fin)
            } catch RawClientError.reset {
                let data = Data(pending)
                pending.removeAll()
                return (data, .reset)
            } catch {
                let data = Data(pending)
                pending.removeAll()
                return (data, nil)
            }
        }
    }

    /// Streams a body of `count` bytes, verifying it against the byte pattern from `offset`
    /// without keeping it. Returns the index of the first wrong byte, or `nil`.
    func verifyPatternBody(count: Int, offset: Int = 0) throws -> Int? {
        var checked = 0
        var mismatch: Int?
        while checked < count {
            if pending.isEmpty { try fill() }
            let take = min(pending.count, count - checked)
            let slice = Data(pending[0..<take])
            if mismatch == nil, let bad = BytePattern.firstMismatch(in: slice, offset: offset + checked) {
                mismatch = checked + bad
            }
            pending.removeFirst(take)
            checked += take
        }
        return mismatch
    }

    /// `shutdown(2)` the write side (the server sees end of stream).
    func shutdownWrite() {
        _ = shutdown(fd, Int32(SHUT_WR))
    }
}

#if canImport(Glibc)
private func rawSend(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ flags: Int32) -> Int {
    Glibc.send(fd, buffer, count, flags)
}
#else
private func rawSend(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ flags: Int32) -> Int {
    Darwin.send(fd, buffer, count, flags)
}
#endif
