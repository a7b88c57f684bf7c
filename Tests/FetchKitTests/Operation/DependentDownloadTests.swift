import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A download that depends on another to the same file starts once the first is finished, and
/// must find the destination free: a download lets go of its destination before Foundation
/// hears that it finished (an OperationQueue starts the dependent at that moment).
@Suite("A dependent download to the same file", .timeLimit(.minutes(2)))
struct DependentDownloadTests {
    @Test func findsTheDestinationFreeEveryTime() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
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

/// What a fetch that never reached the network reports: no attempt and no sent request, even
/// when it was paused or cancelled while it waited for its queue's slot.
@Suite("Attempts count what was sent", .timeLimit(.minutes(2)))
struct AttemptsCountWhatWasSentTests {
    @Test(arguments: ["pause", "cancel"])
    func aDownloadStoppedWhileWaitingForASlotMadeNoAttempt(_ how: String) async throws {
        let line = try await HeldSlotLine(names: [])
        let directory = try TemporaryDirectory()
        defer { line.stop(); directory.remove() }
        let download = DownloadOperation(url: line.server.url("/bytes/5000"), destination: directory.file("waiting.bin"))
        let done = Countdown(1)
        line.queue.enqueue(download, on: .global) { _ in done.signal() }
        #expect(await counts(of: line.queue) { $0.waiting == 1 }, "the download waits for the held slot")
        if how == "pause" {
            #expect(download.pause())
        } else {
            download.cancel()
            #expect(await done.wait())
        }
        #expect(download.attempts == 0, "nothing was sent")
        #expect(download.sentRequest == nil)
        #expect(line.server.requests("/bytes/5000").isEmpty)
        if how == "pause" {
            // Resumed, it is sent: one attempt, and its request.
            line.gate.open()
            #expect(download.resume())
            #expect(await done.wait())
            #expect(download.error == nil)
            #expect(download.attempts == 1)
            #expect(download.sentRequest?.url == line.server.url("/bytes/5000"))
        }
    }
}
