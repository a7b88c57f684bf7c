import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A JSON endpoint that builds its request just before sending, as the docs suggest for an
/// endpoint whose request depends on something known only then.
final class GetLateSample: JSONFetchOperation<Sample>, @unchecked Sendable {
    private let url: URL

    init(url: URL) {
        self.url = url
        super.init()
    }

    override func makeRequest() throws -> URLRequest? {
        var request = URLRequest(url: url)
        request.setValue("Bearer t", forHTTPHeaderField: "Authorization")
        return request
    }
}

/// The typed API's promises where a review found them broken, each staged for real.
@Suite("The typed API keeps its promises at the edges", .timeLimit(.minutes(3)))
struct TypedAPIPromisesTests {
    // MARK: JSONFetchOperation sends Accept whatever way its request was made

    /// "It sends `Accept: application/json` unless the request sets another `Accept`": also
    /// when a subclass builds the request in `makeRequest()`, or the request is set after
    /// init; a request's own `Accept` is kept.
    @Test func aJSONOperationSendsAcceptHowEverItsRequestWasMade() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let late = GetLateSample(url: server.url("/json?late"))
        #expect(try await late.run().result != nil)
        let replaced = JSONFetchOperation<Sample>(url: server.url("/json?placeholder"))
        replaced.request = URLRequest(url: server.url("/json?replaced"))
        #expect(try await replaced.run().value == Sample(ok: true, items: [1, 2, 3], name: "fetchkit"))
        var own = URLRequest(url: server.url("/json?own"))
        own.setValue("application/vnd.api+json", forHTTPHeaderField: "accept")
        try await JSONFetchOperation<Sample>(request: own).run()

        let accepts = Dictionary(server.requests("/json").map { ($0.path + "?" + $0.query.keys.sorted().joined(separator: "&"), $0.header("Accept")) },
                                 uniquingKeysWith: { first, _ in first })
        #expect(accepts["/json?late"] == "application/json")
        #expect(accepts["/json?replaced"] == "application/json")
        #expect(accepts["/json?own"] == "application/vnd.api+json")
        #expect(late.sentRequest?.value(forHTTPHeaderField: "Authorization") == "Bearer t")
    }

    // MARK: A batch takes over a dependency the queue adopted

    /// A queue that enqueued a dependency nothing ran takes it over when it is enqueued there
    /// later: by `enqueue(_:)`, and likewise as a member of a batch. The batch waits for it and
    /// counts its real outcome, rather than refusing it as "already enqueued" and counting a
    /// fetch that succeeds as failed.
    @Test func aBatchTakesOverADependencyTheQueueAdopted() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/held", gate)
        let queue = makeFetchQueue()
        let login = server.operation("/held?login")
        let user = server.operation("/json?user")
        user.addDependency(login)
        let userDone = Countdown(1)
        queue.enqueue(user, on: .global) { _ in userDone.signal() }     // adopts `login`
        let batchDone = Countdown(1)
        let status = Locked<FetchBatch.Status?>(nil)
        let batch = queue.enqueue(batch: [login], on: .global, completion: { final in
            status.withLock { $0 = final }
            batchDone.signal()
        })
        #expect(batch.ids == [try #require(queue.id(of: login))])
        #expect(!batch.isFinished, "the batch waits for its member")
        gate.open()
        #expect(await batchDone.wait(timeout: 60))
        #expect(await userDone.wait(timeout: 60))
        #expect(login.error == nil)
        #expect(status.current?.succeeded == 1)
        #expect(status.current?.failed == 0)
        #expect(batchDone.overSignals == 0)
    }
}

/// An endpoint whose output is optional: `nil` is a legitimate output (an empty answer).
final class MaybeNumber: FetchOperation<Int?>, @unchecked Sendable {
    override func parseResponseBody(_ body: Data) throws -> Int? {
        Int(String(decoding: body, as: UTF8.self))
    }
}

@Suite("An optional output: nil is a success", .timeLimit(.minutes(3)))
struct OptionalOutputTests {
    /// An output that is itself `nil` is a success with `nil`, not a "missing parser" failure.
    @Test func aNilOutputIsASuccess() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/number") { request in .text(request.query["n"] ?? "") }
        let none = MaybeNumber(url: server.url("/number"))
        let some = MaybeNumber(url: server.url("/number?n=42"))
        #expect(try await some.run().value == 42)
        let value = try await none.run().value
        #expect(value == nil)
        guard case .success(nil)? = none.result else {
            Issue.record("expected success(nil), got \(String(describing: none.result))")
            return
        }
        let queue = makeFetchQueue()
        #expect(try await queue.fetch(MaybeNumber(url: server.url("/number"))) == nil)
    }
}

/// An output whose release a test can see.
final class TrackedOutput: Sendable {
    /// Told when the output is released.
    let released: Countdown?

    init(released: Countdown? = nil) {
        self.released = released
    }

    deinit {
        released?.signal()
    }
}

/// Parses into a ``TrackedOutput`` once `proceed` opens, telling `parsing` when it begins and
/// keeping only a weak reference to what it returned.
final class HeldParse: FetchOperation<TrackedOutput>, @unchecked Sendable {
    let parsing = Countdown(1)
    let proceed = TestGate()
    /// Signalled when the output the parse made is released.
    let released = Countdown(1)
    private let made = Locked<WeakOutputBox>(WeakOutputBox())

    var outputAlive: Bool { made.current.value != nil }

    override func parseResponseBody(_ body: Data) throws -> TrackedOutput {
        parsing.signal()
        _ = proceed.wait(timeout: 60)
        let output = TrackedOutput(released: released)
        made.withLock { $0.value = output }
        return output
    }
}

final class WeakOutputBox: @unchecked Sendable {
    weak var value: TrackedOutput?
}

@Suite("A cancelled parse keeps no output", .timeLimit(.minutes(3)))
struct CancelledParseOutputTests {
    /// A cancel that arrives while the parse runs finishes the operation as cancelled: the
    /// output that parse made is nobody's, and is released rather than kept by the finished
    /// operation for as long as it lives.
    @Test func aCancelledParseKeepsNoOutput() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = HeldParse(url: server.url("/json"))
        operation.start()
        #expect(await operation.parsing.wait(timeout: 60))
        operation.cancel()
        operation.proceed.open()
        #expect(await operation.awaitCompletion())
        guard case .failure(.cancelled)? = operation.result else {
            Issue.record("expected cancelled, got \(String(describing: operation.result))")
            return
        }
        // The completion may come at the cancel, while the parse still runs: the output is
        // released once it returns (a wait on the release, not a look at one moment).
        #expect(await operation.released.wait(timeout: 60), "the finished operation still holds the output of its cancelled parse")
        #expect(!operation.outputAlive)
    }
}
