import FetchKit
import FetchKitTesting
import Foundation
import Testing

/// A user's endpoint, as the kit's users write one.
private nonisolated struct KitUser: Decodable, Sendable, Equatable {
    let id: Int
    let name: String
}

private nonisolated final class GetKitUser: FetchOperation<KitUser>, @unchecked Sendable {
    override func parseResponseBody(_ body: Data) throws -> KitUser {
        try JSONDecoder().decode(KitUser.self, from: body)
    }
}

/// The sockets of this process bound to `ports` on 127.0.0.1, from /proc/self/net/tcp. The
/// table lists the whole network namespace — other processes' sockets too, which may be bound
/// to a port a server here has given up — so only the inodes of this process's descriptors
/// count (a connection in TIME_WAIT has none).
private func openSockets(onPorts ports: Set<UInt16>) -> Int {
    guard let table = try? String(contentsOfFile: "/proc/self/net/tcp", encoding: .utf8) else { return 0 }
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    let own = Set(entries.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0) }
        .filter { $0.hasPrefix("socket:[") }.map { String($0.dropFirst(8).dropLast()) })
    return table.split(separator: "\n").dropFirst().filter { line in
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count > 9, let colon = fields[1].lastIndex(of: ":"),
              let port = UInt16(fields[1][fields[1].index(after: colon)...], radix: 16) else { return false }
        return ports.contains(port) && own.contains(String(fields[9]))
    }.count
}

private func post(_ url: URL) -> URLRequest {
    var request = URLRequest(url: url)
    request.httpMethod = "POST"
    request.httpBody = Data("{}".utf8)
    return request
}

/// The entries of /proc/self/fd that could be a server's: every descriptor but the sockets
/// bound to a port not in `ports` (a server's sockets, listening or accepted, are bound to its
/// port; the client ends of connections, which FetchKit's pool may keep after their server
/// went, and libcurl's Unix-domain wake-up pairs are not).
private func openDescriptors(ofServersOn ports: Set<UInt16> = []) -> Int {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return entries.filter { entry in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + entry) else { return false }
        guard target.hasPrefix("socket:[") else { return true }
        return Int32(entry).flatMap(localPort(ofSocket:)).map(ports.contains) ?? false
    }.count
}

/// The local port of the IPv4 socket `descriptor`.
private func localPort(ofSocket descriptor: Int32) -> UInt16? {
    var address = sockaddr_in()
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let result = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    guard result == 0, address.sin_family == sa_family_t(AF_INET) else { return nil }
    return UInt16(bigEndian: address.sin_port)
}

/// The threads of this process (/proc/self/task).
private func threadCount() -> Int {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).count
}

/// Issue 35, first step: FetchKitTesting's server — routes, answers, faults, the request log,
/// expectations and their verification.
@Suite("FetchKitTesting: the test server", .timeLimit(.minutes(2)))
struct TestServerKitTests {
    @Test func aRouteWithAParameterAnswersAnEndpointAndTheLogKeepsTheRequest() async throws {
        let server = try TestServer()
        server.route("GET", "/users/:id") { request in
            .json(#"{"id": \#(request.parameters["id"] ?? "0"), "name": "Ada"}"#)
        }
        server.expect("GET", "/users/:id", times: .exactly(1))
        var request = URLRequest(url: server.url("/users/7?fields=all"))
        request.setValue("secret-token", forHTTPHeaderField: "X-Api-Key")
        let user = try await FetchQueue().fetch(GetKitUser(request: request))
        #expect(user == KitUser(id: 7, name: "Ada"))
        try server.verify()
        let logged = try #require(server.requests.first)
        #expect(logged.method == "GET" && logged.path == "/users/7" && logged.query == ["fields": "all"])
        #expect(logged.header("x-api-key") == "secret-token")
        #expect(logged.parameters == ["id": "7"])
        #expect(server.shutDown() == nil)
    }

    /// An unmatched request gets a 500 naming the nearest route, and `verify()` lists it; an
    /// expectation not met says what came instead.
    @Test func anUnmatchedRequestAndAnUnmetExpectationFailVerifyWithADiff() async throws {
        let server = try TestServer()
        server.route("GET", "/users/:id") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
        server.expect("GET", "/users/:id")
        let operation = GetKitUser(url: server.url("/user/1"))
        operation.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(operation) }
        guard case .unacceptableStatus(let failure)? = operation.error else {
            Issue.record("expected the 500, got \(String(describing: operation.error))")
            return
        }
        #expect(failure.statusCode == 500)
        #expect(String(decoding: failure.bodyPrefix, as: UTF8.self).contains("nearest route: GET /users/:id"))
        do {
            try server.verify()
            Issue.record("verify() passed")
        } catch {
            #expect(error.problems.count == 2, "\(error)")
            #expect(error.description.contains("expected GET /users/:id exactly 1 time, got it 0 times (came instead: GET /user/1)"), "\(error)")
            #expect(error.description.contains("unexpected GET /user/1: no route matched (nearest: GET /users/:id)"), "\(error)")
        }
        withKnownIssue("shutting down with unmet expectations records an issue") {
            server.shutDown()
        }
    }

