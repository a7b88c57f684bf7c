import Foundation

/// One hostile response: the bytes the server sends for each path, the first path fetched.
struct FramingCase {
    let routes: [(path: String, bytes: Data)]

    init(_ routes: [(String, String)]) {
        self.routes = routes.map { ($0.0, Data($0.1.utf8)) }
    }

    init(bytes routes: [(String, Data)]) {
        self.routes = routes
    }

    static let hello = "hello world"
    static let chunkedHello = "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n"

    /// Every case, by name.
    static let all: [String: FramingCase] = [
        // RFC 9112 §7.1.2: a chunked body, then trailer fields.
        "trailers": FramingCase([("/t", "HTTP/1.1 200 OK\r\n" + chunkedHello
            + "Server-Timing: db;dur=53\r\nX-Checksum: abc\r\nX-Checksum: def\r\nSet-Cookie: trailer=1\r\n\r\n")]),
        "trailers-empty-body": FramingCase([("/t", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Status: done\r\n\r\n")]),
        // A trailer that reads like a status line, and a folded one.
        "trailers-status-like": FramingCase([("/t", "HTTP/1.1 200 OK\r\n" + chunkedHello + "HTTP/1.1 200 OK: x\r\n\r\n")]),
        "trailers-folded": FramingCase([("/t", "HTTP/1.1 200 OK\r\n" + chunkedHello + "X-A: 1\r\n continued\r\n\r\n")]),
        // A Set-Cookie trailer whose name Foundation's cookie parser cannot index.
        "trailers-cookie": FramingCase([("/t", "HTTP/1.1 200 OK\r\n" + chunkedHello + "Set-Cookie: 😀😀😀=\r\n\r\n")]),
        // Far more trailer bytes than anyone keeps.
        "trailers-endless": FramingCase([("/t", "HTTP/1.1 200 OK\r\n" + chunkedHello
            + String(repeating: "X-Padding: " + String(repeating: "p", count: 1000) + "\r\n", count: 80) + "\r\n")]),
        // A redirect followed on the same libcurl handle, to a response with trailers.
        "redirect-then-trailers": FramingCase([
            ("/r", "HTTP/1.1 302 Found\r\nLocation: /t\r\nContent-Length: 0\r\n\r\n"),
            ("/t", "HTTP/1.1 200 OK\r\n" + chunkedHello + "X-After: redirect\r\n\r\n"),
        ]),
        "redirect-with-trailers": FramingCase([
            ("/r", "HTTP/1.1 302 Found\r\nLocation: /plain\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: y\r\n\r\n"),
            ("/plain", "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + hello),
        ]),
        // Interim heads before the final one.
        "interim": FramingCase([("/i", "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            + "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + hello)]),
        // Status lines (RFC 9112 §4).
        "no-reason-phrase": FramingCase([("/s", "HTTP/1.1 200\r\nContent-Length: 11\r\n\r\n" + hello)]),
        "empty-reason-phrase": FramingCase([("/s", "HTTP/1.1 200 \r\nContent-Length: 11\r\n\r\n" + hello)]),
        "wrong-case": FramingCase([("/s", "Http/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + hello)]),
        "control-in-reason": FramingCase([("/s", "HTTP/1.1 200 O\u{1}K\r\nContent-Length: 11\r\n\r\n" + hello)]),
        "bare-lf": FramingCase([("/s", "HTTP/1.1 200 OK\nContent-Length: 11\nX-A: b\n\n" + hello)]),
        "no-space-after-colon": FramingCase([("/s", "HTTP/1.1 200 OK\r\nContent-Length:11\r\nX-A:b\r\n\r\n" + hello)]),
        "empty-field-name": FramingCase([("/s", "HTTP/1.1 200 OK\r\n: v\r\nContent-Length: 11\r\n\r\n" + hello)]),
        "non-utf8-field": FramingCase(bytes: [("/s", Data("HTTP/1.1 200 OK\r\nX-Name: caf".utf8) + Data([0xE9])
            + Data("\r\nContent-Length: 11\r\n\r\n\(hello)".utf8))]),
        // A length FoundationNetworking cannot convert (2^63 - 1, 2^63 as a Double).
        "huge-content-length": FramingCase([("/s", "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\nok")]),
        // A scheme-relative Location whose decoded host URLComponents refuses.
        "redirect-ipv6-scheme-relative": FramingCase([("/r", "HTTP/1.1 302 Found\r\nLocation: //[::1]:9/final\r\nContent-Length: 0\r\n\r\n")]),
        "redirect-space-scheme-relative": FramingCase([("/r", "HTTP/1.1 302 Found\r\nLocation: //a%20b/final\r\nContent-Length: 0\r\n\r\n")]),
        // A cookie name Foundation's parser indexes past its end.
        "cookie-name-emoji": FramingCase([("/c", "HTTP/1.1 200 OK\r\nSet-Cookie: 😀😀😀=\r\nSet-Cookie: kept=1\r\nContent-Length: 11\r\n\r\n" + hello)]),
        "cookie-attribute-emoji": FramingCase([("/c", "HTTP/1.1 200 OK\r\nSet-Cookie: a=b; 😀😀😀😀=\r\nContent-Length: 11\r\n\r\n" + hello)]),
        // A plain response, for comparison.
        "plain": FramingCase([("/p", "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + hello)]),
    ]
}

/// A checksum of the body, to tell a whole body from a cut one in one word.
func checksum(_ data: Data) -> String {
    var hash: UInt32 = 2_166_136_261
    for byte in data { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
    return String(hash, radix: 16)
}

func oneLine(_ text: String) -> String {
    text.replacingOccurrences(of: "\n", with: " ")
}

/// A value behind a lock, for the completion handler.
final class Locked: @unchecked Sendable {
    private let lock = NSLock()
    private var value: String
    init(_ value: String) { self.value = value }
    func set(_ new: String) { lock.withLock { value = new } }
    func get() -> String { lock.withLock { value } }
}
