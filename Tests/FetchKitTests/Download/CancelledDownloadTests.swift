import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A download cancelled through a `FetchQueue` completes only once its partial file and resume
/// record are kept (issue 20, point 4: `fetchkit` sometimes left an empty record on Ctrl-C —
/// the queue confirmed the cancel at once, the process exited while the record was being
/// rewritten, and the next run started over, waiting for ever on a server that holds its
/// first answer open).
@Suite("A cancelled download completes after its partial file is kept", .timeLimit(.minutes(3)))
struct CancelledDownloadTests {
    @Test func theCompletionSeesTheRecordWithTheKeptLength() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let size = 1_000_000, firstPart = 300_000
        server.route("/held.bin") { _ in
            .steps([
                .head(status: 200, headers: [
                    "Content-Length": String(size), "ETag": "\"v1\"", "Accept-Ranges": "bytes",
                ]),
                .patternBytes(offset: 0, count: firstPart),
                .stall,
            ])
        }
        let queue = FetchQueue(name: #function, maximumConcurrentTransfers: 4, maximumTransfersPerHost: 4)
        // The race the completion used to win is short: several rounds make the old order fail
        // all but surely.
        for round in 0..<12 {
            let destination = directory.file("held-\(round).bin")
            let download = DownloadOperation(url: server.url("/held.bin"), destination: destination)
            download.configuration.idleTimeout = 600
            let seen = Locked<(record: PartialDownloadRecord?, size: Int64?)?>(nil)
            let done = Countdown(1)
            let partial = download.partialFileURL, recordURL = download.partialRecordURL
            queue.enqueue(download, on: .immediate) { _ in
                // What a process that exits now would leave behind.
                seen.withLock { $0 = (PartialDownloadRecord.load(from: recordURL), DownloadOperation.fileSize(partial)) }
                done.signal()
            }
            let deadline = Date(timeIntervalSinceNow: 60)
            while (DownloadOperation.fileSize(partial) ?? 0) == 0 && Date() < deadline {
                try await Task.sleep(for: .milliseconds(2))
            }
            try #require((DownloadOperation.fileSize(partial) ?? 0) > 0, "round \(round): the partial file never grew")

            queue.cancelAll()

            try #require(await done.wait(timeout: 60), "round \(round): no completion")
            guard case .cancelled? = download.error else { Issue.record("round \(round): \(String(describing: download.error))"); continue }
            let (record, kept) = try #require(seen.current)
            #expect(kept ?? 0 > 0, "round \(round)")
            #expect(record != nil, "round \(round): no readable record when the completion ran")
            #expect(record?.length == kept, "round \(round): the record's length is not yet the kept file's")
        }
    }
}