    @Test func timesAtLeastAndNever() async throws {
        let server = try TestServer()
        server.route(nil, "/ping") { _ in .status(204) }
        server.route("POST", "/events/*") { _ in .status(202) }
        server.expect("GET", "/ping", times: .atLeast(2))
        server.expect("DELETE", "/ping", times: .never)
        server.expect("POST", "/events/*", times: .exactly(1))
        let queue = FetchQueue()
        for _ in 0..<3 { _ = try await queue.fetch(DataFetchOperation(url: server.url("/ping"))) }
        var post = URLRequest(url: server.url("/events/a/b"))
        post.httpMethod = "POST"
        post.httpBody = Data("{}".utf8)
        _ = try await queue.fetch(DataFetchOperation(request: post))
        try server.verify()
        #expect(server.requests.last?.body == Data("{}".utf8))
        server.shutDown()
    }

    /// The requests of an ordered expectation come in its order, with others between them.
    @Test func requestsInTheExpectedOrderPassVerify() async throws {
        let server = try TestServer()
        server.route("POST", "/login") { _ in .json(#"{"token": "t"}"#) }
        server.route("GET", "/users/:id") { _ in .json(#"{"id": 7, "name": "Ada"}"#) }
        server.route("POST", "/logout") { _ in .status(204) }
        server.route("GET", "/ping") { _ in .status(204) }
        server.expectInOrder(["POST /login", "GET /users/:id", "POST /logout"])
        server.expectInOrder([TestServer.ExpectedRequest("GET", "/ping"), "/ping"])
        let queue = FetchQueue()
        _ = try await queue.fetch(DataFetchOperation(url: server.url("/ping")))
        _ = try await queue.fetch(DataFetchOperation(request: post(server.url("/login"))))
        _ = try await queue.fetch(GetKitUser(url: server.url("/users/7")))
        _ = try await queue.fetch(DataFetchOperation(url: server.url("/ping")))
        _ = try await queue.fetch(DataFetchOperation(request: post(server.url("/logout"))))
        try server.verify()
        #expect(server.shutDown() == nil)
    }

    /// Out of order, one missing, one too many: each says what was expected, what came, and
    /// where they first differ.
    @Test func anOutOfOrderSequenceFailsVerifyWithWhatCame() async throws {
        let server = try TestServer()
        server.route(nil, "/*") { _ in .status(204) }
        server.expectInOrder(["POST /login", "GET /users/:id", "POST /logout"])
        server.expectInOrder(["GET /a", "GET /b"])
        server.expectInOrder(["GET /c"])
        let queue = FetchQueue()
        _ = try await queue.fetch(DataFetchOperation(url: server.url("/users/7")))
        _ = try await queue.fetch(DataFetchOperation(request: post(server.url("/login"))))
        _ = try await queue.fetch(DataFetchOperation(request: post(server.url("/logout"))))
        _ = try await queue.fetch(DataFetchOperation(url: server.url("/a")))
        for _ in 0..<2 { _ = try await queue.fetch(DataFetchOperation(url: server.url("/c"))) }
        do {
            try server.verify()
            Issue.record("verify() passed")
        } catch {
            #expect(error.problems == [
                "expected in order: POST /login, GET /users/:id, POST /logout; came: GET /users/7, POST /login, POST /logout"
                    + " (request 1 was GET /users/7, expected POST /login)",
                "expected in order: GET /a, GET /b; came: GET /a (request 2, GET /b, never came)",
                "expected in order: GET /c; came: GET /c, GET /c (request 2, GET /c, came after the last expected)",
            ], "\(error)")
        }
        withKnownIssue("shutting down with unmet expectations records an issue") { server.shutDown() }
    }

    /// A one-shot route answers once, then steps aside for the route under it.
    @Test func aOneShotRouteAnswersOnceThenTheNextRouteDoes() async throws {
        let server = try TestServer()
        server.route("GET", "/feed") { _ in .json("[]") }
        server.route("GET", "/feed", once: true) { _ in .retryAfter(1, status: 503) }
        let first = DataFetchOperation(url: server.url("/feed"))
        first.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(first) }
        guard case .unacceptableStatus(let failure)? = first.error else {
            Issue.record("expected the 503, got \(String(describing: first.error))")
            return
        }
        #expect(failure.statusCode == 503)
        for _ in 0..<2 {
            #expect(try await FetchQueue().fetch(DataFetchOperation(url: server.url("/feed"))) == Data("[]".utf8))
        }
        #expect(server.shutDown() == nil)
    }

    /// With no route under it, a used one-shot route leaves the unmatched 500, and verify()
    /// names it as answered already.
    @Test func aUsedOneShotRouteLeavesTheUnmatchedFiveHundred() async throws {
        let server = try TestServer()
        server.route("POST", "/token", once: true) { _ in .text("fresh") }
        let queue = FetchQueue()
        #expect(try await queue.fetch(DataFetchOperation(request: post(server.url("/token")))) == Data("fresh".utf8))
        let again = DataFetchOperation(request: post(server.url("/token")))
        again.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await queue.fetch(again) }
        guard case .unacceptableStatus(let failure)? = again.error else {
            Issue.record("expected the 500, got \(String(describing: again.error))")
            return
        }
        #expect(failure.statusCode == 500)
        #expect(String(decoding: failure.bodyPrefix, as: UTF8.self).contains("nearest route: POST /token (answered once already)"))
        do {
            try server.verify()
            Issue.record("verify() passed")
        } catch {
            #expect(error.problems == ["unexpected POST /token: no route matched (nearest: POST /token (answered once already))"], "\(error)")
        }
        withKnownIssue("the second request was unmatched") { server.shutDown() }
    }

