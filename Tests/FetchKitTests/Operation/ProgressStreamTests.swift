import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Collects what a stream yields, in a task, until it ends.
private func collect<S: AsyncSequence & Sendable>(_ stream: S) -> Task<[S.Element], Never> where S.Element: Sendable {
    Task {
        var values: [S.Element] = []
        do {
            for try await value in stream { values.append(value) }
        } catch {}
        return values
    }
}

@Suite("Progress streams", .timeLimit(.minutes(3)))
struct ProgressStreamTests {
    @Test func theStreamYieldsIncreasingValuesEndingAtTheBodyLengthThenEnds() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(url: server.url("/bytes/1000000"))
        let values = collect(operation.progressUpdates)      // created before start
        operation.start()
        _ = try await operation.value
        let seen = await values.value
        #expect(!seen.isEmpty)
        #expect(seen.map(\.bytesReceived) == seen.map(\.bytesReceived).sorted(), "never decreases")
        #expect(seen.last == FetchProgress(bytesReceived: 1_000_000, bytesExpected: 1_000_000))
    }

    @Test func aConsumerThatStartsAfterFinishGetsTheFinalValueAndEnds() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(url: server.url("/bytes/5000"))
        operation.start()
        _ = try await operation.value
        let seen = await collect(operation.progressUpdates).value
        #expect(seen == [FetchProgress(bytesReceived: 5000, bytesExpected: 5000)])
    }

    @Test func aSlowConsumerGetsTheLatestValueNotABacklog() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        // 2 MiB arrives as many reports (one per 64 KiB at most).
        let operation = FetchOperation<Data>(url: server.url("/bytes/2097152"))
        let stream = operation.progressUpdates
        operation.start()
        var iterator = stream.makeAsyncIterator()
        let first = await iterator.next()
        // The consumer is busy until the whole body arrived: only the newest value waits.
        _ = try await operation.value
        var rest: [FetchProgress] = []
        while let value = await iterator.next() { rest.append(value) }
        #expect(first != nil)
        #expect(rest.count <= 1, "coalesced, not a backlog: \(rest.count) values waited")
        #expect((rest.last ?? first) == FetchProgress(bytesReceived: 2_097_152, bytesExpected: 2_097_152))
    }

    @Test func severalConsumersEachGetTheirOwnStream() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(url: server.url("/bytes/300000"))
        let a = collect(operation.progressUpdates)
        let b = collect(operation.progressUpdates)
        operation.start()
        _ = try await operation.value
        let final = FetchProgress(bytesReceived: 300_000, bytesExpected: 300_000)
        #expect(await a.value.last == final)
        #expect(await b.value.last == final)
    }

    @Test func cancellingTheConsumingTaskEndsItsIterationButNotTheFetch() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/held", gate)
        let operation = FetchOperation<Data>(url: server.url("/held"))
        let started = Countdown(1)
        let consumer = Task {
            started.signal()
            for await _ in operation.progressUpdates {}
            return Task.isCancelled
        }
        operation.start()
        #expect(await started.wait())
        consumer.cancel()
        #expect(await consumer.value, "the iteration ended because its task was cancelled")
        #expect(!operation.isCancelled)
        gate.open()
        #expect(try await operation.value == Data("open".utf8))
        #expect(operation.core.withLock { $0.progressStreams.count } == 0, "a finished operation keeps no stream")
    }

    @Test func aStreamOfACancelledOperationEnds() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/held", gate)
        defer { gate.open() }
        let operation = FetchOperation<Data>(url: server.url("/held"))
        let values = collect(operation.progressUpdates)
        operation.start()
        operation.cancel()
        _ = await values.value      // ends: a hang here fails the test by its time limit
        #expect(operation.isCancelled)
    }

    @Test func aStreamOfAnOperationCancelledBeforeStartEnds() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let never = FetchOperation<Data>(url: server.url("/bytes/10"))
        never.cancel()
        never.start()
        #expect(await collect(never.progressUpdates).value.isEmpty, "cancelled before it started: no value, ends")
    }

    @Test func aStreamEndsWhenItsOperationIsFreedUnstarted() async {
        var operation: FetchOperation<Data>? = FetchOperation<Data>(url: URL(fileURLWithPath: "/never"))
        let values = collect(operation?.progressUpdates ?? AsyncStream { $0.finish() })
        operation = nil
        #expect(await values.value.isEmpty)
    }

    @Test func theBatchStreamEndsWithAFinishedStatus() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let operations = (0..<3).map { FetchOperation<Data>(url: server.url("/bytes/\(10_000 * ($0 + 1))")) }
        let batch = queue.enqueue(batch: operations, on: .global)
        let seen = await collect(batch.statusUpdates).value
        let last = try #require(seen.last)
        #expect(last.isFinished)
        #expect(last.finished == 3 && last.failed == 0)
        #expect(last.bytesReceived == 60_000)
        // A late consumer gets the final status and ends.
        #expect(await collect(batch.statusUpdates).value == [last])
    }

    @Test func anEmptyBatchStreamEndsWithItsStatus() async throws {
        let queue = makeFetchQueue()
        let batch = queue.enqueue(batch: [], on: .global)
        let seen = await collect(batch.statusUpdates).value
        #expect(seen.last?.isFinished == true)
    }
}

@Suite("Upload progress", .timeLimit(.minutes(3)))
struct UploadProgressTests {
    /// A 3 MB POST to a route that reads the whole body and answers with its length.
    private func post(_ length: Int, to server: TestServer) -> FetchOperation<Data> {
        server.route("/upload") { request in .text("\(request.body.count)") }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        request.httpBody = Data(repeating: 0x61, count: length)
        return FetchOperation<Data>(request: request)
    }

