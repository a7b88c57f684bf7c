import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit


@Suite("Downloads to disk", .timeLimit(.minutes(3)))
struct DownloadTests {
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }
    private func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }

    @Test func downloadStreamsToTheDestination() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let destination = directory.file("file.bin")
        let download = DownloadOperation(url: server.url("/bytes/300000"), destination: destination)
        let last = Locked<FetchProgress?>(nil)
        download.onProgress(on: .immediate) { progress in last.withLock { $0 = progress } }
        try await download.run()
        #expect(contents(destination) == TestResponse.patternBytes(count: 300_000))
        #expect(download.downloadedFileURL == destination.standardizedFileURL)
        #expect(download.responseBody == nil, "the body never sat in memory")
        #expect(!exists(download.partialFileURL))
        #expect(!exists(download.partialRecordURL))
        #expect(last.current == FetchProgress(bytesReceived: 300_000, bytesExpected: 300_000))
        #expect(download.resumedBytes == 0)
    }

    @Test func parseDownloadedFileSeesTheCompleteFile() async throws {
        final class Checked: DownloadOperation, @unchecked Sendable {
            let sizes = Locked<[Int]>([])
            override func parseDownloadedFile(at url: URL) throws {
                let size = (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? -1
                sizes.withLock { $0.append(size) }
            }
        }
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let download = Checked(request: URLRequest(url: server.url("/bytes/4096")), destination: directory.file("a"))
        try await download.run()
        #expect(download.sizes.current == [4096])
    }

    @Test func anExistingDestinationIsUntouchedWhenTheDownloadFails() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let destination = directory.file("keep.txt")
        try Data("old contents".utf8).write(to: destination)
        for path in ["/status/500", "/close-mid-body/100000", "/lie/5000/100"] {
            let download = DownloadOperation(url: server.url(path), destination: destination)
            download.configuration.idleTimeout = 10
            await #expect(throws: FetchError.self) { try await download.run() }
            #expect(contents(destination) == Data("old contents".utf8), "\(path) must not touch the destination")
            #expect(!exists(download.partialFileURL), "\(path): a partial file that cannot be resumed is removed")
        }
    }

    @Test func anExistingDestinationIsReplacedWhenTheDownloadSucceeds() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let destination = directory.file("replace.bin")
        try Data("old".utf8).write(to: destination)
        try await DownloadOperation(url: server.url("/bytes/1000"), destination: destination).run()
        #expect(contents(destination) == TestResponse.patternBytes(count: 1000))
    }

    @Test func aLengthMismatchIsAClearError() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/short") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "1000", "Connection": "close"]),
                    .patternBytes(offset: 0, count: 400), .close])
        }
        let download = DownloadOperation(url: server.url("/short"), destination: directory.file("short"))
        await #expect(throws: FetchError.self) { try await download.run() }
        switch download.error {
        case .lengthMismatch(let mismatch)?:
            #expect(mismatch.expected == 1000)
            #expect(mismatch.received == 400)
        case .transport?:
            break   // libcurl may report the early close itself
        default:
            Issue.record("expected a length error, got \(String(describing: download.error))")
        }
        #expect(!exists(directory.file("short")))
    }

    @Test func anInterruptedDownloadResumesWithRangeAndIfRange() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 200_000
        let etag = Locked("v1")
        let cut = Locked(true)
        server.resumableRoute("/resumable", length: length, etag: etag, cutFull: cut)
        let destination = directory.file("resumed.bin")

        let first = DownloadOperation(url: server.url("/resumable"), destination: destination)
        first.configuration.retryPolicy = .none   // this attempt is meant to fail and leave its partial file
        await #expect(throws: FetchError.self) { try await first.run() }
        #expect(!exists(destination))
        #expect(DownloadOperation.fileSize(first.partialFileURL) == Int64(length / 2), "the partial file is kept")

        cut.withLock { $0 = false }
        let second = DownloadOperation(url: server.url("/resumable"), destination: destination)
        let last = Locked<FetchProgress?>(nil)
        second.onProgress(on: .immediate) { progress in last.withLock { $0 = progress } }
        try await second.run()
        #expect(contents(destination) == TestResponse.patternBytes(count: length))
        #expect(second.resumedBytes == Int64(length / 2))
        #expect(second.response?.statusCode == 206)
        let resumed = try #require(server.requests("/resumable").last)
        #expect(resumed.header("Range") == "bytes=\(length / 2)-")
        #expect(resumed.header("If-Range") == "\"v1\"")
        #expect(last.current == FetchProgress(bytesReceived: Int64(length), bytesExpected: Int64(length)), "progress counts the resumed bytes")
        #expect(!exists(second.partialFileURL))
    }

    /// The record beside a partial file is written by the download's sink; the next attempt of
    /// the same download takes it from the sink, not from the disk (what is on disk is read
    /// only by a download that did not write it: another run).
    @Test func aRetryResumesFromTheRecordItsSinkWroteWithoutReadingItBack() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 200_000
        let cut = Locked(true)
        server.resumableRoute("/resumable", length: length, etag: Locked("v1"), cutFull: cut)
        let destination = directory.file("retried.bin")
        let download = DownloadOperation(url: server.url("/resumable"), destination: destination)
        download.configuration.retryPolicy = RetryPolicy(maximumRetries: 1, baseDelay: 0, maximumDelay: 0, jitter: 0)
        let recordURL = download.partialRecordURL
        download.onRetry(on: .immediate) { _ in
            // Between the attempts: what the first attempt's sink wrote is replaced on disk.
            cut.withLock { $0 = false }
            try? Data("not a record".utf8).write(to: recordURL)
        }
        try await download.run()
        #expect(contents(destination) == TestResponse.patternBytes(count: length))
        let requests = server.requests("/resumable")
        #expect(requests.count == 2)
        #expect(requests.last?.header("Range") == "bytes=\(length / 2)-", "the retry resumed")
        #expect(requests.last?.header("If-Range") == "\"v1\"")
        #expect(download.partialFileNotices.isEmpty, "nothing was read back, so nothing was found unreadable")
    }

    @Test func aBatchCountsAResumedDownloadFromWhatIsOnDiskAsTheDownloadDoes() async throws {
        // The queue hears progress from the transfer itself: a 206 continues from the bytes
        // the partial file holds, for the batch as for the download's own progress.
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 200_000
        let cut = Locked(true)
        server.resumableRoute("/resumable", length: length, etag: Locked("v1"), cutFull: cut)
        let destination = directory.file("batched.bin")
        let first = DownloadOperation(url: server.url("/resumable"), destination: destination)
        first.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await first.run() }
        cut.withLock { $0 = false }

        let queue = makeFetchQueue(total: 2, perHost: 2)
        let second = DownloadOperation(url: server.url("/resumable"), destination: destination)
        let done = Countdown(1)
        let final = Locked<FetchBatch.Status?>(nil)
        let batch = queue.enqueue(batch: [second], completion: { status in
            final.withLock { $0 = status }
            done.signal()
        })
        #expect(await done.wait())
        #expect(second.response?.statusCode == 206)
        #expect(second.resumedBytes == Int64(length / 2))
        let status = try #require(final.current)
        #expect(status.bytesReceived == Int64(length), "what was on disk, and what came now")
        #expect(status.bytesExpected == Int64(length))
        #expect(batch.byteProgress.completedUnitCount == Int64(length))
    }

    @Test func aChangedFileStartsOver() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 100_000
        let etag = Locked("v1")
        let cut = Locked(true)
        server.resumableRoute("/changing", length: length, etag: etag, cutFull: cut)
        let destination = directory.file("changing.bin")
        let first = DownloadOperation(url: server.url("/changing"), destination: destination)
        first.configuration.retryPolicy = .none
        _ = try? await first.run()
        // The file changes: If-Range no longer matches, so the server sends it all again.
        etag.withLock { $0 = "v2" }
        cut.withLock { $0 = false }
        let second = DownloadOperation(url: server.url("/changing"), destination: destination)
        try await second.run()
        #expect(second.response?.statusCode == 200)
        #expect(second.resumedBytes == 0)
        #expect(contents(destination) == TestResponse.patternBytes(count: length))
    }

    @Test func aServerThatIgnoresRangesGetsAFullRestart() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 100_000
        let destination = directory.file("norange.bin")
        // A resumable partial file from an earlier attempt…
        let cut = Locked(true)
        server.resumableRoute("/file", length: length, etag: Locked("v1"), cutFull: cut)
        let first = DownloadOperation(url: server.url("/file"), destination: destination)
        first.configuration.retryPolicy = .none
        _ = try? await first.run()
        #expect(DownloadOperation.fileSize(directory.file(".norange.bin.fetchkit-partial")) == Int64(length / 2))
        // …then the server stops honouring ranges.
        server.resumableRoute("/file", length: length, etag: Locked("v1"), cutFull: Locked(false), ignoresRanges: true)
        let second = DownloadOperation(url: server.url("/file"), destination: destination)
        try await second.run()
        #expect(second.resumedBytes == 0)
        #expect(contents(destination) == TestResponse.patternBytes(count: length))
    }

    @Test func aPartialFileThatNoLongerFitsIsDroppedOn416() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let destination = directory.file("shrunk.bin")
        let probe = DownloadOperation(url: server.url("/resumable"), destination: destination)
        // A partial file longer than the resource now is.
        try TestResponse.patternBytes(count: 5000).write(to: probe.partialFileURL)
        PartialDownloadRecord(url: server.url("/resumable").absoluteString, entityTag: "\"v1\"", lastModified: nil).save(to: probe.partialRecordURL)
        server.resumableRoute("/resumable", length: 1000, etag: Locked("v1"), cutFull: Locked(false))
        probe.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await probe.run() }
        #expect(probe.error?.statusCode == 416)
        #expect(!exists(probe.partialFileURL))
        try await DownloadOperation(url: server.url("/resumable"), destination: destination).run()
        #expect(contents(destination) == TestResponse.patternBytes(count: 1000))
    }

    @Test func cancellingKeepsAResumablePartialAndTheOldDestination() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let gate = TestGate()
        server.route("/held") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "100000", "ETag": "\"h1\"", "Accept-Ranges": "bytes"]),
                    .patternBytes(offset: 0, count: 50_000), .wait(for: gate), .patternBytes(offset: 50_000, count: 50_000)])
        }
        let destination = directory.file("held.bin")
        try Data("previous".utf8).write(to: destination)
        let download = DownloadOperation(url: server.url("/held"), destination: destination)
        let halfway = Countdown(1)
        let once = Locked(false)
        download.onProgress(on: .global) { progress in
            if progress.bytesReceived >= 50_000, once.withLock({ seen in defer { seen = true }; return !seen }) { halfway.signal() }
        }
        download.start()
        #expect(await halfway.wait())
        download.cancel()
        await #expect(throws: FetchError.self) { try await download.finished() }
        #expect(download.error?.isCancellation == true)
        #expect(contents(destination) == Data("previous".utf8))
        #expect(DownloadOperation.fileSize(download.partialFileURL) == 50_000)
        #expect(PartialDownloadRecord.load(from: download.partialRecordURL)?.entityTag == "\"h1\"")
        gate.open()
    }

    @Test func cancellingANonResumableDownloadRemovesItsPartialFile() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let download = DownloadOperation(url: server.url("/stall-mid-body/100000"), destination: directory.file("x"))
        let receiving = Countdown(1)
        let once = Locked(false)
        download.onProgress(on: .global) { progress in
            if progress.bytesReceived > 0, once.withLock({ seen in defer { seen = true }; return !seen }) { receiving.signal() }
        }
        download.start()
        #expect(await receiving.wait())
        download.cancel()
        _ = try? await download.finished()
        #expect(download.error?.isCancellation == true)
        #expect(!exists(download.partialFileURL))
        #expect(!exists(directory.file("x")))
    }

    @Test(arguments: ["missing-directory/file.bin", "a-directory"])
    func anUnwritablePathFailsBeforeAnyRequest(_ relative: String) async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        try FileManager.default.createDirectory(at: directory.file("a-directory"), withIntermediateDirectories: true)
        let download = DownloadOperation(url: server.url("/bytes/10"), destination: directory.file(relative))
        await #expect(throws: FetchError.self) { try await download.run() }
        guard case .fileSystem(let failure)? = download.error else {
            Issue.record("expected a file-system error, got \(String(describing: download.error))")
            return
        }
        #expect(failure.kind == .unwritableDestination)
        #expect(failure.description.contains(relative))
        #expect(server.counters.requestsReceived == 0)
    }

    @Test func aFullDiskIsAClearError() async throws {
        #if os(Linux)
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let destination = directory.file("full.bin")
        try Data("kept".utf8).write(to: destination)
        let gate = TestGate()
        server.route("/late") { _ in
            .steps([.wait(for: gate), .head(status: 200, headers: ["Content-Length": "100000"]),
                    .patternBytes(offset: 0, count: 100_000)])
        }
        let download = DownloadOperation(url: server.url("/late"), destination: destination)
        // The partial file is /dev/full, where every write fails with ENOSPC. (FetchKit never
        // writes through a link planted at the partial file, so the test swaps the opener.)
        download.openPartialFile = PartialFileOpener { _, _ in open("/dev/full", O_WRONLY) }
        download.start()
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 1 })
        gate.open()
        await #expect(throws: FetchError.self) { try await download.finished() }
        guard case .fileSystem(let failure)? = download.error else {
            Issue.record("expected a file-system error, got \(String(describing: download.error))")
            return
        }
        #expect(failure.kind == .diskFull)
        #expect(failure.description.contains("disk is full"))
        #expect(contents(destination) == Data("kept".utf8))
        #expect(FileManager.default.fileExists(atPath: "/dev/full"))
        #expect(!exists(download.partialFileURL))
        #endif
    }

    @Test func twoDownloadsToOneDestinationDoNotShareIt() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let gate = TestGate()
        server.route("/gate") { _ in TestResponse.text("open").held(by: gate) }
        let destination = directory.file("shared")
        let first = DownloadOperation(url: server.url("/gate"), destination: destination)
        first.start()
        #expect(await server.waitUntil(timeout: 30) { $0.requestsInFlight == 1 })
        let second = DownloadOperation(url: server.url("/bytes/10"), destination: destination)
        await #expect(throws: FetchError.self) { try await second.run() }
        guard case .fileSystem(let failure)? = second.error else {
            Issue.record("expected destinationInUse, got \(String(describing: second.error))")
            return
        }
        #expect(failure.kind == .destinationInUse)
        gate.open()
        try await first.finished()
        #expect(contents(destination) == Data("open".utf8))
        try await DownloadOperation(url: server.url("/bytes/10"), destination: destination).run()
        #expect(contents(destination) == TestResponse.patternBytes(count: 10), "released once the first finished")
    }

    @Test func downloadsThroughAQueueAreNotCoalesced() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let queue = makeFetchQueue()
        let downloads = (0..<3).map { DownloadOperation(url: server.url("/bytes/5000"), destination: directory.file("copy\($0)")) }
        for download in downloads { queue.enqueue(download) }
        for download in downloads { try await download.finished() }
        #expect(server.requests("/bytes/5000").count == 3)
        #expect(downloads.allSatisfy { contents($0.destination) == TestResponse.patternBytes(count: 5000) })
    }
}
