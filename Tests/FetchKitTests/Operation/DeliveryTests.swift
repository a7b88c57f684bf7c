import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("A queue with a default callback queue", .timeLimit(.minutes(2)))
struct DeliveryTests {
    private static let key = DispatchSpecificKey<String>()

    @Test func everyHandlerRunsOnTheCallbackQueueGivenOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let callbacks = DispatchQueue(label: "delivery-tests")
        callbacks.setSpecific(key: Self.key, value: "delivery-tests")
        let queue = FetchQueue(name: #function).delivering(on: .dispatch(callbacks))
        let seen = Locked<[String?]>([])
        let done = Countdown(4)
        @Sendable func note() {
            seen.withLock { $0.append(DispatchQueue.getSpecific(key: Self.key)) }
            done.signal()
        }
        queue.enqueue(DataFetchOperation(url: server.url("/bytes/10"))) { result in
            #expect((try? result.get())?.count == 10)
            note()
        }
        let fetch = DataFetchOperation(url: server.url("/bytes/20"))
        queue.enqueue(fetch) { operation, result in
            #expect(operation === fetch)
            #expect((try? result.get())?.count == 20)
            note()
        }
        queue.enqueue(batch: [DataFetchOperation(url: server.url("/bytes/30"))], progress: { _ in }) { status in
            #expect(status.failed == 0)
            note()
        }
        queue.enqueue(DataFetchOperation(url: server.url("/status/404"))) { result in
            guard case .failure(.unacceptableStatus(404)) = result else {
                Issue.record("\(result)")
                return
            }
            note()
        }
        #expect(await done.wait())
        #expect(seen.current == Array(repeating: "delivery-tests", count: 4))
        #expect(try await queue.fetch(DataFetchOperation(url: server.url("/bytes/5"))).count == 5)
        #expect(queue.queue.maximumConcurrentTransfers == FetchQueue.defaultMaximumConcurrentTransfers)
    }
}
