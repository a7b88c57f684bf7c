import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Records the full detail of each event, for the sequence and metrics tests.
final class DetailRecorder: FetchEventMonitor {
    let lines = Locked<[String]>([])
    let metrics = Locked<[FetchMetrics]>([])
    let queue = DispatchQueue(label: "DetailRecorder")

    func fetchWasEnqueued(_ fetch: MonitoredFetch) { lines.withLock { $0.append("enqueued") } }
    func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) {
        lines.withLock { $0.append("started \(request.url?.path ?? "?")") }
    }
    func fetch(_ fetch: MonitoredFetch, didRedirect response: HTTPURLResponse, to request: URLRequest) {
        lines.withLock { $0.append("redirected \(response.statusCode) \(response.url?.path ?? "?") -> \(request.url?.path ?? "?")") }
    }
    func fetch(_ fetch: MonitoredFetch, didReceive response: HTTPURLResponse) {
        lines.withLock { $0.append("response \(response.statusCode)") }
    }
    func fetch(_ fetch: MonitoredFetch, willRetry event: RetryEvent) {
        lines.withLock { $0.append("retry \(event.attempt) after \(event.error.statusCode ?? 0)") }
    }
    func fetch(_ fetch: MonitoredFetch, didCollect metrics: FetchMetrics) {
        self.metrics.withLock { $0.append(metrics) }
        lines.withLock { $0.append("metrics") }
    }
    func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?) {
        lines.withLock { $0.append(error == nil ? "finished" : "failed \(error?.statusCode ?? 0)") }
    }
}

@Suite("Event monitor", .timeLimit(.minutes(3)))
struct EventMonitorTests {
    // No jitter: the tests check that the first byte came after the whole 0.05 s wait.
    static let quick = RetryPolicy(maximumRetries: 2, baseDelay: 0.05, maximumDelay: 0.2, jitter: 0)

