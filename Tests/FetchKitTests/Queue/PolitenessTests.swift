import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("Per-host back-off", .timeLimit(.minutes(3)))
struct HostBackOffTests {
    @Test func aRetryAfterHoldsTheHostsOtherFetchesButNotOtherHosts() async throws {
        let server = try TestServer.standard()
        let other = try TestServer.standard()
        defer { server.shutDown(); other.shutDown() }
        let queue = makeFetchQueue(total: 4, perHost: 4)
        // A long pause, which the test ends itself: nothing here depends on how fast it runs.
        let throttled = server.operation("/flaky/backoff/1/429?retry-after=60")
        let retrying = Countdown(1)
        throttled.onRetry(on: .global) { _ in retrying.signal() }
        let sent = Date()
        queue.enqueue(throttled)
        #expect(await retrying.wait())
        let paused = try #require(queue.backOffDeadline(for: server.baseURL), "the host is paused")
        // 60 s from the 429, which came between `sent` and now (however slow this run is).
        #expect(paused.timeIntervalSince(sent) >= 59 && paused.timeIntervalSinceNow <= 60)
        // Another fetch to the paused host waits in line, with nothing in flight…
        let held = server.operation("/json")
        queue.enqueue(held)
        #expect(await counts(of: queue) { $0 == .init(inFlight: 0, waiting: 1) })
        // …while another host is served at once.
        let elsewhere = other.operation("/json")
        queue.enqueue(elsewhere)
        try await elsewhere.finished()
        #expect(!held.isFinished)
        #expect(server.requests("/json").count == 0)
        // Lifting the pause lets it go.
        queue.clearBackOff(for: server.baseURL)
        try await held.finished()
        #expect(queue.backOffDeadline(for: server.baseURL) == nil)
        #expect(server.requests.map(\.path) == ["/flaky/backoff/1/429", "/json"])
        throttled.cancel()
        _ = try? await throttled.finished()
        #expect(throttled.error?.isCancellation == true)
    }

    @Test func aServiceUnavailableWithoutRetryAfterPausesNothing() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let failing = server.operation("/status/503")
        failing.configuration.retryPolicy = .none
        queue.enqueue(failing)
        _ = try? await failing.finished()
        #expect(queue.backOffDeadline(for: server.baseURL) == nil)
    }
}

@Suite("Conditional GET", .timeLimit(.minutes(3)))
struct ConditionalGETTests {
    @Test func theSecondFetchIsNotModifiedAndItsOutputComesFromTheStoredBody() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = ValidatorStore()
        let first = server.operation("/etag/v1")
        first.configuration.validatorStore = store
        try await first.run()
        #expect(first.parses.current == [Data("tag v1".utf8)])
        #expect(!first.isNotModified)
        #expect(store.validators(for: server.url("/etag/v1"))?.entityTag == "\"v1\"")

