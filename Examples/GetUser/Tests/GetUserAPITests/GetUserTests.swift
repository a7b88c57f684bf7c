import FetchKit
import FetchKitTesting
import Foundation
import GetUserAPI
import Testing

@Suite(.timeLimit(.minutes(1)))
struct GetUserTests {
    @Test(.testServer) func decodesTheServersAnswer() async throws {
        let server = try #require(TestServer.current)
        server.route("GET", "/users/:id") { request in
            .json(#"{"id": \#(request.parameters["id"] ?? "0"), "name": "Ada"}"#)
        }
        server.expect("GET", "/users/:id", times: .exactly(1))
        let user = try await FetchQueue().fetch(GetUser(id: 7, baseURL: server.baseURL))
        #expect(user == User(id: 7, name: "Ada"))
    }

    @Test(.testServer) func aServerErrorIsAnUnacceptableStatusWithItsBody() async throws {
        let server = try #require(TestServer.current)
        server.route("GET", "/users/:id") { _ in .status(500, body: "down for maintenance") }
        do {
            _ = try await FetchQueue().fetch(GetUser(id: 1, baseURL: server.baseURL))
            Issue.record("a 500 decoded as a user")
        } catch {
            guard case .unacceptableStatus(let status) = error else {
                Issue.record("expected unacceptableStatus, got \(error)")
                return
            }
            #expect(status.statusCode == 500)
            #expect(status.bodyPrefix == Data("down for maintenance".utf8))
        }
    }

    @Test(.testServer) func aBodyCutMidwayIsNeverParsed() async throws {
        let server = try #require(TestServer.current)
        server.route("GET", "/users/:id") { _ in .closeMidBody(count: 10) }
        let operation = GetUser(id: 1, baseURL: server.baseURL)
        operation.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(operation) }
        #expect(operation.error?.code == .lengthMismatch)
    }

    @Test func decodesTheStubsAnswer() async throws {
        let stub = StubTransport()
        stub.route("GET", "/users/:id") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
        let operation = GetUser(id: 1, baseURL: stub.baseURL)
        operation.configuration.session = stub.makeSession()
        let user = try await FetchQueue().fetch(operation)
        #expect(user.name == "Ada")
    }

    @Test func aMalformedAnswerIsAParseFailure() async throws {
        let stub = StubTransport()
        stub.route("GET", "/users/:id") { _ in .json(#"{"id": "one"}"#) }
        let operation = GetUser(id: 1, baseURL: stub.baseURL)
        operation.configuration.session = stub.makeSession()
        await #expect(throws: FetchError.self) { try await FetchQueue().fetch(operation) }
        #expect(operation.error?.code == .parseFailed)
    }
}
