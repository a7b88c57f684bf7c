import Dispatch
import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

/// A queue in awkward states: cancelled in one sweep while thousands wait, dropped by its owner
/// while suspended, asked to run a fetch whose dependency nothing runs.
@Suite("FetchQueue hostile states")
struct QueueHostileStateTests {
    // MARK: cancelAll is atomic

    /// Thousands wait behind a few transfers held at the server. After `cancelAll()` no fetch
    /// that was waiting may start a transfer — not even one that a cancelled transfer's freed
    /// slot would hand to a fetch the sweep has not reached yet.
    @Test func cancelAllStartsNoTransferForAnythingItCancels() async throws {
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        let gate = ServerGate()
        server.gatedRoute("/gate", gate)
        defer { gate.open() }
        let limit = 4
        let count = 3_000
        let queue = makeFetchQueue(total: limit, perHost: limit)
        let completions = Locked([Int](repeating: 0, count: count))
        let cancelledResults = Locked(0)
        let done = Countdown(count)
        for index in 0..<count {
            queue.enqueue(FetchOperation(url: server.url("/gate?n=\(index)"))) { result in
                completions.withLock { $0[index] += 1 }
                if case .failure(.cancelled) = result { cancelledResults.withLock { $0 += 1 } }
                done.signal()
            }
        }
        // Given: `limit` transfers held at the server, the rest waiting for a slot.
        #expect(await counts(of: queue) { $0 == .init(inFlight: limit, waiting: count - limit) })
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == limit })
        // When
        queue.cancelAll()
        // Then: every completion once, as cancelled; no transfer started after the first `limit`.
        #expect(await done.wait(timeout: 60))
        #expect(completions.current.allSatisfy { $0 == 1 })
        #expect(cancelledResults.current == count)
        #expect(done.overSignals == 0)
        #expect(queue.statistics.transfersStarted == limit, "a cancelled fetch started a transfer")
        #expect(server.requestsReceived == limit, "a cancelled fetch reached the server")
        #expect(await queueIsEmpty(queue))
    }

    /// The same with a predicate: the fetches it selects never start a transfer, the others run.
    @Test func cancelAllWherePredicateStartsNothingItSelected() async throws {
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        let gate = ServerGate()
        server.gatedRoute("/gate", gate)
        defer { gate.open() }
        let limit = 2
        let count = 2_000
        let queue = makeFetchQueue(total: limit, perHost: limit)
        let done = Countdown(count)
        let operations = (0..<count).map { FetchOperation(url: server.url("/gate?n=\($0)")) }
        let kept = operations.suffix(3).map { ObjectIdentifier($0) }
        for operation in operations {
            queue.enqueue(operation) { _ in done.signal() }
        }
        #expect(await counts(of: queue) { $0 == .init(inFlight: limit, waiting: count - limit) })
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == limit })
        // When: every fetch but the last three is cancelled.
        let cancelled = queue.cancelAll { _, operation in !kept.contains(ObjectIdentifier(operation)) }
        #expect(cancelled == count - 3)
        // Then: only the three kept ones start transfers; they wait at the gate.
        #expect(await counts(of: queue) { $0 == .init(inFlight: 2, waiting: 1) })
        #expect(queue.statistics.transfersStarted == limit + limit, "only kept fetches may start after the sweep")
        gate.open()
        #expect(await done.wait(timeout: 60))
        #expect(operations.suffix(3).allSatisfy { $0.error == nil })
        #expect(operations.dropLast(3).allSatisfy { if case .cancelled? = $0.error { true } else { false } })
        #expect(queue.statistics.transfersStarted == limit + 3)
    }
}
