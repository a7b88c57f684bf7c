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

    private struct Route: Sendable {
        let method: String?
        let pattern: RoutePattern
        let respond: @Sendable (TestRequest) -> TestResponse
    }

    private struct Expectation: Sendable {
        let method: String
        let pattern: RoutePattern
        let times: Times
    }

    private struct State {
        var routes: [Route] = []
        var expectations: [Expectation] = []
        var requests: [TestRequest] = []
        var unmatched: [TestRequest] = []
    }

    private let state = Locked(State())
    private let server: LoopbackServer

    /// Starts a server on 127.0.0.1 and an ephemeral port; it answers at once.
    ///
    /// - Throws: If the listening socket cannot be made.
    public init() throws {
        let state = self.state
        server = try LoopbackServer(recordRequests: false) { request in
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
    /// segment (`/users/:id/posts`) and a last `*` any rest — and whose method is `method`
    /// (any, for `nil`). The route added last wins among those that match.
    ///
    /// - Parameters:
    ///   - method: The method, e.g. `"GET"`; `nil` for any.
    ///   - pattern: The path pattern.
    ///   - respond: Makes the answer, on the connection's thread.
    public func route(_ method: String? = nil, _ pattern: String, _ respond: @escaping @Sendable (TestRequest) -> TestResponse) {
        let route = Route(method: method?.uppercased(), pattern: RoutePattern(pattern), respond: respond)
        state.withLock { $0.routes.append(route) }
    }

    /// Expects requests of `method` whose path matches `pattern` (as ``route(_:_:_:)``
    /// reads it) to come `times` times by the time of ``verify()``.
    public func expect(_ method: String = "GET", _ pattern: String, times: Times = .exactly(1)) {
        let expectation = Expectation(method: method.uppercased(), pattern: RoutePattern(pattern), times: times)
        state.withLock { $0.expectations.append(expectation) }
    }

    /// Every request received, in the order their heads were read.
    public var requests: [TestRequest] {
        state.withLock { $0.requests }
    }

    /// Checks the expectations against the requests so far, and that every request matched a
    /// route.
    ///
    /// - Throws: A ``VerificationFailure`` listing each expectation not met (what came
    ///   instead) and each request no route matched (with the nearest route).
    public func verify() throws(VerificationFailure) {
        let (expectations, requests, unmatched, routes) = state.withLock { ($0.expectations, $0.requests, $0.unmatched, $0.routes) }
        var problems: [String] = []
        for expectation in expectations {
            let count = requests.filter { $0.method == expectation.method && expectation.pattern.match($0.path) != nil }.count
            guard !expectation.times.admits(count) else { continue }
            let near = requests.filter { expectation.pattern.match($0.path) != nil || $0.method == expectation.method }
                .map { "\($0.method) \($0.path)" }
            problems.append("expected \(expectation.method) \(expectation.pattern.text) \(expectation.times), got it \(count) time\(count == 1 ? "" : "s")"
                + (count == 0 && !near.isEmpty ? " (came instead: \(Set(near).sorted().joined(separator: ", ")))" : ""))
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
        let routes = state.withLock { $0.routes }
        for route in routes.reversed() where route.method == nil || route.method == request.method {
            guard let parameters = route.pattern.match(request.path) else { continue }
            let received = TestRequest(request, parameters: parameters)
            state.withLock { $0.requests.append(received) }
            return route.respond(received).response
        }
        let received = TestRequest(request, parameters: [:])
        state.withLock { state in
            state.requests.append(received)
            state.unmatched.append(received)
        }
        let nearest = nearest(to: received, in: routes).map { "; nearest route: \($0)" } ?? ""
        return .text("TestServer: no route for \(request.method) \(request.path)\(nearest)", status: 500)
    }

    /// The route whose pattern is closest to `request`'s path (fewest differing segments, the
    /// same method first), as text.
    private static func nearest(to request: TestRequest, in routes: [Route]) -> String? {
        let segments = RoutePattern.segments(request.path)
        return routes.min { left, right in
            score(left, request, segments) < score(right, request, segments)
        }.map { "\($0.method ?? "*") \($0.pattern.text)" }
    }

    private static func score(_ route: Route, _ request: TestRequest, _ segments: [Substring]) -> Int {
        route.pattern.distance(to: segments) * 2 + (route.method == nil || route.method == request.method ? 0 : 1)
    }
}

extension TestRequest {
    init(_ request: HTTPRequest, parameters: [String: String]) {
        method = request.method
        path = request.path
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