    @Test func bytesSentNeverExceedTheBodyAndEndExactlyAtIt() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let length: Int64 = 3_000_000
        let upload = post(Int(length), to: server)
        let handled = Locked<[FetchProgress]>([])
        // On a concurrent queue the last progress value and the completion are not ordered (the
        // order is promised on the main actor): wait for the handler's last value itself.
        let handlerDone = Countdown(1)
        upload.onProgress(on: .global) { progress in
            handled.withLock { $0.append(progress) }
            if progress.bytesSent == length { handlerDone.signal() }
        }
        let values = collect(upload.progressUpdates)
        upload.start()
        #expect(try await upload.value == Data("3000000".utf8), "the server read the whole body")
        let seen = await values.value
        #expect(await handlerDone.wait())
        for progress in seen + handled.withLock({ $0 }) {
            #expect(progress.bytesSent <= length, "over-reported: \(progress.bytesSent)")
            #expect(progress.bytesToSend == length)
        }
        #expect(seen.map(\.bytesSent) == seen.map(\.bytesSent).sorted(), "never decreases")
        #expect(seen.last?.bytesSent == length)
        #expect(seen.last?.fractionSent == 1)
        #expect(handled.withLock { $0.last?.bytesSent } == length)
    }

    @Test func anUploadThroughAFetchQueueReportsItsBytesSent() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let upload = post(500_000, to: server)
        let values = collect(upload.progressUpdates)
        #expect(try await makeFetchQueue().fetch(upload) == Data("500000".utf8))
        let seen = await values.value
        #expect(seen.allSatisfy { $0.bytesSent <= 500_000 })
        #expect(seen.last?.bytesSent == 500_000 && seen.last?.bytesToSend == 500_000)
    }

    @Test func aRequestWithoutABodyReportsNothingSent() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(url: server.url("/bytes/1000"))
        let values = collect(operation.progressUpdates)
        operation.start()
        _ = try await operation.value
        let last = try #require(await values.value.last)
        #expect(last.bytesSent == 0 && last.bytesToSend == nil && last.fractionSent == nil)
    }
}

/// Records what a transfer reports of its upload.
private final class SendRecorder: TransferOwner, @unchecked Sendable {
    let sent = Locked<[(bytes: Int64, total: Int64?)]>([])
    func transferDidSend(bytes: Int64, of total: Int64?) { sent.withLock { $0.append((bytes, total)) } }
    func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?) {}
    func transferDidReceive(bytes: Int64, of expectedLength: Int64?) {}
    func transferDidEnd(_ result: TransferResult, of handle: any TransferHandle) {}
}

@Suite("Upload progress clamping", .timeLimit(.minutes(3)))
struct UploadClampTests {
    /// URLSession's counts as FoundationNetworking has been seen to send them: past the body's
    /// length, repeated, and (after a resend) from zero again.
    @Test func countsAreClampedToTheBodyAndOnlyGrowthIsReported() {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:9/upload")!)
        request.httpMethod = "POST"
        request.httpBody = Data(count: 3_000_000)
        let owner = SendRecorder()
        let limits = TransferLimits(idleTimeout: 30, totalTimeout: nil, maximumResponseSize: 1 << 20,
                                    acceptableStatusCodes: [200])
        let transfer = Transfer(request: request, session: .shared, limits: limits, sink: MemoryBodySink(limit: 1 << 20), owner: owner)
        for total: Int64 in [65_536, 131_072, 131_072, 3_000_021, 3_000_021, 65_536] {
            transfer.didSendBodyData(totalBytesSent: total, totalBytesExpectedToSend: -1)
        }
        let sent = owner.sent.withLock { $0 }
        #expect(sent.map(\.bytes) == [65_536, 131_072, 3_000_000])
        #expect(sent.allSatisfy { $0.total == 3_000_000 })
    }
}

@Suite("Progress stream intervals", .timeLimit(.minutes(3)))
struct ProgressStreamIntervalTests {
    private static let millisecond: UInt64 = 1_000_000

    /// Everything a stream's continuation was given, once it ended.
    private func values(_ stream: AsyncStream<Int>) async -> [Int] {
        var values: [Int] = []
        for await value in stream { values.append(value) }
        return values
    }

    @Test func aConsumerWithAnIntervalGetsTheNewestValueWhenDueAndTheFinalOneAtOnce() async {
        let ms = Self.millisecond
        var streams = LatestValueStreams<Int>()
        let (slow, slowInput) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .unbounded)
        let (every, everyInput) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .unbounded)
        _ = streams.add(slowInput, minimumInterval: 100 * ms, at: 0)
        _ = streams.add(everyInput, minimumInterval: 0, at: 0)
        #expect(streams.yield(1, at: 0) == nil, "the first value goes at once")
        #expect(streams.yield(2, at: 10 * ms) == 100 * ms, "the slow consumer waits: a timer is asked for")
        #expect(streams.yield(3, at: 20 * ms) == nil, "asked for already")
        #expect(streams.flush(due: 50 * ms, at: 50 * ms) == nil, "a timer not asked for does nothing")
        #expect(streams.flush(due: 100 * ms, at: 100 * ms) == nil, "the newest went: none waits")
        #expect(streams.yield(5, at: 150 * ms) == 200 * ms)
        for continuation in streams.finish(with: 6) { continuation.finish() }
        #expect(await values(slow) == [1, 3, 6], "the newest when due; the final at once")
        #expect(await values(every) == [1, 2, 3, 5, 6])
    }
}