    @Test func oneFetchsWholeLifeInOrderWithARedirectAndARetry() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let detail = DetailRecorder()
        let queue = makeFetchQueue(monitors: [EventRecorder(), detail])
        let operation = server.operation("/redirect-to?url=/flaky/life/1/503")
        operation.configuration.retryPolicy = Self.quick
        let body = try await queue.fetch(operation)
        #expect(await eventsDrain(queue))
        #expect(detail.lines.current == [
            "enqueued",
            "started /redirect-to",
            "redirected 302 /redirect-to -> /flaky/life/1/503",
            "retry 2 after 503",
            "redirected 302 /redirect-to -> /flaky/life/1/503",
            "response 200",
            "metrics",
            "finished",
        ])
        let metrics = try #require(detail.metrics.current.first)
        #expect(metrics.attempts == 2)
        #expect(metrics.bytesReceived == Int64(body.count))
        #expect(metrics.bytesSent == 0)
        #expect(metrics.queueWait >= 0)
        let firstByte = try #require(metrics.timeToFirstByte)
        #expect(firstByte >= 0.05, "the retry's wait comes before the first accepted head")
        #expect(metrics.queueWait + firstByte <= metrics.totalDuration)
    }

    @Test func metricsCountTheBodyBothWaysAndTheWaitInLine() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        let detail = DetailRecorder()
        let queue = makeFetchQueue(total: 1, perHost: 1, monitors: [EventRecorder(), detail])
        queue.enqueue(server.operation("/gate"))
        #expect(await counts(of: queue) { $0.inFlight == 1 })
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "POST"
        request.httpBody = Data(repeating: 7, count: 3000)
        let echo = RecordingOperation(request: request)
        queue.enqueue(echo)
        #expect(await counts(of: queue) { $0.waiting == 1 })
        #expect(await letTimePass(0.1, on: server))
        gate.open()
        let body = try await echo.value
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        let metrics = detail.metrics.current
        #expect(metrics.count == 2)
        let posted = try #require(metrics.last)
        #expect(posted.bytesReceived == 3000 && body.count == 3000)
        #expect(posted.bytesSent == 3000)
        #expect(posted.attempts == 1)
        #expect(posted.queueWait >= 0.1, "it waited in line for the gated fetch")
        #expect(posted.totalDuration >= posted.queueWait + (posted.timeToFirstByte ?? .infinity))
    }

    @Test func aFetchCancelledWhileWaitingNeverStartsAndStillFinishesLast() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        let recorder = EventRecorder()
        let queue = makeFetchQueue(total: 1, perHost: 1, monitors: [recorder])
        queue.enqueue(server.operation("/gate"))
        #expect(await counts(of: queue) { $0.inFlight == 1 })
        let waiting = server.operation("/json")
        let id = queue.enqueue(waiting)
        #expect(await counts(of: queue) { $0.waiting == 1 })
        waiting.cancel()
        _ = try? await waiting.value
        gate.open()
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        #expect(recorder.kinds(for: id) == [.enqueue, .metrics, .finish])
        #expect(recorder.metrics.current[id]?.attempts == 0)
        #expect(recorder.metrics.current[id]?.timeToFirstByte == nil)
    }

    @Test func aBatchMemberRefusedForACycleIsNeverReportedHalfway() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(monitors: [recorder])
        let first = server.operation("/json?n=1")
        let second = server.operation("/json?n=2")
        first.addDependency(second)
        second.addDependency(first)
        let good = server.operation("/json?n=3")
        let done = Countdown(1)
        queue.enqueue(batch: [first, second, good], on: .global) { _ in done.signal() }
        #expect(await done.wait())
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        let byID = Dictionary(grouping: recorder.events.current, by: \.id).mapValues { $0.map(\.kind) }
        #expect(byID.count == 1, "only the member that ran: \(byID)")
        #expect(byID.values.allSatisfy { $0.first == .enqueue && $0.last == .finish }, "\(byID)")
    }

    @Test func eachFetchsEventsStayInOrderUnderConcurrency() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let queue = makeFetchQueue(total: 8, perHost: 8, monitors: [recorder])
        let ids = (0..<200).map { index in
            let operation = server.operation(index % 3 == 0 ? "/redirect/1?n=\(index)" : "/bytes/\(index * 10)?n=\(index)")
            return queue.enqueue(operation)
        }
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        for (index, id) in ids.enumerated() {
            let expected: [EventRecorder.Kind] = index % 3 == 0
                ? [.enqueue, .start, .redirect, .response, .metrics, .finish]
                : [.enqueue, .start, .response, .metrics, .finish]
            #expect(recorder.kinds(for: id) == expected, "\(id)")
        }
    }

    @Test func theLoggerWritesOneRedactedLinePerEvent() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let lines = Locked<[String]>([])
        let logger = FetchEventLogger { line in lines.withLock { $0.append(line) } }
        let queue = makeFetchQueue(monitors: [EventRecorder(), logger])
        server.route("/hop") { _ in TestResponse.text("", status: 302).with(header: "Location", "/bytes/4300?token=secret-42") }
        let operation = server.operation("/hop?token=secret-42")
        let id = queue.enqueue(operation)
        _ = try await operation.value
        #expect(await eventsDrain(queue))
        // First the session's report, once: before its first fetch's start.
        let report = lines.current.filter { $0.hasPrefix("session workarounds: ") }
        #expect(report == ["session workarounds: \(operation.configuration.session.workarounds.summary)"], "\(lines.current)")
        let logged = lines.current.filter { !$0.hasPrefix("session workarounds: ") }
        #expect(logged.count == 6, "\(logged)")   // enqueued, started, redirected, response, metrics, finished
        #expect(logged.allSatisfy { $0.hasPrefix("\(id) ") }, "\(logged)")
        #expect(!logged.contains { $0.contains("secret-42") }, "\(logged)")
        #expect(logged.contains { $0.contains("token=REDACTED") })
        let last = try #require(logged.last)
        #expect(last.contains("GET \(server.url("/hop").absoluteString)?token=REDACTED → 200 in "), "\(last)")
        #expect(logged.contains { $0.contains("redirected 302 ") && $0.hasSuffix("/bytes/4300?token=REDACTED") }, "\(logged)")
        #expect(last.hasSuffix(" ms, 4.2 KiB"), "\(last)")
        #expect(logged.contains { $0.contains("302") })
    }

    @Test func theLoggerSaysWhyAFetchFailed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let lines = Locked<[String]>([])
        let queue = makeFetchQueue(monitors: [EventRecorder(), FetchEventLogger { line in lines.withLock { $0.append(line) } }])
        let operation = server.operation("/status/404?api_key=hunter2")
        _ = try? await queue.fetch(operation)
        #expect(await eventsDrain(queue))
        let last = try #require(lines.current.last)
        #expect(last.contains("failed"), "\(last)")
        #expect(last.contains("404"), "\(last)")
        #expect(!lines.current.contains { $0.contains("hunter2") }, "\(lines.current)")
    }

    @Test func byteCountsReadAsPeopleWriteThem() {
        #expect(FetchEventLogger.format(bytes: 0) == "0 B")
        #expect(FetchEventLogger.format(bytes: 1023) == "1023 B")
        #expect(FetchEventLogger.format(bytes: 4300) == "4.2 KiB")
        #expect(FetchEventLogger.format(bytes: 5 * 1024 * 1024) == "5.0 MiB")
        #expect(FetchEventLogger.format(bytes: 3 * 1024 * 1024 * 1024) == "3.0 GiB")
    }
}
