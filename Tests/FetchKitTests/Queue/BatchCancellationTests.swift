import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A batch cancelled as a whole, and one that stops at its first failure; cancelled members
/// count apart from failed ones.
@Suite("Cancelling a batch", .timeLimit(.minutes(2)))
struct BatchCancellationTests {
    @Test func cancelStopsEveryMemberNotYetCompletedAndCountsThemCancelled() async throws {
        let server = try TestServer()
        let gate = TestGate()
        server.gatedRoute("/held", gate)
        // The member that succeeds is on a server of its own, with a slot of its own: the six
        // held members may ask for their slots before it does (started on other threads), and
        // with one host they could take every slot and hold it.
        let other = try TestServer.standard()
        defer { gate.open(); server.shutDown(); other.shutDown() }
        let queue = makeFetchQueue(total: 3, perHost: 2)
        let first = other.operation("/bytes/100")
        let firstDone = Countdown(1)
        first.onCompletion(on: .global) { _ in firstDone.signal() }
        let operations: [AnyFetchOperation] = [first] + (0..<6).map { _ in server.operation("/held") }
        let completions = Locked(0)
        let completed = Countdown(1)
        let final = Locked<FetchBatch.Status?>(nil)
        let batch = queue.enqueue(batch: operations, on: .global, completion: { status in
            completions.withLock { $0 += 1 }
            final.withLock { $0 = status }
            completed.signal()
        })
        #expect(await firstDone.wait())
        // Two held in flight (the per-host limit), four waiting for a slot.
        #expect(await counts(of: queue) { $0.inFlight == 2 && $0.waiting == 4 })
        batch.cancel()
        #expect(await completed.wait())
        let status = try #require(final.current)
        #expect(status.finished == 7 && status.succeeded == 1 && status.cancelled == 6 && status.failed == 0)
        #expect(operations.dropFirst().allSatisfy { $0.error?.isCancellation == true })
        // The two in flight may or may not have reached the server by the cancel; the four
        // waiting never do.
        #expect(server.requests("/held").count <= 2, "the waiting ones were never sent")
        #expect(completions.current == 1)
        batch.cancel()   // after completion: nothing
        #expect(batch.status.cancelled == 6)
    }

    @Test func theFirstFailureCancelsTheRestWhenAskedTo() async throws {
        let server = try TestServer.standard()
        let gate = TestGate()
        server.gatedRoute("/held", gate)
        defer { gate.open(); server.shutDown() }
        let queue = makeFetchQueue(total: 4, perHost: 4)
        let held = (0..<3).map { _ in server.operation("/held") }
        let failing = server.operation("/status/500")
        failing.configuration.retryPolicy = .none
        let completed = Countdown(1)
        let final = Locked<FetchBatch.Status?>(nil)
        queue.enqueue(batch: held + [failing], on: .global, cancellingRestOnFailure: true, completion: { status in
            final.withLock { $0 = status }
            completed.signal()
        })
        #expect(await completed.wait())
        let status = try #require(final.current)
        #expect(status.failed == 1 && status.cancelled == 3 && status.succeeded == 0)
        #expect(held.allSatisfy { $0.error?.isCancellation == true })
    }

    @Test func withoutTheOptionAFailureCancelsNothing() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue(total: 4, perHost: 4)
        let failing = server.operation("/status/500")
        failing.configuration.retryPolicy = .none
        let completed = Countdown(1)
        let final = Locked<FetchBatch.Status?>(nil)
        queue.enqueue(batch: [failing] + (0..<3).map { _ in server.operation("/bytes/10") }, on: .global, completion: { status in
            final.withLock { $0 = status }
            completed.signal()
        })
        #expect(await completed.wait())
        #expect(final.current?.failed == 1 && final.current?.succeeded == 3 && final.current?.cancelled == 0)
    }
}
