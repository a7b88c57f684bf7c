import Foundation

/// A response for the server to send: a status, header fields and a body.
///
/// For ordinary bodies (``Body/data(_:)``, ``Body/pattern(offset:count:)``) the server adds
/// `Content-Length` (unless `headers` already has one, or has `Transfer-Encoding`), a `Date`
/// (unless present) and `Connection: close` when it is about to close the connection. It sends
/// no body for `HEAD` requests and for 1xx, 204 and 304 statuses.
///
/// ``Body/script(_:)`` bodies are raw: the server writes nothing itself, only what the
/// script's actions say, which is how malformed and faulty responses are produced.
public struct HTTPResponse: Sendable {
    /// The status code.
    public var status: Int
    /// The header fields, in order.
    public var headers: HTTPHeaders
    /// What follows the head.
    public var body: Body
    /// How long the server waits, interruptibly, before writing anything (milliseconds).
    /// The wait ends early if the server is stopped or the client goes away.
    public var delayMilliseconds: Int
    /// A gate the server waits on (after the delay) before it writes a byte; `nil` for none.
    public var holdGate: ServerGate?

    /// The content of a response.
    public enum Body: Sendable {
        /// These bytes, with a `Content-Length` (or as a single chunk, if the headers say
        /// `Transfer-Encoding: chunked`).
        case data(Data)
        /// `count` bytes of the ``BytePattern`` starting at absolute `offset`, streamed from a
        /// shared buffer (a body of any size costs no memory), with a `Content-Length`.
        case pattern(offset: Int, count: Int)
        /// `count` pattern bytes from offset 0, sent with `Transfer-Encoding: chunked` in chunks
        /// of `chunkSize` bytes with an interruptible pause of `intervalMilliseconds` between
        /// chunks (the first chunk follows the head at once), then the terminating chunk.
        /// With `count: .max` the body never ends: chunks go out until the client goes away
        /// or the server stops.
        case chunkedPattern(count: Int, chunkSize: Int, intervalMilliseconds: Int)
        /// Raw: the server writes no head of its own, only what the actions write.
        case script([ScriptAction])
    }

    /// Creates a response with a byte body. The server adds `Content-Length` and `Date`.
    public init(status: Int, headers: HTTPHeaders = [:], body: Data = Data()) {
        self.init(status: status, headers: headers, body: .data(body))
    }

    /// Creates a response with any kind of ``Body``.
    public init(status: Int, headers: HTTPHeaders = [:], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
        delayMilliseconds = 0
        holdGate = nil
    }

    /// A copy of this response that the server sends only after waiting `milliseconds`
    /// (interruptibly: the wait ends early when the server stops or the client goes away).
    public func delayed(milliseconds: Int) -> HTTPResponse {
        var copy = self
        copy.delayMilliseconds = max(0, milliseconds)
        return copy
    }

    /// A copy of this response with the header field `name` set to `value` (replacing any
    /// existing fields of that name).
    public func with(header name: String, _ value: String) -> HTTPResponse {
        var copy = self
        copy.headers.replaceOrAdd(name: name, value: value)
        return copy
    }

    // MARK: Convenience constructors

    /// A `text/plain; charset=utf-8` response.
    public static func text(_ s: String, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "text/plain; charset=utf-8"], body: Data(s.utf8))
    }

    /// An `application/json` response holding `object`: a JSON object graph (dictionaries,
    /// arrays, strings, numbers, booleans, `NSNull`) serialized by `JSONSerialization`, or any
    /// `Encodable` value encoded by a `JSONEncoder`; keys sorted either way, slashes not
    /// escaped. Anything else gives a 500.
    public static func json(_ object: Any, status: Int = 200) -> HTTPResponse {
        if JSONSerialization.isValidJSONObject(object),
           let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) {
            return jsonData(data, status: status)
        }
        if let value = object as? any Encodable {
            return json(encoding: value, status: status)
        }
        return .text("value is not valid JSON", status: 500)
    }

    /// An `application/json` response holding `value` encoded by a `JSONEncoder` with sorted
    /// keys; a 500 if encoding fails.
    public static func json<Value: Encodable>(encoding value: Value, status: Int = 200) -> HTTPResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return .text("value could not be encoded", status: 500) }
        return jsonData(data, status: status)
    }

    /// An `application/json` response whose body is `json`, sent exactly as given.
    public static func jsonText(_ json: String, status: Int = 200) -> HTTPResponse {
        jsonData(Data(json.utf8), status: status)
    }

    /// An `application/json` response whose body is `data`, sent exactly as given.
    public static func jsonData(_ data: Data, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: data)
    }

    /// An `application/octet-stream` response of `count` ``BytePattern`` bytes starting at
    /// absolute `offset`, streamed without allocating the body.
    public static func pattern(count: Int, offset: Int = 0, status: Int = 200, headers: HTTPHeaders = [:]) -> HTTPResponse {
        var headers = headers
        if !headers.contains("Content-Type") { headers.add(name: "Content-Type", value: "application/octet-stream") }
        return HTTPResponse(status: status, headers: headers, body: .pattern(offset: offset, count: count))
    }

    /// A raw, scripted response: the server writes nothing of its own, only what `actions`
    /// write, in order. If the script ends without ``ScriptAction/close``,
    /// ``ScriptAction/reset`` or ``ScriptAction/stall``, the connection stays open and the
    /// server reads the next request from it (unless the request asked to close).
    public static func script(_ actions: [ScriptAction]) -> HTTPResponse {
        HTTPResponse(status: 0, headers: [:], body: .script(actions))
    }

    /// The bytes of a response head (status line, `headers`, a `Date` unless present, and the
    /// empty line) for use in a ``script(_:)``. Nothing is added beyond that: no
    /// `Content-Length`, no `Connection`.
    public static func rawHead(status: Int, headers: HTTPHeaders = [:], reason: String? = nil) -> Data {
        var headers = headers
        if !headers.contains("Date") { headers.add(name: "Date", value: HTTPDate.now()) }
        return Data(ResponseHead.bytes(status: status, reason: reason, headers: headers))
    }
}

/// One step of a scripted response (``HTTPResponse/script(_:)``).
public enum ScriptAction: Sendable {
    /// Writes these bytes, as they are.
    case write(Data)
    /// Writes `count` ``BytePattern`` bytes starting at absolute `offset`, streamed from the
    /// shared pattern buffer.
    case writePattern(offset: Int, count: Int)
    /// Waits this long. The wait ends early, and the script with it, if the server stops or
    /// the client goes away.
    case sleep(milliseconds: Int)
    /// Ends the connection gracefully: the client sees a FIN after what was written.
    case close
    /// Ends the connection abortively: `SO_LINGER {1, 0}` then `close(2)`, so the client
    /// sees a TCP RST.
    case reset
    /// Writes nothing more and waits until the server stops or the client goes away, then
    /// closes the connection.
    case stall
    /// Waits until the gate is opened, then goes on with the script. The wait ends early, and
    /// the script with it, if the server stops or the client goes away.
    case wait(ServerGate)
}
