import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A server fault, and the outcome FetchKit documents for it.
struct Fault: Sendable, CustomStringConvertible {
    let name: String
    let path: String
    var idleTimeout: TimeInterval = 10
    var totalTimeout: TimeInterval?
    /// The retries ``ServerFaultOutcomeTests/policy`` allows for this fault.
    var maximumRetries = ServerFaultOutcomeTests.policy.maximumRetries
    /// Whether the fetch should succeed (possibly after retries).
    let succeeds: Bool
    /// The attempts expected (with ``ServerFaultOutcomeTests/policy(for:)``).
    let attempts: ClosedRange<Int>
    /// Checks the error of a failing fetch.
    var check: @Sendable (FetchError) -> Bool = { _ in true }
    var description: String { name }
}

@Suite("Each server fault ends as documented", .timeLimit(.minutes(3)))
struct ServerFaultOutcomeTests {
    /// Short waits, the default decisions: up to two retries.
    static let policy = RetryPolicy(maximumRetries: 2, baseDelay: 0.05, maximumDelay: 0.2)

    static let faults: [Fault] = [
        Fault(name: "connection refused", path: "REFUSED", succeeds: false, attempts: 3...3,
              check: { $0.urlError?.code == .cannotConnectToHost }),
        Fault(name: "reset mid-body", path: "/reset-mid-body/100000", succeeds: false, attempts: 3...3,
              check: { if case .lengthMismatch = $0 { return true }; return $0.urlError != nil }),
        // Retried because the server answered before it stalled. The idle timeout leaves room
        // for the head to arrive on a loaded machine: one that comes later is not retried
        // (1 s was too little with two compilers running beside the suite on two cores, and
        // 2.5 s with three compilers and a second test run: the head then came after 2.5 s).
        // One retry shows that it is retried (each attempt waits out the whole idle timeout:
        // the bound on retries is the other faults' to show).
        Fault(name: "stall mid-body", path: "/stall-mid-body/100000", idleTimeout: 4, maximumRetries: 1, succeeds: false, attempts: 2...2,
              check: { if case .timedOut(let t) = $0 { return t.kind == .idle }; return false }),
        // 20 bytes, one each 20 ms: an idle timeout far above the gap, which a loaded machine can
        // stretch to seconds (2 s was too little beside three compilers).
        Fault(name: "slow trickle under the deadline", path: "/trickle/20/1/20", idleTimeout: runsUnderSanitizer ? 10 : 6, totalTimeout: runsUnderSanitizer ? 30 : 20, succeeds: true, attempts: 1...1),
        Fault(name: "slow trickle over the deadline", path: "/trickle/100/1/50", idleTimeout: 2, totalTimeout: 0.5, succeeds: false, attempts: 1...1,
              check: { if case .timedOut(let t) = $0 { return t.kind == .total }; return false }),
        Fault(name: "wrong Content-Length", path: "/lie/5000/100", succeeds: false, attempts: 3...3,
              check: { if case .lengthMismatch(let m) = $0 { return m.expected == 5000 && m.received == 100 }; return false }),
        // Not a transient failure: a server that speaks no HTTP is not retried.
        Fault(name: "garbage status line", path: "/garbage-status", succeeds: false, attempts: 1...1,
              check: { if case .invalidResponse(let f) = $0, case .malformedStatusLine = f.reason { return true }; return false }),
        Fault(name: "429 with Retry-After", path: "/flaky/fault-429/1/429?retry-after=1", succeeds: true, attempts: 2...2),
        Fault(name: "503 twice, then fine", path: "/flaky/fault-503/2/503", succeeds: true, attempts: 3...3),
        Fault(name: "redirect loop", path: "/redirect-loop", succeeds: false, attempts: 1...1,
              check: { if case .redirectFailed(let f) = $0 { return f.kind == .loop }; return false }),
        Fault(name: "401 challenge without credentials", path: "/basic-auth/u/p", succeeds: false, attempts: 1...1,
              check: { $0.statusCode == 401 }),
    ]

    /// ``policy``, with the retries `fault` allows.
    static func policy(for fault: Fault) -> RetryPolicy {
        var policy = Self.policy
        policy.maximumRetries = fault.maximumRetries
        return policy
    }

    private func url(for fault: Fault, on server: TestServer, closed: URL, variant: String) -> URL {
        if fault.path == "REFUSED" { return closed }
        // Stateful endpoints get their own key per variant.
        return server.url(fault.path.replacingOccurrences(of: "/flaky/fault-", with: "/flaky/\(variant)-fault-"))
    }

