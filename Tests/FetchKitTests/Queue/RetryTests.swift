import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("Retry-After and the retry policy (pure)", .timeLimit(.minutes(3)))
struct RetryPolicyTests {
    private let now = Date(timeIntervalSince1970: 784_111_777)   // Sun, 06 Nov 1994 08:49:37 GMT

    @Test func retryAfterInSeconds() {
        #expect(RetryAfter.seconds(from: "120", now: now) == 120)
        #expect(RetryAfter.seconds(from: " 0 ", now: now) == 0)
        #expect(RetryAfter.seconds(from: "-5", now: now) == nil)
    }

    @Test(arguments: ["Sun, 06 Nov 1994 08:50:37 GMT", "Sunday, 06-Nov-94 08:50:37 GMT", "Sun Nov  6 08:50:37 1994"])
    func retryAfterAsAnHTTPDate(_ value: String) {
        #expect(RetryAfter.seconds(from: value, now: now) == 60)
    }

    @Test func retryAfterInThePastMeansNow() {
        #expect(RetryAfter.seconds(from: "Sun, 06 Nov 1994 08:00:00 GMT", now: now) == 0)
    }

    @Test func unreadableRetryAfter() {
        #expect(RetryAfter.seconds(from: "soon", now: now) == nil)
        #expect(RetryAfter.seconds(from: "", now: now) == nil)
    }

    private func status(_ code: Int, retryAfter: String? = nil) -> FetchError {
        .unacceptableStatus(.init(statusCode: code, headers: retryAfter.map { ["Retry-After": $0] } ?? [:], bodyPrefix: Data(), url: nil))
    }

    @Test func whatIsRetryable() {
        let policy = RetryPolicy.default
        #expect(policy.isRetryable(.transport(URLError(.networkConnectionLost))))
        #expect(policy.isRetryable(.transport(URLError(.cannotConnectToHost))))
        #expect(!policy.isRetryable(.transport(URLError(.badURL))))
        #expect(policy.isRetryable(.timedOut(.init(kind: .idle, interval: 1, url: nil))))
        #expect(!policy.isRetryable(.timedOut(.init(kind: .total, interval: 1, url: nil))), "the total timeout covers all attempts")
        #expect(policy.isRetryable(.lengthMismatch(.init(expected: 10, received: 5, url: nil))))
        for code in [408, 429, 500, 502, 503, 504] { #expect(policy.isRetryable(status(code))) }
        for code in [400, 401, 403, 404, 501] { #expect(!policy.isRetryable(status(code))) }
        #expect(!policy.isRetryable(.cancelled(.init(url: nil))))
        #expect(!policy.isRetryable(.parseFailed(.init(underlying: .init(ParseTestError(reason: "x")), url: nil))))
    }

    @Test func backoffGrowsWithinItsJitterAndStopsAtTheLimit() {
        let policy = RetryPolicy(maximumRetries: 3, baseDelay: 1, multiplier: 2, maximumDelay: 3, jitter: 0.25)
        let error = status(503)
        for _ in 0..<50 {
            let first = policy.delay(after: error, attempt: 1, method: "GET")!
            let second = policy.delay(after: error, attempt: 2, method: "GET")!
            let third = policy.delay(after: error, attempt: 3, method: "GET")!
            #expect((0.75...1.25).contains(first))
            #expect((1.5...2.5).contains(second))
            #expect((2.25...3.75).contains(third), "capped at 3 s, then jittered")
        }
        #expect(policy.delay(after: error, attempt: 4, method: "GET") == nil)
    }

    @Test func onlyIdempotentMethodsUnlessAsked() {
        #expect(RetryPolicy.default.delay(after: status(503), attempt: 1, method: "POST") == nil)
        #expect(RetryPolicy.default.delay(after: status(503), attempt: 1, method: "PUT") != nil)
        let brave = RetryPolicy(retriesNonIdempotentRequests: true)
        #expect(brave.delay(after: status(503), attempt: 1, method: "POST") != nil)
    }

    @Test func retryAfterSetsTheWaitWithinItsBound() {
        let policy = RetryPolicy(maximumRetryAfter: 60)
        #expect(policy.delay(after: status(429, retryAfter: "7"), attempt: 1, method: "GET") == 7)
        #expect(policy.delay(after: status(503, retryAfter: "61"), attempt: 1, method: "GET") == nil, "too long: give up")
        #expect(RetryPolicy.none.delay(after: status(503), attempt: 1, method: "GET") == nil)
    }
}

@Suite("Retries", .timeLimit(.minutes(3)))
struct RetryTests {
    /// A quick policy for tests: short waits, same decisions.
    static let quick = RetryPolicy(maximumRetries: 2, baseDelay: 0.05, maximumDelay: 0.2)

    @Test func aTransientFailureIsRetriedAndVisible() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/flaky/retry-visible/2/503")
        operation.configuration.retryPolicy = Self.quick
        let events = Locked<[RetryEvent]>([])
        operation.onRetry(on: .immediate) { event in events.withLock { $0.append(event) } }
        try await operation.run()
        #expect(operation.attempts == 3)
        #expect(operation.parses.current == [Data("ok after 2".utf8)])
        #expect(events.current.map(\.attempt) == [2, 3])
        #expect(events.current.allSatisfy { $0.error.statusCode == 503 })
        #expect(server.requests("/flaky/retry-visible/2/503").count == 3)
    }

    @Test func aFetchStartedByHandAndNotKeptStillFinishesAfterItsRetryWait() async throws {
        // Between attempts the operation holds no transfer: what waits for the delay must keep
        // it, or its completion would never run.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let done = Countdown(1)
        let attempts = Locked(0)
        weak var released: FetchOperation<Data>?
        do {
            let operation = server.operation("/flaky/unkept/1/503")
            operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 2, baseDelay: 0.2, maximumDelay: 0.2)
            operation.addCompletionHandler(on: .global) { finished in
                attempts.withLock { $0 = finished.attempts }
                done.signal()
            }
            released = operation
            operation.start()
        }
        #expect(await done.wait(), "the completion ran")
        #expect(attempts.current == 2)
        _ = released
    }

