import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Coalescing identical GETs is opt-in, and even then limited to requests that are safe to
/// share: a resource that answers differently each time must never hand two callers one body
/// unless they asked for it.
@Suite("Coalescing is opt-in and limited to shareable requests", .timeLimit(.minutes(3)))
struct CoalescingTests {
    /// Routes `path` to a handler that numbers each request as it arrives, holds it until
    /// `gate` opens, then answers with its number: a fresh body per request, like `/uuid`.
    private func freshRoute(_ server: TestServer, _ path: String, _ gate: TestGate) {
        let counter = Locked(0)
        server.route(path) { _ in
            let number = counter.withLock { count -> Int in
                count += 1
                return count
            }
            gate.wait(timeout: 120)
            return .text("response \(number)")
        }
    }

    /// Signals `begun` as each fetch starts (once it has a transfer, its own or a shared one).
    private struct StartSignal: FetchEventMonitor {
        let begun: Countdown
        func fetchDidStart(_ fetch: MonitoredFetch, request: URLRequest) { begun.signal() }
    }

    /// A queue whose monitor counts the fetches that started, and that countdown.
    private func queueCountingStarts(_ count: Int, coalesces: Bool, name: String = #function) -> (FetchQueue, Countdown) {
        let begun = Countdown(count)
        return (makeFetchQueue(coalesces: coalesces, monitors: [StartSignal(begun: begun)], name: name), begun)
    }

    /// Enqueues `operations` on `queue` and returns a countdown of their completions.
    private func enqueue(_ operations: [FetchOperation<Data>], on queue: FetchQueue) -> Countdown {
        let completed = Countdown(operations.count)
        for operation in operations { queue.enqueue(operation, on: .global) { _ in completed.signal() } }
        return completed
    }