    @Test(arguments: faults)
    func aFetchThroughAQueue(_ fault: Fault) async throws {
        let server = try TestServer.standard()
        let closed = try ClosedPort()
        let closedURL = closed.url("/json")
        defer { server.shutDown(); withExtendedLifetime(closed) {} }
        let queue = makeFetchQueue(total: 4, perHost: 2)
        let completions = Locked(0)
        let released = Countdown(1)
        do {
            let operation = DeinitProbeOperation(request: URLRequest(url: url(for: fault, on: server, closed: closedURL, variant: "fetch")))
            operation.onDeinit = { released.signal() }
            operation.configuration.retryPolicy = Self.policy(for: fault)
            operation.configuration.idleTimeout = fault.idleTimeout
            operation.configuration.totalTimeout = fault.totalTimeout
            queue.enqueue(operation) { _ in completions.withLock { $0 += 1 } }
            _ = try? await operation.finished()
            #expect(operation.isFinished)
            #expect(fault.attempts.contains(operation.attempts), "\(fault): \(operation.attempts) attempts")
            if fault.succeeds {
                #expect(operation.error == nil, "\(fault): \(String(describing: operation.error))")
            } else {
                let error = try #require(operation.error, "\(fault) must fail")
                #expect(fault.check(error), "\(fault): unexpected \(error)")
            }
            print("fault \(fault.name): \(operation.error.map { "\($0)" } ?? "succeeded") after \(operation.attempts) attempt(s)")
        }
        #expect(await queueIsEmpty(queue))
        #expect(await released.wait(), "\(fault): the operation leaked")
        #expect(completions.current == 1, "\(fault): completion ran \(completions.current) times")
    }

    @Test(arguments: faults)
    func aDownloadLeavesTheDestinationWholeOrUntouched(_ fault: Fault) async throws {
        let server = try TestServer.standard()
        let closed = try ClosedPort()
        let closedURL = closed.url("/json")
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove(); withExtendedLifetime(closed) {} }
        let destination = directory.file("target")
        try Data("previous contents".utf8).write(to: destination)
        let download = DownloadOperation(url: url(for: fault, on: server, closed: closedURL, variant: "download"), destination: destination)
        download.configuration.retryPolicy = Self.policy(for: fault)
        download.configuration.idleTimeout = fault.idleTimeout
        download.configuration.totalTimeout = fault.totalTimeout
        _ = try? await download.run()
        let contents = FileManager.default.contents(atPath: destination.path)
        if download.error == nil {
            #expect(fault.succeeds)
            #expect(contents != Data("previous contents".utf8) && contents?.isEmpty == false, "\(fault): a success replaced the file")
        } else {
            #expect(contents == Data("previous contents".utf8), "\(fault): the destination was touched")
        }
        let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: directory.url.path)) ?? []
        #expect(leftovers.allSatisfy { $0 == "target" || $0.hasPrefix(".target.fetchkit-partial") }, "\(fault): \(leftovers)")
    }

    @Test func cancellingInTheMiddleOfRedirectChainsNeverTraps() async throws {
        // FoundationNetworking traps when a redirect callback is answered after its task was
        // cancelled; cancels and timeouts here land at every point of redirect chains.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 16, perHost: 16)
        let operations = (0..<400).map { index -> FetchOperation in
            let operation = FetchOperation<Data>(url: server.url("/redirect/\(index % 8)?n=\(index)"))
            operation.configuration.retryPolicy = .none
            if index.isMultiple(of: 5) { operation.configuration.idleTimeout = 0.001 }
            return operation
        }
        let done = Countdown(operations.count)
        for operation in operations { queue.enqueue(operation) { _ in done.signal() } }
        var generator = SplitMix64(seed: 11)
        for operation in operations where generator.next() % 2 == 0 { operation.cancel() }
        #expect(await done.wait(timeout: 120))
        #expect(done.overSignals == 0)
        #expect(operations.allSatisfy { $0.isFinished })
    }

    @Test func oversizedHeadersAreRefusedWithoutHarm() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // A 300 KiB header line: past libcurl's 100 KiB bound on a response's headers.
        let huge = String(repeating: "x", count: 300 << 10)
        server.route("/huge-headers") { _ in
            .steps([.head(status: 200, headers: ["X-Huge": huge, "Content-Length": "2"]),
                    .write(Data("ok".utf8)), .close])
        }
        let operation = server.operation("/huge-headers")
        operation.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await operation.run() }
        #expect(operation.error?.urlError != nil, "\(String(describing: operation.error))")
        #expect(operation.parses.current.isEmpty)
        print("fault oversized headers: \(operation.error.map { "\($0)" } ?? "succeeded")")
    }

    @Test func aStormOf503sIsRetriedWithinItsBound() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 8, perHost: 8)
        let operations = (0..<30).map { server.operation("/flaky/storm-\($0)/2/503") }
        for operation in operations {
            operation.configuration.retryPolicy = Self.policy
            queue.enqueue(operation)
        }
        for operation in operations { try await operation.finished() }
        #expect(operations.allSatisfy { $0.error == nil && $0.attempts == 3 })
        #expect(server.counters.requestsReceived == 90, "three attempts each, never more")
        #expect(server.counters.peakRequestsInFlight <= 8)
        print("fault 503 storm: 30 fetches, all succeeded after 3 attempts; \(server.counters.requestsReceived) requests, at most \(server.counters.peakRequestsInFlight) at once")
    }
}
