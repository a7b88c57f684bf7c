import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// ``FetchConfiguration/connectTimeout``: a connection that cannot be made ends at it, long
/// before the idle timeout, as `.timedOut(.connect)`; it bounds nothing after the connection.
///
/// Each test's idle timeout is 60 s, so the error's kind and interval say which limit fired: on
/// Linux, each of the first two fails without FetchKit's option on the task's libcurl handle
/// (the attempt then ends at its idle timeout, as `.idle`). Only the lower side of the time is
/// checked (the timeout did not fire early): a loaded machine delays an end, never hastens it.
@Suite("Connect timeout", .timeLimit(.minutes(2)))
struct ConnectTimeoutTests {
    /// Runs `operation` on a session of its own, timed to its end.
    private func timedOutcome(of operation: FetchOperation<Data>, session: FetchSession = FetchSession()) async -> (FetchError?, TimeInterval) {
        defer { session.invalidate(cancellingTransfers: true) }
        operation.configuration.session = session
        let started = Date()
        let error = await outcome(of: operation)
        return (error, Date().timeIntervalSince(started))
    }

    private func stalledFetch(_ url: URL, connectTimeout: TimeInterval = 0.3, retries: Int = 0) -> FetchOperation<Data> {
        let operation = FetchOperation<Data>(request: URLRequest(url: url))
        operation.configuration.idleTimeout = 60
        operation.configuration.connectTimeout = connectTimeout
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: retries, baseDelay: 0.01, jitter: 0)
        return operation
    }

    #if canImport(FoundationNetworking)
    @Test func aTCPHandshakeThatNeverCompletesEndsAtTheConnectTimeout() async throws {
        let port = try SilentPort(.connectStalls)
        let (error, elapsed) = await timedOutcome(of: stalledFetch(port.url("/file")))
        guard case .timedOut(let timeout) = error else {
            Issue.record("expected a connect timeout, got \(String(describing: error))")
            return
        }
        #expect(timeout.kind == .connect)
        #expect(timeout.interval == 0.3)
        #expect(elapsed >= 0.25, "ended after \(elapsed) s, before its 0.3 s")
        #expect(timeout.description.contains("connect timeout"))
    }

    @Test func aTLSHandshakeThatNeverCompletesEndsAtTheConnectTimeout() async throws {
        let port = try SilentPort(.neverAnswers)
        let (error, elapsed) = await timedOutcome(of: stalledFetch(port.url("/file", scheme: "https")))
        #expect(elapsed >= 0.25, "ended after \(elapsed) s, before its 0.3 s")
        guard case .timedOut(let timeout) = error else {
            Issue.record("expected a connect timeout, got \(String(describing: error))")
            return
        }
        #expect(timeout.kind == .connect)
    }

    @Test func aConnectTimeoutIsRetriedByThePolicy() async throws {
        let port = try SilentPort(.connectStalls)
        let operation = stalledFetch(port.url("/file"), connectTimeout: 0.2, retries: 2)
        let retries = Locked<[RetryEvent]>([])
        operation.onRetry(on: .immediate) { event in retries.withLock { $0.append(event) } }
        let (error, _) = await timedOutcome(of: operation)
        guard case .timedOut(let timeout) = error else {
            Issue.record("expected a connect timeout, got \(String(describing: error))")
            return
        }
        #expect(timeout.kind == .connect)
        #expect(retries.current.map(\.attempt) == [2, 3], "nothing was sent: every attempt may try again")
    }

    @Test func theSessionsThatEnforceIt() throws {
        #expect(FetchSession().enforcesConnectTimeouts)
        #expect(FetchSession.shared.enforcesConnectTimeouts)
        let configuration = FetchSession.defaultConfiguration()
        configuration.urlCache = URLCache(memoryCapacity: 0, diskCapacity: 0, diskPath: nil)
        #expect(!FetchSession(configuration: configuration).enforcesConnectTimeouts,
                "the urlCache slot is where FetchKit sets it")
        var trust = TrustSettings()
        try trust.pinPublicKeys([Data(count: 32).base64EncodedString()], forHost: "pinned.invalid")
        #expect(try FetchSession(trust: trust).enforcesConnectTimeouts)
    }

    @Test func withoutTheSlotTheIdleTimeoutStillBoundsAConnection() async throws {
        let port = try SilentPort(.connectStalls)
        let configuration = FetchSession.defaultConfiguration()
        configuration.urlCache = URLCache(memoryCapacity: 0, diskCapacity: 0, diskPath: nil)
        let operation = stalledFetch(port.url("/file"))
        operation.configuration.idleTimeout = 0.5
        let (error, _) = await timedOutcome(of: operation, session: FetchSession(configuration: configuration))
        guard case .timedOut(let timeout) = error else {
            Issue.record("expected a timeout, got \(String(describing: error))")
            return
        }
        #expect(timeout.kind == .idle, "not set, so not reported as a connect timeout")
    }
    #endif

    @Test func aSlowAnswerOnAConnectionMadeInTimeIsNotAConnectTimeout() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(request: URLRequest(url: server.url("/delay/800")))
        operation.configuration.connectTimeout = 0.1
        operation.configuration.retryPolicy = .none
        let (error, _) = await timedOutcome(of: operation)
        #expect(error == nil, "\(String(describing: error))")
        #expect(operation.result.flatMap { try? $0.get() }.map { String(decoding: $0, as: UTF8.self) } == "delayed 800")
    }

    @Test func aConnectTimeoutIsRetryableAndNamesItsFlag() {
        let timeout = FetchError.timedOut(.init(kind: .connect, interval: 2, url: URL(string: "https://user:secret@example.com/a?token=t")))
        #expect(RetryPolicy().isRetryable(timeout))
        #expect(!String(describing: timeout).contains("secret"))
        #expect(FetchSession.milliseconds(0.0001) == 1)
        #expect(FetchSession.milliseconds(1.5) == 1500)
        #expect(FetchSession.milliseconds(.infinity) == 31_536_000_000)
        #expect(FetchSession.milliseconds(.nan) == nil)
        #expect(FetchSession.milliseconds(-3) == 1)
    }
}
