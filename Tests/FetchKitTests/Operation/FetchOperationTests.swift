import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("FetchOperation against the loopback server", .timeLimit(.minutes(3)))
struct FetchOperationTests {
    @Test func successfulGETParsesTheBodyOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        try await operation.run()
        #expect(operation.error == nil)
        #expect(operation.response?.statusCode == 200)
        let parses = operation.parses.current
        #expect(parses.count == 1)
        let object = try JSONSerialization.jsonObject(with: parses[0]) as? [String: Any]
        #expect(object?["name"] as? String == "fetchkit")
        #expect(operation.responseBody == parses[0])
    }

    @Test func bodyArrivesIntactAndProgressCountsEveryByte() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let length = 1_000_003
        let operation = server.operation("/bytes/\(length)")
        let seen = Locked<[FetchProgress]>([])
        operation.onProgress(on: .immediate) { progress in seen.withLock { $0.append(progress) } }
        try await operation.run()
        #expect(operation.responseBody == TestResponse.patternBytes(count: length))
        #expect(operation.progress.totalUnitCount == Int64(length))
        #expect(operation.progress.completedUnitCount == Int64(length))
        let values = seen.current
        #expect(values.last == FetchProgress(bytesReceived: Int64(length), bytesExpected: Int64(length)))
        #expect(zip(values, values.dropFirst()).allSatisfy { $0.bytesReceived <= $1.bytesReceived })
    }

    @Test func progressShowsEveryByteOfAStalledTransfer() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        // 30,000 bytes (less than one 64 KiB progress step), then nothing until the gate opens.
        server.route("/held") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "40000"]),
                    .patternBytes(offset: 0, count: 30_000), .wait(for: gate), .patternBytes(offset: 30_000, count: 10_000)])
        }
        let operation = server.operation("/held")
        let reached = Countdown(1)
        let once = Locked(false)
        operation.onProgress(on: .global) { progress in
            if progress.bytesReceived == 30_000, once.withLock({ seen in defer { seen = true }; return !seen }) { reached.signal() }
        }
        operation.start()
        #expect(await reached.wait(), "the bytes before the stall were reported")
        #expect(operation.progress.completedUnitCount == 30_000)
        gate.open()
        try await operation.finished()
        #expect(operation.progress.completedUnitCount == 40_000)
    }

    @Test func parseRunsOffTheDelegateQueueOnTheNamedQueue() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = tagged(DispatchQueue(label: "test.store"))
        let operation = server.operation("/json")
        operation.configuration.parseQueue = .dispatch(store)
        try await operation.run()
        #expect(operation.parseQueueLabels.current == ["test.store"])
        #expect(operation.parseQueueLabels.current.first != "FetchKit.SessionRouter")
    }

    @Test func aSerialParseQueueSerialisesEveryParse() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let store = DispatchQueue(label: "test.store.serial")
        let active = Locked((now: 0, peak: 0))
        let queue = makeQueue(8)
        let operations = (0..<24).map { _ in server.operation("/bytes/2000") }
        for operation in operations {
            operation.configuration.parseQueue = .dispatch(store)
            operation.onParse = { _ in
                active.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) }
                // Give an overlapping parse, if the queue allowed one, the chance to show up.
                for _ in 0..<2000 { _ = active.withLock { $0.now } }
                active.withLock { $0.now -= 1 }
            }
        }
        queue.enqueue(operations)
        for operation in operations { try await operation.finished() }
        #expect(active.current.peak == 1)
    }

    @Test func aThrowingParseBecomesParseFailed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        operation.parseError = ParseTestError(reason: "bad shape")
        await #expect(throws: FetchError.self) { try await operation.run() }
        guard case .parseFailed(let failure)? = operation.error else {
            Issue.record("expected parseFailed, got \(String(describing: operation.error))")
            return
        }
        #expect(failure.underlying.error as? ParseTestError == ParseTestError(reason: "bad shape"))
        #expect(operation.parses.current.count == 1)
        #expect(operation.error?.description.contains("bad shape") == true)
    }

    @Test func unacceptableStatusKeepsCodeHeadersAndBodyPrefixAndSkipsParse() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/status/404")
        _ = try? await operation.run()
        guard case .unacceptableStatus(let failure)? = operation.error else {
            Issue.record("expected unacceptableStatus, got \(String(describing: operation.error))")
            return
        }
        #expect(failure.statusCode == 404)
        #expect(failure.bodyText == "status 404")
        #expect(failure.headers.keys.contains { $0.lowercased() == "content-length" })
        #expect(operation.parses.current.isEmpty)
        #expect(operation.response?.statusCode == 404)
    }

    @Test func errorBodyPrefixIsBounded() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/big-error") { _ in TestResponse(status: 500, body: TestResponse.patternBytes(count: 100_000)) }
        let operation = server.operation("/big-error")
        _ = try? await operation.run()
        guard case .unacceptableStatus(let failure)? = operation.error else {
            Issue.record("expected unacceptableStatus")
            return
        }
        #expect(failure.statusCode == 500)
        #expect(failure.bodyPrefix == TestResponse.patternBytes(count: FetchError.StatusFailure.bodyPrefixLimit))
    }

    @Test func acceptableStatusCodesAreConfigurable() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/status/404")
        operation.configuration.acceptableStatusCodes = [404]
        try await operation.run()
        #expect(operation.error == nil)
        #expect(operation.parses.current == [Data("status 404".utf8)])
    }

    @Test func announcedLengthOverTheLimitStopsAtTheHead() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/bytes/100000")
        operation.configuration.maximumResponseSize = 1000
        _ = try? await operation.run()
        let limit = try #require(operation.error?.sizeLimit, "expected responseTooLarge, got \(String(describing: operation.error))")
        #expect(limit.limit == 1000)
        #expect(limit.expectedLength == 100_000)
        #expect(operation.parses.current.isEmpty)
    }

    @Test func unannouncedBodyOverTheLimitStopsWhenItPassesIt() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/trickle/200000/20000/1")
        operation.configuration.maximumResponseSize = 50_000
        _ = try? await operation.run()
        let limit = try #require(operation.error?.sizeLimit, "expected responseTooLarge, got \(String(describing: operation.error))")
        #expect(limit.expectedLength == nil)
        #expect(operation.responseBody == nil)
    }

    @Test func chunkedBodyIsReassembled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/trickle/10000/1000/1")
        try await operation.run()
        #expect(operation.responseBody == TestResponse.patternBytes(count: 10000))
    }

    @Test func completionHandlerRunsOnceOnTheChosenQueue() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = tagged(DispatchQueue(label: "test.completions"))
        let operation = server.operation("/json")
        let labels = Locked<[String]>([])
        let done = Countdown(2)
        operation.onCompletion(on: .dispatch(queue)) { _ in labels.withLock { $0.append(currentQueueLabel()) }; done.signal() }
        operation.onCompletion(on: .global) { [operation] result in
            #expect(operation.isFinished)
            #expect((try? result.get()) != nil)
            done.signal()
        }
        operation.start()
        #expect(await done.wait())
        #expect(labels.current == ["test.completions"])
        #expect(done.overSignals == 0)
    }

    @Test func aHandlerAddedAfterFinishRunsOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        try await operation.run()
        let done = Countdown(1)
        operation.onCompletion { _ in done.signal() }
        #expect(await done.wait())
        #expect(done.overSignals == 0)
    }

    @Test func foundationCompletionBlockStillRuns() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        let done = Countdown(1)
        operation.completionBlock = { done.signal() }
        makeQueue(1).addOperation(operation)
        #expect(await done.wait())
        #expect(operation.isFinished)
    }

    @Test func startCalledDirectlyWithoutAQueueWorks() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        operation.start()
        #expect(operation.isExecuting || operation.isFinished)
        #expect(await operation.awaitCompletion())
        #expect(operation.error == nil)
        #expect(!operation.isExecuting)
    }

    @Test func aSecondStartIsIgnored() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        operation.start()
        operation.start()
        #expect(await operation.awaitCompletion())
        operation.start()
        #expect(operation.parses.current.count == 1)
        #expect(server.requests("/json").count == 1)
    }

    @Test func theConfigurationIsOneValueSetBeforeStart() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/bytes/2000")
        var configuration = FetchConfiguration(maximumResponseSize: 1000, retryPolicy: .none)
        configuration.acceptableStatusCodes = [200]
        operation.configuration = configuration
        operation.request = URLRequest(url: server.url("/bytes/3000"))
        let error = await outcome(of: operation)
        #expect(error?.sizeLimit?.limit == 1000, "the configuration set before start is the one used")
        #expect(operation.sentRequest?.url?.path == "/bytes/3000")
        #expect(operation.configuration.retryPolicy.maximumRetries == 0, "readable after start")
        #expect(FetchConfiguration(maximumResponseSize: -5).maximumResponseSize == 0)
    }

    @Test func settingTheConfigurationAfterStartTraps() async {
        await #expect(processExitsWith: .failure) {
            let operation = FetchOperation<Data>(request: URLRequest(url: URL(fileURLWithPath: "/")))
            operation.start()
            operation.configuration.retryPolicy = .none
        }
        await #expect(processExitsWith: .failure) {
            let operation = FetchOperation<Data>(request: URLRequest(url: URL(fileURLWithPath: "/")))
            operation.start()
            operation.request = nil
        }
    }

    /// Frozen at enqueue: whether the queue has started the operation yet makes no difference.
    @Test func settingTheConfigurationAfterEnqueueTrapsWhetherOrNotTheQueueStartedIt() async {
        await #expect(processExitsWith: .failure) {
            let queue = FetchQueue()
            queue.isSuspended = true                // never started
            let operation = FetchOperation<Data>(url: URL(fileURLWithPath: "/"))
            queue.enqueue(operation)
            operation.configuration.retryPolicy = .none
        }
        await #expect(processExitsWith: .failure) {
            let queue = FetchQueue()
            queue.isSuspended = true
            let operation = FetchOperation<Data>(url: URL(fileURLWithPath: "/"))
            queue.enqueue(operation)
            operation.request = nil
        }
        await #expect(processExitsWith: .failure) {
            let queue = FetchQueue()
            let operation = FetchOperation<Data>(url: URL(fileURLWithPath: "/"))
            _ = try? await queue.fetch(operation)   // started and finished
            operation.configuration.retryPolicy = .none
        }
    }

    @Test func theConfigurationSetBeforeEnqueueIsTheOneUsed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = FetchQueue()
        queue.isSuspended = true
        let operation = FetchOperation<Data>(url: server.url("/bytes/3000"))
        operation.configuration.maximumResponseSize = 1000
        queue.enqueue(operation)
        #expect(operation.configuration.maximumResponseSize == 1000, "readable after enqueue")
        queue.isSuspended = false
        await #expect(throws: FetchError.self) { try await operation.value }
        #expect(operation.error?.sizeLimit?.limit == 1000)
    }

    @Test func redirectsAreFollowed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/redirect/3")
        try await operation.run()
        #expect(operation.response?.url?.path == "/redirect/0")
        #expect(operation.parses.current == [Data("redirected".utf8)])
    }

    @Test func authorizationIsNotForwardedToAnotherOrigin() async throws {
        let origin = try TestServer.standard()
        let other = try TestServer.standard()
        defer { origin.shutDown(); other.shutDown() }
        let target = other.url("/headers").absoluteString
        var request = URLRequest(url: origin.url("/redirect-to?url=\(target)"))
        request.setValue("Bearer secret", forHTTPHeaderField: "Authorization")
        let operation = RecordingOperation(request: request)
        try await operation.run()
        let headers = try JSONSerialization.jsonObject(with: operation.responseBody ?? Data()) as? [String: String]
        #expect(headers?["authorization"] == nil)
        #expect(other.requests("/headers").first?.header("Authorization") == nil)
    }

    @Test func makeRequestBuildsTheRequestJustBeforeSending() async throws {
        final class Late: FetchOperation<Data>, @unchecked Sendable {
            let url: URL
            override init(url: URL) { self.url = url; super.init() }
            override func makeRequest() throws -> URLRequest? {
                var request = URLRequest(url: url)
                request.setValue("built-late", forHTTPHeaderField: "X-Test")
                return request
            }
        }
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = Late(url: server.url("/headers"))
        try await operation.run()
        let headers = try JSONSerialization.jsonObject(with: operation.responseBody ?? Data()) as? [String: String]
        #expect(headers?["x-test"] == "built-late")
        #expect(operation.sentRequest?.value(forHTTPHeaderField: "X-Test") == "built-late")
    }

    @Test func aFinishedOperationIsReleased() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let released = Countdown(1)
        let queue = makeQueue(2)
        do {
            let operation = DeinitProbeOperation(request: URLRequest(url: server.url("/json")))
            operation.onDeinit = { released.signal() }
            operation.onCompletion { _ in _ = operation.responseBody } // a handler that captures it
            queue.addOperation(operation)
            try await operation.finished()
        }
        #expect(await released.wait(), "the operation was not released after finishing")
    }

    @Test func aFailedOperationIsReleased() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let released = Countdown(1)
        do {
            let operation = DeinitProbeOperation(request: URLRequest(url: server.url("/stall-mid-body/100000")))
            operation.onDeinit = { released.signal() }
            operation.configuration.idleTimeout = 0.2
            _ = try? await operation.run()
            #expect(operation.error != nil)
        }
        #expect(await released.wait(), "the operation was not released after failing")
    }
}
