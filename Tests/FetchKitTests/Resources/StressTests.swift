import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("Stress", .timeLimit(.minutes(3)))
struct StressTests {
    @Test func tenThousandOperationsWithRandomCancelsFinishAndCompleteExactlyOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        // A quarter of them under a sanitizer, whose every access costs tens of times more:
        // still thousands of cancels racing transfers, parses and completions.
        let count = runsUnderSanitizer ? 2_500 : 10_000
        let queue = makeQueue(16)
        let completions = Locked([Int](repeating: 0, count: count))
        let finishes = Locked([Int](repeating: 0, count: count))
        let allCompleted = Countdown(count)
        var tokens: [FetchObservation] = []
        tokens.reserveCapacity(count)
        var generator = SplitMix64(seed: 2026)
        // A third are cancelled at once from four threads (mostly still queued); another third
        // from other operations' completion handlers, so they land while transferring,
        // parsing, finishing or already finished.
        let roles = (0..<count).map { _ in generator.next() % 3 }
        let lateVictims = (0..<count).map { _ in Int(generator.next() % UInt64(count)) }
        let operationsBox = Locked<[FetchOperation<Data>]>([])
        let operations: [FetchOperation<Data>] = (0..<count).map { index in
            let path = index.isMultiple(of: 10) ? "/delay/2" : "/bytes/\(index % 1024)"
            let operation = FetchOperation<Data>(url: server.url(path))
            tokens.append(operation.observeState { change in
                if change.key == .finished { finishes.withLock { $0[index] += 1 } }
            })
            operation.onCompletion { _ in
                completions.withLock { $0[index] += 1 }
                if roles[index] == 1 {
                    operationsBox.withLock { $0.isEmpty ? nil : $0[lateVictims[index]] }?.cancel()
                }
                allCompleted.signal()
            }
            return operation
        }
        operationsBox.withLock { $0 = operations }
        let victims = operations.indices.filter { roles[$0] == 0 }
        let started = Date()
        queue.enqueue(operations)
        // Cancel from four threads at once while the queue runs.
        DispatchQueue.concurrentPerform(iterations: 4) { part in
            for index in victims where index % 4 == part {
                operations[index].cancel()
            }
        }
        #expect(await allCompleted.wait(timeout: 300), "\(allCompleted.count) operations never completed")
        let elapsed = Date().timeIntervalSince(started)
        #expect(await queueDrains(queue))
        #expect(queue.operationCount == 0)
        #expect(allCompleted.overSignals == 0)
        #expect(completions.current.allSatisfy { $0 == 1 }, "every completion runs exactly once")
        #expect(finishes.current.allSatisfy { $0 == 1 }, "every operation finishes exactly once")
        #expect(operations.allSatisfy { $0.isFinished && !$0.isExecuting })
        let cancelled = operations.filter { $0.error?.isCancellation == true }.count
        let succeeded = operations.filter { $0.error == nil }.count
        #expect(cancelled + succeeded == count, "only cancels and successes are possible here")
        #expect(victims.allSatisfy { operations[$0].isCancelled || operations[$0].error == nil })
        let requested = victims.count + roles.filter { $0 == 1 }.count
        print("stress: \(count) operations, \(requested) cancels requested (\(victims.count) up front, the rest from completion handlers), \(cancelled) finished cancelled, \(succeeded) succeeded, \(server.counters.requestsReceived) requests served, \(String(format: "%.2f", elapsed)) s")
        withExtendedLifetime(tokens) {}
    }

    @Test func fetchQueueStormOfRandomCancelsCompletesEachFetchOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = FetchQueue(name: #function, maximumConcurrentTransfers: 16, maximumTransfersPerHost: 8,
                               monitors: [EventRecorder()],
                               coalescesIdenticalRequests: true, networkActivityHideDelay: 0)
        let recorder = try #require(queue.recorder)
        let count = 5_000
        let completions = Locked([Int](repeating: 0, count: count))
        let done = Countdown(count)
        let milestone = Countdown(count * 6 / 10)
        var generator = SplitMix64(seed: 7)
        var ids: [FetchID] = []
        let started = Date()
        for index in 0..<count {
            // A few paths repeat, so identical GETs coalesce while cancels fly.
            let path: String
            switch generator.next() % 4 {
            case 0: path = "/bytes/\(index % 7 * 1000)"
            case 1: path = "/delay/\(index % 3)?n=\(index)"
            case 2: path = "/bytes/100?n=\(index)"
            default: path = "/stall-mid-body/20000?n=\(index)"
            }
            let operation = FetchOperation<Data>(url: server.url(path))
            operation.configuration.idleTimeout = 30
            ids.append(queue.enqueue(operation) { _ in
                completions.withLock { $0[index] += 1 }
                milestone.signal()
                done.signal()
            })
        }
        let targets = ids
        // Cancel by id from three threads, by predicate from a fourth; then, once 60 % have
        // completed, cancel all that is left (the stalled bodies would never finish).
        DispatchQueue.concurrentPerform(iterations: 4) { part in
            var random = SplitMix64(seed: UInt64(part))
            if part == 3 {
                _ = queue.cancelAll { id, _ in id.rawValue % 5 == 0 }
            } else {
                for id in targets where random.next() % 4 == 0 { queue.cancel(id) }
            }
        }
        #expect(await milestone.wait(timeout: 120))
        queue.cancelAll()
        #expect(await done.wait(timeout: 120), "\(done.count) fetches never completed")
        #expect(done.overSignals == 0)
        #expect(completions.current.allSatisfy { $0 == 1 }, "every completion runs exactly once")
        #expect(await queueIsEmpty(queue))
        // Cancelled callers complete at once; their transfers release their slots when the
        // transport confirms they stopped.
        #expect(await counts(of: queue) { $0 == .init(inFlight: 0, waiting: 0) })
        #expect(await eventsDrain(queue))
        let events = recorder.events.current
        let enqueues = Dictionary(grouping: events.filter { $0.kind == .enqueue }, by: \.id).mapValues(\.count)
        let starts = Dictionary(grouping: events.filter { $0.kind == .start }, by: \.id).mapValues(\.count)
        let finishes = Dictionary(grouping: events.filter { $0.kind == .finish }, by: \.id).mapValues(\.count)
        #expect(enqueues.count == count && enqueues.values.allSatisfy { $0 == 1 })
        #expect(starts.values.allSatisfy { $0 == 1 })
        #expect(Set(ids).isSuperset(of: starts.keys))
        #expect(finishes.count == count && finishes.values.allSatisfy { $0 == 1 })
        print("FetchQueue storm: \(count) fetches, \(queue.statistics.transfersStarted) transfers, \(queue.statistics.requestsCoalesced) coalesced, \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
    }

    @Test func queueBoundIsRespectedAsSeenByTheServer() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        server.gatedRoute("/gate", gate)
        let queue = makeQueue(3)
        let operations = (0..<12).map { server.operation("/gate?n=\($0)") }
        queue.enqueue(operations)
        #expect(await server.waitUntil(timeout: 60) { $0.requestsInFlight == 3 })
        gate.open()
        for operation in operations { try await operation.finished() }
        #expect(server.counters.peakRequestsInFlight == 3)
        #expect(server.counters.requestsReceived == 12)
    }
}
