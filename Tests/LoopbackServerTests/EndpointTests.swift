import Foundation
import LoopbackServer
import Testing

@Suite("Built-in endpoints", .timeLimit(.minutes(3)))
struct EndpointTests {
    @Test("/bytes/{n}: status, headers and pattern body")
    func bytes() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let response = try client.get("/bytes/1000")
            #expect(response.status == 200)
            #expect(response.headers["Content-Length"] == "1000")
            #expect(response.headers["Content-Type"] == "application/octet-stream")
            #expect(response.headers["ETag"] == "\"bytes-1000\"")
            #expect(response.headers["Last-Modified"] == LoopbackServer.fixedLastModified)
            #expect(response.headers["Accept-Ranges"] == "bytes")
            #expect(response.headers["Date"]?.hasSuffix(" GMT") == true)
            #expect(response.body == BytePattern.data(offset: 0, count: 1000))

            let empty = try client.get("/bytes/0")
            #expect(empty.status == 200)
            #expect(empty.headers["Content-Length"] == "0")
            #expect(empty.body.isEmpty)

            let bad = try client.get("/bytes/abc")
            #expect(bad.status == 400)
        }
    }

    @Test("HEAD /bytes/{n} has the length but no body, and the connection stays usable")
    func headRequest() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let head = try client.get("/bytes/5000", method: "HEAD")
            #expect(head.status == 200)
            #expect(head.headers["Content-Length"] == "5000")
            let next = try client.get("/json")
            #expect(next.status == 200)
            #expect(server.connectionsAccepted == 1)
        }
    }

    @Test("/bytes/{n}?delay=ms waits before the head")
    func bytesDelay() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            var response: RawResponse?
            let elapsed = try measure { response = try client.get("/bytes/10?delay=120") }
            #expect(response?.body == BytePattern.data(offset: 0, count: 10))
            #expect(elapsed >= 0.1)
        }
    }

    @Test("/json")
    func json() throws {
        try withServer { server in
            let response = try RawClient(port: server.port).get("/json")
            #expect(response.status == 200)
            #expect(response.headers["Content-Type"] == "application/json")
            #expect(response.text == #"{"ok":true,"items":[1,2,3],"name":"fetchkit"}"#)
        }
    }

    @Test("/status/{code} with Retry-After and Location")
    func status() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let unavailable = try client.get("/status/503?retry-after=7")
            #expect(unavailable.status == 503)
            #expect(unavailable.text == "status 503")
            #expect(unavailable.headers["Retry-After"] == "7")

            let moved = try client.get("/status/301?location=%2Felsewhere")
            #expect(moved.status == 301)
            #expect(moved.headers["Location"] == "/elsewhere")

            let noContent = try client.get("/status/204")
            #expect(noContent.status == 204)
            #expect(noContent.headers["Content-Length"] == nil)
            // Nothing followed the head: the next response parses.
            #expect(try client.get("/status/418").status == 418)
            #expect(try client.get("/status/abc").status == 400)
        }
    }

    @Test("/delay/{ms}")
    func delay() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            var response: RawResponse?
            let elapsed = try measure { response = try client.get("/delay/150") }
            #expect(response?.status == 200)
            #expect(response?.text == "delayed 150")
            #expect(elapsed >= 0.14)
        }
    }

    @Test("/redirect/{n}, /redirect-loop and /redirect-to")
    func redirects() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let first = try client.get("/redirect/3")
            #expect(first.status == 302)
            #expect(first.headers["Location"] == "/redirect/2")
            let last = try client.get("/redirect/0")
            #expect(last.status == 200)
            #expect(last.text == "redirected")
            let loop = try client.get("/redirect-loop")
            #expect(loop.status == 302)
            #expect(loop.headers["Location"] == "/redirect-loop")
            let to = try client.get("/redirect-to?url=http%3A%2F%2F127.0.0.1%3A1%2Fx%3Fa%3Db&status=307")
            #expect(to.status == 307)
            #expect(to.headers["Location"] == "http://127.0.0.1:1/x?a=b")
            let defaultStatus = try client.get("/redirect-to?url=/json")
            #expect(defaultStatus.status == 302)
            #expect(defaultStatus.headers["Location"] == "/json")
        }
    }

    @Test("/headers echoes request headers, lowercased, duplicates joined")
    func headers() throws {
        try withServer { server in
            let response = try RawClient(port: server.port).get(
                "/headers", headers: [("X-Custom", "Value 1"), ("X-Multi", "a"), ("x-multi", "b")])
            #expect(response.status == 200)
            #expect(response.headers["Content-Type"] == "application/json")
            let object = try #require(jsonObject(response.body) as? [String: String])
            #expect(object["x-custom"] == "Value 1")
            #expect(object["x-multi"] == "a, b")
            #expect(object["host"] == "127.0.0.1")
        }
    }

    @Test("/echo returns the body and its Content-Type, for any method")
    func echo() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let body = Data("hello, echo".utf8)
            let post = try client.get("/echo", headers: [("Content-Type", "text/x-test")], method: "POST", body: body)
            #expect(post.status == 200)
            #expect(post.body == body)
            #expect(post.headers["Content-Type"] == "text/x-test")
            let put = try client.get("/echo", method: "PUT", body: BytePattern.data(offset: 0, count: 300_000))
            #expect(put.body == BytePattern.data(offset: 0, count: 300_000))
            let get = try client.get("/echo")
            #expect(get.status == 200)
            #expect(get.body.isEmpty)
        }
    }

    @Test("/echo with a chunked request body")
    func echoChunked() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                + "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n")
            let response = try client.readResponse()
            #expect(response.status == 200)
            #expect(response.text == "hello, world")
            #expect(server.requests(path: "/echo").first?.body == Data("hello, world".utf8))
        }
    }

    @Test("Expect: 100-continue gets an interim response before the body is sent")
    func expectContinue() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
            let interim = try client.readHead()
            #expect(interim.status == 100)
            try client.send("ping")
            let response = try client.readResponse()
            #expect(response.status == 200)
            #expect(response.text == "ping")
        }
    }

    @Test("/basic-auth/{user}/{pass}")
    func basicAuth() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let good = Data("alice:s3cret".utf8).base64EncodedString()
            let ok = try client.get("/basic-auth/alice/s3cret", headers: [("Authorization", "Basic \(good)")])
            #expect(ok.status == 200)
            #expect(ok.text == #"{"authenticated":true,"user":"alice"}"#)

            let bad = Data("alice:wrong".utf8).base64EncodedString()
            let denied = try client.get("/basic-auth/alice/s3cret", headers: [("Authorization", "Basic \(bad)")])
            #expect(denied.status == 401)
            #expect(denied.headers["WWW-Authenticate"] == #"Basic realm="fetchkit""#)
            #expect(!denied.body.isEmpty)
            let missing = try client.get("/basic-auth/alice/s3cret")
            #expect(missing.status == 401)
        }
    }

    @Test("/login and /user")
    func loginAndUser() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let json = [("Content-Type", "application/json")]
            let login = try client.get("/login", headers: json, method: "POST",
                                       body: Data(#"{"user":"alice","password":"secret"}"#.utf8))
            #expect(login.status == 200)
            #expect(login.headers["Content-Type"] == "application/json")
            #expect(login.text == #"{"token":"token-alice"}"#)

            let wrong = try client.get("/login", headers: json, method: "POST",
                                       body: Data(#"{"user":"alice","password":"nope"}"#.utf8))
            #expect(wrong.status == 403)
            #expect(wrong.text == #"{"error":"bad credentials"}"#)

            let garbled = try client.get("/login", headers: json, method: "POST", body: Data("{not json".utf8))
            #expect(garbled.status == 400)

            let user = try client.get("/user", headers: [("Authorization", "Bearer token-alice")])
            #expect(user.status == 200)
            #expect(user.text == #"{"name":"alice","id":42}"#)

            let anonymous = try client.get("/user")
            #expect(anonymous.status == 401)
            #expect(anonymous.text == #"{"error":"unauthorized"}"#)
            #expect(anonymous.headers["WWW-Authenticate"] == nil)
            let badToken = try client.get("/user", headers: [("Authorization", "Bearer nonsense")])
            #expect(badToken.status == 401)
        }
    }

    @Test("/etag/{tag}: 200 with validators, 304 on If-None-Match or If-Modified-Since")
    func etag() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let fresh = try client.get("/etag/v1")
            #expect(fresh.status == 200)
            #expect(fresh.headers["ETag"] == "\"v1\"")
            #expect(fresh.headers["Last-Modified"] == "Wed, 21 Oct 2026 07:28:00 GMT")
            #expect(fresh.text == "tag v1")

            let matched = try client.get("/etag/v1", headers: [("If-None-Match", "\"v0\", \"v1\"")])
            #expect(matched.status == 304)
            #expect(matched.body.isEmpty)
            #expect(matched.headers["ETag"] == "\"v1\"")

            let stale = try client.get("/etag/v1", headers: [("If-None-Match", "\"v0\"")])
            #expect(stale.status == 200)

            let since = try client.get("/etag/v1", headers: [("If-Modified-Since", "Wed, 21 Oct 2026 07:28:00 GMT")])
            #expect(since.status == 304)
            let otherDate = try client.get("/etag/v1", headers: [("If-Modified-Since", "Tue, 20 Oct 2026 07:28:00 GMT")])
            #expect(otherDate.status == 200)
        }
    }

    @Test("/flaky/{key}/{failures}/{code} fails, then succeeds, per key")
    func flaky() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let first = try client.get("/flaky/k1/2/503?retry-after=1")
            #expect(first.status == 503)
            #expect(first.headers["Retry-After"] == "1")
            let second = try client.get("/flaky/k1/2/503?retry-after=1")
            #expect(second.status == 503)
            let third = try client.get("/flaky/k1/2/503?retry-after=1")
            #expect(third.status == 200)
            #expect(third.text == "ok after 2")
            #expect(third.headers["Retry-After"] == nil)
            #expect(try client.get("/flaky/k1/2/503").status == 200)
            // Another key has its own counter.
            #expect(try client.get("/flaky/k2/1/500").status == 500)
            #expect(try client.get("/flaky/k2/1/500").status == 200)
            #expect(try client.get("/flaky/k3/0/500").status == 200)
        }
    }

    @Test("/retry-after/{value} passes the decoded value through")
    func retryAfter() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let seconds = try client.get("/retry-after/3")
            #expect(seconds.status == 429)
            #expect(seconds.headers["Retry-After"] == "3")
            let date = try client.get("/retry-after/Wed,%2021%20Oct%202026%2007:28:00%20GMT")
            #expect(date.status == 429)
            #expect(date.headers["Retry-After"] == "Wed, 21 Oct 2026 07:28:00 GMT")
        }
    }

    @Test("unknown paths are 404")
    func notFound() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            #expect(try client.get("/nope").status == 404)
            #expect(try client.get("/bytes/1/2").status == 404)
            #expect(try client.get("/").status == 404)
        }
    }
}
