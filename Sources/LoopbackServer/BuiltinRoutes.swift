import Foundation

/// The endpoints every ``LoopbackServer`` serves (after custom routes). Numbers in paths are
/// non-negative decimals; anything that does not fit a route is a 404 (a route whose numbers
/// do not parse is a 400).
enum BuiltinRoutes {
    /// The `Last-Modified` date of `/bytes`, `/bytes-norange` and `/etag` responses.
    static let lastModified = "Wed, 21 Oct 2026 07:28:00 GMT"

    static func respond(to request: HTTPRequest, core: ServerCore) -> HTTPResponse {
        let segments = request.pathSegments
        let name = segments.first ?? ""
        let args = Array(segments.dropFirst())
        switch (name, args.count) {
        case ("bytes", 1): return bytes(request, args[0], ranged: true)
        case ("bytes-norange", 1): return bytes(request, args[0], ranged: false)
        case ("json", 0): return .jsonText(#"{"ok":true,"items":[1,2,3],"name":"fetchkit"}"#)
        case ("status", 1): return status(request, args[0])
        case ("delay", 1):
            guard let ms = decimalNumber(args[0]) else { return badNumber() }
            return HTTPResponse.text("delayed \(ms)").delayed(milliseconds: ms)
        case ("trickle", 3): return trickle(args)
        case ("close-mid-body", 1), ("reset-mid-body", 1), ("stall-mid-body", 1):
            guard let n = decimalNumber(args[0]) else { return badNumber() }
            let ending: ScriptAction = name == "close-mid-body" ? .close : name == "reset-mid-body" ? .reset : .stall
            return .script([
                .write(octetStreamHead(contentLength: n)),
                .writePattern(offset: 0, count: n / 2),
                ending,
            ])
        case ("stall-head", 0), ("never", 0):
            return .script([.stall])
        case ("lie", 2):
            guard let claimed = decimalNumber(args[0]), let actual = decimalNumber(args[1]) else { return badNumber() }
            return .script([
                .write(octetStreamHead(contentLength: claimed)),
                .writePattern(offset: 0, count: actual),
                .close,
            ])
        case ("garbage-status", 0):
            return .script([.write(Data("HTTP/1.1 abc not-a-status\r\n\r\n".utf8)), .close])
        case ("garbage", 0):
            return .script([.write(garbage), .close])
        case ("redirect", 1):
            guard let n = decimalNumber(args[0]) else { return badNumber() }
            if n == 0 { return .text("redirected") }
            return redirect(to: "/redirect/\(n - 1)")
        case ("redirect-loop", 0):
            return redirect(to: "/redirect-loop")
        case ("redirect-to", 0):
            guard let url = request.query["url"] else { return .text("missing url parameter", status: 400) }
            var status = 302
            if let text = request.query["status"] {
                guard let s = decimalNumber(text), (100...999).contains(s) else { return badNumber() }
                status = s
            }
            return redirect(to: url, status: status)
        case ("headers", 0): return headers(request)
        case ("echo", 0):
            var response = HTTPResponse(status: 200, body: request.body)
            if let type = request.headers["Content-Type"] { response.headers.add(name: "Content-Type", value: type) }
            return response
        case ("basic-auth", 2): return basicAuth(request, user: args[0], password: args[1])
        case ("login", 0): return login(request)
        case ("user", 0): return user(request)
        case ("etag", 1): return etag(request, tag: args[0])
        case ("flaky", 3): return flaky(request, args, core: core)
        case ("retry-after", 1):
            return HTTPResponse.text("retry after \(args[0])", status: 429).with(header: "Retry-After", args[0])
        default:
            return .text("not found: \(request.path)", status: 404)
        }
    }

    // MARK: Bytes and ranges

    private static func bytes(_ request: HTTPRequest, _ sizeText: String, ranged: Bool) -> HTTPResponse {
        guard let size = decimalNumber(sizeText) else { return badNumber() }
        let delay = request.query["delay"].flatMap(decimalNumber) ?? 0
        let headers: HTTPHeaders = [
            "Content-Type": "application/octet-stream",
            "ETag": ranged ? "\"bytes-\(size)\"" : "\"norange-\(size)\"",
            "Last-Modified": lastModified,
        ]
        guard ranged else {
            return HTTPResponse.pattern(count: size, headers: headers).delayed(milliseconds: delay)
        }
        let response = HTTPResponse.ranged(size: size, range: request.headers["Range"], ifRange: request.headers["If-Range"],
                                           ifRangeValidators: ["\"bytes-\(size)\""], headers: headers) { offset, count in
            .pattern(offset: offset, count: count)
        }
        return response.delayed(milliseconds: delay)
    }

    /// A `Range` request header's meaning for a body of `size` bytes.
    enum ByteRange: Equatable {
        /// No (usable) range: send everything. Also what a multi-range or malformed
        /// header means, since a server may ignore those.
        case whole
        /// The bytes `first...last` (inclusive, already clamped to the body).
        case part(first: Int, last: Int)
        /// A well-formed range that selects nothing of the body: 416.
        case unsatisfiable

        static func parse(_ header: String?, size: Int) -> ByteRange {
            guard let header = header?.trimmingOWS() else { return .whole }
            guard let equals = header.firstIndex(of: "="),
                  header[..<equals].trimmingOWS().lowercased() == "bytes"
            else { return .whole }
            let spec = header[header.index(after: equals)...].trimmingOWS()
            guard !spec.contains(",") else { return .whole }
            let bounds = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            guard bounds.count == 2 else { return .whole }
            let firstText = bounds[0].trimmingOWS()
            let lastText = bounds[1].trimmingOWS()
            if firstText.isEmpty {
                // Suffix range: the last N bytes.
                guard let suffix = decimalNumber(lastText) else { return .whole }
                guard suffix > 0, size > 0 else { return .unsatisfiable }
                return .part(first: max(0, size - suffix), last: size - 1)
            }
            guard let first = decimalNumber(firstText) else { return .whole }
            var last = size - 1
            if !lastText.isEmpty {
                guard let value = decimalNumber(lastText), value >= first else { return .whole }
                last = min(value, size - 1)
            }
            guard first < size else { return .unsatisfiable }
            return .part(first: first, last: last)
        }
    }

    /// A head with `Content-Length` for the fault endpoints' scripts.
    private static func octetStreamHead(contentLength: Int) -> Data {
        HTTPResponse.rawHead(status: 200, headers: [
            "Content-Type": "application/octet-stream",
            "Content-Length": String(contentLength),
        ])
    }

    /// 64 bytes that are not an HTTP response.
    private static let garbage = Data(String(repeating: "NOT-HTTP-GARBAGE", count: 4).utf8)

    // MARK: Status, redirects, streaming

    private static func status(_ request: HTTPRequest, _ codeText: String) -> HTTPResponse {
        guard let code = decimalNumber(codeText), (100...999).contains(code) else { return badNumber() }
        var response = HTTPResponse.text("status \(code)", status: code)
        if let retryAfter = request.query["retry-after"] { response.headers.add(name: "Retry-After", value: retryAfter) }
        if let location = request.query["location"] { response.headers.add(name: "Location", value: location) }
        return response
    }

    private static func redirect(to location: String, status: Int = 302) -> HTTPResponse {
        HTTPResponse.text("redirecting to \(location)", status: status).with(header: "Location", location)
    }

    private static func trickle(_ args: [String]) -> HTTPResponse {
        guard let count = decimalNumber(args[0]), let chunk = decimalNumber(args[1]), chunk > 0, let interval = decimalNumber(args[2]) else {
            return badNumber()
        }
        return HTTPResponse(
            status: 200,
            headers: ["Content-Type": "application/octet-stream"],
            body: .chunkedPattern(count: count, chunkSize: chunk, intervalMilliseconds: interval))
    }

    // MARK: Introspection

    private static func headers(_ request: HTTPRequest) -> HTTPResponse {
        var merged: [String: String] = [:]
        for (name, value) in request.headers {
            let key = name.lowercased()
            merged[key] = merged[key].map { $0 + ", " + value } ?? value
        }
        return .json(merged)
    }

    // MARK: Authentication

    private static func basicAuth(_ request: HTTPRequest, user: String, password: String) -> HTTPResponse {
        if let credentials = credentials(request.headers["Authorization"], scheme: "Basic"),
           let decoded = Data(base64Encoded: credentials),
           String(decoding: decoded, as: UTF8.self) == "\(user):\(password)" {
            return .jsonText(#"{"authenticated":true,"user":\#(jsonString(user))}"#)
        }
        return HTTPResponse.text("authentication required", status: 401)
            .with(header: "WWW-Authenticate", #"Basic realm="fetchkit""#)
    }

    private static func login(_ request: HTTPRequest) -> HTTPResponse {
        guard request.method == "POST" else {
            return HTTPResponse.jsonText(#"{"error":"method not allowed"}"#, status: 405).with(header: "Allow", "POST")
        }
        guard let object = try? JSONSerialization.jsonObject(with: request.body) as? [String: Any],
              let user = object["user"] as? String,
              let password = object["password"] as? String
        else {
            return .jsonText(#"{"error":"bad request"}"#, status: 400)
        }
        guard password == "secret" else { return .jsonText(#"{"error":"bad credentials"}"#, status: 403) }
        return .jsonText(#"{"token":\#(jsonString("token-" + user))}"#)
    }

    private static func user(_ request: HTTPRequest) -> HTTPResponse {
        if let token = credentials(request.headers["Authorization"], scheme: "Bearer"), token.hasPrefix("token-"),
           token.count > "token-".count {
            let name = String(token.dropFirst("token-".count))
            return .jsonText(#"{"name":\#(jsonString(name)),"id":42}"#)
        }
        return .jsonText(#"{"error":"unauthorized"}"#, status: 401)
    }

    /// The credentials of an `Authorization` value using `scheme` (compared case-insensitively).
    private static func credentials(_ authorization: String?, scheme: String) -> String? {
        guard let value = authorization?.trimmingOWS(),
              let space = value.firstIndex(of: " "),
              HTTPHeaders.equalsIgnoringCase(String(value[..<space]), scheme)
        else { return nil }
        let credentials = value[value.index(after: space)...].trimmingOWS()
        return credentials.isEmpty ? nil : credentials
    }

    // MARK: Caching and retries

    private static func etag(_ request: HTTPRequest, tag: String) -> HTTPResponse {
        let quoted = "\"\(tag)\""
        var headers: HTTPHeaders = [
            "ETag": quoted,
            "Last-Modified": lastModified,
            "Cache-Control": "no-cache",
        ]
        let notModified: Bool
        if let condition = request.headers["If-None-Match"] {
            notModified = condition.split(separator: ",").contains { item in
                let entity = item.trimmingOWS()
                return entity == "*" || entity == quoted || entity == "W/" + quoted
            }
        } else if let since = request.headers["If-Modified-Since"] {
            notModified = since.trimmingOWS() == lastModified
        } else {
            notModified = false
        }
        if notModified { return HTTPResponse(status: 304, headers: headers) }
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        return HTTPResponse(status: 200, headers: headers, body: Data("tag \(tag)".utf8))
    }

    private static func flaky(_ request: HTTPRequest, _ args: [String], core: ServerCore) -> HTTPResponse {
        guard let failures = decimalNumber(args[1]), let code = decimalNumber(args[2]), (100...999).contains(code) else {
            return badNumber()
        }
        let index = core.nextFlakyIndex(args[0])
        guard index < failures else { return .text("ok after \(failures)") }
        var response = HTTPResponse.text("failure \(index + 1) of \(failures)", status: code)
        if let retryAfter = request.query["retry-after"] { response.headers.add(name: "Retry-After", value: retryAfter) }
        return response
    }

    // MARK: Helpers

    private static func badNumber() -> HTTPResponse {
        .text("bad number in path or query", status: 400)
    }

    /// `s` as a quoted, escaped JSON string.
    static func jsonString(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// A non-negative decimal number made only of ASCII digits (no sign, no spaces, at most 18
/// digits, so it cannot overflow), or `nil`. Used for paths, queries and `Content-Length`.
func decimalNumber<S: StringProtocol>(_ text: S) -> Int? {
    guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
    return Int(text)
}
