import Foundation
import LoopbackServer
#if canImport(Testing)
import Testing
#endif

/// A request a ``TestServer`` received, as it arrived.
public struct TestRequest: Sendable {
    /// The method, e.g. `"GET"`.
    public let method: String
    /// The path, without the query, not percent-decoded.
    public let path: String
    /// The request target as it was sent: the path and, after a `?`, the query, neither
    /// decoded (`/search?q=a%20b&q=c`).
    public let target: String
    /// The query's parameters, percent-decoded (the first value of a name).
    public let query: [String: String]
    /// The header fields in the order received, as name and value.
    public let headerFields: [(name: String, value: String)]
    /// The body (de-chunked); empty when there was none.
    public let body: Data
    /// Which connection carried it: requests on one kept-alive connection share it.
    public let connectionID: Int
    /// When its head was read.
    public let time: Date
    /// The values a route's `:name` segments matched (empty for an unmatched request).
    public let parameters: [String: String]

    /// The value of the header field `name`, matched case-insensitively (the first, if
    /// several).
    public func header(_ name: String) -> String? {
        headerFields.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// The values of every header field `name` (matched case-insensitively), in the order
    /// received: empty if there is none.
    public func headerValues(_ name: String) -> [String] {
        headerFields.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
    }
}

/// An HTTP/1.1 server on 127.0.0.1, on a port of its own, for testing the endpoints you build
/// on FetchKit: routes with path parameters, canned answers and faults at the socket, a log
/// of what arrived, and expectations that ``verify()`` checks.
///
/// Each server is independent — no global state — so tests that run in parallel each make
/// their own. It answers until ``shutDown()`` (or until it is released).
///
/// ```swift
/// let server = try TestServer()
/// server.route("GET", "/users/:id") { request in
///     .json(#"{"id": \#(request.parameters["id"] ?? "0"), "name": "Ada"}"#)
/// }
/// server.expect("GET", "/users/:id", times: .exactly(1))
/// // ... fetch server.url("/users/7") with your operation ...
/// try server.verify()
/// server.shutDown()
/// ```
///
/// A request no route matches gets a `500` whose body names the nearest route, and is
/// recorded: ``verify()`` lists it — an unexpected request is never silently a 404.
public final class TestServer: Sendable {
    /// How many times an expected request must come.
    public enum Times: Sendable, Equatable, CustomStringConvertible {
        /// Exactly this many times.
        case exactly(Int)
        /// This many times or more.
        case atLeast(Int)
        /// Never.
        case never

        func admits(_ count: Int) -> Bool {
            switch self {
            case .exactly(let expected): return count == expected
            case .atLeast(let minimum): return count >= minimum
            case .never: return count == 0
            }
        }

        public var description: String {
            switch self {
            case .exactly(let count): return "exactly \(count) time\(count == 1 ? "" : "s")"
            case .atLeast(let count): return "at least \(count) time\(count == 1 ? "" : "s")"
            case .never: return "never"
            }
        }
    }

    /// Why ``verify()`` failed: the expectations not met and the requests no route matched,
    /// as a readable list.
    public struct VerificationFailure: Error, CustomStringConvertible, Sendable {
        /// One line per problem.
        public let problems: [String]

        public var description: String {
            "The test server's expectations were not met:\n" + problems.map { "  - " + $0 }.joined(separator: "\n")
        }
    }

    /// A request an ordered expectation (``expectInOrder(_:)``) names: a method and a path
    /// pattern, as ``route(_:_:_:)`` reads it.
    ///
    /// Write it as a string literal, the method then the pattern — `"POST /login"`,
    /// `"GET /users/:id"` (a literal with no method means `GET`) — or with
    /// ``init(_:_:)``.
    public struct ExpectedRequest: Sendable, Equatable, CustomStringConvertible, ExpressibleByStringLiteral {
        /// The method, uppercased.
        public let method: String
        /// The path pattern.
        public let pattern: String
        private let matcher: RoutePattern

        /// The request of `method` whose path matches `pattern`.
        public init(_ method: String, _ pattern: String) {
            self.method = method.uppercased()
            self.pattern = pattern
            matcher = RoutePattern(pattern)
        }

        /// `"METHOD /pattern"`, or `"/pattern"` for a `GET`.
        public init(stringLiteral value: String) {
            let parts = value.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            if parts.count == 2 {
                self.init(String(parts[0]), String(parts[1]).trimmingCharacters(in: .whitespaces))
            } else {
                self.init("GET", value.trimmingCharacters(in: .whitespaces))
            }
        }

