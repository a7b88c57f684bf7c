import Foundation

/// One HTTP request as the server received it: what route handlers are given.
public struct HTTPRequest: Sendable {
    /// The request method as sent, e.g. `"GET"` (methods are case-sensitive).
    public let method: String
    /// The raw request target from the request line, e.g. `"/bytes/10?x=1"`.
    public let target: String
    /// The target's path, without query or fragment and not percent-decoded, e.g. `"/bytes/10"`.
    /// For an absolute-form target (`http://host/p`) this is the path part (`"/p"`).
    public let path: String
    /// The path split at `/` (after the leading one), each segment percent-decoded:
    /// `"/a/b%20c"` gives `["a", "b c"]`; `"/"` gives `[""]`.
    public let pathSegments: [String]
    /// The query parameters, percent-decoded (`+` is left alone). For a name given more than
    /// once, the first value wins; a name without `=` maps to `""`.
    public let query: [String: String]
    /// The raw query string (after `?`, not decoded), or `""`.
    public let rawQuery: String
    /// The header fields in the order received.
    public let headers: HTTPHeaders
    /// The request body (de-chunked if it was sent chunked); empty when there was none.
    public let body: Data
    /// The protocol version from the request line: `"HTTP/1.1"` or `"HTTP/1.0"`.
    public let version: String
    /// Which TCP connection carried the request: 1 for the first the server accepted, 2 for the
    /// next, and so on. Requests with equal IDs came over one (kept-alive) connection.
    public let connectionID: Int

    /// Creates a request. The server builds these itself; this initializer exists so that
    /// route handlers can be exercised directly in tests.
    public init(
        method: String,
        target: String,
        headers: HTTPHeaders = HTTPHeaders(),
        body: Data = Data(),
        version: String = "HTTP/1.1",
        connectionID: Int = 0
    ) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.version = version
        self.connectionID = connectionID
        let parts = RequestTarget(target)
        path = parts.path
        rawQuery = parts.rawQuery
        query = parts.query
        pathSegments = parts.segments
    }

    /// Whether the client asked for the connection to be closed after this request
    /// (`Connection: close`, or HTTP/1.0 without `Connection: keep-alive`).
    public var wantsClose: Bool {
        if headers.listContains("Connection", token: "close") { return true }
        if version == "HTTP/1.0" { return !headers.listContains("Connection", token: "keep-alive") }
        return false
    }
}

/// The path, query and segments of a request target.
struct RequestTarget {
    var path: String
    var rawQuery: String
    var query: [String: String]
    var segments: [String]

    init(_ target: String) {
        var rest = Substring(target)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        // Absolute form: drop scheme and authority.
        if let schemeEnd = rest.range(of: "://"), rest[..<schemeEnd.lowerBound].allSatisfy({ $0.isLetter }) {
            let afterAuthority = rest[schemeEnd.upperBound...]
            if let slash = afterAuthority.firstIndex(where: { $0 == "/" || $0 == "?" }) {
                rest = afterAuthority[slash...]
            } else {
                rest = "/"
            }
            if rest.first == "?" { rest = "/" + rest }
        }
        if let question = rest.firstIndex(of: "?") {
            path = String(rest[..<question])
            rawQuery = String(rest[rest.index(after: question)...])
        } else {
            path = String(rest)
            rawQuery = ""
        }
        query = Self.parseQuery(rawQuery)
        var segmentText = Substring(path)
        if segmentText.first == "/" { segmentText = segmentText.dropFirst() }
        segments = segmentText.split(separator: "/", omittingEmptySubsequences: false).map { percentDecoded($0) }
    }

    static func parseQuery(_ raw: String) -> [String: String] {
        var result: [String: String] = [:]
        for pair in raw.split(separator: "&") where !pair.isEmpty {
            let name: Substring
            let value: Substring
            if let equals = pair.firstIndex(of: "=") {
                name = pair[..<equals]
                value = pair[pair.index(after: equals)...]
            } else {
                name = pair
                value = ""
            }
            let key = percentDecoded(name)
            if result[key] == nil { result[key] = percentDecoded(value) }
        }
        return result
    }
}

/// Percent-decodes `text`, or returns it unchanged if it is not valid percent-encoding.
func percentDecoded<S: StringProtocol>(_ text: S) -> String {
    let string = String(text)
    guard string.contains("%") else { return string }
    return string.removingPercentEncoding ?? string
}

// MARK: - Parsing a request head

/// How the body of a request is delimited.
enum BodyFraming: Equatable {
    /// No body.
    case none
    /// Exactly this many bytes follow the head.
    case length(Int)
    /// `Transfer-Encoding: chunked`.
    case chunked
}

/// A parsed request line plus header fields, before the body is read.
struct RequestHead {
    var method: String
    var target: String
    var version: String
    var headers: HTTPHeaders
    var framing: BodyFraming

