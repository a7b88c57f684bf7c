import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

/// A download that depends on another to the same file starts once the first is finished, and
/// must find the destination free: a download lets go of its destination before Foundation
/// hears that it finished (an OperationQueue starts the dependent at that moment).
@Suite("A dependent download to the same file", .timeLimit(.minutes(2)))
struct DependentDownloadTests {
    @Test func findsTheDestinationFreeEveryTime() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let destination = directory.file("same.bin")
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        for round in 0..<40 {
            let first = DownloadOperation(url: server.url("/bytes/2000"), destination: destination)
            let second = DownloadOperation(url: server.url("/bytes/3000"), destination: destination)
            second.addDependency(first)
            let ended = Countdown(2)
            first.onCompletion(on: .immediate) { _ in ended.signal() }
            second.onCompletion(on: .immediate) { _ in ended.signal() }
            queue.addOperation(second)
            queue.addOperation(first)
            #expect(await ended.wait(), "round \(round): both ended")
            #expect(first.error == nil, "round \(round): \(String(describing: first.error))")
            #expect(second.error == nil, "round \(round): \(String(describing: second.error))")
            if second.error != nil { break }
        }
        #expect(FileManager.default.contents(atPath: destination.path)?.count == 3000)
    }
}
