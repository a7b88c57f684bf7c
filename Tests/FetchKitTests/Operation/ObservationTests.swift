import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("State observation", .timeLimit(.minutes(3)))
struct ObservationTests {
    typealias Change = AnyFetchOperation.StateChange

    private func record(_ operation: AnyFetchOperation) -> (Locked<[Change]>, FetchObservation) {
        let changes = Locked<[Change]>([])
        let token = operation.observeState { change in changes.withLock { $0.append(change) } }
        return (changes, token)
    }

    @Test func successfulRunSequence() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        let (changes, token) = record(operation)
        try await operation.run()
        #expect(changes.current == [
            Change(key: .executing, oldValue: false, newValue: true),
            Change(key: .executing, oldValue: true, newValue: false),
            Change(key: .finished, oldValue: false, newValue: true),
        ])
        token.invalidate()
    }

    @Test func cancelBeforeStartSequence() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        let (changes, token) = record(operation)
        // The observers hear `isFinished` after Foundation does (`waitUntilFinished` can return
        // first, as it did once under ThreadSanitizer): the test waits for the observer's.
        let finished = Countdown(1)
        let finishToken = operation.observeState { change in if change.key == .finished { finished.signal() } }
        operation.cancel()
        makeQueue(1).addOperation(operation)
        #expect(await operation.awaitCompletion())
        // The completion answers at the cancel; `isFinished` turns when the queue starts it.
        #expect(await finished.wait())
        withExtendedLifetime(finishToken) {}
        #expect(changes.current == [
            Change(key: .cancelled, oldValue: false, newValue: true),
            Change(key: .finished, oldValue: false, newValue: true),
        ])
        withExtendedLifetime(token) {}
    }

    @Test func cancelDuringTransferSequence() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/stall-head")
        let (changes, token) = record(operation)
        let executing = Countdown(1)
        let startToken = operation.observeState { change in
            if change.key == .executing && change.newValue { executing.signal() }
        }
        makeQueue(1).addOperation(operation)
        #expect(await executing.wait())
        operation.cancel()
        #expect(await operation.awaitCompletion())
        #expect(changes.current == [
            Change(key: .executing, oldValue: false, newValue: true),
            Change(key: .cancelled, oldValue: false, newValue: true),
            Change(key: .executing, oldValue: true, newValue: false),
            Change(key: .finished, oldValue: false, newValue: true),
        ])
        withExtendedLifetime((token, startToken)) {}
    }

    @Test func readinessFollowsDependencies() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let dependency = server.operation("/delay/50")
        let operation = server.operation("/json")
        let (changes, token) = record(operation)
        operation.addDependency(dependency)
        #expect(!operation.isReady)
        makeQueue(2).enqueue([operation, dependency])
        try await operation.finished()
        #expect(changes.current == [
            Change(key: .ready, oldValue: true, newValue: false),
            Change(key: .ready, oldValue: false, newValue: true),
            Change(key: .executing, oldValue: false, newValue: true),
            Change(key: .executing, oldValue: true, newValue: false),
            Change(key: .finished, oldValue: false, newValue: true),
        ])
        withExtendedLifetime(token) {}
    }

    @Test func anInvalidatedObservationHearsNothing() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        let (changes, token) = record(operation)
        token.invalidate()
        try await operation.run()
        #expect(changes.current.isEmpty)
    }

    @Test func releasingTheTokenStopsObservation() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        let changes = Locked<[Change]>([])
        _ = operation.observeState { change in changes.withLock { $0.append(change) } }
        try await operation.run()
        #expect(changes.current.isEmpty)
    }

    @Test func anObserverMayCancelWithoutDeadlock() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/stall-head")
        let token = operation.observeState { [unowned operation] change in
            if change.key == .executing && change.newValue { operation.cancel() }
        }
        makeQueue(1).addOperation(operation)
        #expect(await operation.awaitCompletion())
        #expect(operation.error?.isCancellation == true)
        withExtendedLifetime(token) {}
    }

    @Test func everyObserverSeesFinishedExactlyOnceUnderRacingCancels() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeQueue(8)
        let operations = (0..<200).map { index in server.operation(index.isMultiple(of: 2) ? "/json" : "/delay/5") }
        let finishes = Locked([ObjectIdentifier: Int]())
        var tokens: [FetchObservation] = []
        for operation in operations {
            let id = ObjectIdentifier(operation)
            tokens.append(operation.observeState { change in
                if change.key == .finished { finishes.withLock { $0[id, default: 0] += 1 } }
            })
        }
        queue.enqueue(operations)
        for operation in operations.shuffled().prefix(100) { operation.cancel() }
        for operation in operations { _ = try? await operation.finished() }
        #expect(finishes.current.count == operations.count)
        #expect(finishes.current.values.allSatisfy { $0 == 1 })
        withExtendedLifetime(tokens) {}
    }
}
