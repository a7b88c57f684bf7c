import FetchKitTesting
import Foundation

/// A file that changes under a resumed download, and a server that lies about it: for the
/// library's resume tests and the command's.
enum ResumeFixtures {
    /// The object's bytes in version `version`: the pattern from another offset each time.
    static func content(version: Int, length: Int) -> Data {
        patternBytes(offset: version * 7_919, count: length)
    }
}

extension ResumeFixtures {
    /// `count` bytes of the kit's byte pattern from `offset` into it (what
    /// ``TestResponse/Step/patternBytes(offset:count:)`` writes).
    static func patternBytes(offset: Int, count: Int) -> Data {
        TestResponse.patternBytes(offset: offset, count: count)
    }

    /// `head`, then `count` pattern bytes from `offset` — the head alone for a `HEAD`, as a
    /// server answers one: a pattern body from anywhere in the pattern, its head written as
    /// given (`head` says the `Content-Length`).
    static func patternAnswer(_ head: TestResponse.Step, offset: Int, count: Int, for request: TestRequest) -> TestResponse {
        request.method == "HEAD" ? .steps([head]) : .steps([head, .patternBytes(offset: offset, count: count)])
    }

    /// A server that ignores `If-Range`: it answers any `Range` with `206` and the current
    /// version's bytes and validators. The first full answer stops after half the body.
    final class LyingServer: Sendable {
        let server: TestServer
        let version = Locked(1)
        /// The current version's length (a new version may be longer).
        let length = Locked(200_000)
        let cutFirstFull = Locked(true)
        /// Which validators the server sends: an ETag, a Last-Modified, or both.
        let sendsETag: Bool
        let sendsLastModified: Bool
        /// An ETag that stays the same whatever the version (a broken origin).
        let fixedETag: Bool

        init(sendsETag: Bool = true, sendsLastModified: Bool = false, fixedETag: Bool = false) throws {
            server = try TestServer()
            self.sendsETag = sendsETag
            self.sendsLastModified = sendsLastModified
            self.fixedETag = fixedETag
            server.route("/object") { [self] request in
                let version = self.version.current
                let length = self.length.current
                var headers = ["Accept-Ranges": "bytes"]
                let etag = fixedETag ? "\"v1\"" : "\"v\(version)\""
                let lastModified = "Mon, 0\(version) Jun 2026 10:00:00 GMT"
                if sendsETag { headers["ETag"] = etag }
                if sendsLastModified { headers["Last-Modified"] = lastModified }
                let body = ResumeFixtures.content(version: version, length: length)
                if let range = request.header("Range"), range.hasPrefix("bytes="),
                   let start = Int(range.dropFirst(6).prefix { $0 != "-" }), start < length {
                    headers["Content-Range"] = "bytes \(start)-\(length - 1)/\(length)"
                    return TestResponse(status: 206, headers: headers, body: body.subdata(in: start..<length))
                }
                if self.cutFirstFull.withLock({ cut -> Bool in
                    defer { cut = false }
                    return cut
                }) {
                    var fields: [(name: String, value: String)] = [(name: "Accept-Ranges", value: "bytes")]
                    if sendsETag { fields.append((name: "ETag", value: etag)) }
                    if sendsLastModified { fields.append((name: "Last-Modified", value: lastModified)) }
                    let head = TestResponse.Step.head(status: 200, headerFields: fields + [(name: "Content-Length", value: String(length))])
                    return .steps([head, .write(body.prefix(length / 2)), .close])
                }
                return TestResponse(status: 200, headers: headers, body: body)
            }
        }
    }
}

extension TestServer {
    /// Serves `length` pattern bytes at `path` with `ETag: "<etag>"`, honouring `Range` and
    /// `If-Range`. While `cutFull` holds, a full (non-range) response stops after half the body
    /// and closes. With `ignoresRanges`, ranges are ignored (always 200).
    func resumableRoute(_ path: String, length: Int, etag: Locked<String>, cutFull: Locked<Bool>, ignoresRanges: Bool = false) {
        route(path) { request in
            let tag = "\"\(etag.current)\""
            let acceptRanges = ignoresRanges ? "none" : "bytes"
            if !ignoresRanges, let range = request.header("Range"), request.header("If-Range") == nil || request.header("If-Range") == tag,
               range.hasPrefix("bytes="), let start = Int(range.dropFirst(6).prefix { $0 != "-" }) {
                guard start < length else {
                    return TestResponse(status: 416, headers: ["Content-Range": "bytes */\(length)"])
                }
                let head = TestResponse.Step.head(status: 206, headers: [
                    "ETag": tag, "Accept-Ranges": acceptRanges, "Content-Range": "bytes \(start)-\(length - 1)/\(length)",
                    "Content-Length": String(length - start),
                ])
                return ResumeFixtures.patternAnswer(head, offset: start, count: length - start, for: request)
            }
            let head = TestResponse.Step.head(status: 200, headers: ["ETag": tag, "Accept-Ranges": acceptRanges, "Content-Length": String(length)])
            if cutFull.current {
                return .steps([head, .patternBytes(offset: 0, count: length / 2), .close])
            }
            return ResumeFixtures.patternAnswer(head, offset: 0, count: length, for: request)
        }
    }
}
