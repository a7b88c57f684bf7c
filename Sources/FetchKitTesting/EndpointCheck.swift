import FetchKit
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs an endpoint operation against the answers that break endpoints — empty bodies, `204`,
/// `304`s, error statuses with bodies, truncated and cut-gzip bodies, a body over the size
/// limit, a stall, a `307` with a body, a `401` that leads to a refresh — and reports, per
/// answer, how the fetch ended and how many times its parse ran.
///
/// ```swift
/// let report = try await EndpointCheck.run(sampleBody: Data(#"{"id": 1, "name": "Ada"}"#.utf8)) { request in
///     GetUser(request: request)
/// }
/// print(report)
/// ```
///
/// Each case gets a ``TestServer`` of its own, a fresh operation made by `makeOperation`, no
/// retries, and a 0.5 s idle timeout (the stalled body's); the size-limit case sets a 16-byte
/// `maximumResponseSize`. What a case should end with is for your endpoint to decide: the report
/// says what happened, so that a test can pin it (`#expect(report["truncated body"]?.error == .lengthMismatch)`).
public enum EndpointCheck {
    /// How one case ended.
    public struct Case: Sendable, CustomStringConvertible {
        /// What the server answered, in words (`"204 No Content"`).
        public let name: String
        /// The error's kind, or `nil` when the fetch succeeded.
        public let error: FetchError.Code?
        /// How many times the operation made its output from a body (ran its parse).
        public let parseCalls: Int
        /// The error's description, when it failed.
        public let message: String?

        public var description: String {
            "\(name): \(error.map { "failed, \($0)" } ?? "succeeded"), parsed \(parseCalls) time\(parseCalls == 1 ? "" : "s")"
        }
    }

    /// The cases, in the order they ran.
    public struct Report: Sendable, CustomStringConvertible {
        /// Every case.
        public let cases: [Case]

        /// The case named `name`.
        public subscript(name: String) -> Case? {
            cases.first { $0.name == name }
        }

        public var description: String {
            cases.map(\.description).joined(separator: "\n")
        }
    }

    /// Runs every case.
    ///
    /// - Parameters:
    ///   - sampleBody: A body the endpoint parses (what its server answers when all is well).
    ///   - contentType: The sample's `Content-Type`. Default `application/json`.
    ///   - makeOperation: A new operation for `request` (a `FetchOperation` subclass of yours,
    ///     or a `DownloadOperation`).
    /// - Returns: How each case ended.
    /// - Throws: If a test server cannot be made.
    public static func run<Operation: OutputProducing>(sampleBody: Data, contentType: String = "application/json",
                                                     _ makeOperation: @escaping @Sendable (URLRequest) -> Operation) async throws -> Report {
        let sample = TestResponse(status: 200, headers: ["Content-Type": contentType, "ETag": #""v1""#], body: sampleBody)
        let gzip = Gzip.stored(sampleBody)
        let cutGzip = gzip.prefix(max(11, gzip.count * 2 / 3))
        var cases: [Case] = []
        func check(_ name: String, store: ValidatorStore? = nil, sizeLimit: Int64? = nil, authenticated: Bool = false,
                   setUp: (TestServer) -> Void) async throws {
            let server = try TestServer()
            defer { _ = server.shutDown(recordingIssue: false) }
            setUp(server)
            cases.append(await fetch(name, server: server, makeOperation: makeOperation, store: store, sizeLimit: sizeLimit,
                                     authenticated: authenticated))
        }
        try await check("200 with an empty body") { $0.route(nil, "/endpoint") { _ in .status(200) } }
        try await check("204 No Content") { $0.route(nil, "/endpoint") { _ in .status(204) } }
        for store in [ValidatorStore(storesBodies: true), ValidatorStore(storesBodies: false)] {
            try await check(store.storesBodies ? "304 with a stored body" : "304 without a stored body", store: store) { server in
                server.route(nil, "/endpoint") { request in
                    request.header("If-None-Match") == #""v1""# ? TestResponse(status: 304, headers: ["ETag": #""v1""#]) : sample
                }
            }
        }
        try await check("404 with a body") { $0.route(nil, "/endpoint") { _ in .json(#"{"error": "not found"}"#, status: 404) } }
        try await check("500 with a body") { $0.route(nil, "/endpoint") { _ in .text("internal error", status: 500) } }
        try await check("truncated body") { server in
            server.route(nil, "/endpoint") { _ in .closeMidBody(count: max(2, sampleBody.count)) }
        }
        try await check("cut gzip stream") { server in
            server.route(nil, "/endpoint") { _ in
                TestResponse(status: 200, headers: ["Content-Type": contentType, "Content-Encoding": "gzip"], body: Data(cutGzip))
            }
        }
        try await check("body over the size limit", sizeLimit: 16) { server in
            server.route(nil, "/endpoint") { _ in .bytes(Data(repeating: 0x20, count: 64 << 10)) }
        }
        try await check("stalled body") { server in
            server.route(nil, "/endpoint") { _ in .stallMidBody(count: 100_000) }
        }
        try await check("307 with a body") { server in
            server.route(nil, "/endpoint") { _ in
                TestResponse(status: 307, headers: ["Location": "/moved", "Content-Type": "text/plain"], body: Data("moved".utf8))
            }
            server.route(nil, "/moved") { _ in sample }
        }
        try await check("401 then a refreshed credential", authenticated: true) { server in
            server.route(nil, "/endpoint") { request in
                request.header("Authorization") == "Bearer fresh" ? sample : .unauthorized()
            }
            server.route(nil, "/token") { _ in .text("fresh") }
        }
        return Report(cases: cases)
    }

    private static func fetch<Operation: OutputProducing>(_ name: String, server: TestServer, makeOperation: @Sendable (URLRequest) -> Operation,
                              store: ValidatorStore?, sizeLimit: Int64?, authenticated: Bool) async -> Case {
        let queue: FetchQueue
        if authenticated {
            let authentication = FetchAuthentication(authenticator: TokenFromServer(server: server),
                                                     credential: FetchCredential(token: "stale"), origins: [server.baseURL])
            queue = FetchQueue(authentication: authentication)
        } else {
            queue = FetchQueue()
        }
        func attempt() async -> Operation {
            let operation = makeOperation(URLRequest(url: server.url("/endpoint")))
            operation.configuration.retryPolicy = .none
            operation.configuration.idleTimeout = 0.5
            if let store { operation.configuration.validatorStore = store }
            if let sizeLimit { operation.configuration.maximumResponseSize = sizeLimit }
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                queue.enqueue(operation, on: .global) { _ in done.resume() }
            }
            return operation
        }
        if store != nil { _ = await attempt() }     // fills the store: the next is conditional
        let operation = await attempt()
        return Case(name: name, error: operation.error?.code, parseCalls: operation.parseCount, message: operation.error?.description)
    }

    /// Refreshes by fetching `/token` from the check's server.
    private struct TokenFromServer: FetchAuthenticator {
        let server: TestServer

        func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential> {
            TokenOperation(url: server.url("/token"))
        }
    }

    private final class TokenOperation: FetchOperation<FetchCredential>, @unchecked Sendable {
        override func parseResponseBody(_ body: Data) throws -> FetchCredential {
            FetchCredential(token: String(decoding: body, as: UTF8.self))
        }
    }
}
