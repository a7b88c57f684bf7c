import FetchKit
import FetchKitTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A reviewer's attempts to break the kit's documented promises, read from its docs only.
/// Raw sockets where the bytes on the wire matter.
@Suite("FetchKitTesting: each documented promise, checked at the socket", .timeLimit(.minutes(2)))
struct TestServerKitPromiseTests {

    // MARK: raw socket helpers

    final class RawClient {
        let fd: Int32
        init(port: UInt16, receiveTimeoutSeconds: Int = 30) throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw POSIXError(.EIO) }
            var tv = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard result == 0 else { Glibc.close(fd); throw POSIXError(.ECONNREFUSED) }
        }
        func send(_ text: String) { send(Data(text.utf8)) }
        func send(_ data: Data) {
            data.withUnsafeBytes { raw in
                var sent = 0
                while sent < raw.count {
                    let n = Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                    if n <= 0 { return }
                    sent += n
                }
            }
        }
        /// One recv; nil on EOF/error/timeout.
        func receiveSome() -> Data? {
            var buffer = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { return nil }
            return Data(buffer[0..<n])
        }
        /// Nonblocking: whether any byte is waiting now.
        func hasBytesNow() -> Bool {
            var byte: UInt8 = 0
            return recv(fd, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK)) > 0
        }
        /// Everything until EOF (or timeout).
        func receiveToEOF() -> Data {
            var all = Data()
            while let chunk = receiveSome() { all.append(chunk) }
            return all
        }
        /// A whole response framed by Content-Length: (head text, body).
        func receiveResponse() -> (head: String, body: Data)? {
            var all = Data()
            let separator = Data("\r\n\r\n".utf8)
            while all.range(of: separator) == nil {
                guard let chunk = receiveSome() else { return nil }
                all.append(chunk)
            }
            let end = all.range(of: separator)!
            let head = String(decoding: all[all.startIndex..<end.lowerBound], as: UTF8.self)
            var body = Data(all[end.upperBound...])
            let length = head.split(separator: "\r\n").compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first ?? 0
            while body.count < length {
                guard let chunk = receiveSome() else { return nil }
                body.append(chunk)
            }
            return (head, body)
        }
        func close() { Glibc.close(fd) }
    }

    static func get(_ target: String, port: UInt16, method: String = "GET", extra: String = "") -> String {
        "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\(extra)\r\n"
    }

    // MARK: TestGate + held(by:)

    @Test func heldRequestCountsInFlightAndSendsNothing() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("GET", "/held") { _ in .text("hi").held(by: gate) }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/held", port: server.port))
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 1 }, "held request counted in flight: \(server.counters)")
        #expect(!client.hasBytesNow(), "a held answer sends no byte while the gate is closed")
        gate.open()
        let response = client.receiveResponse()
        #expect(response?.head.hasPrefix("HTTP/1.1 200") == true)
        #expect(response?.body == Data("hi".utf8))
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 0 }, "\(server.counters)")
    }

    @Test func heldWaitEndsWhenTheClientGoesAway() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate() // never opened
        server.route("GET", "/held") { _ in .text("hi").held(by: gate) }
        let client = try RawClient(port: server.port)
        client.send(Self.get("/held", port: server.port))
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 1 })
        client.close()
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 0 && $0.connectionsOpen == 0 },
                "the held wait ends when the client goes away: \(server.counters)")
    }

    @Test func heldWaitEndsWhenTheServerShutsDown() async throws {
        let server = try TestServer()
        let gate = TestGate() // never opened
        server.route("GET", "/held") { _ in .text("hi").held(by: gate) }
        let client = try RawClient(port: server.port, receiveTimeoutSeconds: 20)
        defer { client.close() }
        client.send(Self.get("/held", port: server.port))
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 1 })
        let start = Date()
        _ = server.shutDown()
        let rest = client.receiveToEOF()
        #expect(rest.isEmpty, "no answer once the server shut down")
        #expect(Date().timeIntervalSince(start) < 15, "the connection closed on shutDown rather than at the recv timeout")
        #expect(!gate.isOpen)
    }

    @Test func anOpenGateHoldsNothing() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        gate.open()
        #expect(gate.isOpen)
        #expect(gate.wait(timeout: 0.001))
        server.route("GET", "/held") { _ in .text("open").held(by: gate) }
        server.route("GET", "/stepwait") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "2"]), .wait(for: gate), .write("ok")])
        }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/held", port: server.port))
        let response = client.receiveResponse()
        #expect(response?.body == Data("open".utf8), "an open gate holds nothing")
        client.send(Self.get("/stepwait", port: server.port))
        let second = client.receiveResponse()
        #expect(second?.body == Data("ok".utf8), "an open gate holds nothing in .wait(for:)")
    }

    // MARK: steps / Step.head

    static func headLines(_ head: String) -> [String] { head.components(separatedBy: "\r\n") }

    @Test func stepsHeadWritesExactlyOrderAndDuplicatesKeptOnlyDateAdded() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/exact") { _ in
            .steps([.head(status: 200, headers: ["X-B": "1", "Content-Length": "4", "X-A": "2", "X-B": "3", "content-length": "5"]),
                    .write("abcd"), .close])
        }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/exact", port: server.port))
        let wire = client.receiveToEOF()
        let text = String(decoding: wire, as: UTF8.self)
        let parts = text.components(separatedBy: "\r\n\r\n")
        #expect(parts.count == 2 && parts.last == "abcd", "body exactly abcd after one blank line: \(text.debugDescription)")
        let lines = Self.headLines(parts[0])
        let dates = lines.filter { $0.lowercased().hasPrefix("date:") }
        #expect(dates.count == 1, "exactly one Date added: \(text.debugDescription)")
        let others = lines.filter { !$0.lowercased().hasPrefix("date:") }
        #expect(others == ["HTTP/1.1 200 OK", "X-B: 1", "Content-Length: 4", "X-A: 2", "X-B: 3", "content-length: 5"],
                "fields in order, repeats kept, nothing else added: \(text.debugDescription)")
    }

    @Test func stepsHeadWithOwnDateAndReasonAddsNothing() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/own") { _ in
            .steps([.head(status: 304, headers: ["date": "Wed, 21 Oct 2026 07:28:00 GMT", "ETag": "\"v\""], reason: "Same Old"),
                    .write("body-after-304"), .close])
        }
        server.route("GET", "/fields") { _ in
            .steps([.head(status: 201, headerFields: [(name: "Set-Cookie", value: "a=1"), (name: "X", value: ""), (name: "Set-Cookie", value: "b=2")]),
                    .close])
        }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/own", port: server.port))
        let wire = String(decoding: client.receiveToEOF(), as: UTF8.self)
        #expect(wire == "HTTP/1.1 304 Same Old\r\ndate: Wed, 21 Oct 2026 07:28:00 GMT\r\nETag: \"v\"\r\n\r\nbody-after-304",
                "bytes written exactly, no Date added when one is given: \(wire.debugDescription)")

        let second = try RawClient(port: server.port)
        defer { second.close() }
        second.send(Self.get("/fields", port: server.port))
        let text = String(decoding: second.receiveToEOF(), as: UTF8.self)
        #expect(text.hasSuffix("\r\n\r\n"), "\(text.debugDescription)")
        let lines = Self.headLines(String(text.dropLast(4))).filter { !$0.lowercased().hasPrefix("date:") }
        #expect(lines == ["HTTP/1.1 201 Created", "Set-Cookie: a=1", "X: ", "Set-Cookie: b=2"],
                "headerFields in order, duplicates kept: \(text.debugDescription)")
    }

    @Test func stepsKeepConnectionAfterLastStepWithoutEnding() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/a") { _ in .steps([.head(status: 200, headers: ["Content-Length": "1"]), .write("a")]) }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/a", port: server.port))
        #expect(client.receiveResponse()?.body == Data("a".utf8))
        client.send(Self.get("/a", port: server.port))
        #expect(client.receiveResponse()?.body == Data("a".utf8), "kept for the next request")
        #expect(Set(server.requests.map(\.connectionID)).count == 1)
    }

    // MARK: pattern / patternBytes

    @Test(arguments: [(0, 10), (1, 300), (255, 2), (256, 513), (1000, 70000), (65535, 3), (123457, 4096)])
    func patternAgreesWithPatternBytes(offset: Int, count: Int) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/p") { _ in .pattern(offset: offset, count: count) }
        server.route("GET", "/s") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "\(count)"]), .patternBytes(offset: offset, count: count)])
        }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/p", port: server.port))
        let body = client.receiveResponse()?.body
        let expected = TestResponse.patternBytes(offset: offset, count: count)
        #expect(expected.count == count)
        #expect(body == expected, "pattern(offset: \(offset), count: \(count)) == patternBytes(offset:count:)")
        client.send(Self.get("/s", port: server.port))
        let stepBody = client.receiveResponse()?.body
        #expect(stepBody == expected, "Step.patternBytes(offset: \(offset), count: \(count)) == patternBytes(offset:count:)")
        // offset consistency: a slice of a longer pattern from 0
        let whole = TestResponse.patternBytes(count: offset + count)
        #expect(Data(whole.suffix(count)) == expected, "patternBytes(offset:count:) is the suffix of patternBytes(count: offset+count)")
    }

    // MARK: adding(header:)

    @Test func addingKeepsEarlierFields() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/c") { _ in
            TestResponse.json("{}")
                .with(header: "Set-Cookie", "a=1")
                .adding(header: "Set-Cookie", "b=2")
                .adding(header: "set-cookie", "c=3")
                .adding(header: "WWW-Authenticate", "Basic")
        }
        server.route("GET", "/d") { _ in
            TestResponse(status: 200, headerFields: [(name: "Set-Cookie", value: "x=1"), (name: "Set-Cookie", value: "y=2")], body: Data("z".utf8))
                .adding(header: "Set-Cookie", "w=3")
        }
        server.route("GET", "/e") { _ in
            TestResponse(status: 200, headers: ["X-One": "1"]).adding(header: "X-One", "2")
        }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        for (path, name, expected) in [("/c", "set-cookie", ["a=1", "b=2", "c=3"]),
                                       ("/d", "set-cookie", ["x=1", "y=2", "w=3"]),
                                       ("/e", "x-one", ["1", "2"])] {
            client.send(Self.get(path, port: server.port))
            let head = client.receiveResponse()?.head ?? ""
            let values = Self.headLines(head).compactMap { line -> String? in
                let p = line.split(separator: ":", maxSplits: 1)
                guard p.count == 2, p[0].lowercased() == name else { return nil }
                return p[1].trimmingCharacters(in: .whitespaces)
            }
            #expect(values == expected, "adding(header:) keeps earlier fields, in order, for \(path): \(head.debugDescription)")
        }
        // doc: does nothing to a hand-written answer
        server.route("GET", "/h") { _ in
            TestResponse.steps([.head(status: 200, headers: ["Content-Length": "0"])]).adding(header: "X-Added", "1")
        }
        client.send(Self.get("/h", port: server.port))
        let head = client.receiveResponse()?.head ?? ""
        #expect(!head.lowercased().contains("x-added"), "adding does nothing to steps: \(head.debugDescription)")
    }

    // MARK: counters / waitUntil

    @Test func connectionsOpenDropsWhenAClientCloses() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/x") { _ in .text("x") }
        let idle = try RawClient(port: server.port)
        #expect(await server.waitUntil(timeout: 30) { $0.connectionsOpen == 1 && $0.connectionsAccepted == 1 }, "\(server.counters)")
        idle.close()
        #expect(await server.waitUntil(timeout: 30) { $0.connectionsOpen == 0 }, "idle client closed, no request: \(server.counters)")

        let used = try RawClient(port: server.port)
        used.send(Self.get("/x", port: server.port))
        #expect(used.receiveResponse()?.body == Data("x".utf8))
        #expect(server.counters.connectionsOpen == 1, "kept alive after the answer: \(server.counters)")
        used.close()
        #expect(await server.waitUntil(timeout: 30) { $0.connectionsOpen == 0 && $0.connectionsAccepted == 2 },
                "kept-alive client closed: \(server.counters)")
    }

    @Test func peakRequestsInFlight() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("GET", "/held") { _ in .text("h").held(by: gate) }
        let clients = try (0..<3).map { _ in try RawClient(port: server.port) }
        defer { clients.forEach { $0.close() } }
        for client in clients { client.send(Self.get("/held", port: server.port)) }
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 3 }, "\(server.counters)")
        #expect(server.counters.peakRequestsInFlight == 3)
        gate.open()
        for client in clients { #expect(client.receiveResponse()?.body == Data("h".utf8)) }
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 0 }, "\(server.counters)")
        #expect(server.counters.peakRequestsInFlight == 3, "peak kept after the requests end: \(server.counters)")
        server.resetCounters()
        #expect(server.counters.peakRequestsInFlight == 0, "reset sets the peak to the current in-flight count: \(server.counters)")
        #expect(server.counters.connectionsOpen == 3, "reset keeps counting open connections: \(server.counters)")
    }

    @Test func peakAfterResetWhileHeldIsTheCurrentCount() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("GET", "/held") { _ in .text("h").held(by: gate) }
        let clients = try (0..<2).map { _ in try RawClient(port: server.port) }
        defer { clients.forEach { $0.close() } }
        for client in clients { client.send(Self.get("/held", port: server.port)) }
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 2 })
        server.resetCounters()
        let after = server.counters
        #expect(after.requestsInFlight == 2 && after.peakRequestsInFlight == 2, "reset sets peak to current in flight: \(after)")
        gate.open()
        for client in clients { _ = client.receiveResponse() }
    }

    // MARK: requests(_:) / requests(_:_:) match as routes do

    @Test func requestsFilterMatchesAsRoutesDo() async throws {
        let patterns = ["/users/:id", "/files/*", "/a/:x/c", "/Users/:id", "/users/:id/"]
        let paths = ["/users/7", "/users/7?q=1", "/users/7/", "/users//7", "/users", "/users/7/posts", "/Users/7",
                     "/users/a%2Fb", "/files", "/files/", "/files/a", "/files/a/b/c", "/filesx/a", "/a/b/c", "/a//c", "/a/b/c/"]
        for pattern in patterns {
            let server = try TestServer()
            server.route("/*") { _ in .status(404) }   // fallback: everything matched, so verify stays clean
            server.route("GET", pattern) { _ in .status(200) }
            let client = try RawClient(port: server.port)
            var routed: [String] = []
            for path in paths {
                client.send(Self.get(path, port: server.port))
                let head = client.receiveResponse()?.head ?? ""
                if head.hasPrefix("HTTP/1.1 200") { routed.append(path) }
            }
            // HEAD and POST too: requests(_:) is whatever the method
            client.send(Self.get(paths[0], port: server.port, method: "POST", extra: "Content-Length: 0\r\n"))
            _ = client.receiveResponse()
            client.close()
            let filtered = server.requests(pattern).filter { $0.method == "GET" }.map(\.target)
            #expect(filtered == routed, "requests(\"\(pattern)\") matches the requests its GET route answered")
            let byMethod = server.requests("GET", pattern).map(\.target)
            #expect(byMethod == routed, "requests(\"GET\", \"\(pattern)\") matches the requests its GET route answered")
            let anyMethod = server.requests(pattern)
            #expect(anyMethod.contains { $0.method == "POST" } == routed.contains(paths[0]),
                    "requests(_:) is whatever the method (\(pattern))")
            _ = server.shutDown()
        }
    }

    @Test func requestsMethodCaseAsRoutes() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("get", "/m") { _ in .status(200) }
        server.route("/*") { _ in .status(404) }
        // route added last wins: reorder so the /m route is last
        server.route("get", "/m") { _ in .status(200) }
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get("/m", port: server.port))
        let head = client.receiveResponse()?.head ?? ""
        let routeMatched = head.hasPrefix("HTTP/1.1 200")
        #expect((server.requests("get", "/m").count == 1) == routeMatched,
                "requests(\"get\", _) agrees with route(\"get\", _) on method case (route matched: \(routeMatched))")
    }

    // MARK: TestRequest.target

    @Test func targetIsTheRawTarget() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/*") { _ in .status(200) }
        let targets = ["/search?q=a%20b&q=c", "/a%2Fb?x=%3F&y", "/plain", "/empty?", "/q?a=1&&b=%zz", "/p;param?x=1#frag",
                       "/%E2%82%AC/x+y?z=+"]
        let client = try RawClient(port: server.port)
        defer { client.close() }
        for target in targets {
            client.send(Self.get(target, port: server.port))
            _ = client.receiveResponse()
        }
        let got = server.requests.map(\.target)
        #expect(got == targets, "target is the raw target as sent")
        let first = server.requests.first
        #expect(first?.path == "/search")
        #expect(first?.query["q"] == "a b")
        #expect(server.requests.dropFirst().first?.path == "/a%2Fb", "path not percent-decoded")
        #expect(server.requests.last?.path == "/%E2%82%AC/x+y")
    }

    @Test func targetKeepsAbsoluteForm() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/*") { _ in .status(200) }
        let target = "http://127.0.0.1:\(server.port)/abs?x=%20"
        let client = try RawClient(port: server.port)
        defer { client.close() }
        client.send(Self.get(target, port: server.port))
        let head = client.receiveResponse()?.head ?? "<none>"
        #expect(server.requests.first?.target == target, "absolute-form target kept as sent; answer: \(head.prefix(40))")
    }
}