        func matches(_ request: TestRequest) -> Bool {
            request.method == method && matcher.match(request.path) != nil
        }

        public var description: String { "\(method) \(pattern)" }

        public static func == (left: ExpectedRequest, right: ExpectedRequest) -> Bool {
            left.method == right.method && left.pattern == right.pattern
        }
    }

    private struct Route: Sendable {
        let method: String?
        let pattern: RoutePattern
        let once: Bool
        let respond: @Sendable (TestRequest) -> TestResponse
        /// Whether a one-shot route has answered (and steps aside).
        var used = false

        var text: String { "\(method ?? "*") \(pattern.text)" + (once && used ? " (answered once already)" : "") }
    }

    private struct Expectation: Sendable {
        let method: String
        let pattern: RoutePattern
        let times: Times
    }

    private struct State {
        var routes: [Route] = []
        var expectations: [Expectation] = []
        var sequences: [[ExpectedRequest]] = []
        var requests: [TestRequest] = []
        var unmatched: [TestRequest] = []
    }

    private let state = Locked(State())
    private let server: LoopbackServer

    /// Starts a server on 127.0.0.1 and an ephemeral port; it answers at once.
    ///
    /// - Throws: If the listening socket cannot be made.
    public convenience init() throws {
        try self.init(sendBufferSize: nil)
    }

    /// Starts a server whose sockets' send buffer is `sendBufferSize` bytes, so that what it
    /// has sent (``Counters/patternBytesSent``) stays within that much of what the client
    /// read: for tests of a client's backpressure and read rate. `nil` for the system's.
    ///
    /// - Throws: If the listening socket cannot be made.
    public init(sendBufferSize: Int?) throws {
        let state = self.state
        server = try LoopbackServer(recordRequests: false, sendBufferSize: sendBufferSize) { request in
            Self.answer(request, state: state)
        }
    }

    deinit {
        server.stop()
    }

    /// `http://127.0.0.1:<port>`.
    public var baseURL: URL { server.baseURL }

    /// The port it listens on.
    public var port: UInt16 { server.port }

    /// The URL of `pathAndQuery` on this server (a leading `/` is added if missing).
    public func url(_ pathAndQuery: String) -> URL {
        server.url(pathAndQuery)
    }

    /// Answers requests whose path matches `pattern` — segments, with `:name` matching any one
    /// segment (`/users/:id/posts`) and a last `*` any rest, an empty one too — and whose
    /// method is `method` (any, for `nil`). Empty segments are ignored on both sides (`/users/7/`
    /// and `/users//7` match `/users/:id`). The route added last wins among those that match.
    ///
    /// - Parameters:
    ///   - method: The method, e.g. `"GET"`; `nil` for any.
    ///   - pattern: The path pattern.
    ///   - respond: Makes the answer, on the connection's thread.
    ///
    /// A `HEAD` request that no `HEAD` route matches is answered by the `GET` route: its head,
    /// without the body (faults are written as they are, `HEAD` or not).
    public func route(_ method: String? = nil, _ pattern: String, _ respond: @escaping @Sendable (TestRequest) -> TestResponse) {
        route(method, pattern, once: false, respond)
    }

    /// Answers requests of any method whose path matches `pattern` (as
    /// ``route(_:_:_:)`` with `nil` for the method).
    public func route(_ pattern: String, _ respond: @escaping @Sendable (TestRequest) -> TestResponse) {
        route(nil, pattern, once: false, respond)
    }

    /// Answers as ``route(_:_:_:)`` does, but with `once: true` only the first matching request:
    /// then the route steps aside and a later request falls to the route that matches it next
    /// (one added before) or, with none, gets the unmatched `500` — which ``verify()`` lists,
    /// naming this route as answered once already.
    ///
    /// ```swift
    /// server.route("GET", "/feed") { _ in .json("[]") }
    /// server.route("GET", "/feed", once: true) { _ in .retryAfter(1, status: 503) }
    /// // the first GET /feed gets the 503, every later one the 200
    /// ```
    ///
    /// - Parameters:
    ///   - method: The method, e.g. `"GET"`; `nil` for any.
    ///   - pattern: The path pattern.
    ///   - once: Whether the route answers only one request.
    ///   - respond: Makes the answer, on the connection's thread.
    public func route(_ method: String? = nil, _ pattern: String, once: Bool, _ respond: @escaping @Sendable (TestRequest) -> TestResponse) {
        let route = Route(method: method?.uppercased(), pattern: RoutePattern(pattern), once: once, respond: respond)
        state.withLock { $0.routes.append(route) }
    }

