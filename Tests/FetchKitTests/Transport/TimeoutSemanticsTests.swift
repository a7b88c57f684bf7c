import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Which bound holds, as a user reads it: the request's `timeoutInterval` (or `idleTimeout`) is
/// how long the server may stay silent, and a server that never answers within it is not asked
/// again; `totalTimeout` is a deadline over the whole fetch, every attempt and every wait.
@Suite("Timeouts across retries", .timeLimit(.minutes(3)))
struct TimeoutSemanticsTests {
    /// Whether a fetch that should end at `interval` ended no sooner (less the timer's leeway).
    /// Only the lower side is checked: how much later it ends depends on how loaded the machine
    /// is (a parallel suite on two cores has delayed completions by 15 s), so an upper bound
    /// would test the machine. The request counts are what catch a retry behind the test's
    /// back, and the error's kind and interval which bound fired.
    private func endedNoSooner(_ elapsed: TimeInterval, than interval: TimeInterval) -> Bool {
        elapsed >= interval - 0.1
    }

    /// Runs `operation` to its end, timed from just before it starts to its completion handler
    /// (on the thread that finishes it: the test's own task may resume late while the whole
    /// suite runs in parallel). The operation gets a session of its own: the shared one's
    /// queue, where FetchKit keeps its clocks, is busy with the rest of the suite.
    private func timedOutcome(of operation: FetchOperation<Data>) async -> (FetchError?, TimeInterval) {
        let session = FetchSession()
        defer { session.invalidate() }
        operation.configuration.session = session
        let finishedAt = Locked<Date?>(nil)
        let completed = Countdown(1)
        operation.onCompletion(on: .immediate) { _ in
            finishedAt.withLock { $0 = Date() }
            completed.signal()
        }
        let started = Date()
        let error = await outcome(of: operation)
        _ = await completed.wait()
        guard let end = finishedAt.current else {
            Issue.record("the operation never completed")
            return (error, .infinity)
        }
        return (error, end.timeIntervalSince(started))
    }

    /// Routes `path` to `response`, which gets the number of the request, from 1.
    private func route(_ server: TestServer, _ path: String, _ response: @escaping @Sendable (Int) -> TestResponse) {
        let requests = Locked(0)
        server.route(path) { _ in
            let number = requests.withLock { count -> Int in
                count += 1
                return count
            }
            return response(number)
        }
    }

