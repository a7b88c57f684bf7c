import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

/// The classic pair: log in, then fetch the user with the token.
final class LoginOperation: FetchOperation, @unchecked Sendable {
    private let token = Locked<String?>(nil)
    var authToken: String? { token.current }

    init(server: LoopbackServer, user: String, password: String) {
        var request = URLRequest(url: server.url("/login"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try? JSONSerialization.data(withJSONObject: ["user": user, "password": password])
        super.init(request: request)
        name = "login"
    }

    override func parseResponseBody(_ body: Data) throws {
        let object = try JSONSerialization.jsonObject(with: body) as? [String: Any]
        guard let value = object?["token"] as? String else { throw ParseTestError(reason: "no token") }
        token.withLock { $0 = value }
    }
}

final class GetUserOperation: FetchOperation, @unchecked Sendable {
    private let login: LoginOperation
    private let server: LoopbackServer
    private let userName = Locked<String?>(nil)
    var user: String? { userName.current }

    init(server: LoopbackServer, after login: LoginOperation) {
        self.login = login
        self.server = server
        super.init()
        name = "get-user"
        addDependency(login)
    }

    override func makeRequest() throws -> URLRequest? {
        var request = URLRequest(url: server.url("/user"))
        request.setValue("Bearer \(login.authToken ?? "")", forHTTPHeaderField: "Authorization")
        return request
    }

    override func parseResponseBody(_ body: Data) throws {
        let object = try JSONSerialization.jsonObject(with: body) as? [String: Any]
        userName.withLock { $0 = object?["name"] as? String }
    }
}

@Suite("Dependencies")
struct DependencyTests {
    @Test func loginThenGetUserUsesTheToken() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let login = LoginOperation(server: server, user: "alice", password: "secret")
        let getUser = GetUserOperation(server: server, after: login)
        makeQueue(4).enqueue([getUser, login])
        let user = try await getUser.finished().user
        #expect(user == "alice")
        #expect(server.requests(path: "/user").first?.headers["Authorization"] == "Bearer token-alice")
    }

    @Test func aFailedDependencyStopsItsDependentBeforeAnyRequest() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let login = LoginOperation(server: server, user: "alice", password: "wrong")
        let getUser = GetUserOperation(server: server, after: login)
        makeQueue(4).enqueue([login, getUser])
        _ = try? await getUser.finished()
        guard case .dependencyFailed(let failure)? = getUser.error else {
            Issue.record("expected dependencyFailed, got \(String(describing: getUser.error))")
            return
        }
        #expect(failure.dependency == "'login'")
        #expect((failure.dependencyError?.error as? FetchError)?.statusCode == 403)
        #expect(!failure.dependencyWasCancelled)
        #expect(server.requestCount(path: "/user") == 0)
        #expect(getUser.description.contains("get-user"))
    }

    @Test func aCancelledDependencyStopsItsDependent() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let login = LoginOperation(server: server, user: "alice", password: "secret")
        let getUser = GetUserOperation(server: server, after: login)
        login.cancel()
        makeQueue(4).enqueue([login, getUser])
        _ = try? await getUser.finished()
        guard case .dependencyFailed(let failure)? = getUser.error else {
            Issue.record("expected dependencyFailed, got \(String(describing: getUser.error))")
            return
        }
        #expect(failure.dependencyWasCancelled)
        #expect(server.requestsReceived == 0)
    }

    @Test func failurePropagatesDownAChain() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let first = server.operation("/status/500")
        let second = server.operation("/json")
        let third = server.operation("/json")
        second.addDependency(first)
        third.addDependency(second)
        makeQueue(3).enqueue([third, second, first])
        _ = try? await third.finished()
        #expect(first.error?.statusCode == 500)
        guard case .dependencyFailed? = second.error, case .dependencyFailed(let failure)? = third.error else {
            Issue.record("expected the failure to propagate")
            return
        }
        #expect(failure.dependency == "RecordingOperation")
        #expect(server.requestCount(path: "/json") == 0)
    }

    @Test func optingOutRunsDespiteAFailedDependency() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let failing = server.operation("/status/500")
        let dependent = server.operation("/json")
        dependent.requiresSuccessfulDependencies = false
        dependent.addDependency(failing)
        makeQueue(2).enqueue([dependent, failing])
        try await dependent.finished()
        #expect(dependent.error == nil)
        #expect(failing.error?.statusCode == 500)
    }

    @Test func plainOperationDependenciesAreRespected() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let order = Locked<[String]>([])
        let setup = BlockOperation { order.withLock { $0.append("setup") } }
        let fetch = server.operation("/json")
        fetch.onParse = { _ in order.withLock { $0.append("parse") } }
        fetch.addDependency(setup)
        makeQueue(2).enqueue([fetch, setup])
        try await fetch.finished()
        #expect(order.current == ["setup", "parse"])
    }

    @Test func startingByHandBeforeDependenciesFinishFailsCleanly() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let blocker = BlockOperation {}
        let operation = server.operation("/json")
        operation.addDependency(blocker)
        operation.start()
        guard case .invalidRequest(let details)? = operation.error, case .startedBeforeReady = details.reason else {
            Issue.record("expected startedBeforeReady, got \(String(describing: operation.error))")
            return
        }
        #expect(server.requestsReceived == 0)
    }
}