    /// Expects requests of `method` whose path matches `pattern` (as ``route(_:_:_:)``
    /// reads it) to come `times` times by the time of ``verify()``.
    public func expect(_ method: String = "GET", _ pattern: String, times: Times = .exactly(1)) {
        let expectation = Expectation(method: method.uppercased(), pattern: RoutePattern(pattern), times: times)
        state.withLock { $0.expectations.append(expectation) }
    }

    /// Expects `requests` to come in this order by the time of ``verify()``: of the requests
    /// received, those that match any of `requests` must be exactly these, one for one, in this
    /// order (others may come between them). List a request twice to expect it twice.
    ///
    /// ```swift
    /// server.expectInOrder(["POST /login", "GET /users/:id", "POST /logout"])
    /// ```
    ///
    /// ``verify()`` reports a sequence not met with what was expected, what came, and where
    /// they first differ. Each call adds a sequence of its own, checked on its own.
    public func expectInOrder(_ requests: [ExpectedRequest]) {
        state.withLock { $0.sequences.append(requests) }
    }

    /// Every request received, in the order their heads were read.
    public var requests: [TestRequest] {
        state.withLock { $0.requests }
    }

    /// The requests received whose path matches `pattern` as a route's does (`/users/:id`,
    /// `/files/*`), whatever their method, in the order they came.
    public func requests(_ pattern: String) -> [TestRequest] {
        let pattern = RoutePattern(pattern)
        return requests.filter { pattern.match($0.path) != nil }
    }

    /// The requests received whose method is `method` and whose path matches `pattern`, in the
    /// order they came.
    public func requests(_ method: String, _ pattern: String) -> [TestRequest] {
        let method = method.uppercased()
        return requests(pattern).filter { $0.method == method }
    }

    // MARK: Counters

    /// What the server counted, read together (see ``counters``).
    public struct Counters: Sendable, Equatable, CustomStringConvertible {
        /// TCP connections accepted (since the start or the last ``TestServer/resetCounters()``).
        public let connectionsAccepted: Int
        /// Connections open now.
        public let connectionsOpen: Int
        /// Requests whose head was read and whose answer is not all sent yet — held
        /// (``TestResponse/held(by:)``), delayed, stalled or being written. The count drops
        /// just before an answer's last bytes go out, so a client that has a whole answer sees
        /// it already lower.
        public let requestsInFlight: Int
        /// The most requests in flight at once (since the start or the last reset, which sets
        /// it to the current ``requestsInFlight``): what a concurrency limit allowed.
        public let peakRequestsInFlight: Int
        /// Request heads read (unmatched ones too).
        public let requestsReceived: Int
        /// Bytes of pattern bodies (``TestResponse/pattern(count:status:headers:)``,
        /// ``TestResponse/Step/patternBytes(offset:count:)``, the faults' bodies) handed to the
        /// server's kernel: what a client was sent of them, to within the socket's buffer.
        public let patternBytesSent: Int

        init(_ counters: ServerCounters) {
            connectionsAccepted = counters.connectionsAccepted
            connectionsOpen = counters.connectionsOpen
            requestsInFlight = counters.requestsInFlight
            peakRequestsInFlight = counters.peakRequestsInFlight
            requestsReceived = counters.requestsReceived
            patternBytesSent = counters.patternBytesSent
        }

        /// The counters on one line.
        public var description: String {
            "connectionsAccepted=\(connectionsAccepted) connectionsOpen=\(connectionsOpen) "
                + "requestsInFlight=\(requestsInFlight) peakRequestsInFlight=\(peakRequestsInFlight) "
                + "requestsReceived=\(requestsReceived) patternBytesSent=\(patternBytesSent)"
        }
    }

    /// The counters now.
    public var counters: Counters { Counters(server.counters) }

    /// The bytes the clients' TCP acknowledged over all connections (response heads included),
    /// since the start or the last reset: what reached the client's kernel, whatever the
    /// buffers — a client's read rate as the server sees it. `nil` where the kernel does not
    /// report it (not Linux). Each read asks the kernel once per open connection: sample it.
    public var bytesAcknowledged: Int? { server.bytesAcknowledged }