    /// Twenty requests at once to a one-shot route over a plain one: exactly one gets it.
    @Test func aOneShotRouteAnswersOneOfManyConcurrentRequests() async throws {
        let server = try TestServer()
        server.route("GET", "/slot") { _ in .text("later") }
        server.route("GET", "/slot", once: true) { _ in .text("first") }
        let bodies = try await withThrowingTaskGroup(of: Data.self) { group in
            for _ in 0..<20 { group.addTask { try await FetchQueue().fetch(DataFetchOperation(url: server.url("/slot"))) } }
            var bodies: [String] = []
            for try await body in group { bodies.append(String(decoding: body, as: UTF8.self)) }
            return bodies
        }
        #expect(bodies.filter { $0 == "first" }.count == 1 && bodies.filter { $0 == "later" }.count == 19, "\(bodies)")
        #expect(server.shutDown() == nil)
    }

    /// 100 servers at once: 100 ports, and after shutdown no socket of theirs stays open.
    @Test func aHundredServersInParallelHaveTheirOwnPortsAndLeaveNoSocket() async throws {
        let ports = try await withThrowingTaskGroup(of: UInt16.self) { group in
            for index in 0..<100 {
                group.addTask {
                    let server = try TestServer()
                    server.route("GET", "/n") { _ in .text("\(index)") }
                    server.expect("GET", "/n")
                    let body = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/n")))
                    #expect(String(decoding: body, as: UTF8.self) == "\(index)")
                    #expect(server.shutDown() == nil)
                    return server.port
                }
            }
            var ports: [UInt16] = []
            for try await port in group { ports.append(port) }
            return ports
        }
        #expect(Set(ports).count == 100)
        #expect(openSockets(onPorts: Set(ports)) == 0, "a server's socket stayed open")
    }

