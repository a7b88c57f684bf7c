import FetchKitTesting
import Foundation

/// The endpoints many of FetchKit's own tests share, built on FetchKitTesting's public API as a
/// user's tests would build theirs: byte bodies with ranges, statuses, delays, slow and broken
/// bodies, redirects, echoes, a login, conditional answers and a flaky endpoint. A test's own
/// routes, added after these, win over them.
///
/// | Path | Answer |
/// | --- | --- |
/// | `/bytes/:n` | `n` pattern bytes with ranges, `ETag: "bytes-n"`, ``lastModified``; `?delay=ms` |
/// | `/bytes-norange/:n` | the same without ranges, `ETag: "norange-n"` |
/// | `/json` | a small JSON object |
/// | `/status/:code` | that status, `?retry-after=` and `?location=` as header fields |
/// | `/delay/:ms` | text after `ms` milliseconds |
/// | `/trickle/:count/:chunk/:ms` | a chunked pattern body, `chunk` bytes every `ms` |
/// | `/close-mid-body/:n`, `/reset-mid-body/:n`, `/stall-mid-body/:n` | half of `n` bytes, then the fault |
/// | `/stall-head`, `/never` | no answer |
/// | `/lie/:claimed/:actual` | a `Content-Length` that lies |
/// | `/garbage`, `/garbage-status` | bytes that are not HTTP; a status line that is not one |
/// | `/redirect/:n`, `/redirect-loop`, `/redirect-to?url=&status=` | redirects |
/// | `/headers` | the request's header fields as JSON (names lowercased, repeats joined) |
/// | `/echo` | the request's body and `Content-Type` |
/// | `/basic-auth/:user/:password`, `/login`, `/user` | credentials checked |
/// | `/etag/:tag` | `304` to a matching `If-None-Match` or `If-Modified-Since` |
/// | `/flaky/:key/:failures/:code` | `code` for the first `failures` requests of `key`, then `200` |
/// | `/retry-after/:seconds` | `429` with `Retry-After` |
enum StandardRoutes {
    /// The `Last-Modified` of `/bytes`, `/bytes-norange` and `/etag` answers.
    static let lastModified = "Wed, 21 Oct 2026 07:28:00 GMT"
    static let lastModifiedDate = Date(timeIntervalSince1970: 1_792_567_680)
}

extension TestServer {
    /// A server with the ``StandardRoutes`` (and `sendBufferSize`, see
    /// ``TestServer/init(sendBufferSize:)``).
    static func standard(sendBufferSize: Int? = nil) throws -> TestServer {
        let server = try TestServer(sendBufferSize: sendBufferSize)
        server.addStandardRoutes()
        return server
    }

