import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

// The login → user pair is the README's Quick Start (QuickStartTests.swift): `LogIn` and
// `GetUser`, named here for the dependency-failure messages.

private func loginPair(_ server: TestServer, password: String) -> (LogIn, GetUser) {
    let login = LogIn(api: server.baseURL, user: "alice", password: password)
    login.name = "login"
    let getUser = GetUser(api: server.baseURL, after: login)
    getUser.name = "get-user"
    return (login, getUser)
}

@Suite("Dependencies", .timeLimit(.minutes(3)))
struct DependencyTests {
    @Test func loginThenGetUserUsesTheToken() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (login, getUser) = loginPair(server, password: "secret")
        makeQueue(4).enqueue([getUser, login])
        let user = try await getUser.value
        #expect(user.name == "alice")
        #expect(server.requests("/user").first?.header("Authorization") == "Bearer token-alice")
    }

    @Test func aFailedDependencyStopsItsDependentBeforeAnyRequest() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (login, getUser) = loginPair(server, password: "wrong")
        makeQueue(4).enqueue([login, getUser])
        _ = try? await getUser.finished()
        guard case .dependencyFailed(let failure)? = getUser.error else {
            Issue.record("expected dependencyFailed, got \(String(describing: getUser.error))")
            return
        }
        #expect(failure.dependency == "'login'")
        #expect((failure.dependencyError?.error as? FetchError)?.statusCode == 403)
        #expect(!failure.dependencyWasCancelled)
        #expect(server.requests("/user").count == 0)
        #expect(getUser.description.contains("get-user"))
    }

    @Test func aCancelledDependencyStopsItsDependent() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (login, getUser) = loginPair(server, password: "secret")
        login.cancel()
        makeQueue(4).enqueue([login, getUser])
        _ = try? await getUser.finished()
        guard case .dependencyFailed(let failure)? = getUser.error else {
            Issue.record("expected dependencyFailed, got \(String(describing: getUser.error))")
            return
        }
        #expect(failure.dependencyWasCancelled)
        #expect(server.counters.requestsReceived == 0)
    }

    @Test func failurePropagatesDownAChain() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
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
        #expect(server.requests("/json").count == 0)
    }

    @Test func optingOutRunsDespiteAFailedDependency() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let failing = server.operation("/status/500")
        let dependent = server.operation("/json")
        dependent.configuration.requiresSuccessfulDependencies = false
        dependent.addDependency(failing)
        makeQueue(2).enqueue([dependent, failing])
        try await dependent.finished()
        #expect(dependent.error == nil)
        #expect(failing.error?.statusCode == 500)
    }

    @Test func plainOperationDependenciesAreRespected() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
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
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let blocker = BlockOperation {}
        let operation = server.operation("/json")
        operation.addDependency(blocker)
        operation.start()
        guard case .invalidRequest(let details)? = operation.error, case .startedBeforeReady = details.reason else {
            Issue.record("expected startedBeforeReady, got \(String(describing: operation.error))")
            return
        }
        #expect(server.counters.requestsReceived == 0)
    }

    @Test func aWaitingDependentIsKeptAliveUntilItsDependencyFinishes() async {
        let dependency = BlockOperation {}
        let freed = Countdown(1)
        weak var dependent: DeinitProbeOperation?
        do {
            let operation = DeinitProbeOperation(url: URL(string: "http://127.0.0.1:9/never")!)
            operation.onDeinit = { freed.signal() }
            operation.addDependency(dependency)
            dependent = operation
        }
        #expect(dependent != nil, "kept alive: the dependency still points to it")
        dependency.start()
        #expect(await freed.wait(), "freed once its dependency finished")
    }

    @Test func aCancelledDependentLeavesItsDependenciesAndStillListsThem() async {
        let first = BlockOperation {}
        let second = BlockOperation {}
        let freed = Countdown(1)
        do {
            let operation = DeinitProbeOperation(url: URL(string: "http://127.0.0.1:9/never")!)
            operation.onDeinit = { freed.signal() }
            operation.addDependency(first)
            operation.addDependency(second)
            operation.cancel()
            #expect(operation.isReady)
            #expect(operation.dependencies.map(ObjectIdentifier.init) == [first, second].map(ObjectIdentifier.init))
            operation.removeDependency(first)
            #expect(operation.dependencies.map(ObjectIdentifier.init) == [ObjectIdentifier(second)])
        }
        #expect(await freed.wait(), "a cancelled dependent is freed while its dependencies wait")
        first.start()
        second.start()
    }
}