    /// 100 servers at once leave no descriptor and no thread after their shutdown — counted in
    /// a process of their own. In this one, a thousand other tests open and close descriptors
    /// and threads beside it (a full run saw the counts swing by 1,600 descriptors and 600
    /// threads between two reads), far more than a leak of one per server would add; so the
    /// test binary runs this test alone (``countsInAQuietProcess()``) and reports its counts.
    @Test func aHundredServersLeaveNoDescriptorAndNoThreadAfterShutdown() async throws {
        if ProcessInfo.processInfo.environment[Self.quietProcessKey] != nil {
            try await countsInAQuietProcess()
            return
        }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try ChildProcess(executable, ["--testing-library", "swift-testing", "--filter", "aHundredServersLeaveNoDescriptorAndNoThread"],
                                     environment: [Self.quietProcessKey: "1"])
        let (ending, stdout, stderr) = try await child.finish(timeout: 50)
        #expect(ending == .exit(0), "the test alone:\n\(stdout)\n\(stderr)")
        #expect(stdout.contains("descriptors:"), "the child ran the test:\n\(stdout)\n\(stderr)")
    }

    static let quietProcessKey = "FETCHKIT_TEST_ALONE_IN_PROCESS"

    /// The counts, where nothing else runs: before the servers, with them (the counts see
    /// them), after their shutdown. The descriptors after may exceed those before by less than
    /// 10 (alone they are equal: 8 and 8), the threads by less than 50 — half of what a leak of
    /// one thread per server adds — for what the test's own fetches leave (Dispatch threads
    /// that have not retired yet: 5 before, 10 to 13 after). A thread that did
    /// its last work is listed until it has exited, and nothing signals that: while over, the
    /// counts are read again until a deadline.
    private func countsInAQuietProcess() async throws {
        let descriptorsBefore = openDescriptors()
        let threadsBefore = threadCount()
        let servers = try (0..<100).map { _ in try TestServer() }
        let ports = Set(servers.map(\.port))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, server) in servers.enumerated() {
                server.route("GET", "/n") { _ in .text("\(index)") }
                server.expect("GET", "/n")
                group.addTask {
                    let body = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/n")))
                    #expect(String(decoding: body, as: UTF8.self) == "\(index)")
                }
            }
            try await group.waitForAll()
        }
        let descriptorsRunning = openDescriptors(ofServersOn: ports)
        let threadsRunning = threadCount()
        // Each server holds its listening socket and its wake pipe (3 descriptors) and an
        // accept thread at least.
        #expect(descriptorsRunning - descriptorsBefore >= 300, "\(descriptorsBefore) descriptors before, \(descriptorsRunning) with the servers")
        #expect(threadsRunning - threadsBefore >= 100, "\(threadsBefore) threads before, \(threadsRunning) with the servers")
        for server in servers { #expect(server.shutDown() == nil) }
        #expect(openSockets(onPorts: ports) == 0, "a server's socket stayed open")

        let deadline = ContinuousClock.now + .seconds(20)
        var descriptorsAfter = openDescriptors(ofServersOn: ports)
        var threadsAfter = threadCount()
        while descriptorsAfter - descriptorsBefore >= 10 || threadsAfter - threadsBefore >= 50, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            descriptorsAfter = openDescriptors(ofServersOn: ports)
            threadsAfter = threadCount()
        }
        print("descriptors: \(descriptorsBefore) before the servers, \(descriptorsRunning) with them, \(descriptorsAfter) after;"
              + " threads: \(threadsBefore), \(threadsRunning), \(threadsAfter)")
        #expect(descriptorsAfter - descriptorsBefore < 10, "\(descriptorsBefore) descriptors before the servers, \(descriptorsAfter) after")
        #expect(threadsAfter - threadsBefore < 50, "\(threadsBefore) threads before the servers, \(threadsAfter) after")
    }

    /// Each fault does what it says at the socket: the FetchError a fetch meets.
    @Test func eachFaultGivesItsFetchError() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("GET", "/close") { _ in .closeMidBody(count: 100_000) }
        server.route("GET", "/reset") { _ in .resetMidBody(count: 100_000) }
        server.route("GET", "/lie") { _ in .lyingContentLength(claimed: 1000, actual: 10) }
        server.route("GET", "/never") { _ in .neverAnswer }
        server.route("GET", "/stall") { _ in .stallMidBody(count: 100_000) }
        server.route("GET", "/garbage") { _ in .garbage }
        server.route("GET", "/status-line") { _ in .malformedStatusLine }
        server.route("GET", "/slow") { _ in .slowBody(count: 3000, chunkSize: 1000, intervalMilliseconds: 20) }
        server.route("GET", "/late") { _ in TestResponse.text("late").delayed(milliseconds: 300) }
        server.route("GET", "/busy") { _ in .retryAfter(1, status: 503) }
        func error(_ path: String, idle: TimeInterval = 5) async -> FetchError? {
            let operation = DataFetchOperation(url: server.url(path))
            operation.configuration.retryPolicy = .none
            operation.configuration.idleTimeout = idle
            _ = try? await FetchQueue().fetch(operation)
            return operation.error
        }
        #expect(await error("/close")?.code == .lengthMismatch)
        #expect(await error("/lie")?.code == .lengthMismatch)
        let reset = await error("/reset")
        #expect(reset?.code == .transport || reset?.code == .lengthMismatch, "\(String(describing: reset))")
        #expect(await error("/never", idle: 0.3)?.code == .timedOut)
        #expect(await error("/stall", idle: 0.3)?.code == .timedOut)
        let garbage = await error("/garbage")
        #expect(garbage?.code == .transport, "\(String(describing: garbage))")
        #expect(await error("/status-line")?.code == .invalidResponse)
        #expect(await error("/busy")?.code == .unacceptableStatus)
        let slow = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/slow")))
        #expect(slow == TestResponse.patternBytes(count: 3000))
        let start = ContinuousClock.now
        _ = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/late")))
        #expect(ContinuousClock.now - start >= .milliseconds(290))
    }
}