    @Test func retriesStopAtTheLimit() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/flaky/retry-limit/5/503")
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: 0.05)
        await #expect(throws: FetchError.self) { try await operation.run() }
        #expect(operation.error?.statusCode == 503)
        #expect(operation.attempts == 2)
        #expect(server.requests("/flaky/retry-limit/5/503").count == 2)
    }

    @Test func aPOSTIsNotRetriedUnlessAllowed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        var request = URLRequest(url: server.url("/flaky/post/1/503"))
        request.httpMethod = "POST"
        request.httpBody = Data("x".utf8)
        let once = RecordingOperation(request: request)
        once.configuration.retryPolicy = Self.quick
        await #expect(throws: FetchError.self) { try await once.run() }
        #expect(once.attempts == 1)
        request.url = server.url("/flaky/post-allowed/1/503")
        let twice = RecordingOperation(request: request)
        var brave = Self.quick
        brave.retriesNonIdempotentRequests = true
        twice.configuration.retryPolicy = brave
        try await twice.run()
        #expect(twice.attempts == 2)
    }

    @Test func retryAfterSetsTheWait() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/flaky/after/1/429?retry-after=1")
        let events = Locked<[RetryEvent]>([])
        operation.onRetry(on: .immediate) { event in events.withLock { $0.append(event) } }
        try await operation.run()
        #expect(events.current.map(\.delay) == [1], "the server's Retry-After, not the backoff")
        #expect(operation.attempts == 2)
    }

    @Test func cancellingDuringTheWaitFinishesAtOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/status/503")
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 3, baseDelay: 600, maximumDelay: 600)
        let waiting = Countdown(1)
        operation.onRetry(on: .global) { _ in waiting.signal() }
        operation.start()
        #expect(await waiting.wait())
        operation.cancel()
        await #expect(throws: FetchError.self) { try await operation.finished() }
        #expect(operation.error?.isCancellation == true)
        #expect(operation.attempts == 1)
    }

    @Test func theTotalTimeoutCoversEveryAttempt() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/status/503")
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 1000, baseDelay: 0.1, multiplier: 1, jitter: 0)
        operation.configuration.totalTimeout = 0.6
        await #expect(throws: FetchError.self) { try await operation.run() }
        #expect(operation.attempts < 1000, "the deadline ended the retries")
        switch operation.error {
        case .unacceptableStatus(let failure)?: #expect(failure.statusCode == 503)
        case .timedOut(let timeout)?: #expect(timeout.kind == .total)
        default: Issue.record("expected the last 503 or the total timeout, got \(String(describing: operation.error))")
        }
    }

    @Test func aRetriedDownloadResumesWhereTheFailedAttemptStopped() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 120_000
        let cut = Locked(true)
        server.resumableRoute("/cut-once", length: length, etag: Locked("e1"), cutFull: cut)
        let download = DownloadOperation(url: server.url("/cut-once"), destination: directory.file("resumed"))
        download.configuration.retryPolicy = Self.quick
        download.onRetry(on: .immediate) { _ in cut.withLock { $0 = false } }
        try await download.run()
        #expect(download.attempts == 2)
        #expect(download.resumedBytes == Int64(length / 2))
        #expect(FileManager.default.contents(atPath: directory.file("resumed").path) == TestResponse.patternBytes(count: length))
        #expect(server.requests("/cut-once").last?.header("Range") == "bytes=\(length / 2)-")
    }

    @Test func aQueueFreesTheSlotDuringTheWaitAndReportsTheRetry() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(total: 1, perHost: 1, monitors: [recorder])
        let flaky = server.operation("/status/503")
        flaky.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: 600, maximumDelay: 600)
        let waiting = Countdown(1)
        flaky.onRetry(on: .global) { _ in waiting.signal() }
        let flakyID = queue.enqueue(flaky)
        #expect(await waiting.wait())
        // The slot is free while the flaky fetch waits: another runs to its end.
        let other = server.operation("/json")
        queue.enqueue(other)
        try await other.finished()
        flaky.cancel()
        _ = try? await flaky.finished()
        #expect(await eventsDrain(queue))
        #expect(recorder.kinds(for: flakyID).filter { $0 == .retry }.count == 1)
    }
}
