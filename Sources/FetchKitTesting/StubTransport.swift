import FetchKit
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Answers a session's requests in-process, with no socket, for tests of a parser alone.
///
/// It is injected per session — ``makeSession()`` gives a ``FetchKit/FetchSession`` whose
/// configuration's `protocolClasses` lead to this transport (the one way that works on Linux:
/// `URLProtocol.registerClass` is ignored by default configurations) — never through a global
/// registration. Each transport has a host of its own (``baseURL``, under `.invalid`, which no
/// network resolves): its session answers that host's requests; other sessions, and other
/// transports, are untouched.
///
/// ```swift
/// let stub = StubTransport()
/// stub.route("GET", "/users/:id") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
/// let operation = GetUser(url: stub.url("/users/1"))
/// operation.configuration.session = stub.makeSession()
/// ```
///
/// What it cannot do: faults at the socket (a stub has none — use ``TestServer``), and what
/// FetchKit does below URLSession on Linux. Its tasks are not libcurl's, so the session's
/// workarounds that act on a task's libcurl handle do nothing for them (FetchKit finds no
/// handle and carries on as a plain `URLSession` would): no connect timeout of FetchKit's, no
/// pause of the reading, no check of response heads before FoundationNetworking; and a session
/// with trust settings (`FetchSession(trust:)`) is not made with it. Responses are delivered as
/// one head and one body chunk.
public final class StubTransport: Sendable {
    private struct Route: Sendable {
        let method: String?
        let pattern: RoutePattern
        let respond: @Sendable (TestRequest) -> TestResponse
    }

    private struct State {
        var routes: [Route] = []
        var requests: [TestRequest] = []
    }

    /// The host of this transport's URLs.
    let host = "stub-\(UUID().uuidString.lowercased()).invalid"
    private let state = Locked(State())

    /// `http://stub-<unique>.invalid`: the origin this transport answers.
    public var baseURL: URL {
        URL(string: "http://\(host)") ?? URL(fileURLWithPath: "/")
    }

    /// The URL of `pathAndQuery` on this transport's host (a leading `/` is added if missing).
    public func url(_ pathAndQuery: String) -> URL {
        URL(string: "http://\(host)" + (pathAndQuery.hasPrefix("/") ? pathAndQuery : "/" + pathAndQuery)) ?? baseURL
    }

    /// Creates a transport with no routes: every request gets a `500` naming it.
    public init() {
        StubURLProtocol.transports.withLock { $0[host] = Weak(self) }
    }

    deinit {
        let host = self.host
        StubURLProtocol.transports.withLock { _ = $0.removeValue(forKey: host) }
    }

    /// Answers requests whose method is `method` (any, for `nil`) and whose path matches
    /// `pattern`, as ``TestServer/route(_:_:_:)`` reads it. Only canned answers (status,
    /// headers, body) make sense here. A `HEAD` request that no `HEAD` route matches gets the
    /// `GET` route's status and headers, without the body.
    public func route(_ method: String? = nil, _ pattern: String, _ respond: @escaping @Sendable (TestRequest) -> TestResponse) {
        let route = Route(method: method?.uppercased(), pattern: RoutePattern(pattern), respond: respond)
        state.withLock { $0.routes.append(route) }
    }

    /// Every request answered, in order.
    public var requests: [TestRequest] {
        state.withLock { $0.requests }
    }

    /// A session whose requests this transport answers.
    public func makeSession() -> FetchSession {
        let configuration = FetchSession.defaultConfiguration()
        configuration.protocolClasses = [StubURLProtocol.self]
        return FetchSession(configuration: configuration)
    }

    /// The answer to `request`.
    func answer(_ request: URLRequest) -> (status: Int, headers: [String: String], body: Data) {
        let method = request.httpMethod ?? "GET"
        let components = request.url.flatMap { URLComponents(url: $0, resolvingAgainstBaseURL: false) }
        // Not percent-decoded, as a TestServer logs it.
        let path = components.map { $0.percentEncodedPath.isEmpty ? "/" : $0.percentEncodedPath } ?? "/"
        let target = path + (components?.percentEncodedQuery.map { "?" + $0 } ?? "")
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] where query[item.name] == nil {
            query[item.name] = item.value ?? ""
        }
        let fields = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }
        let routes = state.withLock { $0.routes }
        // A HEAD that no HEAD route matches falls to the GET route, as on a TestServer: its
        // head, without the body.
        let isHead = method.uppercased() == "HEAD"
        let methods = isHead ? ["HEAD", "GET"] : [method.uppercased()]
        let matched = methods.lazy.compactMap { wanted in
            routes.reversed().lazy.compactMap { route -> (Route, [String: String])? in
                guard route.method == nil || route.method == wanted, let parameters = route.pattern.match(path) else { return nil }
                return (route, parameters)
            }.first
        }.first
        let received = TestRequest(method: method, path: path, target: target, query: query, headerFields: fields.map { ($0.key, $0.value) },
                                   body: request.httpBody ?? Data(), connectionID: 0, time: Date(), parameters: matched?.1 ?? [:])
        state.withLock { $0.requests.append(received) }
        guard let (route, _) = matched else {
            return (500, ["Content-Type": "text/plain"], Data("StubTransport: no route for \(method) \(path)".utf8))
        }
        let response = route.respond(received).response
        var headers: [String: String] = [:]
        for field in response.headers { headers[field.name] = field.value }
        if isHead { return (response.status, headers, Data()) }
        switch response.body {
        case .data(let data):
            return (response.status, headers, data)
        case .pattern(let offset, let count):
            return (response.status, headers, TestResponse.patternBytes(offset: offset, count: count))
        case .chunkedPattern(let count, _, _):
            return (response.status, headers, TestResponse.patternBytes(count: count))
        default:
            return (500, ["Content-Type": "text/plain"], Data("StubTransport: a fault needs a socket (use TestServer)".utf8))
        }
    }
}

/// A weak reference, for the table that leads a transport's host to it.
struct Weak<Object: AnyObject & Sendable>: Sendable {
    weak var object: Object?

    init(_ object: Object) {
        self.object = object
    }
}

/// The `URLProtocol` of ``StubTransport``'s sessions: it answers a request from the transport
/// whose host it names.
final class StubURLProtocol: URLProtocol {
    static let transports = Locked([String: Weak<StubTransport>]())

    static func transport(for request: URLRequest) -> StubTransport? {
        guard let host = request.url?.host?.lowercased() else { return nil }
        return transports.withLock { $0[host]?.object }
    }

    override class func canInit(with request: URLRequest) -> Bool {
        transport(for: request) != nil
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest {
        request
    }

    override func startLoading() {
        guard let transport = Self.transport(for: request), let url = request.url else {
            client?.urlProtocol(self, didFailWithError: URLError(.cannotConnectToHost))
            return
        }
        let answer = transport.answer(request)
        var headers = answer.headers
        headers["Content-Length"] = String(answer.body.count)
        guard let response = HTTPURLResponse(url: url, statusCode: answer.status, httpVersion: "HTTP/1.1", headerFields: headers) else {
            client?.urlProtocol(self, didFailWithError: URLError(.badServerResponse))
            return
        }
        client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
        if !answer.body.isEmpty { client?.urlProtocol(self, didLoad: answer.body) }
        client?.urlProtocolDidFinishLoading(self)
    }

    override func stopLoading() {}
}
