import Foundation
import LoopbackServer

/// A file that changes under a resumed download, and a server that lies about it: for the
/// library's resume tests and the command's.
enum ResumeFixtures {
    /// The object's bytes in version `version`: the pattern from another offset each time.
    static func content(version: Int, length: Int) -> Data {
        BytePattern.data(offset: version * 7_919, count: length)
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