        let second = server.operation("/etag/v1")
        second.configuration.validatorStore = store
        try await second.run()
        #expect(second.isNotModified)
        #expect(second.error == nil)
        #expect(second.response?.statusCode == 304)
        #expect(second.parses.current == [Data("tag v1".utf8)], "the kept body, parsed again")
        #expect(try second.result?.get() == Data("tag v1".utf8))
        let sent = try #require(server.requests("/etag/v1").last)
        #expect(sent.header("If-None-Match") == "\"v1\"")
        #expect(sent.header("If-Modified-Since") == StandardRoutes.lastModified)
    }

    @Test func withoutStoredBodiesTheOperationSaysWhatANotModifiedYields() async throws {
        final class Revision: FetchOperation<String>, @unchecked Sendable {
            let parsed = Locked(0)
            override func parseResponseBody(_ body: Data) throws -> String {
                parsed.withLock { $0 += 1 }
                return String(decoding: body, as: UTF8.self)
            }
            override func outputWhenNotModified(storedBody: Data?) throws -> String {
                storedBody == nil ? "unchanged" : "unexpected body"
            }
        }
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = ValidatorStore(storesBodies: false)
        let first = Revision(url: server.url("/etag/v3"))
        first.configuration.validatorStore = store
        #expect(try await first.run().result?.get() == "tag v3")
        let second = Revision(url: server.url("/etag/v3"))
        second.configuration.validatorStore = store
        #expect(try await second.run().result?.get() == "unchanged")
        #expect(second.isNotModified)
        #expect(second.parsed.current == 0, "nothing to parse")

        // An operation that does not say fails clearly, naming the hook.
        let third = server.operation("/etag/v3")
        third.configuration.validatorStore = store
        let error = await outcome(of: third)
        guard case .parseFailed(let failure)? = error else {
            Issue.record("expected parseFailed, got \(String(describing: error))")
            return
        }
        #expect(failure.description.contains("outputWhenNotModified(storedBody:)"))
        #expect(third.response?.statusCode == 304)
    }

    /// A plain operation, whose output needs the body, sends no validators that would earn a
    /// `304` it could make nothing of: it gets the body, as it would without a store.
    @Test func aPlainOperationGetsTheBodyFromAStoreThatKeepsNone() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = ValidatorStore(storesBodies: false)
        let url = server.url("/etag/v4")
        for round in 0..<2 {
            let operation = FetchOperation<Data>(url: url)
            operation.configuration.validatorStore = store
            #expect(try await FetchQueue().fetch(operation) == Data("tag v4".utf8), "round \(round)")
            #expect(!operation.isNotModified)
        }
        #expect(store.validators(for: url)?.entityTag == "\"v4\"", "the store still learns the validators")
        #expect(server.requests("/etag/v4").allSatisfy { $0.header("If-None-Match") == nil })

        // An output that needs no body still revalidates: a 304 is a success with nothing in it.
        let touch = FetchOperation<Void>(url: url)
        touch.configuration.validatorStore = store
        try await FetchQueue().fetch(touch)
        #expect(touch.isNotModified)
        #expect(server.requests("/etag/v4").last?.header("If-None-Match") == "\"v4\"")
    }

    @Test func aStoredBodyIsParsedWhenAsked() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = ValidatorStore(storesBodies: true)
        let first = server.operation("/etag/v2")
        first.configuration.validatorStore = store
        try await first.run()
        let second = server.operation("/etag/v2")
        second.configuration.validatorStore = store
        try await second.run()
        #expect(second.isNotModified)
        #expect(second.parses.current == [Data("tag v2".utf8)], "the stored body, parsed")
        #expect(second.responseBody == Data("tag v2".utf8))
    }

    @Test func aBodyThatFailedToParseIsFetchedWholeNextTime() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = ValidatorStore()
        let broken = server.operation("/etag/v3")
        broken.configuration.validatorStore = store
        broken.parseError = ParseTestError(reason: "bad feed")
        _ = try? await broken.run()
        #expect(store.validators(for: server.url("/etag/v3")) == nil)
        let again = server.operation("/etag/v3")
        again.configuration.validatorStore = store
        try await again.run()
        #expect(!again.isNotModified)
        #expect(server.requests("/etag/v3").last?.header("If-None-Match") == nil)
    }

    @Test func validatorsSurviveInTheirFile() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let file = directory.file("validators.json")
        let store = ValidatorStore(persistingTo: file)
        let operation = server.operation("/etag/v4")
        operation.configuration.validatorStore = store
        try await operation.run()
        try store.save()
        let reloaded = ValidatorStore(persistingTo: file)
        #expect(reloaded.validators(for: server.url("/etag/v4"))?.entityTag == "\"v4\"")
        let next = server.operation("/etag/v4")
        next.configuration.validatorStore = reloaded
        try await next.run()
        #expect(next.isNotModified)
    }

    @Test func anUnreadableFileGivesAnEmptyStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.file("garbage.json")
        try Data("{ not json".utf8).write(to: file)
        let store = ValidatorStore(persistingTo: file)
        #expect(store.count == 0)
    }

    @Test func aFloodOfNotModifiedThroughAQueue() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = ValidatorStore()
        let queue = makeFetchQueue(total: 8, perHost: 8)
        let warmUp = (0..<50).map { server.operation("/etag/flood-\($0)") }
        for operation in warmUp { operation.configuration.validatorStore = store; queue.enqueue(operation) }
        for operation in warmUp { try await operation.finished() }
        let refresh = (0..<50).flatMap { index in (0..<4).map { _ in server.operation("/etag/flood-\(index)") } }
        let completions = Countdown(refresh.count)
        for operation in refresh {
            operation.configuration.validatorStore = store
            queue.enqueue(operation) { _ in completions.signal() }
        }
        #expect(await completions.wait(), "every completion ran")
        #expect(completions.overSignals == 0, "and none twice")
        #expect(refresh.allSatisfy { $0.isNotModified && $0.parses.current.count == 1 && $0.error == nil })
        #expect(await queueIsEmpty(queue))
    }
}