    /// ``bytesAcknowledged`` per connection, by ``TestRequest/connectionID``. `nil` where the
    /// kernel does not report it.
    public var bytesAcknowledgedByConnection: [Int: Int]? { server.bytesAcknowledgedByConnection }

    /// Sets the counters back to zero (``Counters/requestsInFlight`` and
    /// ``Counters/connectionsOpen`` keep counting what is open). The request log is kept.
    public func resetCounters() {
        server.resetCounters()
    }

    /// Suspends until `condition` holds for the counters, or `timeout` seconds pass: wait
    /// for an event — a request in flight, a connection closed — rather than for a time.
    ///
    /// ```swift
    /// #expect(await server.waitUntil { $0.requestsInFlight == 1 })
    /// ```
    ///
    /// The condition is evaluated whenever the counters change (and on
    /// ``wakeWaiters()``), under the server's lock: keep it quick, and do not call the server
    /// from it. The wait blocks a thread of its own, not one of Swift concurrency's.
    ///
    /// - Returns: Whether `condition` held (`false`: the time ran out).
    @discardableResult
    public func waitUntil(timeout: TimeInterval = 60, _ condition: @escaping @Sendable (Counters) -> Bool) async -> Bool {
        await server.waitUntil(timeout: timeout) { condition(Counters($0)) }
    }

    /// Blocks the calling thread until `condition` holds for the counters, or `timeout`
    /// seconds pass (as ``waitUntil(timeout:_:)`` does, for code that is not `async`: a
    /// route's responder, a helper thread).
    ///
    /// - Returns: Whether `condition` held.
    @discardableResult
    public func blockingWait(timeout: TimeInterval = 60, until condition: (Counters) -> Bool) -> Bool {
        server.blockingWait(timeout: timeout) { condition(Counters($0)) }
    }

    /// Evaluates every waiting ``waitUntil(timeout:_:)`` condition again: call it after
    /// changing state of your own that a condition reads (the server wakes waiters only when
    /// its counters change).
    public func wakeWaiters() {
        server.wakeWaiters()
    }

    /// Checks the expectations against the requests so far, and that every request matched a
    /// route.
    ///
    /// - Throws: A ``VerificationFailure`` listing each expectation not met (what came
    ///   instead) and each request no route matched (with the nearest route).
    public func verify() throws(VerificationFailure) {
        let (expectations, sequences, requests, unmatched, routes) = state.withLock {
            ($0.expectations, $0.sequences, $0.requests, $0.unmatched, $0.routes)
        }
        var problems: [String] = []
        for expectation in expectations {
            let count = requests.filter { $0.method == expectation.method && expectation.pattern.match($0.path) != nil }.count
            guard !expectation.times.admits(count) else { continue }
            let near = requests.filter { expectation.pattern.match($0.path) != nil || $0.method == expectation.method }
                .map { "\($0.method) \($0.path)" }
            problems.append("expected \(expectation.method) \(expectation.pattern.text) \(expectation.times), got it \(count) time\(count == 1 ? "" : "s")"
                + (count == 0 && !near.isEmpty ? " (came instead: \(Set(near).sorted().joined(separator: ", ")))" : ""))
        }
        for sequence in sequences {
            if let problem = Self.check(sequence, against: requests) { problems.append(problem) }
        }
        for request in unmatched {
            problems.append("unexpected \(request.method) \(request.path): no route matched"
                + (Self.nearest(to: request, in: routes).map { " (nearest: \($0))" } ?? ""))
        }
        if !problems.isEmpty { throw VerificationFailure(problems: problems) }
    }

    /// Stops the server — open connections are closed, waiting faults end — and checks it
    /// (``verify()``): a failure is recorded as an issue of the Swift Testing test that runs
    /// this (and returned, for XCTest: `XCTAssertNil(server.shutDown())`).
    ///
    /// - Returns: The verification's failure, or `nil`.
    @discardableResult
    public func shutDown() -> VerificationFailure? {
        shutDown(recordingIssue: true)
    }

    func shutDown(recordingIssue: Bool) -> VerificationFailure? {
        server.stop()
        do {
            try verify()
            return nil
        } catch {
            #if canImport(Testing)
            if recordingIssue { Issue.record(Comment(rawValue: error.description)) }
            #endif
            return error
        }
    }

    // MARK: Answering (a connection's thread)