    @Test func byDefaultTwoCallersOfAFreshResourceGetTwoResponses() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        freshRoute(server, "/uuid", gate)
        let begun = Countdown(2)
        let queue = FetchQueue(name: #function, monitors: [StartSignal(begun: begun)])
        #expect(!queue.coalescesIdenticalRequests, "off by default")
        let operations = [server.operation("/uuid"), server.operation("/uuid")]
        let completed = enqueue(operations, on: queue)
        #expect(await begun.wait())
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 2 }, "each caller sent its own request")
        gate.open()
        #expect(await completed.wait())
        #expect(server.requests("/uuid").count == 2)
        let bodies = Set(operations.flatMap(\.parses.current))
        #expect(bodies == [Data("response 1".utf8), Data("response 2".utf8)], "each caller got its own response")
        #expect(queue.statistics.requestsCoalesced == 0)
    }

    @Test func whenAskedForTwoCallersShareOneResponse() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        freshRoute(server, "/uuid", gate)
        let (queue, begun) = queueCountingStarts(2, coalesces: true)
        let operations = [server.operation("/uuid"), server.operation("/uuid")]
        let completed = enqueue(operations, on: queue)
        #expect(await begun.wait(), "both joined the one transfer")
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 1 })
        gate.open()
        #expect(await completed.wait())
        #expect(server.requests("/uuid").count == 1)
        #expect(operations.allSatisfy { $0.parses.current == [Data("response 1".utf8)] })
        #expect(queue.statistics.requestsCoalesced == 1)
    }

    @Test func aCallerThatJoinsAfterTheHeadArrivedHearsOfItOnceInOrder() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.route("/held") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "2"]),
                     .wait(for: gate), .write(Data("ok".utf8))])
        }
        let queue = makeFetchQueue(coalesces: true)
        let recorder = try #require(queue.recorder)
        // Given a transfer whose head has arrived,
        let first = server.operation("/held")
        let firstID = queue.enqueue(first, on: .global) { _ in }
        #expect(await recorder.waitUntil { $0.contains { $0 == (.response, firstID) } })
        // when an identical fetch joins it,
        let late = server.operation("/held")
        let lateID = queue.enqueue(late, on: .global) { _ in }
        #expect(await recorder.waitUntil { $0.contains { $0 == (.response, lateID) } })
        gate.open()
        #expect(await recorder.waitUntil { events in [firstID, lateID].allSatisfy { id in events.contains { $0 == (.finish, id) } } })
        // then each caller's monitors hear its whole life once, in order — the late one that it
        // joined, first — and one request was sent.
        #expect(recorder.kinds(for: firstID) == [.enqueue, .start, .response, .metrics, .finish])
        #expect(recorder.kinds(for: lateID) == [.enqueue, .join, .start, .response, .metrics, .finish])
        #expect(late.responseBody == Data("ok".utf8))
        #expect(server.requests("/held").count == 1)
        #expect(queue.statistics.requestsCoalesced == 1)
    }

    @Test func monitorsHearThatAFetchJoinedAWaitingTransferBeforeItStarts() async throws {
        let server = try TestServer.standard()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.gatedRoute("/held", gate)
        let lines = Locked<[String]>([])
        let logger = FetchEventLogger { line in lines.withLock { $0.append(line) } }
        let sessionRecorder = EventRecorder()
        let session = FetchSession(monitors: [sessionRecorder])
        defer { session.invalidate() }
        // The logger first: its events are handed to its queue before the recorder's.
        let queue = makeFetchQueue(total: 1, coalesces: true, monitors: [logger, EventRecorder()])
        let recorder = try #require(queue.recorder)
        queue.enqueue(server.operation("/held"))
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        // Given a shareable fetch waiting for the only slot,
        func shared() -> RecordingOperation {
            let operation = server.operation("/json")
            operation.configuration.session = session
            return operation
        }
        let done = Countdown(2)
        let firstID = queue.enqueue(shared(), on: .global) { _ in done.signal() }
        #expect(await counts(of: queue) { $0.waiting == 1 })
        // when an identical one joins it,
        let joinerID = queue.enqueue(shared(), on: .global) { _ in done.signal() }
        // then the queue's monitors and the session's hear it at once, before it starts,
        #expect(await recorder.waitUntil { $0.contains { $0 == (.join, joinerID) } })
        #expect(await sessionRecorder.waitUntil { $0.contains { $0 == (.join, joinerID) } })
        #expect(recorder.kinds(for: joinerID) == [.enqueue, .join])
        let logged = Countdown(1)
        logger.queue.async { logged.signal() }
        #expect(await logged.wait())
        #expect(lines.current.contains("\(joinerID) joined an identical request's transfer"), "\(lines.current)")
        gate.open()
        #expect(await done.wait())
        #expect(await recorder.waitUntil { events in [firstID, joinerID].allSatisfy { id in events.contains { $0 == (.finish, id) } } })
        #expect(recorder.kinds(for: firstID) == [.enqueue, .start, .response, .metrics, .finish], "it made the transfer")
        #expect(recorder.kinds(for: joinerID) == [.enqueue, .join, .start, .response, .metrics, .finish])
        #expect(server.requests("/json").count == 1)
    }

    /// Requests that say they want a fresh answer, in each of the ways HTTP and Foundation let
    /// them say it.
    static let freshnessDemands: [(name: String, apply: @Sendable (inout URLRequest) -> Void)] = [
        ("Cache-Control: no-cache", { $0.setValue("no-cache", forHTTPHeaderField: "Cache-Control") }),
        ("Cache-Control: max-age=0, no-store", { $0.setValue("max-age=0, no-store", forHTTPHeaderField: "Cache-Control") }),
        ("Cache-Control: max-age=0", { $0.setValue("max-age=0", forHTTPHeaderField: "Cache-Control") }),
        ("Pragma: no-cache", { $0.setValue("no-cache", forHTTPHeaderField: "Pragma") }),
        ("reloadIgnoringLocalCacheData", { $0.cachePolicy = .reloadIgnoringLocalCacheData }),
        ("reloadIgnoringLocalAndRemoteCacheData", { $0.cachePolicy = .reloadIgnoringLocalAndRemoteCacheData }),
    ]

    @Test(arguments: 0..<freshnessDemands.count)
    func aRequestThatAsksForAFreshAnswerIsNeverShared(_ index: Int) async throws {
        let demand = Self.freshnessDemands[index]
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        freshRoute(server, "/uuid", gate)
        let queue = makeFetchQueue(coalesces: true)
        let operations = (0..<2).map { _ in
            var request = URLRequest(url: server.url("/uuid"))
            demand.apply(&request)
            return RecordingOperation(request: request)
        }
        let completed = enqueue(operations, on: queue)
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 2 }, "\(demand.name): each caller sent its own request")
        gate.open()
        #expect(await completed.wait())
        #expect(server.requests("/uuid").count == 2, "\(demand.name)")
        #expect(Set(operations.flatMap(\.parses.current)).count == 2, "\(demand.name)")
        #expect(queue.statistics.requestsCoalesced == 0, "\(demand.name)")
    }

    @Test func differentCredentialsInHeadersAreNeverShared() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        freshRoute(server, "/me", gate)
        let queue = makeFetchQueue(coalesces: true)
        let operations = [("Authorization", "Bearer alice"), ("Authorization", "Bearer bob"), ("Cookie", "session=carol")].map { name, value in
            var request = URLRequest(url: server.url("/me"))
            request.setValue(value, forHTTPHeaderField: name)
            return RecordingOperation(request: request)
        }
        let completed = enqueue(operations, on: queue)
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 3 })
        gate.open()
        #expect(await completed.wait())
        #expect(server.requests("/me").count == 3)
        #expect(queue.statistics.requestsCoalesced == 0)
    }

    @Test func whichRequestsAskForAFreshAnswer() throws {
        func request(_ headers: [String: String], cachePolicy: URLRequest.CachePolicy = .useProtocolCachePolicy) throws -> URLRequest {
            var request = URLRequest(url: try #require(URL(string: "http://127.0.0.1/feed")))
            request.cachePolicy = cachePolicy
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            return request
        }
        for fresh in [["cache-control": "No-Cache"], ["Cache-Control": "private, no-cache=\"Set-Cookie\""],
                      ["Cache-Control": "no-store"], ["Cache-Control": "max-age = 0"], ["Cache-Control": "max-age=00"], ["PRAGMA": "no-cache"]] {
            #expect(FlightKey.asksForAFreshAnswer(try request(fresh)), "\(fresh)")
        }
        for shareable in [[:], ["Cache-Control": "max-age=60"], ["Cache-Control": "max-age=0600"], ["Accept": "no-cache"]] {
            #expect(!FlightKey.asksForAFreshAnswer(try request(shareable)), "\(shareable)")
        }
        #expect(!FlightKey.asksForAFreshAnswer(try request([:], cachePolicy: .returnCacheDataElseLoad)))
    }
}
