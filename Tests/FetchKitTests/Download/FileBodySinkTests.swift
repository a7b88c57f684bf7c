import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a download puts beside its destination, by the size of its body (issue 32, 6.6): a body
/// that arrives in one piece costs its file and one rename, whatever the count; one that does
/// not gets its lock, partial file and record before any byte of it is on disk.
@Suite("Files beside a download", .timeLimit(.minutes(3)))
struct FileBodySinkTests {
    /// The names in `directory` other than `kept`, sorted.
    private static func others(in directory: URL, than kept: Set<String>) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { !kept.contains($0) }.sorted()
    }

    /// 20 small resumable files (an `ETag`, ranges), one after another: when each request
    /// reaches the server, the directory holds the files finished so far and nothing else —
    /// no lock file, no partial file, no record — and after the last, just the 20 files.
    @Test func aBodyThatArrivesInOnePieceLeavesNoLockRecordOrPartialFile() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let seen = Locked<[String]>([])
        let finished = Locked<Set<String>>([])
        server.route("/small") { _ in
            // Seen from the server while the request is in flight.
            let extra = Self.others(in: directory.url, than: finished.current)
            seen.withLock { $0 += extra }
            return TestResponse(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes"],
                                body: TestResponse.patternBytes(count: 4096))
        }
        for index in 0..<20 {
            let name = "f\(index).bin"
            let download = DownloadOperation(url: server.url("/small?\(index)"), destination: directory.file(name))
            try await download.run()
            finished.withLock { _ = $0.insert(name) }
            #expect(FileManager.default.contents(atPath: directory.file(name).path) == TestResponse.patternBytes(count: 4096))
        }
        #expect(seen.current.isEmpty, "beside the finished files while a request was in flight: \(Set(seen.current).sorted())")
        #expect(Self.others(in: directory.url, than: finished.current).isEmpty)
        #expect(finished.current.count == 20)
    }

    /// A body past its first piece (here 400 kB of 600 kB, then the server waits): the partial
    /// file has its record and its lock while the body arrives, so that a process killed now
    /// leaves a partial file that resumes, and another process cannot take it.
    @Test func aLargerBodyHasItsLockAndRecordBeforeItsBytesAreOnDisk() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let size = 600_000
        server.route("/big") { _ in
            .steps([
                .head(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": String(size)]),
                .patternBytes(offset: 0, count: 400_000),
                .wait(for: gate),
                .patternBytes(offset: 400_000, count: size - 400_000),
            ])
        }
        let download = DownloadOperation(url: server.url("/big"), destination: directory.file("big.bin"))
        download.start()
        let deadline = Date(timeIntervalSinceNow: 60)
        func partialSize() -> Int64 { LocalFile.status(download.partialFileURL)?.size ?? 0 }
        while partialSize() == 0, Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        try #require(partialSize() > 0, "the partial file never grew")

        let record = try #require(PartialDownloadRecord.load(from: download.partialRecordURL), "a partial file with bytes has its record")
        #expect(record.validator == "\"v1\"")
        guard case .failure(.held) = PartialFileLock.acquire(at: download.partialLockURL) else {
            Issue.record("the partial file's lock is not held while its bytes arrive")
            return
        }

        gate.open()
        try await download.finished()
        #expect(FileManager.default.contents(atPath: directory.file("big.bin").path) == TestResponse.patternBytes(count: size))
        #expect(Self.others(in: directory.url, than: ["big.bin"]).isEmpty)
    }

    /// A whole body's own file is made exclusively under a name of its own: a link planted at
    /// the partial file's name is neither followed nor removed, and the download succeeds.
    @Test func aWholeBodyNeverWritesThroughALinkAtThePartialName() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let target = directory.file("target")
        try Data("target".utf8).write(to: target)
        let download = DownloadOperation(url: server.url("/bytes/4096"), destination: directory.file("f.bin"))
        // Planted after the download looked for a partial file: a link to another file.
        download.start()
        try? FileManager.default.createSymbolicLink(at: download.partialFileURL, withDestinationURL: target)
        try await download.finished()
        #expect(FileManager.default.contents(atPath: target.path) == Data("target".utf8))
        #expect(FileManager.default.contents(atPath: directory.file("f.bin").path) == TestResponse.patternBytes(count: 4096))
    }
}

extension FileBodySinkTests {
    /// A whole body's file that a killed process left between its write and its rename is
    /// removed by the next journal opened in the directory once it is a minute old; a fresh
    /// one (another process may be about to rename it), and other names, are kept.
    @Test func aWholeBodysFileLeftByAKilledProcessIsRemovedOnceStale() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let stale = directory.file(".a.bin.fetchkit-partial.x7q2")
        let fresh = directory.file(".b.bin.fetchkit-partial.k3m9")
        let others = [".c.bin.fetchkit-partial", ".c.bin.fetchkit-partial.json", ".c.bin.fetchkit-partial.lock",
                      ".d.bin.fetchkit-partial.toolong", "e.bin"].map(directory.file)
        for url in [stale, fresh] + others { try Data("x".utf8).write(to: url) }
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -3600)], ofItemAtPath: stale.path)
        for url in others { try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -3600)], ofItemAtPath: url.path) }

        _ = try DownloadJournal(contentsOf: directory.file(".fetchkit-journal.json"))

        #expect(!FileManager.default.fileExists(atPath: stale.path))
        #expect(FileManager.default.fileExists(atPath: fresh.path))
        for url in others { #expect(FileManager.default.fileExists(atPath: url.path), "\(url.lastPathComponent)") }
    }
}

@Suite("A journal of many small files", .timeLimit(.minutes(3)))
struct DownloadJournalCostTests {
    /// 20 downloads that succeed one after another, not together, within the journal's delay
    /// (``DownloadJournal/leaveDelay``, here an hour: a loaded machine takes a minute for them):
    /// they leave the file in one write, the flush's, not one each (main: 21 writes in all).
    @Test func successesOneAfterAnotherShareTheirWrites() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let journal = try DownloadJournal(contentsOf: directory.file("downloads.json"))
        journal.leaveDelay.withLock { $0 = .seconds(3600) }
        let downloads = (0..<20).map { DownloadOperation(url: server.url("/bytes/10?\($0)"), destination: directory.file("f\($0)")) }
        try journal.track(downloads.map { ($0, nil) })
        #expect(journal.writeCount.snapshot == 1)
        for download in downloads { try await download.run() }
        #expect(journal.entries.isEmpty)
        try journal.flush()
        #expect(journal.writeCount.snapshot == 2, "\(journal.writeCount.snapshot) writes for a list and 20 successes")
        let data = try #require(FileManager.default.contents(atPath: journal.fileURL.path))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect((object["entries"] as? [Any])?.isEmpty == true)
    }
}
