import FetchKit
import FetchKitTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// FetchKitTesting's controls for a test that steers the server: gates that hold an answer,
/// waits on the server's counters, hand-written answers, pattern bodies, and the log's filter.
@Suite("FetchKitTesting: gates, counters and hand-written answers", .timeLimit(.minutes(2)))
struct TestServerKitControlTests {
    /// A held answer keeps its request in flight until the gate opens; then it arrives whole.
    @Test func aHeldAnswerWaitsInFlightUntilTheGateOpens() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("GET", "/held") { _ in .json(#"{"ok": true}"#).held(by: gate) }
        let operation = DataFetchOperation(url: server.url("/held"))
        let queue = FetchQueue()
        queue.enqueue(operation)
        #expect(await server.waitUntil { $0.requestsInFlight == 1 }, "\(server.counters)")
        #expect(!operation.isFinished, "no byte of the answer went out while the gate was closed")
        #expect(!gate.isOpen)
        gate.open()
        #expect(gate.isOpen)
        let body = try await queue.fetch(DataFetchOperation(url: server.url("/held")))
        #expect(body == Data(#"{"ok": true}"#.utf8), "an open gate holds nothing")
        #expect(await server.waitUntil { $0.requestsInFlight == 0 })
        #expect(operation.responseBody == Data(#"{"ok": true}"#.utf8))
        #expect(server.counters.peakRequestsInFlight == 1 && server.counters.requestsReceived == 2)
    }

    /// A client that gives up on a held answer ends the server's wait (the connection closes),
    /// though the gate never opens.
    @Test func aClientGoingAwayEndsTheWaitAtAGateNeverOpened() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/never") { _ in .text("late").held(by: TestGate()) }
        let operation = DataFetchOperation(url: server.url("/never"))
        let queue = FetchQueue()
        queue.enqueue(operation)
        #expect(await server.waitUntil { $0.requestsInFlight == 1 })
        operation.cancel()
        #expect(await server.waitUntil { $0.requestsInFlight == 0 && $0.connectionsOpen == 0 }, "\(server.counters)")
    }

