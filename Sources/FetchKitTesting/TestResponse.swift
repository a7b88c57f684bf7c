import Foundation
import LoopbackServer

/// What a ``TestServer`` answers: a canned response, or a fault staged at the socket.
///
/// The canned ones are ordinary responses with their `Content-Length`; the faults are written
/// byte by byte as they say (a head that never comes, a body cut short, a reset, a length that
/// lies), which is what a `URLProtocol` stub cannot do: FetchKit's handling of them runs in
/// libcurl and FoundationNetworking, below any stub.
public struct TestResponse: Sendable {
    let response: HTTPResponse

    init(_ response: HTTPResponse) {
        self.response = response
    }

    /// A response with `status`, `headers` and `body`; the server adds `Content-Length`.
    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        response = HTTPResponse(status: status, headers: HTTPHeaders(headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }), body: body)
    }

    /// A response with `status`, the header fields `headerFields` in their order (a name may
    /// come more than once: several `Set-Cookie` fields) and `body`; the server adds
    /// `Content-Length` unless they give one.
    public init(status: Int, headerFields: [(name: String, value: String)], body: Data = Data()) {
        response = HTTPResponse(status: status, headers: HTTPHeaders(headerFields.map { ($0.name, $0.value) }), body: body)
    }

    /// The status code, or `nil` for a hand-written answer (``steps(_:)``), which says its own.
    public var status: Int? {
        if case .script = response.body { return nil }
        return response.status
    }

    // MARK: Canned

    /// `200` (or `status`) with `json` as an `application/json` body, sent as given.
    public static func json(_ json: String, status: Int = 200) -> TestResponse {
        TestResponse(.jsonText(json, status: status))
    }

    /// `200` (or `status`) with `value` encoded by a `JSONEncoder` (sorted keys).
    public static func json<Value: Encodable>(encoding value: Value, status: Int = 200) -> TestResponse {
        TestResponse(.json(encoding: value, status: status))
    }

    /// `200` (or `status`) with a `text/plain; charset=utf-8` body.
    public static func text(_ text: String, status: Int = 200) -> TestResponse {
        TestResponse(.text(text, status: status))
    }

    /// `200` (or `status`) with these bytes as an `application/octet-stream` body.
    public static func bytes(_ data: Data, status: Int = 200) -> TestResponse {
        TestResponse(HTTPResponse(status: status, headers: ["Content-Type": "application/octet-stream"], body: data))
    }

    /// `status` with no body (a `204`, a `500`…), or with `body` as text.
    public static func status(_ status: Int, body: String = "") -> TestResponse {
        TestResponse(HTTPResponse(status: status, headers: body.isEmpty ? [:] : ["Content-Type": "text/plain; charset=utf-8"],
                                  body: Data(body.utf8)))
    }

    /// A redirect (`302` unless `status` says) to `location`: a path of this server or a URL of
    /// another (a second ``TestServer`` for a cross-origin chain).
    public static func redirect(to location: String, status: Int = 302) -> TestResponse {
        TestResponse(HTTPResponse(status: status, headers: ["Location": location]))
    }

    /// `401` with `WWW-Authenticate: challenge` (default a bearer challenge).
    public static func unauthorized(challenge: String = #"Bearer realm="test""#) -> TestResponse {
        TestResponse(HTTPResponse(status: 401, headers: ["WWW-Authenticate": challenge], body: Data("unauthorized".utf8)))
    }

    /// `429` (or `status`, e.g. `503`) with `Retry-After: seconds`.
    public static func retryAfter(_ seconds: Int, status: Int = 429) -> TestResponse {
        TestResponse(HTTPResponse(status: status, headers: ["Retry-After": String(seconds)], body: Data("retry later".utf8)))
    }

    /// The answer to `request` for the representation `data`, honouring a byte range as a file
    /// server does (RFC 9110, section 14) — a resumed download's test.
    ///
    /// A `GET` without `Range` gets `200` with all of `data`; one satisfiable range
    /// (`bytes=100-199`, `bytes=100-`, `bytes=-50`) gets `206` with those bytes and
    /// `Content-Range: bytes 100-199/<count>`; a range past the end gets `416` with
    /// `Content-Range: bytes */<count>`. An `If-Range` that is not the strong `etag` nor exactly
    /// the `Last-Modified` date means the representation changed: `200` with all of it. A
    /// multi-range or malformed `Range` is ignored (`200`), and so is `Range` on any method
    /// but `GET`. Every answer carries `Accept-Ranges: bytes` and the validators given.
    ///
    /// ```swift
    /// server.route("GET", "/files/report.pdf") { request in
    ///     .ranged(file, for: request, etag: #""v1""#)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - data: The whole representation.
    ///   - request: The request being answered (its `Range`, `If-Range` and method).
    ///   - etag: The representation's `ETag`, quoted (`"\"v1\""`; a weak `W/` one never
    ///     matches an `If-Range`). Default none.
    ///   - lastModified: Its `Last-Modified` date (to the second). Default none.
    ///   - contentType: Its `Content-Type`. Default `application/octet-stream`.
    public static func ranged(_ data: Data, for request: TestRequest, etag: String? = nil, lastModified: Date? = nil,
                              contentType: String = "application/octet-stream") -> TestResponse {
        ranged(count: data.count, for: request, etag: etag, lastModified: lastModified, contentType: contentType) { offset, count in
            .data(data.subdata(in: offset..<(offset + count)))
        }
    }

    /// The answer to `request` for a representation of `count` bytes of the kit's byte pattern
    /// (``patternBytes(count:)``), honouring a byte range as
    /// ``ranged(_:for:etag:lastModified:contentType:)`` does — made as it is sent, so a
    /// download's test can serve gigabytes without holding them. Its bytes sent are counted
    /// (``TestServer/Counters/patternBytesSent``).
    public static func ranged(patternCount count: Int, for request: TestRequest, etag: String? = nil, lastModified: Date? = nil,
                              contentType: String = "application/octet-stream") -> TestResponse {
        ranged(count: max(0, count), for: request, etag: etag, lastModified: lastModified, contentType: contentType) { offset, count in
            .pattern(offset: offset, count: count)
        }
    }

    private static func ranged(count: Int, for request: TestRequest, etag: String?, lastModified: Date?, contentType: String,
                               body: @escaping @Sendable (Int, Int) -> HTTPResponse.Body) -> TestResponse {
        var headers: HTTPHeaders = ["Content-Type": contentType]
        var validators: [String] = []
        if let etag {
            headers.add(name: "ETag", value: etag)
            if !etag.hasPrefix("W/") { validators.append(etag) }
        }
        if let lastModified {
            let date = httpDate(lastModified)
            headers.add(name: "Last-Modified", value: date)
            validators.append(date)
        }
        let isGET = request.method == "GET"
        return TestResponse(.ranged(size: count, range: isGET ? request.header("Range") : nil,
                                    ifRange: isGET ? request.header("If-Range") : nil,
                                    ifRangeValidators: validators, headers: headers, body: body))
    }

    /// `date` as an HTTP date (`Wed, 21 Oct 2026 07:28:00 GMT`).
    private static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }

    /// `200` (or `status`) with `count` bytes of the kit's byte pattern
    /// (``patternBytes(count:)``) as an `application/octet-stream` body, made as it is sent:
    /// a large body (hundreds of megabytes) costs the server no memory. The bytes sent of such
    /// bodies are counted (``TestServer/Counters/patternBytesSent``).
    ///
    /// - Parameters:
    ///   - offset: Where in the pattern the body starts (a `206`'s part: ``patternBytes(offset:count:)``
    ///     shows the same bytes). Default 0.
    ///   - count: How many bytes.
    ///   - status: The status. Default `200`.
    ///   - headers: More header fields, replacing the default `Content-Type` if they name one
    ///     (a `Content-Length` given here is sent as it is, true or not).
    public static func pattern(offset: Int = 0, count: Int, status: Int = 200, headers: [String: String] = [:]) -> TestResponse {
        var fields: HTTPHeaders = ["Content-Type": "application/octet-stream"]
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { fields.replaceOrAdd(name: name, value: value) }
        return TestResponse(.pattern(count: max(0, count), offset: max(0, offset), status: status, headers: fields))
    }

    /// A copy of this answer with the header field `name` set to `value` (replacing any of
    /// that name). A hand-written answer (``steps(_:)``) is sent as written: this does nothing
    /// to it.
    public func with(header name: String, _ value: String) -> TestResponse {
        TestResponse(response.with(header: name, value))
    }

    /// A copy of this answer with one more header field `name: value`, after those it has,
    /// keeping any of that name (a second `Set-Cookie`, a second `WWW-Authenticate`). Does
    /// nothing to a hand-written answer (``steps(_:)``).
    public func adding(header name: String, _ value: String) -> TestResponse {
        var copy = response
        if case .script = copy.body { return self }
        copy.headers.add(name: name, value: value)
        return TestResponse(copy)
    }

    // MARK: Faults

    /// The head after `milliseconds` (interruptibly: the wait ends when the client goes away
    /// or the server shuts down).
    public func delayed(milliseconds: Int) -> TestResponse {
        TestResponse(response.delayed(milliseconds: milliseconds))
    }

    /// This answer, sent only once `gate` opens (after any ``delayed(milliseconds:)``): the
    /// request counts as in flight (``TestServer/Counters/requestsInFlight``) while it waits,
    /// so a test can wait for that, act (cancel, pause, read progress), then open the gate. The
    /// wait ends, and the connection closes, when the client goes away or the server shuts
    /// down.
    public func held(by gate: TestGate) -> TestResponse {
        var copy = response
        copy.holdGate = gate.gate
        return TestResponse(copy)
    }

    /// No answer at all: the connection stays open and silent until the client gives up or the
    /// server shuts down (an idle timeout's test).
    public static let neverAnswer = TestResponse(.script([.stall]))

    /// A TCP reset (`RST`) as soon as the request is read, before any byte of the head: a
    /// server that crashed, or a middlebox that dropped the connection. FetchKit reports
    /// ``FetchKit/FetchError/transport(_:)`` (the connection was lost).
    public static let resetBeforeHead = TestResponse(.script([.reset]))

    /// `count` bytes announced and `count / 2` sent, then the connection closes (`FIN`).
    public static func closeMidBody(count: Int) -> TestResponse {
        TestResponse(.script([.write(head(contentLength: count)), .writePattern(offset: 0, count: count / 2), .close]))
    }

    /// `count` bytes announced and `count / 2` sent, then a TCP reset (`RST`).
    public static func resetMidBody(count: Int) -> TestResponse {
        TestResponse(.script([.write(head(contentLength: count)), .writePattern(offset: 0, count: count / 2), .reset]))
    }

    /// `count` bytes announced and `count / 2` sent, then silence until the client gives up.
    public static func stallMidBody(count: Int) -> TestResponse {
        TestResponse(.script([.write(head(contentLength: count)), .writePattern(offset: 0, count: count / 2), .stall]))
    }

    /// `Content-Length: claimed` with `actual` bytes, then the connection closes.
    public static func lyingContentLength(claimed: Int, actual: Int) -> TestResponse {
        TestResponse(.script([.write(head(contentLength: claimed)), .writePattern(offset: 0, count: actual), .close]))
    }

    /// `count` body bytes in chunks of `chunkSize`, `intervalMilliseconds` apart (chunked
    /// encoding): a slow body, or a stream.
    public static func slowBody(count: Int, chunkSize: Int, intervalMilliseconds: Int) -> TestResponse {
        TestResponse(HTTPResponse(status: 200, headers: ["Content-Type": "application/octet-stream"],
                                  body: .chunkedPattern(count: count, chunkSize: max(1, chunkSize), intervalMilliseconds: max(0, intervalMilliseconds))))
    }

    /// A gzip bomb: `200` with `Content-Encoding: gzip` and a small body — about a thousandth
    /// of `inflatedSize` (64 MiB in 64 KiB) — that inflates to `inflatedSize` zero bytes. The
    /// announced `Content-Length` is the compressed one, as a real server sends it, so only a
    /// limit on what is inflated stops it: an operation whose `maximumResponseSize` is below
    /// `inflatedSize` fails with ``FetchKit/FetchError/responseTooLarge(_:)``. The stream is
    /// valid gzip to its end (its CRC-32 and length are the zeros'): without a limit the fetch
    /// succeeds with `inflatedSize` zeros.
    ///
    /// - Parameter inflatedSize: How many bytes the body inflates to. Default 64 MiB.
    public static func gzipBomb(inflatedSize: Int = 64 << 20) -> TestResponse {
        TestResponse(HTTPResponse(status: 200, headers: ["Content-Type": "application/octet-stream", "Content-Encoding": "gzip"],
                                  body: Gzip.zeros(count: max(0, inflatedSize))))
    }

    /// Bytes that are not HTTP, then the connection closes. (libcurl takes them for HTTP/0.9
    /// and refuses them: FetchKit reports ``FetchKit/FetchError/transport(_:)``.)
    public static let garbage = TestResponse(.script([.write(Data("this is not HTTP\r\n\r\n".utf8)), .close]))

    /// A status line that is not one (`HTTP/1.1 abc`), then the connection closes: FetchKit
    /// reports ``FetchKit/FetchError/invalidResponse(_:)``.
    public static let malformedStatusLine = TestResponse(.script([.write(Data("HTTP/1.1 abc not-a-status\r\n\r\n".utf8)), .close]))

    /// An answer written exactly as `steps` say, byte for byte — nothing added, no
    /// `Content-Length` unless a step writes it: for the answers no server should
    /// send (duplicate or contradictory lengths, a head cut in two, a body after a `304`, a
    /// head that never ends), which a parser and FetchKit must survive.
    ///
    /// ```swift
    /// server.route("GET", "/two-lengths") { _ in
    ///     .steps([.head(status: 200, headers: ["Content-Length": "4", "Content-Length": "5"]),
    ///             .write("abcd"), .close])
    /// }
    /// ```
    ///
    /// After the last step the connection is kept for the next request unless a step ended it
    /// (``Step/close``, ``Step/reset``, ``Step/stall``).
    public static func steps(_ steps: [Step]) -> TestResponse {
        TestResponse(.script(steps.map(\.action)))
    }

    /// One step of a hand-written answer (``TestResponse/steps(_:)``).
    public struct Step: Sendable {
        let action: ScriptAction

        /// Writes `data`.
        public static func write(_ data: Data) -> Step {
            Step(action: .write(data))
        }

        /// Writes `text` as UTF-8 (write `\r\n` line ends yourself).
        public static func write(_ text: String) -> Step {
            Step(action: .write(Data(text.utf8)))
        }

        /// Writes a response head: `HTTP/1.1 <status> <reason>`, then `headers` in their order
        /// (duplicates kept), a `Date` unless they give one, then the blank line — nothing
        /// else: no `Content-Length` or `Connection` the headers do not give.
        ///
        /// - Parameters:
        ///   - status: The status code.
        ///   - headers: The header fields, in order.
        ///   - reason: The reason phrase. Default the status's usual one.
        public static func head(status: Int, headers: KeyValuePairs<String, String> = [:], reason: String? = nil) -> Step {
            head(status: status, headerFields: headers.map { (name: $0.key, value: $0.value) }, reason: reason)
        }

        /// Writes a response head as ``head(status:headers:reason:)`` does, from header fields
        /// made at run time (in their order, duplicates kept).
        public static func head(status: Int, headerFields: [(name: String, value: String)], reason: String? = nil) -> Step {
            Step(action: .write(HTTPResponse.rawHead(status: status, headers: HTTPHeaders(headerFields.map { ($0.name, $0.value) }),
                                                     reason: reason)))
        }

        /// Writes `count` bytes of the kit's byte pattern, from `offset` into it
        /// (``TestResponse/patternBytes(count:)`` shows them from offset 0).
        public static func patternBytes(offset: Int = 0, count: Int) -> Step {
            Step(action: .writePattern(offset: offset, count: count))
        }

        /// Waits `milliseconds` (ended early, with the connection, if the client goes away or
        /// the server shuts down).
        public static func pause(milliseconds: Int) -> Step {
            Step(action: .sleep(milliseconds: milliseconds))
        }

        /// Waits until `gate` opens (ended early, with the connection, if the client goes away
        /// or the server shuts down).
        public static func wait(for gate: TestGate) -> Step {
            Step(action: .wait(gate.gate))
        }

        /// Closes the connection (`FIN`).
        public static let close = Step(action: .close)

        /// Resets the connection (`RST`).
        public static let reset = Step(action: .reset)

        /// Says nothing more, the connection open, until the client goes away or the server
        /// shuts down.
        public static let stall = Step(action: .stall)
    }

    /// The bytes of the kit's byte pattern from `offset` (default 0), `count` of them, of which a fault's body is made (``closeMidBody(count:)``,
    /// ``slowBody(count:chunkSize:intervalMilliseconds:)``…): compare what arrived with it.
    public static func patternBytes(offset: Int = 0, count: Int) -> Data {
        BytePattern.data(offset: max(0, offset), count: max(0, count))
    }

    private static func head(contentLength: Int) -> Data {
        HTTPResponse.rawHead(status: 200, headers: ["Content-Type": "application/octet-stream", "Content-Length": String(contentLength)])
    }
}
