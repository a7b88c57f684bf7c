import Foundation
import LoopbackServer
import Testing

@Suite("Streaming and fault endpoints", .timeLimit(.minutes(3)))
struct FaultTests {
    @Test("/trickle/{n}/{chunk}/{ms} sends a chunked pattern body in chunks")
    func trickle() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let response = try client.get("/trickle/10/3/5")
            #expect(response.status == 200)
            #expect(response.headers["Transfer-Encoding"] == "chunked")
            #expect(response.headers["Content-Length"] == nil)
            #expect(response.chunkSizes == [3, 3, 3, 1])
            #expect(response.body == BytePattern.data(offset: 0, count: 10))
            // The connection is still usable afterwards.
            #expect(try client.get("/json").status == 200)
            #expect(server.connectionsAccepted == 1)

            let empty = try client.get("/trickle/0/5/0")
            #expect(empty.chunkSizes == [])
        }
    }

    @Test("A chunked pattern body of count .max never ends, and stops when the client goes away")
    func endlessChunkedPattern() throws {
        try withServer { server in
            server.route("/endless") { _ in
                HTTPResponse(status: 200, body: .chunkedPattern(count: .max, chunkSize: 1000, intervalMilliseconds: 0))
            }
            var client: RawClient? = try RawClient(port: server.port)
            try client?.sendRequest("GET", "/endless")
            let head = try #require(try client?.readHead())
            #expect(head.headers["Transfer-Encoding"] == "chunked")
            var offset = 0
            for _ in 0..<300 {   // 300 kB, far more than the socket buffers hold
                #expect(try client?.readLine() == "3e8")
                let chunk = try #require(try client?.readExactly(1000))
                #expect(BytePattern.matches(chunk, offset: offset))
                #expect(try client?.readLine() == "")
                offset += 1000
            }
            #expect(server.requestsInFlight == 1)
            client = nil   // closes the socket
            #expect(server.blockingWait(timeout: 30) { $0.requestsInFlight == 0 }, "the server stops sending")
        }
    }

    @Test("/close-mid-body/{n} sends half the body, then a FIN")
    func closeMidBody() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.sendRequest("GET", "/close-mid-body/100")
            let head = try client.readHead()
            #expect(head.status == 200)
            #expect(head.headers["Content-Length"] == "100")
            let rest = client.readToEnd()
            #expect(rest.end == .fin)
            #expect(rest.data == BytePattern.data(offset: 0, count: 50))
        }
    }

    @Test("/reset-mid-body/{n} ends with a TCP reset")
    func resetMidBody() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.sendRequest("GET", "/reset-mid-body/100")
            let head = try client.readHead()
            #expect(head.headers["Content-Length"] == "100")
            let rest = client.readToEnd()
            #expect(rest.end == .reset)
            #expect(rest.data.count <= 50)
            #expect(BytePattern.matches(rest.data, offset: 0))
        }
    }

    @Test("/lie/{claimed}/{actual} claims more than it sends, then closes")
    func lie() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.sendRequest("GET", "/lie/100/10")
            let head = try client.readHead()
            #expect(head.headers["Content-Length"] == "100")
            let rest = client.readToEnd()
            #expect(rest.end == .fin)
            #expect(rest.data == BytePattern.data(offset: 0, count: 10))
        }
    }

    @Test("/garbage-status and /garbage")
    func garbage() throws {
        try withServer { server in
            let statusClient = try RawClient(port: server.port)
            try statusClient.sendRequest("GET", "/garbage-status")
            let status = statusClient.readToEnd()
            #expect(status.end == .fin)
            #expect(String(decoding: status.data, as: UTF8.self) == "HTTP/1.1 abc not-a-status\r\n\r\n")

            let garbageClient = try RawClient(port: server.port)
            try garbageClient.sendRequest("GET", "/garbage")
            let garbage = garbageClient.readToEnd()
            #expect(garbage.end == .fin)
            #expect(garbage.data.count == 64)
            #expect(!garbage.data.starts(with: Data("HTTP".utf8)))
        }
    }

    @Test("/stall-mid-body/{n} sends half the body and holds; stop() ends it promptly")
    func stallMidBody() throws {
        let server = try LoopbackServer()
        let client = try RawClient(port: server.port)
        try client.sendRequest("GET", "/stall-mid-body/1000")
        let head = try client.readHead()
        #expect(head.headers["Content-Length"] == "1000")
        #expect(try client.readExactly(500) == BytePattern.data(offset: 0, count: 500))
        #expect(server.requestsInFlight == 1)
        let elapsed = measure { server.stop() }
        #expect(elapsed < promptStop, "stop() took \(elapsed) s")
        let rest = client.readToEnd()
        #expect(rest.end != nil)
        #expect(rest.data.isEmpty)
        #expect(server.counters.connectionsOpen == 0)
    }

    @Test("a stalled endpoint ends when the client goes away")
    func stallEndsWithClient() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            try client.sendRequest("GET", "/never")
            #expect(server.blockingWait { $0.requestsInFlight == 1 })
            client.shutdownWrite()
            #expect(server.blockingWait { $0.requestsInFlight == 0 && $0.connectionsOpen == 0 })
        }
    }

    @Test("a delayed response is abandoned when the client goes away")
    func delayEndsWithClient() throws {
        try withServer { server in
            var client: RawClient? = try RawClient(port: server.port)
            try client?.sendRequest("GET", "/delay/60000")
            #expect(server.blockingWait { $0.requestsInFlight == 1 })
            client = nil // closes the socket
            #expect(server.blockingWait { $0.requestsInFlight == 0 && $0.connectionsOpen == 0 })
        }
    }

    @Test("a scripted response that ends with writes leaves the connection open")
    func scriptKeepsConnection() throws {
        try withServer { server in
            server.route("/scripted") { _ in
                .script([
                    .write(HTTPResponse.rawHead(status: 200, headers: ["Content-Length": "6"])),
                    .writePattern(offset: 3, count: 3),
                    .sleep(milliseconds: 1),
                    .write(Data("abc".utf8)),
                ])
            }
            let client = try RawClient(port: server.port)
            let response = try client.get("/scripted")
            #expect(response.status == 200)
            #expect(response.body == BytePattern.data(offset: 3, count: 3) + Data("abc".utf8))
            #expect(try client.get("/json").status == 200)
            #expect(server.connectionsAccepted == 1)
        }
    }

    @Test("a 64 MiB pattern body streams intact")
    func largeBody() throws {
        try withServer(recordRequests: false) { server in
            let client = try RawClient(port: server.port)
            let size = 64 << 20
            try client.sendRequest("GET", "/bytes/\(size)")
            let head = try client.readHead()
            #expect(head.headers["Content-Length"] == String(size))
            #expect(try client.verifyPatternBody(count: size) == nil)
            #expect(try client.get("/bytes/10").body == BytePattern.data(offset: 0, count: 10))
        }
    }
}