    /// Whether the client sent `Expect: 100-continue`.
    var expectsContinue: Bool {
        version == "HTTP/1.1" && headers.listContains("Expect", token: "100-continue")
    }
}

/// Why a request could not be parsed; the message is the 400 response's body.
struct RequestError: Error {
    var status: Int
    var message: String

    static func bad(_ message: String) -> RequestError { RequestError(status: 400, message: message) }
}

enum RequestParser {
    /// The largest request head (request line plus header fields) accepted.
    static let maximumHeadSize = 64 * 1024
    /// The largest request body accepted (1 GiB); larger ones get a 413.
    static let maximumBodySize = 1 << 30

    /// Parses a request head: `bytes` runs from the start of the request line up to, but not
    /// including, the empty line that ends the head.
    static func parseHead(_ bytes: UnsafeRawBufferPointer) -> Result<RequestHead, RequestError> {
        var lines: [UnsafeRawBufferPointer] = []
        var lineStart = 0
        for index in 0..<bytes.count where bytes[index] == 0x0A {
            var lineEnd = index
            if lineEnd > lineStart, bytes[lineEnd - 1] == 0x0D { lineEnd -= 1 }
            lines.append(UnsafeRawBufferPointer(rebasing: bytes[lineStart..<lineEnd]))
            lineStart = index + 1
        }
        if lineStart < bytes.count {
            var lineEnd = bytes.count
            if bytes[lineEnd - 1] == 0x0D { lineEnd -= 1 }
            lines.append(UnsafeRawBufferPointer(rebasing: bytes[lineStart..<lineEnd]))
        }
        guard let requestLine = lines.first else { return .failure(.bad("empty request")) }

        // Request line: method SP target SP version.
        let parts = requestLine.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .failure(.bad("malformed request line")) }
        guard !parts[0].isEmpty, parts[0].allSatisfy(isTokenByte) else {
            return .failure(.bad("malformed method"))
        }
        guard !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(.bad("malformed request target"))
        }
        let version = String(decoding: parts[2], as: UTF8.self)
        guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
            return .failure(.bad("unsupported protocol version"))
        }

        var headers = HTTPHeaders()
        for line in lines.dropFirst() {
            guard let first = line.first else { continue }
            if first == 0x20 || first == 0x09 { return .failure(.bad("obsolete header line folding")) }
            guard let colon = line.firstIndex(of: 0x3A) else { return .failure(.bad("header line without a colon")) }
            let name = line[..<colon]
            guard !name.isEmpty, name.allSatisfy(isTokenByte) else { return .failure(.bad("malformed header name")) }
            let valueBytes = line[(colon + 1)...]
            guard valueBytes.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
                return .failure(.bad("control character in header value"))
            }
            let value = String(decoding: valueBytes, as: UTF8.self).trimmingOWS()
            headers.add(name: String(decoding: name, as: UTF8.self), value: value)
        }

        let framing: BodyFraming
        switch bodyFraming(headers) {
        case let .success(f): framing = f
        case let .failure(error): return .failure(error)
        }
        return .success(RequestHead(
            method: String(decoding: parts[0], as: UTF8.self),
            target: String(decoding: parts[1], as: UTF8.self),
            version: version,
            headers: headers,
            framing: framing))
    }

    /// Works out how the body is delimited, rejecting contradictory or malformed framing.
    static func bodyFraming(_ headers: HTTPHeaders) -> Result<BodyFraming, RequestError> {
        let lengths = headers.values(for: "Content-Length")
        let codings = headers.values(for: "Transfer-Encoding")
        if !codings.isEmpty {
            guard lengths.isEmpty else { return .failure(.bad("both Content-Length and Transfer-Encoding")) }
            let list = codings.flatMap { $0.split(separator: ",") }.map { $0.trimmingOWS().lowercased() }
            guard list == ["chunked"] else {
                return .failure(RequestError(status: 501, message: "unsupported transfer coding"))
            }
            return .success(.chunked)
        }
        guard !lengths.isEmpty else { return .success(.none) }
        var length: Int?
        for value in lengths.flatMap({ $0.split(separator: ",", omittingEmptySubsequences: false) }) {
            guard let n = decimalNumber(value.trimmingOWS()) else { return .failure(.bad("malformed Content-Length")) }
            if let length, length != n { return .failure(.bad("conflicting Content-Length values")) }
            length = n
        }
        let n = length ?? 0
        guard n <= maximumBodySize else { return .failure(RequestError(status: 413, message: "body too large")) }
        return .success(n == 0 ? .none : .length(n))
    }

    /// Whether `byte` may appear in an HTTP token (methods, field names).
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true // digits, letters
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E:
            return true // ! # $ % & ' * + - . ^ _ ` | ~
        default: return false
        }
    }
}
