import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// The loopback server's `/json`: `{"ok":true,"items":[1,2,3],"name":"fetchkit"}`.
struct Sample: Decodable, Sendable, Equatable {
    let ok: Bool
    let items: [Int]
    let name: String
}

/// An endpoint whose output is a model: the README's shape.
final class GetSample: FetchOperation<Sample>, @unchecked Sendable {
    override func parseResponseBody(_ body: Data) throws -> Sample {
        try JSONDecoder().decode(Sample.self, from: body)
    }
}

/// A view model on the main actor, updated from handlers and from `await` with no hop or cast.
@MainActor
final class SampleModel {
    var sample: Sample?
    var failure: FetchError?
    var fraction: Double = 0
    /// Whether every update ran on the main queue (the main actor's executor; on Linux, after
    /// `dispatchMain()`, not necessarily the process's first thread).
    var updatedOnMainQueue = true

    func show(_ result: Result<Sample, FetchError>) {
        noteQueue()
        switch result {
        case .success(let sample): self.sample = sample
        case .failure(let error): failure = error
        }
    }

    func noteQueue() {
        updatedOnMainQueue = updatedOnMainQueue && currentQueueLabel() == DispatchQueue.main.label
    }
}

@Suite("Typed results", .timeLimit(.minutes(3)))
struct TypedResultTests {
    @Test func aDataFetchOperationReturnsTheBody() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation: FetchOperation<Data> = DataFetchOperation(url: server.url("/bytes/300"))
        let body = try await FetchQueue().fetch(operation)
        #expect(body.count == 300)
        #expect(operation.responseBody == body)
    }

    private let expected = Sample(ok: true, items: [1, 2, 3], name: "fetchkit")

    @Test func resultIsNilUntilFinishedThenTheParsedModel() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/held", gate)
        let held = GetSample(url: server.url("/held"))
        held.start()
        #expect(held.result == nil, "running: no result yet")
        gate.open()
        _ = try? await held.value
        guard case .failure(.parseFailed)? = held.result else {
            Issue.record("\"open\" is not JSON: expected parseFailed, got \(String(describing: held.result))")
            return
        }
        let operation = GetSample(url: server.url("/json"))
        operation.start()
        #expect(try await operation.value == expected)
        #expect(try operation.result?.get() == expected)
        #expect(operation.error == nil)
    }

    @Test func aFailureIsTheResultsErrorAndValueThrowsIt() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = GetSample(url: server.url("/status/404"))
        operation.start()
        await #expect(throws: FetchError.self) { try await operation.value }
        guard case .failure(let error)? = operation.result else {
            Issue.record("expected a failure, got \(String(describing: operation.result))")
            return
        }
        #expect(error.statusCode == 404)
        #expect(operation.error?.statusCode == 404)
    }

    @Test func cancellingTheAwaitingTaskCancelsTheFetch() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = GetSample(url: server.url("/stall-mid-body/200000"))
        let receiving = Countdown(1)
        operation.onProgress(on: .global) { progress in if progress.bytesReceived > 0 { receiving.signal() } }
        operation.start()
        let task = Task { () async throws(FetchError) -> Sample in try await operation.value }
        #expect(await receiving.wait(), "the body never started")
        task.cancel()
        let outcome = await task.result
        guard case .failure(let error) = outcome, case .cancelled? = error as? FetchError else {
            Issue.record("expected FetchError.cancelled, got \(outcome)")
            return
        }
        #expect(operation.isCancelled && operation.isFinished)
    }

    @Test func theQueueReturnsTheTypedOutput() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let sample = try await queue.fetch(GetSample(url: server.url("/json")))
        #expect(sample == expected)
        let file = try TemporaryDirectory()
        defer { file.remove() }
        let destination = file.file("bytes")
        let url = try await queue.fetch(DownloadOperation(url: server.url("/bytes/1000"), destination: destination))
        #expect(url == destination.standardizedFileURL)
        #expect(DownloadOperation.fileSize(url) == 1000)
    }

    @Test func aJSONGetIsOneLine() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let sample = try await makeFetchQueue().fetch(JSONFetchOperation<Sample>(url: server.url("/json")))
        #expect(sample == expected)
        #expect(server.requests("/json").last?.header("Accept") == "application/json")
    }

    @Test func theJSONDecoderIsConfigurableAndItsErrorsAreParseFailures() async throws {
        struct Snake: Decodable, Sendable { let userName: String }
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/snake") { _ in .json(#"{"user_name":"ada"}"#) }
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        var request = URLRequest(url: server.url("/snake"))
        request.setValue("application/vnd.api+json", forHTTPHeaderField: "Accept")
        let queue = makeFetchQueue()
        #expect(try await queue.fetch(JSONFetchOperation<Snake>(request: request, decoder: decoder)).userName == "ada")
        #expect(server.requests("/snake").last?.header("Accept") == "application/vnd.api+json", "the caller's Accept wins")
        let plain = JSONFetchOperation<Snake>(url: server.url("/snake"))
        let error = await outcome(of: plain)
        guard case .parseFailed(let failure)? = error else {
            Issue.record("expected parseFailed, got \(String(describing: error))")
            return
        }
        #expect(failure.underlying.error is DecodingError)
    }

    @Test func dataAndVoidNeedNoParserOtherOutputsDo() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        #expect(try await FetchOperation<Data>(url: server.url("/bytes/10")).run().result?.get().count == 10)
        try await FetchOperation<Void>(url: server.url("/bytes/10")).run()
        let unparsed = FetchOperation<Sample>(url: server.url("/json"))
        let error = await outcome(of: unparsed)
        guard case .parseFailed(let failure)? = error else {
            Issue.record("expected parseFailed, got \(String(describing: error))")
            return
        }
        #expect(failure.description.contains("does not override parseResponseBody(_:)"))
    }

    @MainActor
    @Test func mainActorHandlersUpdateAViewModelDirectly() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        _ = tagged(DispatchQueue.main)
        let model = SampleModel()
        let queue = makeFetchQueue()
        let done = Countdown(3)
        let operation = GetSample(url: server.url("/json"))
        operation.onProgress { progress in
            model.fraction = progress.fractionCompleted ?? 0
            model.noteQueue()
        }
        operation.onCompletion { result in
            model.show(result)
            done.signal()
        }
        queue.enqueue(GetSample(url: server.url("/status/500"))) { result in
            model.show(result)
            done.signal()
        }
        queue.enqueue(operation) { _ in done.signal() }
        #expect(await done.wait())
        #expect(model.sample == expected)
        #expect(model.failure?.statusCode == 500)
        #expect(model.fraction == 1)
        #expect(model.updatedOnMainQueue)
        // And from `await`, on the main actor.
        model.sample = nil
        model.sample = try await queue.fetch(GetSample(url: server.url("/json")))
        #expect(model.sample == expected)
    }

    @Test func aHandlerOnANamedQueueRunsThere() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = tagged(DispatchQueue(label: "test.typed"))
        let labels = Locked<[String]>([])
        let done = Countdown(2)
        let operation = GetSample(url: server.url("/json"))
        operation.onCompletion(on: .dispatch(queue)) { result in
            labels.withLock { $0.append(currentQueueLabel()) }
            #expect((try? result.get()) != nil)
            done.signal()
        }
        makeFetchQueue().enqueue(operation, on: .dispatch(queue)) { _ in
            labels.withLock { $0.append(currentQueueLabel()) }
            done.signal()
        }
        #expect(await done.wait())
        #expect(labels.current == ["test.typed", "test.typed"])
    }

    /// Results are read from many threads while fetches finish: ThreadSanitizer must stay quiet.
    @Test func resultsReadFromManyThreadsWhileFetchesFinish() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 8, perHost: 8)
        let operations = (0..<64).map { index in
            GetSample(url: server.url(index.isMultiple(of: 4) ? "/status/503" : "/json"))
        }
        for operation in operations { operation.configuration.retryPolicy = .none }
        let readers = 2
        let stop = Locked(false)
        let seen = Locked(0)
        let readersDone = Countdown(readers)
        for _ in 0..<readers {
            Thread.detachNewThread {
                while !stop.current {
                    for operation in operations {
                        switch operation.result {
                        case .success(let sample)?: if sample.items.count != 3 { Issue.record("torn result") }
                        case .failure(let error)?: if error.statusCode != 503 { Issue.record("unexpected \(error)") }
                        case nil: break
                        }
                        _ = operation.error
                        _ = operation.response
                    }
                    seen.withLock { $0 += 1 }
                    // A pause between passes (not to synchronise: to leave the fetches, and the
                    // rest of a parallel suite, the CPU; a tight loop under a sanitizer on two
                    // cores starved every other test into timeouts).
                    usleep(500)
                }
                readersDone.signal()
            }
        }
        for operation in operations { queue.enqueue(operation) }
        for operation in operations { _ = try? await operation.value }
        stop.withLock { $0 = true }
        #expect(await readersDone.wait())
        #expect(operations.allSatisfy { $0.result != nil })
        #expect(operations.filter { (try? $0.result?.get()) != nil }.count == 48)
        #expect(seen.current > 0)
    }
}