    /// Adds the ``StandardRoutes``.
    func addStandardRoutes() {
        let flakyCounts = Locked<[String: Int]>([:])
        route("/bytes/:n") { request in
            guard let count = number(request.parameters["n"]) else { return badNumber }
            let answer = TestResponse.ranged(patternCount: count, for: request, etag: #""bytes-\#(count)""#,
                                             lastModified: StandardRoutes.lastModifiedDate)
            return answer.delayed(milliseconds: number(request.query["delay"]) ?? 0)
        }
        route("/bytes-norange/:n") { request in
            guard let count = number(request.parameters["n"]) else { return badNumber }
            return TestResponse.pattern(count: count, headers: ["ETag": #""norange-\#(count)""#, "Last-Modified": StandardRoutes.lastModified])
                .delayed(milliseconds: number(request.query["delay"]) ?? 0)
        }
        route("/json") { _ in .json(#"{"ok":true,"items":[1,2,3],"name":"fetchkit"}"#) }
        route("/status/:code") { request in
            guard let code = number(request.parameters["code"]), (100...999).contains(code) else { return badNumber }
            var answer = TestResponse.text("status \(code)", status: code)
            if let retryAfter = request.query["retry-after"] { answer = answer.with(header: "Retry-After", retryAfter) }
            if let location = request.query["location"] { answer = answer.with(header: "Location", location) }
            return answer
        }
        route("/delay/:ms") { request in
            guard let milliseconds = number(request.parameters["ms"]) else { return badNumber }
            return TestResponse.text("delayed \(milliseconds)").delayed(milliseconds: milliseconds)
        }
        route("/trickle/:count/:chunk/:ms") { request in
            guard let count = number(request.parameters["count"]), let chunk = number(request.parameters["chunk"]), chunk > 0,
                  let interval = number(request.parameters["ms"]) else { return badNumber }
            return .slowBody(count: count, chunkSize: chunk, intervalMilliseconds: interval)
        }
        route("/close-mid-body/:n") { request in number(request.parameters["n"]).map { .closeMidBody(count: $0) } ?? badNumber }
        route("/reset-mid-body/:n") { request in number(request.parameters["n"]).map { .resetMidBody(count: $0) } ?? badNumber }
        route("/stall-mid-body/:n") { request in number(request.parameters["n"]).map { .stallMidBody(count: $0) } ?? badNumber }
        route("/stall-head") { _ in .neverAnswer }
        route("/never") { _ in .neverAnswer }
        route("/lie/:claimed/:actual") { request in
            guard let claimed = number(request.parameters["claimed"]), let actual = number(request.parameters["actual"]) else { return badNumber }
            return .lyingContentLength(claimed: claimed, actual: actual)
        }
        route("/garbage") { _ in .steps([.write(String(repeating: "NOT-HTTP-GARBAGE", count: 4)), .close]) }
        route("/garbage-status") { _ in .malformedStatusLine }
        route("/redirect/:n") { request in
            guard let count = number(request.parameters["n"]) else { return badNumber }
            return count == 0 ? .text("redirected") : redirect(to: "/redirect/\(count - 1)")
        }
        route("/redirect-loop") { _ in redirect(to: "/redirect-loop") }
        route("/redirect-to") { request in
            guard let url = request.query["url"] else { return .text("missing url parameter", status: 400) }
            guard let status = request.query["status"].map(number) ?? 302, (100...999).contains(status) else { return badNumber }
            return redirect(to: url, status: status)
        }
        route("/headers") { request in
            var merged: [String: String] = [:]
            for (name, value) in request.headerFields {
                let key = name.lowercased()
                merged[key] = merged[key].map { $0 + ", " + value } ?? value
            }
            return .json(encoding: merged)
        }
        route("/echo") { request in
            let answer = TestResponse(status: 200, body: request.body)
            return request.header("Content-Type").map { answer.with(header: "Content-Type", $0) } ?? answer
        }
        route("/basic-auth/:user/:password") { request in
            let expected = "\(request.parameters["user"] ?? ""):\(request.parameters["password"] ?? "")"
            if let credentials = credentials(request.header("Authorization"), scheme: "Basic"),
               let decoded = Data(base64Encoded: credentials), String(decoding: decoded, as: UTF8.self) == expected {
                return .json(encoding: Authenticated(authenticated: true, user: request.parameters["user"] ?? ""))
            }
            return TestResponse.text("authentication required", status: 401).with(header: "WWW-Authenticate", #"Basic realm="fetchkit""#)
        }
        route("/login") { request in
            guard request.method == "POST" else {
                return TestResponse.json(#"{"error":"method not allowed"}"#, status: 405).with(header: "Allow", "POST")
            }
            struct Login: Decodable { let user: String; let password: String }
            guard let login = try? JSONDecoder().decode(Login.self, from: request.body) else { return .json(#"{"error":"bad request"}"#, status: 400) }
            guard login.password == "secret" else { return .json(#"{"error":"bad credentials"}"#, status: 403) }
            return .json(encoding: ["token": "token-" + login.user])
        }
        route("/user") { request in
            if let token = credentials(request.header("Authorization"), scheme: "Bearer"), token.hasPrefix("token-"), token.count > 6 {
                return .json(encoding: UserAnswer(name: String(token.dropFirst(6)), id: 42))
            }
            return .json(#"{"error":"unauthorized"}"#, status: 401)
        }
        route("/etag/:tag") { request in
            let quoted = "\"\(request.parameters["tag"] ?? "")\""
            let notModified: Bool
            if let condition = request.header("If-None-Match") {
                notModified = condition.split(separator: ",").contains { item in
                    let entity = item.trimmingCharacters(in: .whitespaces)
                    return entity == "*" || entity == quoted || entity == "W/" + quoted
                }
            } else if let since = request.header("If-Modified-Since") {
                notModified = since.trimmingCharacters(in: .whitespaces) == StandardRoutes.lastModified
            } else {
                notModified = false
            }
            let headers = ["ETag": quoted, "Last-Modified": StandardRoutes.lastModified, "Cache-Control": "no-cache"]
            if notModified { return TestResponse(status: 304, headers: headers) }
            return TestResponse(status: 200, headers: headers.merging(["Content-Type": "text/plain; charset=utf-8"]) { $1 },
                                body: Data("tag \(request.parameters["tag"] ?? "")".utf8))
        }
        route("/flaky/:key/:failures/:code") { request in
            guard let failures = number(request.parameters["failures"]), let code = number(request.parameters["code"]),
                  (100...999).contains(code) else { return badNumber }
            let key = request.parameters["key"] ?? ""
            let index = flakyCounts.withLock { counts in
                defer { counts[key, default: 0] += 1 }
                return counts[key, default: 0]
            }
            guard index < failures else { return .text("ok after \(failures)") }
            let answer = TestResponse.text("failure \(index + 1) of \(failures)", status: code)
            return request.query["retry-after"].map { answer.with(header: "Retry-After", $0) } ?? answer
        }
        route("/retry-after/:seconds") { request in
            let seconds = request.parameters["seconds"] ?? ""
            return TestResponse.text("retry after \(seconds)", status: 429).with(header: "Retry-After", seconds)
        }
    }
}

private struct Authenticated: Encodable {
    let authenticated: Bool
    let user: String
}

private struct UserAnswer: Encodable {
    let name: String
    let id: Int
}

private let badNumber = TestResponse.text("bad number in path or query", status: 400)

/// A redirect with a text body, as the standard routes send it.
private func redirect(to location: String, status: Int = 302) -> TestResponse {
    TestResponse.text("redirecting to \(location)", status: status).with(header: "Location", location)
}

/// A non-negative decimal of ASCII digits (at most 18), or `nil`.
private func number(_ text: String?) -> Int? {
    guard let text, !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
    return Int(text)
}

/// The credentials of an `Authorization` value using `scheme` (compared case-insensitively).
private func credentials(_ authorization: String?, scheme: String) -> String? {
    guard let value = authorization?.trimmingCharacters(in: .whitespaces), let space = value.firstIndex(of: " "),
          value[..<space].caseInsensitiveCompare(scheme) == .orderedSame else { return nil }
    let credentials = value[value.index(after: space)...].trimmingCharacters(in: .whitespaces)
    return credentials.isEmpty ? nil : credentials
}