@Suite("Redirect policy", .timeLimit(.minutes(3)))
struct RedirectPolicyTests {
    @Test func tooManyRedirectsIsAClearError() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/redirect/6")
        operation.configuration.redirectPolicy = .follow(maximum: 3)
        await #expect(throws: FetchError.self) { try await operation.run() }
        guard case .redirectFailed(let failure)? = operation.error else {
            Issue.record("expected redirectFailed, got \(String(describing: operation.error))")
            return
        }
        #expect(failure.kind == .tooMany(3))
        #expect(failure.chain.map(\.path) == ["/redirect/6", "/redirect/5", "/redirect/4", "/redirect/3", "/redirect/2"])
        #expect(operation.attempts == 1, "not retried")
    }

    @Test func aRedirectLoopIsCaughtAtOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/redirect-loop")
        await #expect(throws: FetchError.self) { try await operation.run() }
        guard case .redirectFailed(let failure)? = operation.error else {
            Issue.record("expected redirectFailed, got \(String(describing: operation.error))")
            return
        }
        #expect(failure.kind == .loop)
        #expect(server.requests("/redirect-loop").count == 1)
        #expect(failure.description.contains("Redirect loop"))
    }

    @Test func notFollowingGivesTheRedirectItself() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let refused = server.operation("/redirect/1")
        refused.configuration.redirectPolicy = .doNotFollow
        await #expect(throws: FetchError.self) { try await refused.run() }
        guard case .unacceptableStatus(let failure)? = refused.error else {
            Issue.record("expected the 302, got \(String(describing: refused.error))")
            return
        }
        #expect(failure.statusCode == 302)
        #expect(failure.headers.first { $0.key.lowercased() == "location" }?.value == "/redirect/0")
        let accepted = server.operation("/redirect/1")
        accepted.configuration.redirectPolicy = .doNotFollow
        accepted.configuration.acceptableStatusCodes = [302]
        try await accepted.run()
        #expect(accepted.response?.statusCode == 302)
        #expect(server.requests("/redirect/0").count == 0)
    }

    @Test func aHookDecidesEachRedirect() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let seen = Locked<[[String]]>([])
        let operation = server.operation("/redirect/2")
        operation.configuration.redirectPolicy = .ask { context in
            seen.withLock { $0.append(context.chain.map(\.path)) }
            var next = context.proposedRequest
            next.setValue("hooked", forHTTPHeaderField: "X-Hook")
            return context.chain.count < 2 ? next : nil
        }
        await #expect(throws: FetchError.self) { try await operation.run() }
        #expect(operation.error?.statusCode == 302, "the hook stopped at the second redirect")
        #expect(seen.current == [["/redirect/2"], ["/redirect/2", "/redirect/1"]])
        #expect(server.requests("/redirect/1").first?.header("X-Hook") == "hooked")
    }

    @Test func credentialsAndCookiesStayWithTheirOrigin() async throws {
        let origin = try TestServer.standard()
        let other = try TestServer.standard()
        defer { origin.shutDown(); other.shutDown() }
        var request = URLRequest(url: origin.url("/redirect-to?url=\(other.url("/headers").absoluteString)"))
        request.setValue("Bearer secret", forHTTPHeaderField: "Authorization")
        request.setValue("session=1", forHTTPHeaderField: "Cookie")
        request.setValue("kept", forHTTPHeaderField: "X-Other")
        try await RecordingOperation(request: request).run()
        let arrived = try #require(other.requests("/headers").first)
        #expect(arrived.header("Authorization") == nil)
        #expect(arrived.header("Cookie") == nil)
        #expect(arrived.header("X-Other") == "kept")
    }
}

@Suite("Authentication", .timeLimit(.minutes(3)))
struct AuthenticationTests {
    @Test func credentialsPerHostAnswerTheChallenge() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/basic-auth/alice/secret")
        operation.configuration.credentials = .perHost(["127.0.0.1": URLCredential(user: "alice", password: "secret", persistence: .none)])
        try await operation.run()
        let object = try JSONSerialization.jsonObject(with: operation.responseBody ?? Data()) as? [String: Any]
        #expect(object?["user"] as? String == "alice")
    }

    @Test func aWrongPasswordFailsWithTheStatusWithoutLooping() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/basic-auth/alice/secret")
        operation.configuration.credentials = .perHost(["127.0.0.1": URLCredential(user: "alice", password: "wrong", persistence: .none)])
        await #expect(throws: FetchError.self) { try await operation.run() }
        #expect(operation.error?.statusCode == 401)
        #expect(server.requests("/basic-auth/alice/secret").count <= 2, "one answer, then the 401")
    }

    @Test func anotherHostsCredentialIsNotOffered() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/basic-auth/alice/secret")
        operation.configuration.credentials = .perHost(["example.com": URLCredential(user: "alice", password: "secret", persistence: .none)])
        await #expect(throws: FetchError.self) { try await operation.run() }
        #expect(operation.error?.statusCode == 401)
        #expect(server.requests("/basic-auth/alice/secret").allSatisfy { $0.header("Authorization") == nil })
    }
}