/// The kit's Swift Testing trait: a test gets its own server as `TestServer.current`.
@Suite("FetchKitTesting: a server per test", .timeLimit(.minutes(2)))
struct TestServerTraitTests {
    @Test(.testServer) func aTestGetsItsOwnServer() async throws {
        let server = try #require(TestServer.current)
        server.route("GET", "/users/:id") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
        server.expect("GET", "/users/:id")
        let user = try await FetchQueue().fetch(GetKitUser(url: server.url("/users/1")))
        #expect(user.name == "Ada")
    }

    /// Parallel tests with the trait: each its own server, on its own port.
    @Test(.testServer, arguments: 0..<20) func parallelTestsGetDistinctServers(index: Int) async throws {
        let server = try #require(TestServer.current)
        server.route("GET", "/n") { _ in .text("\(index)") }
        let body = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/n")))
        #expect(String(decoding: body, as: UTF8.self) == "\(index)")
        #expect(server.requests.count == 1)
    }
}

/// A fragile endpoint: it parses whatever it is given, an empty body included, and decodes
/// nothing (its output is the body's size).
private nonisolated final class CountBytes: FetchOperation<Int>, @unchecked Sendable {
    override func parseResponseBody(_ body: Data) throws -> Int {
        body.count
    }
}

/// The kit's endpoint check: what each pathological answer does to a known-good endpoint
/// (a strict JSON decoder) and a known-fragile one (anything parses).
@Suite("FetchKitTesting: the endpoint check", .timeLimit(.minutes(2)))
struct EndpointCheckTests {
    static let sample = Data(#"{"id": 1, "name": "Ada"}"#.utf8)

    @Test func aStrictEndpointFailsWhereTheAnswerIsBadAndParsesOnlyGoodBodies() async throws {
        let report = try await EndpointCheck.run(sampleBody: Self.sample) { GetKitUser(request: $0) }
        let expected: [(String, FetchError.Code?, Int)] = [
            ("200 with an empty body", .parseFailed, 1),
            ("204 No Content", .parseFailed, 1),
            ("304 with a stored body", nil, 1),
            ("304 without a stored body", .parseFailed, 1),
            ("404 with a body", .unacceptableStatus, 0),
            ("500 with a body", .unacceptableStatus, 0),
            ("truncated body", .lengthMismatch, 0),
            ("body over the size limit", .responseTooLarge, 0),
            ("stalled body", .timedOut, 0),
            ("307 with a body", nil, 1),
            ("401 then a refreshed credential", nil, 1),
        ]
        for (name, error, parses) in expected {
            let found = try #require(report[name], "no case \(name)")
            #expect(found.error == error && found.parseCalls == parses, "\(found)\n\(report)")
        }
        // A cut gzip stream is never a success with the sample's value.
        #expect(report["cut gzip stream"]?.error != nil, "\(report)")
        print("endpoint check of a strict JSON endpoint:\n\(report)")
    }

    @Test func aFragileEndpointSucceedsOnEmptyBodies() async throws {
        let report = try await EndpointCheck.run(sampleBody: Self.sample) { CountBytes(request: $0) }
        #expect(report["200 with an empty body"]?.error == nil, "\(report)")
        #expect(report["204 No Content"]?.error == nil, "\(report)")
        #expect(report["404 with a body"]?.parseCalls == 0)
        #expect(report.cases.count == 12)
    }
}

/// The kit's stub transport: a session answered in-process, no socket.
@Suite("FetchKitTesting: the stub transport", .timeLimit(.minutes(2)))
struct StubTransportTests {
    @Test func aParserTestNeedsNoSocket() async throws {
        let stub = StubTransport()
        stub.route("GET", "/users/:id") { request in
            .json(#"{"id": \#(request.parameters["id"] ?? "0"), "name": "Ada"}"#)
        }
        let operation = GetKitUser(url: stub.url("/users/3"))
        operation.configuration.session = stub.makeSession()
        let user = try await FetchQueue().fetch(operation)
        #expect(user == KitUser(id: 3, name: "Ada"))
        #expect(stub.requests.map(\.path) == ["/users/3"])

        // No route: a 500 naming the request; another session is not led to the stub.
        let missing = GetKitUser(url: stub.url("/nothing"))
        missing.configuration.session = stub.makeSession()
        missing.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(missing) }
        guard case .unacceptableStatus(let failure)? = missing.error else {
            Issue.record("expected the 500, got \(String(describing: missing.error))")
            return
        }
        #expect(failure.statusCode == 500)
    }

