import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Buffered, blocking reading of requests (heads, `Content-Length` bodies, chunked bodies)
/// from one connection's socket.
///
/// Bytes past the end of one request stay buffered for the next one, so pipelined requests
/// work. A read returns early (as `.closed`, or `nil`) when the peer closes the connection,
/// or when `stop()` shuts the socket down.
struct RequestReader {
    /// The outcome of waiting for a request head.
    enum HeadResult {
        /// A complete, well-formed head.
        case head(RequestHead)
        /// The connection ended (cleanly between requests, or with a partial head).
        case closed
        /// The bytes received are not a valid request head.
        case invalid(RequestError)
    }

    private let fd: Int32
    private var storage: [UInt8]
    private var start = 0
    private var end = 0
    /// Where the search for the end of the head resumes.
    private var scanned = 0

    private static let initialCapacity = 16 * 1024
    private static let maximumCapacity = RequestParser.maximumHeadSize + 16 * 1024

    init(fd: Int32) {
        self.fd = fd
        storage = [UInt8](repeating: 0, count: Self.initialCapacity)
    }

    /// Bytes received but not consumed yet.
    var bufferedCount: Int { end - start }

    // MARK: Heads

    /// Blocks until a whole request head has arrived, the peer closes, or the head is
    /// found to be invalid (too large, malformed).
    mutating func readHead() -> HeadResult {
        while true {
            // Empty lines before a request line are ignored (RFC 9112, section 2.2).
            while start < end, storage[start] == 0x0D || storage[start] == 0x0A { start += 1 }
            if start == end {
                start = 0
                end = 0
                scanned = 0
            } else if let (headEnd, bodyStart) = findEndOfHead() {
                guard headEnd - start <= RequestParser.maximumHeadSize else {
                    return .invalid(.bad("request head larger than 64 KiB"))
                }
                let result = storage.withUnsafeBytes {
                    RequestParser.parseHead(UnsafeRawBufferPointer(rebasing: $0[start..<headEnd]))
                }
                start = bodyStart
                scanned = bodyStart
                switch result {
                case let .success(head): return .head(head)
                case let .failure(error): return .invalid(error)
                }
            } else if end - start > RequestParser.maximumHeadSize {
                return .invalid(.bad("request head larger than 64 KiB"))
            }
            guard fill() > 0 else { return .closed }
        }
    }

    /// Finds the empty line ending the head in `storage[start..<end]`. Returns the end of the
    /// head (just past the last header line's LF) and where the body starts.
    private mutating func findEndOfHead() -> (Int, Int)? {
        let from = max(start, scanned)
        return storage.withUnsafeBytes { bytes -> (Int, Int)? in
            let base = bytes.baseAddress!
            var i = from
            while i < end {
                guard let hit = memchr(base + i, 0x0A, end - i) else {
                    scanned = end
                    return nil
                }
                let lf = base.distance(to: UnsafeRawPointer(hit))
                // Need the byte(s) after this LF to decide.
                if lf + 1 >= end {
                    scanned = lf
                    return nil
                }
                let next = bytes[lf + 1]
                if next == 0x0A { return (lf + 1, lf + 2) }
                if next == 0x0D {
                    if lf + 2 >= end {
                        scanned = lf
                        return nil
                    }
                    if bytes[lf + 2] == 0x0A { return (lf + 1, lf + 3) }
                }
                i = lf + 1
            }
            scanned = end
            return nil
        }
    }

    // MARK: Bodies

    /// Reads a body of exactly `length` bytes. Returns `nil` if the connection ended first.
    ///
    /// Memory grows with the bytes that actually arrive, not with the announced length, so a
    /// client claiming a huge `Content-Length` and sending little costs little.
    mutating func readBody(length: Int) -> Data? {
        var body = [UInt8]()
        body.reserveCapacity(min(length, 16 << 20))
        let fromBuffer = min(length, end - start)
        if fromBuffer > 0 {
            body.append(contentsOf: storage[start..<(start + fromBuffer)])
            start += fromBuffer
        }
        if body.count < length {
            var scratch = [UInt8](repeating: 0, count: min(length - body.count, 256 * 1024))
            while body.count < length {
                let want = min(scratch.count, length - body.count)
                let n = scratch.withUnsafeMutableBytes { Socket.receive(fd, into: $0.baseAddress!, count: want) }
                if n <= 0 { return nil }
                body.append(contentsOf: scratch[0..<n])
            }
        }
        return Data(body)
    }

    /// The outcome of reading a chunked body.
    enum ChunkedResult {
        case body(Data)
        case closed
        case invalid(RequestError)
    }

    /// Reads a `Transfer-Encoding: chunked` body, discarding chunk extensions and trailers.
    mutating func readChunkedBody() -> ChunkedResult {
        var body = Data()
        while true {
            guard let line = readLine() else { return .closed }
            guard let sizeText = line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first,
                  case let trimmed = sizeText.trimmingOWS(), !trimmed.isEmpty, trimmed.utf8.count <= 15,
                  let size = Int(trimmed, radix: 16), size >= 0
            else { return .invalid(.bad("malformed chunk size")) }
            if size == 0 { break }
            guard body.count + size <= RequestParser.maximumBodySize else {
                return .invalid(RequestError(status: 413, message: "body too large"))
            }
            guard let chunk = readBody(length: size) else { return .closed }
            body.append(chunk)
            guard let terminator = readLine() else { return .closed }
            guard terminator.isEmpty else { return .invalid(.bad("chunk not followed by CRLF")) }
        }
        // Trailer fields, up to the empty line.
        var trailerBytes = 0
        while true {
            guard let line = readLine() else { return .closed }
            if line.isEmpty { return .body(body) }
            trailerBytes += line.utf8.count
            if trailerBytes > RequestParser.maximumHeadSize { return .invalid(.bad("trailers too large")) }
        }
    }

    /// Reads one line (ending in LF, optional CR before it stripped), up to 64 KiB. Returns
    /// `nil` if the connection ended first or the line is too long.
    private mutating func readLine() -> String? {
        while true {
            let found: Int? = storage.withUnsafeBytes { bytes in
                guard start < end, let hit = memchr(bytes.baseAddress! + start, 0x0A, end - start) else { return nil }
                return bytes.baseAddress!.distance(to: UnsafeRawPointer(hit))
            }
            if let lf = found {
                var lineEnd = lf
                if lineEnd > start, storage[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                let line = String(decoding: storage[start..<lineEnd], as: UTF8.self)
                start = lf + 1
                scanned = start
                return line
            }
            if end - start > RequestParser.maximumHeadSize { return nil }
            guard fill() > 0 else { return nil }
        }
    }

    // MARK: Buffer management

    /// Receives more bytes into the buffer, compacting or growing it as needed. Returns the
    /// number of bytes received (0 or less when the connection ended or failed).
    private mutating func fill() -> Int {
        if end == storage.count {
            if start > 0 {
                let count = end - start
                storage.withUnsafeMutableBytes { bytes in
                    let base = bytes.baseAddress!
                    _ = memmove(base, base + start, count)
                }
                scanned -= start
                start = 0
                end = count
                if scanned < 0 { scanned = 0 }
            }
            if end == storage.count {
                guard storage.count < Self.maximumCapacity else { return -1 }
                storage.append(contentsOf: repeatElement(0, count: min(storage.count, Self.maximumCapacity - storage.count)))
            }
        }
        let room = storage.count - end
        let n = storage.withUnsafeMutableBytes { bytes in
            Socket.receive(fd, into: bytes.baseAddress! + end, count: room)
        }
        if n > 0 { end += n }
        return n
    }
}
