import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

// The README's Quick Start, compiled and run against the loopback server (whose /login and
// /user endpoints play the API). Keep the two in step.

nonisolated struct User: Decodable, Sendable {
    let name: String
    let id: Int
}

/// POST /login → {"token": "…"}; its output is the token.
nonisolated final class LogIn: FetchOperation<String>, @unchecked Sendable {
    init(api: URL, user: String, password: String) {
        var request = URLRequest(url: api.appendingPathComponent("login"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try? JSONEncoder().encode(["user": user, "password": password])
        super.init(request: request)
    }

    override func parseResponseBody(_ body: Data) throws -> String {
        try JSONDecoder().decode([String: String].self, from: body)["token"] ?? ""
    }
}

/// GET /user, with the token the login got.
nonisolated final class GetUser: FetchOperation<User>, @unchecked Sendable {
    private let api: URL
    private let login: LogIn

    init(api: URL, after login: LogIn) {
        self.api = api
        self.login = login
        super.init()
        addDependency(login)            // runs after the login; if it fails, sends nothing
    }

    override func makeRequest() throws -> URLRequest? {
        let token = try login.result?.get() ?? ""
        var request = URLRequest(url: api.appendingPathComponent("user"))
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        return request
    }

    override func parseResponseBody(_ body: Data) throws -> User {
        try JSONDecoder().decode(User.self, from: body)
    }
}

@Suite("README Quick Start", .timeLimit(.minutes(3)))
struct QuickStartTests {
    @Test func loginThenUser() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let api = server.baseURL

        let queue = FetchQueue()
        let login = LogIn(api: api, user: "alice", password: "secret")
        let getUser = GetUser(api: api, after: login)
        let printed = Locked<String?>(nil)
        let handled = Countdown(1)
        getUser.onCompletion(on: .global) { result in
            switch result {
            case .success(let user): printed.withLock { $0 = "hello, \(user.name)" }
            case .failure(let error): printed.withLock { $0 = "failed: \(error)" }
            }
            handled.signal()
        }
        queue.enqueue(login)
        let user = try await queue.fetch(getUser)
        #expect(user.name == "alice")
        #expect(user.id == 42)
        #expect(await handled.wait())
        #expect(printed.current == "hello, alice")
    }

    @Test func wrongPasswordStopsTheDependent() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let login = LogIn(api: server.baseURL, user: "alice", password: "wrong")
        let getUser = GetUser(api: server.baseURL, after: login)
        let queue = makeQueue(4)
        queue.addOperation(login)
        queue.addOperation(getUser)
        await #expect(throws: FetchError.self) { try await getUser.value }
        #expect(getUser.error?.description.contains("Not sent: dependency LogIn failed") == true)
        #expect(server.requests("/user").count == 0)
    }
}
