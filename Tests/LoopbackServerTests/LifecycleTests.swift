import Foundation
import LoopbackServer
import Testing

@Suite("Connections, counters and lifecycle", .timeLimit(.minutes(3)))
struct LifecycleTests {
    @Test("two requests on one connection: one connection accepted")
    func keepAlive() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            #expect(try client.get("/bytes/10").status == 200)
            #expect(try client.get("/json").status == 200)
            #expect(server.connectionsAccepted == 1)
            #expect(server.requestsReceived == 2)
            let recorded = server.recordedRequests
            #expect(recorded.count == 2)
            #expect(recorded[0].connectionID == recorded[1].connectionID)

            let other = try RawClient(port: server.port)
            #expect(try other.get("/json").status == 200)
            #expect(server.connectionsAccepted == 2)
        }
    }

    @Test("pipelined requests are answered in order")
    func pipelining() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.send("GET /bytes/5 HTTP/1.1\r\nHost: x\r\n\r\nGET /delay/1 HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try client.readResponse().body == BytePattern.data(offset: 0, count: 5))
            #expect(try client.readResponse().text == "delayed 1")
            #expect(try client.readResponse().headers["Content-Type"] == "application/json")
        }
    }

    @Test("Connection: close and HTTP/1.0 close after the response")
    func connectionClose() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let response = try client.get("/json", headers: [("Connection", "close")])
            #expect(response.headers["Connection"] == "close")
            #expect(client.readToEnd().end == .fin)

            let old = try RawClient(port: server.port)
            try old.send("GET /bytes/3 HTTP/1.0\r\n\r\n")
            let oldResponse = try old.readResponse()
            #expect(oldResponse.status == 200)
            #expect(oldResponse.body == BytePattern.data(offset: 0, count: 3))
            #expect(old.readToEnd().end == .fin)

            let kept = try RawClient(port: server.port)
            try kept.send("GET /bytes/3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            #expect(try kept.readResponse().headers["Connection"] == "keep-alive")
            #expect(try kept.get("/json").status == 200)
        }
    }

    @Test("peakRequestsInFlight counts concurrent requests")
    func peakInFlight() throws {
        try withServer { server in
            let count = 6
            let clients = try (0..<count).map { _ in try RawClient(port: server.port) }
            for client in clients { try client.sendRequest("GET", "/delay/300") }
            #expect(server.blockingWait { $0.requestsInFlight == count })
            #expect(server.peakRequestsInFlight == count)
            for client in clients { #expect(try client.readResponse().text == "delayed 300") }
            // A client that has read its whole response sees it counted out already.
            #expect(server.requestsInFlight == 0)
            #expect(server.peakRequestsInFlight == count)
            #expect(server.requestsReceived == count)
            #expect(server.connectionsAccepted == count)

            server.resetCounters()
            #expect(server.peakRequestsInFlight == 0)
            #expect(server.requestsReceived == 0)
            #expect(server.connectionsAccepted == 0)
            #expect(server.recordedRequests.isEmpty)
            #expect(try clients[0].get("/json").status == 200)
            #expect(server.peakRequestsInFlight == 1)
            #expect(server.requestCount(path: "/json") == 1)
        }
    }

    @Test("waitUntil (async) observes counter changes")
    func asyncWait() async throws {
        try await withServerAsync { server in
            let client = try RawClient(port: server.port)
            try client.sendRequest("GET", "/never")
            #expect(await server.waitUntil { $0.requestsInFlight == 1 })
            #expect(await server.waitUntil(timeout: 0.05) { $0.requestsInFlight == 2 } == false)
        }
    }

    /// The fetchkit Ctrl-C test waits for `patternBytesSent` before it signals: a count that
    /// woke no waiter left it waiting for the next unrelated event (the end of a 4 GB body).
    ///
    /// The bytes go out only once the wait has begun (the predicate's first evaluation opens the
    /// gate they wait behind), and the time is taken on the waiting thread itself. An async
    /// test that timed `await waitUntil` measured the cooperative pool too: a full run on two
    /// cores queues a resumed test behind hundreds of others (a 1-line sync test there took 19.8 s
    /// from its start to its end), which read as a missed wake-up of 15–21 s.
    @Test("waitUntil wakes when body bytes are sent, with nothing else happening")
    func waitWakesOnBodyBytes() throws {
        try withServer { server in
            let gate = ServerGate()
            server.route("/part") { _ in
                .script([.write(HTTPResponse.rawHead(status: 200, headers: ["Content-Length": "2000"])),
                         .wait(gate), .writePattern(offset: 0, count: 1000), .stall])
            }
            let client = try RawClient(port: server.port)
            try client.sendRequest("GET", "/part")
            #expect(server.blockingWait { $0.requestsInFlight == 1 })
            let started = DispatchTime.now().uptimeNanoseconds
            // Only the bytes can end this wait before its (long) deadline.
            let woke = server.blockingWait(timeout: 60) { counters in
                gate.open()         // evaluated first before the wait: the bytes follow it
                return counters.patternBytesSent >= 1000
            }
            let waited = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
            #expect(woke)
            #expect(waited < 20, "woke after \(waited) s: at the deadline, not when the bytes were sent")
        }
    }

    /// A bandwidth limit is measured at the server by what crossed the wire: TCP_INFO's
    /// `tcpi_bytes_acked`, read at a fixed offset; a wrong offset or size would read another field.
    @Test("bytesAcknowledged counts what the client's kernel acknowledged, head included, kept after the close")
    func bytesAcknowledged() throws {
        #if os(Linux)
        let server = try LoopbackServer()
        defer { server.stop() }
        #expect(server.bytesAcknowledged == 0)
        let client = try RawClient(port: server.port)
        let response = try client.get("/bytes/300000")
        #expect(response.body.count == 300_000)
        // The last ACK may come a delayed-ACK time after the client read the last byte, and no
        // event says so: poll the kernel's count, with a deadline that only turns a hang into a failure.
        let deadline = Date(timeIntervalSinceNow: 10)
        while (server.bytesAcknowledged ?? 0) < 300_000 + 60, Date() < deadline { usleep(5_000) }
        let acknowledged = try #require(server.bytesAcknowledged)
        #expect(acknowledged >= 300_000 + 60 && acknowledged < 300_000 + 1_024, "the body and a head of some hundred bytes: \(acknowledged)")
        client.shutdownWrite()
        #expect(server.blockingWait { $0.connectionsOpen == 0 })
        #expect(server.bytesAcknowledged == acknowledged, "kept when the connection closed")
        server.resetCounters()
        #expect(server.bytesAcknowledged == 0)
        #endif
    }

    @Test("stop() returns promptly while clients sit in /never, /delay and /trickle")
    func stopIsPrompt() throws {
        let server = try LoopbackServer()
        let never = try RawClient(port: server.port)
        try never.sendRequest("GET", "/never")
        let delayed = try RawClient(port: server.port)
        try delayed.sendRequest("GET", "/delay/60000")
        let trickle = try RawClient(port: server.port)
        try trickle.sendRequest("GET", "/trickle/100/1/60000")
        let idle = try RawClient(port: server.port)
        #expect(try idle.get("/json").status == 200)
        #expect(server.blockingWait { $0.requestsInFlight == 3 && $0.connectionsOpen == 4 })

        let elapsed = measure { server.stop() }
        #expect(elapsed < promptStop, "stop() took \(elapsed) s")
        #expect(server.counters.connectionsOpen == 0)
        #expect(server.isStopped)
        #expect(never.readToEnd().end != nil)
        #expect(delayed.readToEnd().end != nil)
        #expect(idle.readToEnd().end != nil)
        #expect(RawClient.connectionRefused(port: server.port))
        // Idempotent.
        #expect(measure { server.stop() } < promptStop)
    }

    @Test("stop() from inside a route handler does not deadlock")
    func stopFromHandler() throws {
        let server = try LoopbackServer()
        server.route("/shutdown") { [weak server] _ in
            server?.stop()
            return .text("bye")
        }
        let client = try RawClient(port: server.port)
        try client.sendRequest("GET", "/shutdown")
        #expect(client.readToEnd().end != nil)
        #expect(server.blockingWait { $0.requestsReceived == 1 && $0.connectionsOpen == 0 })
        #expect(server.isStopped)
        #expect(RawClient.connectionRefused(port: server.port))
    }

    @Test("releasing the server stops it")
    func deinitStops() throws {
        var server: LoopbackServer? = try LoopbackServer()
        let port = try #require(server?.port)
        let client = try RawClient(port: port)
        try client.sendRequest("GET", "/never")
        #expect(server?.blockingWait { $0.requestsInFlight == 1 } == true)
        server = nil
        #expect(client.readToEnd().end != nil)
        #expect(RawClient.connectionRefused(port: port))
    }

    @Test("malformed requests get a 400 and a close", arguments: [
        "garbage\r\n\r\n",
        "GET /x\r\n\r\n",
        "GET /x HTTP/9.9\r\n\r\n",
        "GET  /x HTTP/1.1\r\n\r\n",
        "GET /x HTTP/1.1\r\nno colon here\r\n\r\n",
        "GET /x HTTP/1.1\r\nBad Name: 1\r\n\r\n",
        "GET /x HTTP/1.1\r\n folded: 1\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "POST /echo HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ])
    func malformed(request: String) throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.send(request)
            let response = try client.readResponse()
            #expect(response.status == 400)
            #expect(response.headers["Connection"] == "close")
            #expect(client.readToEnd().end == .fin)
            // The server carries on.
            #expect(try RawClient(port: server.port).get("/json").status == 200)
        }
    }

    @Test("a request head over 64 KiB gets a 400")
    func oversizedHead() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            var request = "GET /json HTTP/1.1\r\n"
            for i in 0..<700 { request += "X-Filler-\(i): \(String(repeating: "x", count: 100))\r\n" }
            request += "\r\n"
            try? client.send(request) // the server may stop reading early
            let response = try client.readResponse()
            #expect(response.status == 400)
            #expect(try RawClient(port: server.port).get("/json").status == 200)
        }
    }

    @Test("a client that announces a huge body and hangs up costs nothing")
    func announcedBodyNeverSent() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\nonly this")
            #expect(server.blockingWait { $0.requestsInFlight == 1 })
            client.shutdownWrite()
            #expect(server.blockingWait { $0.requestsInFlight == 0 && $0.connectionsOpen == 0 })
            let tooLarge = try RawClient(port: server.port).get(
                "/echo", headers: [("Content-Length", "5000000000")], method: "POST")
            #expect(tooLarge.status == 413)
            #expect(try RawClient(port: server.port).get("/json").status == 200)
        }
    }

    @Test("custom routes take precedence and see the request")
    func customRoutes() throws {
        try withServer { server in
            server.route("/json") { _ in .text("mine") }
            server.route("/inspect") { request in
                .json([
                    "method": request.method,
                    "path": request.path,
                    "q": request.query["q"] ?? "",
                    "header": request.headers["x-thing"] ?? "",
                    "body": String(decoding: request.body, as: UTF8.self),
                ])
            }
            let client = try RawClient(port: server.port)
            #expect(try client.get("/json").text == "mine")
            let inspected = try client.get("/inspect?q=a%20b&r=1", headers: [("X-Thing", "42")], method: "PUT",
                                           body: Data("payload".utf8))
            let object = try #require(jsonObject(inspected.body) as? [String: String])
            #expect(object == ["method": "PUT", "path": "/inspect", "q": "a b", "header": "42", "body": "payload"])

            let recorded = try #require(server.requests(path: "/inspect").first)
            #expect(recorded.method == "PUT")
            #expect(recorded.query == ["q": "a b", "r": "1"])
            #expect(recorded.headers["X-THING"] == "42")
            #expect(recorded.body == Data("payload".utf8))
            #expect(recorded.target == "/inspect?q=a%20b&r=1")
            #expect(server.requestCount(path: "/json") == 1)
            #expect(server.requestCount(path: "/nothing") == 0)

            struct Payload: Encodable { let name: String; let count: Int }
            server.route("/encodable") { _ in .json(Payload(name: "x/y", count: 2), status: 201) }
            let encoded = try client.get("/encodable")
            #expect(encoded.status == 201)
            #expect(encoded.text == #"{"count":2,"name":"x/y"}"#)

            server.route("/big") { _ in .pattern(count: 2_000_000, offset: 7) }
            try client.sendRequest("GET", "/big")
            #expect(try client.readHead().headers["Content-Length"] == "2000000")
            #expect(try client.verifyPatternBody(count: 2_000_000, offset: 7) == nil)

            server.removeRoute("/json")
            #expect(try client.get("/json").headers["Content-Type"] == "application/json")
        }
    }

    @Test("recordRequests: false records nothing but still counts")
    func noRecording() throws {
        try withServer(recordRequests: false) { server in
            let client = try RawClient(port: server.port)
            #expect(try client.get("/bytes/1").status == 200)
            #expect(server.recordedRequests.isEmpty)
            #expect(server.requestCount(path: "/bytes/1") == 0)
            #expect(server.requestsReceived == 1)
        }
    }

    @Test("many short-lived servers")
    func manyServers() throws {
        for _ in 0..<20 {
            let server = try LoopbackServer()
            let client = try RawClient(port: server.port)
            #expect(try client.get("/bytes/100").status == 200)
            server.stop()
        }
    }

    @Test("url(_:) and baseURL")
    func urls() throws {
        try withServer { server in
            #expect(server.baseURL.absoluteString == "http://127.0.0.1:\(server.port)")
            #expect(server.url("/bytes/10?x=1").absoluteString == "http://127.0.0.1:\(server.port)/bytes/10?x=1")
            #expect(server.url("json").path == "/json")
        }
    }
}
