import FetchKitTesting
import Foundation
// LoopbackServer: LyingServer and LoopbackServer.resumableRoute stay for the suites not yet on FetchKitTesting (the command's, RetryTests, BackpressureTests)
import LoopbackServer

/// A file that changes under a resumed download, and a server that lies about it: for the
/// library's resume tests and the command's.
enum ResumeFixtures {
    /// The object's bytes in version `version`: the pattern from another offset each time.
    static func content(version: Int, length: Int) -> Data {
        patternBytes(offset: version * 7_919, count: length)
    }

    /// A server that ignores `If-Range`: it answers any `Range` with `206` and the current
    /// version's bytes and validators. The first full answer stops after half the body.
    final class LyingServer: Sendable {
        let server: LoopbackServer
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
            server = try LoopbackServer()
            self.sendsETag = sendsETag
            self.sendsLastModified = sendsLastModified
            self.fixedETag = fixedETag
            server.route("/object") { [self] request in
                let version = self.version.current
                let length = self.length.current
                var headers: HTTPHeaders = ["Accept-Ranges": "bytes"]
                if sendsETag { headers["ETag"] = fixedETag ? "\"v1\"" : "\"v\(version)\"" }
                if sendsLastModified { headers["Last-Modified"] = "Mon, 0\(version) Jun 2026 10:00:00 GMT" }
                let body = ResumeFixtures.content(version: version, length: length)
                if let range = request.headers["Range"], range.hasPrefix("bytes="),
                   let start = Int(range.dropFirst(6).prefix { $0 != "-" }), start < length {
                    headers["Content-Range"] = "bytes \(start)-\(length - 1)/\(length)"
                    return HTTPResponse(status: 206, headers: headers, body: body.subdata(in: start..<length))
                }
                if self.cutFirstFull.withLock({ cut -> Bool in
                    defer { cut = false }
                    return cut
                }) {
                    headers["Content-Length"] = String(length)
                    return .script([.write(HTTPResponse.rawHead(status: 200, headers: headers)),
                                    .write(body.prefix(length / 2)), .close])
                }
                return HTTPResponse(status: 200, headers: headers, body: body)
            }
        }
    }
}

extension LoopbackServer {
    /// Serves `length` pattern bytes at `path` with `ETag: "<etag>"`, honouring `Range` and
    /// `If-Range`. While `cutFull` holds, a full (non-range) response stops after half the body
    /// and closes. With `ignoresRanges`, ranges are ignored (always 200).
    func resumableRoute(_ path: String, length: Int, etag: Locked<String>, cutFull: Locked<Bool>, ignoresRanges: Bool = false) {
        route(path) { request in
            let tag = "\"\(etag.current)\""
            let headers: HTTPHeaders = ["ETag": tag, "Accept-Ranges": ignoresRanges ? "none" : "bytes"]
            if !ignoresRanges, let range = request.headers["Range"], request.headers["If-Range"] == nil || request.headers["If-Range"] == tag,
               range.hasPrefix("bytes="), let start = Int(range.dropFirst(6).prefix { $0 != "-" }) {
                guard start < length else {
                    return HTTPResponse(status: 416, headers: ["Content-Range": "bytes */\(length)"])
                }
                var partial = headers
                partial["Content-Range"] = "bytes \(start)-\(length - 1)/\(length)"
                return HTTPResponse(status: 206, headers: partial, body: .pattern(offset: start, count: length - start))
            }
            if cutFull.current {
                var head = headers
                head["Content-Length"] = String(length)
                return .script([.write(HTTPResponse.rawHead(status: 200, headers: head)),
                                .writePattern(offset: 0, count: length / 2), .close])
            }
            return HTTPResponse(status: 200, headers: headers, body: .pattern(offset: 0, count: length))
        }
    }
}

extension ResumeFixtures {
    /// `count` bytes of the kit's byte pattern from `offset` into it (what
    /// ``TestResponse/Step/patternBytes(offset:count:)`` writes).
    static func patternBytes(offset: Int, count: Int) -> Data {
        TestResponse.patternBytes(count: offset + count).subdata(in: offset..<(offset + count))
    }

    /// `head`, then `count` pattern bytes from `offset` — the head alone for a `HEAD`, as a
    /// server answers one: a pattern body from anywhere in the pattern, its head written as
    /// given (`head` says the `Content-Length`).
    static func patternAnswer(_ head: TestResponse.Step, offset: Int, count: Int, for request: TestRequest) -> TestResponse {
        request.method == "HEAD" ? .steps([head]) : .steps([head, .patternBytes(offset: offset, count: count)])
    }

    /// ``LyingServer`` on FetchKitTesting's ``TestServer``: the same answers (a `206` of the
    /// current version to any `Range`, `If-Range` ignored; the first full answer cut after half
    /// the body), the same knobs.
    final class LyingTestServer: Sendable {
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
                    let announced = String(length)
                    let head: TestResponse.Step
                    switch (sendsETag, sendsLastModified) {
                    case (true, true):
                        head = .head(status: 200, headers: ["Accept-Ranges": "bytes", "ETag": etag, "Last-Modified": lastModified,
                                                            "Content-Length": announced])
                    case (true, false):
                        head = .head(status: 200, headers: ["Accept-Ranges": "bytes", "ETag": etag, "Content-Length": announced])
                    case (false, true):
                        head = .head(status: 200, headers: ["Accept-Ranges": "bytes", "Last-Modified": lastModified, "Content-Length": announced])
                    case (false, false):
                        head = .head(status: 200, headers: ["Accept-Ranges": "bytes", "Content-Length": announced])
                    }
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
    /// and closes. With `ignoresRanges`, ranges are ignored (always 200). (The same answers as
    /// ``LoopbackServer/resumableRoute(_:length:etag:cutFull:ignoresRanges:)``, byte for byte.)
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