    @Test(arguments: [1.0, 0.4])
    func aServerThatNeverAnswersFailsAfterTheRequestTimeoutOnce(_ interval: TimeInterval) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        route(server, "/never") { _ in .steps([.stall]) }
        var request = URLRequest(url: server.url("/never"))
        request.timeoutInterval = interval
        let operation = FetchOperation<Data>(request: request)   // the default retry policy
        let retries = Locked<[RetryEvent]>([])
        operation.onRetry(on: .immediate) { event in retries.withLock { $0.append(event) } }
        let (error, elapsed) = await timedOutcome(of: operation)
        guard case .timedOut(let timeout)? = error else {
            Issue.record("expected a timeout, got \(String(describing: error))")
            return
        }
        print("timeoutInterval \(interval) s against a silent server: \(timeout.kind) timeout after \(String(format: "%.3f", elapsed)) s, \(server.requests("/never").count) request(s)")
        #expect(timeout.kind == .idle)
        #expect(timeout.interval == interval, "the error names the bound that fired, as set")
        #expect(endedNoSooner(elapsed, than: interval), "\(interval) s took \(elapsed) s")
        #expect(server.requests("/never").count == 1, "a server silent for the whole timeout is not asked again")
        #expect(retries.current.isEmpty)
        #expect(operation.attempts == 1)
    }

    // Under a sanitizer the fault suite's "stall mid-body" runs the same path (an answer, a stall,
    // an idle timeout, one retry), through a queue and to a file: this test's 10 s would add nothing.
    @Test(.disabled(if: runsUnderSanitizer, "under a sanitizer: the fault suite's stall mid-body covers it; CI's time"))
    func aServerThatStallsAfterAnsweringIsRetried() async throws {
        // It answered, then went silent mid-body: another attempt may well get the rest.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(url: server.url("/stall-mid-body/1000"))
        // Room for the head to arrive on a loaded machine: a head later than the idle timeout
        // means "never answered", which is (rightly) not retried.
        // (3 s was too little beside three compilers and a second test run.)
        let idle: TimeInterval = 5
        operation.configuration.idleTimeout = idle
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: 0.05, jitter: 0)
        let error = await outcome(of: operation)
        guard case .timedOut(let timeout)? = error else {
            Issue.record("expected a timeout, got \(String(describing: error))")
            return
        }
        #expect(timeout.kind == .idle)
        #expect(timeout.interval == idle)
        #expect(server.requests("/stall-mid-body/1000").count == 2)
    }

    /// Failures that come at once, with a wait before the retry that would end past the
    /// deadline: the retry is not begun, and the failure stands.
    @Test(arguments: [(503, nil, RetryPolicy(maximumRetries: 3, baseDelay: 20, jitter: 0)),
                      (429, "30", RetryPolicy(maximumRetries: 3, baseDelay: 0.01, jitter: 0))] as [(Int, String?, RetryPolicy)])
    func aRetryWhoseWaitWouldPassTheDeadlineIsNotBegun(_ status: Int, _ retryAfter: String?, _ policy: RetryPolicy) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let path = "/busy"
        route(server, path) { _ in
            let busy = TestResponse.text("busy", status: status)
            return retryAfter.map { busy.with(header: "Retry-After", $0) } ?? busy
        }
        let operation = FetchOperation<Data>(url: server.url(path))
        operation.configuration.retryPolicy = policy
        // Long enough for the first answer on a loaded machine; far shorter than the waits.
        // (3 s was too little beside three compilers and a second test run.)
        operation.configuration.totalTimeout = runsUnderSanitizer ? 10 : 8
        let retries = Locked<[RetryEvent]>([])
        operation.onRetry(on: .immediate) { event in retries.withLock { $0.append(event) } }
        let error = await outcome(of: operation)
        #expect(error?.statusCode == status, "got \(String(describing: error))")
        #expect(server.requests(path).count == 1)
        #expect(retries.current.isEmpty, "no wait was begun")
    }

    @Test func anExplicitTotalDeadlineCoversEveryAttemptAndWait() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // The first request is cut short at once (a retryable failure); the next never answers.
        route(server, "/flaky-then-silent") { number in
            if number == 1 {
                return .steps([.head(status: 200, headers: ["Content-Length": "1000"]),
                                 .patternBytes(offset: 0, count: 100), .close])
            }
            return .steps([.stall])
        }
        let operation = FetchOperation<Data>(url: server.url("/flaky-then-silent"))
        operation.configuration.idleTimeout = 30
        // Long enough that the cut first attempt ends before it on a loaded machine (one that
        // ended later would rightly get no retry). Under a sanitizer the run is serial: the
        // attempt has the machine to itself, slowed some tenfold (a 100-byte answer, a few
        // hundred milliseconds at worst).
        let deadline: TimeInterval = runsUnderSanitizer ? 3 : 2
        operation.configuration.totalTimeout = deadline
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 5, baseDelay: 0.1, jitter: 0)
        let retries = Locked<[RetryEvent]>([])
        operation.onRetry(on: .immediate) { event in retries.withLock { $0.append(event) } }
        let (error, elapsed) = await timedOutcome(of: operation)
        guard case .timedOut(let timeout)? = error else {
            Issue.record("expected a timeout, got \(String(describing: error))")
            return
        }
        print("totalTimeout \(deadline) s across a retry: \(timeout.kind) timeout after \(String(format: "%.3f", elapsed)) s")
        #expect(timeout.kind == .total)
        #expect(timeout.interval == deadline, "the error names the deadline as set, not what was left of it")
        #expect(endedNoSooner(elapsed, than: deadline), "a \(deadline) s deadline took \(elapsed) s")
        #expect(retries.current.map(\.attempt) == [2])
        // The retry was sent; on a loaded machine it may not have reached the server before
        // the deadline stopped it. Never a third.
        #expect((1...2).contains(server.requests("/flaky-then-silent").count))
    }

    @Test func aRetryWaitingForAQueueSlotFailsAtTheDeadline() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        route(server, "/cut-short") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "1000"]),
                     .patternBytes(offset: 0, count: 100), .close])
        }
        let gate = TestGate()
        let holding = Countdown(1)
        server.route("/gate") { _ in
            holding.signal()
            gate.wait(timeout: 120)
            return .text("open")
        }
        let queue = makeFetchQueue(total: 1, perHost: 1)
        let fetch = FetchOperation<Data>(url: server.url("/cut-short"))
        // Generous on purpose: the first attempt must end, and the other fetch take the slot
        // during the retry's wait, before the deadline — on a loaded machine too (a first
        // attempt that ends too late for a retry rightly gets none: beside two CPU hogs and the
        // rest of the suite, a 4-second deadline left no room for the 1-second wait twice in 16
        // runs). The same under a sanitizer, whose run is serial.
        let (deadline, backoff): (TimeInterval, TimeInterval) = (10, 0.5)
        fetch.configuration.totalTimeout = deadline
        fetch.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: backoff, jitter: 0)
        let blocker = server.operation("/gate")
        let blockerEnded = Countdown(1)
        blocker.onCompletion(on: .immediate) { _ in blockerEnded.signal() }
        // While the fetch waits to retry, another takes the only slot and holds it until the
        // fetch has ended.
        let retried = Locked(false)
        fetch.onRetry(on: .immediate) { _ in
            retried.withLock { $0 = true }
            queue.enqueue(blocker)
        }
        let fetchEnded = Countdown(1)
        queue.enqueue(fetch) { _ in fetchEnded.signal() }
        #expect(await fetchEnded.wait(), "the fetch ended at its deadline, still waiting for the slot")
        try #require(retried.current, "the first attempt ended in time for a retry: \(String(describing: fetch.error))")
        #expect(await holding.wait(), "the other fetch holds the slot")
        gate.open()
        #expect(await blockerEnded.wait())
        guard case .timedOut(let timeout)? = fetch.error else {
            Issue.record("expected a timeout, got \(String(describing: fetch.error))")
            return
        }
        #expect(timeout.kind == .total)
        #expect(timeout.interval == deadline)
        #expect(server.requests("/cut-short").count == 1, "the retry never got to send")
        #expect(queue.statistics.transfersStarted == 2, "the fetch's first attempt and the other fetch")
    }
}