    /// Steps are written byte for byte: two contradictory lengths reach the client as written,
    /// which FetchKit refuses; a gate between two writes holds the rest of a body.
    @Test func stepsAreWrittenAsTheySayAndAGateHoldsTheRest() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/two-lengths") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "4", "Content-Length": "5"]), .write("abcd"), .close])
        }
        let gate = TestGate()
        server.route("GET", "/halves") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "8"]), .patternBytes(count: 4), .wait(for: gate),
                    .patternBytes(offset: 4, count: 4)])
        }
        let lengths = DataFetchOperation(url: server.url("/two-lengths"))
        lengths.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(lengths) }
        guard case .invalidResponse? = lengths.error else {
            Issue.record("expected invalidResponse for two lengths, got \(String(describing: lengths.error))")
            return
        }

        let halves = DataFetchOperation(url: server.url("/halves"))
        let queue = FetchQueue()
        queue.enqueue(halves)
        #expect(await server.waitUntil { $0.patternBytesSent == 4 && $0.requestsInFlight == 1 }, "\(server.counters)")
        #expect(!halves.isFinished)
        gate.open()
        #expect(await server.waitUntil { $0.requestsInFlight == 0 })
        let body = try await queue.fetch(DataFetchOperation(url: server.url("/halves")))
        #expect(body == TestResponse.patternBytes(count: 8))
        #expect(server.counters.patternBytesSent == 16)
    }

    /// A pattern body is the documented bytes, with its length; `with(header:)` adds a field.
    @Test func aPatternBodyIsThePatternBytesWithTheirLength() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/big") { _ in .pattern(count: 300_000).with(header: "ETag", #""p1""#) }
        let operation = DataFetchOperation(url: server.url("/big"))
        let body = try await FetchQueue().fetch(operation)
        #expect(body == TestResponse.patternBytes(count: 300_000))
        #expect(operation.response?.value(forHTTPHeaderField: "Content-Length") == "300000")
        #expect(operation.response?.value(forHTTPHeaderField: "ETag") == #""p1""#)
        #expect(server.counters.patternBytesSent == 300_000)
        #expect(server.counters.connectionsAccepted == 1)
        server.resetCounters()
        #expect(server.counters.patternBytesSent == 0 && server.counters.connectionsAccepted == 0)
        #expect(server.requests.count == 1, "a reset keeps the log")
    }

    /// The log's filter matches as routes do: method (or any) and a pattern with parameters.
    @Test func theLogFiltersByMethodAndPattern() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/users/:id") { _ in .status(204) }
        let queue = FetchQueue()
        for path in ["/users/1", "/users/2"] { _ = try await queue.fetch(DataFetchOperation(url: server.url(path))) }
        var post = URLRequest(url: server.url("/users/3"))
        post.httpMethod = "POST"
        _ = try await queue.fetch(DataFetchOperation(request: post))
        #expect(server.requests("/users/:id").map(\.path) == ["/users/1", "/users/2", "/users/3"])
        #expect(server.requests("GET", "/users/:id").count == 2)
        #expect(server.requests("POST", "/users/:id").map(\.path) == ["/users/3"])
        #expect(server.requests("/users/1").count == 1 && server.requests("/posts/:id").isEmpty)
    }

    /// Repeated fields go out as given: two `Set-Cookie` fields both reach the client; the
    /// request's raw target and every value of a repeated field are in the log.
    @Test func repeatedFieldsGoOutAndComeInAsTheyAre() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/cookies") { _ in
            TestResponse(status: 200, headerFields: [(name: "Set-Cookie", value: "a=1"), (name: "Set-Cookie", value: "b=2")])
                .adding(header: "Set-Cookie", "c=3")
        }
        let fields: [(name: String, value: String)] = (1...3).map { (name: "X-Step", value: String($0)) }
        server.route("GET", "/built") { _ in .steps([.head(status: 200, headerFields: fields + [(name: "Content-Length", value: "0")])]) }
        server.route("GET", "/part") { _ in .pattern(offset: 1000, count: 500, status: 206) }
        #expect(TestResponse.json("{}").status == 200 && TestResponse.steps([.close]).status == nil)

        var request = URLRequest(url: server.url("/cookies?q=a%20b&q=c"))
        request.addValue("one", forHTTPHeaderField: "X-Twice")
        request.addValue("two", forHTTPHeaderField: "X-Twice")
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(for: request)
        let cookies = HTTPCookie.cookies(withResponseHeaderFields: ["Set-Cookie": (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Set-Cookie") ?? ""],
                                         for: server.url("/"))
        #expect(Set(cookies.map(\.name)) == ["a", "b", "c"], "\(String(describing: (response as? HTTPURLResponse)?.allHeaderFields))")
        let logged = try #require(server.requests("/cookies").first)
        #expect(logged.target == "/cookies?q=a%20b&q=c" && logged.query["q"] == "a b")
        #expect(logged.headerValues("x-twice").joined(separator: ",").replacingOccurrences(of: " ", with: "") == "one,two")

        let (_, built) = try await session.data(from: server.url("/built"))
        #expect((built as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Step")?.replacingOccurrences(of: " ", with: "") == "1,2,3")
        let (part, partResponse) = try await session.data(from: server.url("/part"))
        #expect((partResponse as? HTTPURLResponse)?.statusCode == 206)
        #expect(part == TestResponse.patternBytes(offset: 1000, count: 500))
        #expect(part == TestResponse.patternBytes(count: 1500).suffix(500))
    }

    /// Shutting the server down ends an answer held at a gate never opened: the connection
    /// closes and the fetch fails, at once rather than at a poll's next look.
    @Test func shuttingDownEndsAHeldAnswer() async throws {
        let server = try TestServer()
        server.route("GET", "/held") { _ in TestResponse.text("never").held(by: TestGate()) }
        let operation = DataFetchOperation(url: server.url("/held"))
        operation.configuration.retryPolicy = .none
        let queue = FetchQueue()
        let ended = Countdown(1)
        queue.enqueue(operation, on: .global) { _ in ended.signal() }
        #expect(await server.waitUntil { $0.requestsInFlight == 1 })
        let start = ContinuousClock.now
        server.shutDown()
        #expect(ContinuousClock.now - start < .seconds(5), "the held connection's thread ended")
        #expect(server.counters.connectionsOpen == 0 && server.counters.requestsInFlight == 0, "\(server.counters)")
        #expect(await ended.wait())
        #expect(operation.error != nil, "the connection closed under the fetch")
    }
}