    /// A `HEAD` that no `HEAD` route matches gets the `GET` route's head, without its body, as
    /// on a `TestServer`. (It got the unmatched 500.)
    @Test func aHeadFallsToTheGetRouteWithoutTheBody() async throws {
        let stub = StubTransport()
        stub.route("GET", "/report") { _ in .text("the whole report") }
        var request = URLRequest(url: stub.url("/report"))
        request.httpMethod = "HEAD"
        let operation = DataFetchOperation(request: request)
        operation.configuration.session = stub.makeSession()
        operation.configuration.retryPolicy = .none
        let body = try await FetchQueue().fetch(operation)
        #expect(body.isEmpty)
        #expect(operation.response?.statusCode == 200)
        #expect(stub.requests.map(\.method) == ["HEAD"])
    }

    @Test func twoStubsAnswerTheirOwnSessions() async throws {
        let first = StubTransport(), second = StubTransport()
        first.route(nil, "/who") { _ in .text("first") }
        second.route(nil, "/who") { _ in .text("second") }
        for (stub, name) in [(first, "first"), (second, "second")] {
            let operation = DataFetchOperation(url: stub.url("/who"))
            operation.configuration.session = stub.makeSession()
            let body = try await FetchQueue().fetch(operation)
            #expect(String(decoding: body, as: UTF8.self) == name)
        }
    }
}
