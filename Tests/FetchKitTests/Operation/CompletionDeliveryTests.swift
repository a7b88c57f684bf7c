import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Where completion handlers run after the parse.
@Suite("Completion delivery", .timeLimit(.minutes(3)))
struct CompletionDeliveryTests {
    /// Two handlers for the global queue after a parse there (one may run on the parse's own
    /// thread): each runs once, after the output is set.
    @Test func globalHandlersAfterAGlobalParseRunOnceEach() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/bytes/100")
        let outputs = Locked<[Int]>([])
        let done = Countdown(2)
        for _ in 0..<2 {
            operation.onCompletion(on: .global) { result in
                outputs.withLock { $0.append((try? result.get())?.count ?? -1) }
                done.signal()
            }
        }
        OperationQueue().addOperation(operation)
        #expect(await done.wait())
        #expect(done.overSignals == 0)
        #expect(outputs.current == [100, 100])
    }

    /// A handler for another queue is still handed to that queue.
    @Test func aHandlerForAnotherQueueRunsThere() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/bytes/100")
        let queue = DispatchQueue(label: "mine")
        let key = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: key, value: true)
        let onMine = Locked<Bool?>(nil)
        let done = Countdown(1)
        operation.onCompletion(on: .dispatch(queue)) { _ in
            onMine.withLock { $0 = DispatchQueue.getSpecific(key: key) == true }
            done.signal()
        }
        OperationQueue().addOperation(operation)
        #expect(await done.wait())
        #expect(onMine.current == true)
    }
}