    private static func answer(_ request: HTTPRequest, state: Locked<State>) -> HTTPResponse {
        // Chosen, claimed (a one-shot route) and logged under one lock: two requests at once
        // cannot both have a one-shot route's answer.
        let (received, respond, routes) = state.withLock { state -> (TestRequest, (@Sendable (TestRequest) -> TestResponse)?, [Route]) in
            var methods = [request.method]
            if request.method == "HEAD" { methods.append("GET") }   // HEAD falls to the GET route
            for method in methods {
                for index in state.routes.indices.reversed() {
                    let route = state.routes[index]
                    guard route.method == nil || route.method == method, !(route.once && route.used),
                          let parameters = route.pattern.match(request.path) else { continue }
                    if route.once { state.routes[index].used = true }
                    let received = TestRequest(request, parameters: parameters)
                    state.requests.append(received)
                    return (received, route.respond, [])
                }
            }
            let received = TestRequest(request, parameters: [:])
            state.requests.append(received)
            state.unmatched.append(received)
            return (received, nil, state.routes)
        }
        if let respond { return respond(received).response }
        let nearest = nearest(to: received, in: routes).map { "; nearest route: \($0)" } ?? ""
        return .text("TestServer: no route for \(request.method) \(request.path)\(nearest)", status: 500)
    }

    /// What is wrong with the requests that match `sequence`'s, if they are not it in order.
    private static func check(_ sequence: [ExpectedRequest], against requests: [TestRequest]) -> String? {
        let came = requests.filter { request in sequence.contains { $0.matches(request) } }
        let firstDifference = zip(sequence, came).enumerated().first { !$0.element.0.matches($0.element.1) }?.offset
            ?? (came.count == sequence.count ? nil : min(came.count, sequence.count))
        guard let index = firstDifference else { return nil }
        let difference: String
        if index < sequence.count && index < came.count {
            difference = "request \(index + 1) was \(came[index].method) \(came[index].path), expected \(sequence[index])"
        } else if index < sequence.count {
            difference = "request \(index + 1), \(sequence[index]), never came"
        } else {
            difference = "request \(index + 1), \(came[index].method) \(came[index].path), came after the last expected"
        }
        let cameText = came.isEmpty ? "none of them" : came.map { "\($0.method) \($0.path)" }.joined(separator: ", ")
        return "expected in order: \(sequence.map(\.description).joined(separator: ", ")); came: \(cameText) (\(difference))"
    }

    /// The route whose pattern is closest to `request`'s path (fewest differing segments, the
    /// same method first), as text.
    private static func nearest(to request: TestRequest, in routes: [Route]) -> String? {
        let segments = RoutePattern.segments(request.path)
        return routes.min { left, right in
            score(left, request, segments) < score(right, request, segments)
        }.map(\.text)
    }

    private static func score(_ route: Route, _ request: TestRequest, _ segments: [Substring]) -> Int {
        route.pattern.distance(to: segments) * 2 + (route.method == nil || route.method == request.method ? 0 : 1)
    }
}

extension TestRequest {
    init(_ request: HTTPRequest, parameters: [String: String]) {
        method = request.method
        path = request.path
        target = request.target
        query = request.query
        headerFields = request.headers.map { ($0.name, $0.value) }
        body = request.body
        connectionID = request.connectionID
        time = Date()
        self.parameters = parameters
    }
}

/// A route's path pattern: literal segments, `:name` for any one, a last `*` for any rest.
struct RoutePattern: Sendable {
    let text: String
    private let parts: [Substring]

    init(_ text: String) {
        self.text = text
        parts = Self.segments(text)
    }

    static func segments(_ path: String) -> [Substring] {
        path.split(separator: "/", omittingEmptySubsequences: true)
    }

    /// The parameters, if `path` matches.
    func match(_ path: String) -> [String: String]? {
        let segments = Self.segments(path)
        var parameters: [String: String] = [:]
        for (index, part) in parts.enumerated() {
            if part == "*", index == parts.count - 1 { return parameters }
            guard index < segments.count else { return nil }
            if part.hasPrefix(":") {
                parameters[String(part.dropFirst())] = String(segments[index]).removingPercentEncoding ?? String(segments[index])
            } else if part != segments[index] {
                return nil
            }
        }
        return segments.count == parts.count ? parameters : nil
    }

    /// How many segments differ from `segments` (a parameter matches any).
    func distance(to segments: [Substring]) -> Int {
        let common = zip(parts, segments).filter { part, segment in !part.hasPrefix(":") && part != "*" && part != segment }.count
        return common + abs(parts.count - segments.count)
    }
}

/// A value behind a lock.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value   // guarded by `lock`

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
