import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite("A download list that survives a restart", .timeLimit(.minutes(3)))
struct DownloadJournalTests {
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }

    /// The journal's file as JSON, read apart from the journal.
    private func entriesOnDisk(_ url: URL) throws -> [[String: Any]] {
        let data = try #require(contents(url))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(object["entries"] as? [[String: Any]])
    }

    @Test func aTrackedDownloadIsWrittenBeforeItStartsAndLeavesWhenItSucceeds() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let journalURL = directory.file("downloads.json")
        let journal = try DownloadJournal(contentsOf: journalURL)
        let destination = directory.file("a.bin")
        let download = DownloadOperation(url: server.url("/bytes/100000"), destination: destination)
        let digest = try #require(FileDigest(.sha256, hex: String(repeating: "0", count: 64)))
        download.expectedDigest = digest
        let identifier = try journal.track(download, identifier: "a")
        #expect(identifier == "a")
        let written = try entriesOnDisk(journalURL)
        #expect(written.count == 1)
        #expect(written.first?["identifier"] as? String == "a")
        #expect(written.first?["expectedDigest"] as? String == digest.description)
        #expect(journal.entries.map(\.destination) == [destination.standardizedFileURL])
        // The journal's file is private.
        let attributes = try FileManager.default.attributesOfItem(atPath: journalURL.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        // A wrong digest fails the download: it stays.
        await #expect(throws: FetchError.self) { try await download.run() }
        #expect(journal.entries.count == 1)

        let good = DownloadOperation(url: server.url("/bytes/100000"), destination: directory.file("b.bin"))
        try journal.track(good, identifier: "b")
        try await good.run()
        // Gone before the completion ran; on disk once the write that follows is done.
        #expect(journal.entries.map(\.identifier) == ["a"])
        try journal.flush()
        #expect(try entriesOnDisk(journalURL).map { $0["identifier"] as? String } == ["a"])
        // Tracking twice, or after the start, is refused.
        #expect(throws: DownloadJournal.JournalError.self) {
            try journal.track(DownloadOperation(url: server.url("/bytes/1"), destination: directory.file("c")), identifier: "a")
        }
        #expect(throws: DownloadJournal.JournalError(kind: .alreadyStarted, path: journalURL.standardizedFileURL.path)) {
            try journal.track(good)
        }
    }

    /// A list is tracked in one write, and downloads that succeed while the journal's disk is
    /// busy leave it at once, without waiting for the disk, and in one write after: a journal
    /// of n downloads costs a handful of writes, not 2n or 3n whole-file writes.
    @Test func aListIsTrackedInOneWriteAndSuccessesWhileTheDiskIsBusyShareOne() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let journalURL = directory.file("downloads.json")
        let journal = try DownloadJournal(contentsOf: journalURL)
        let downloads = (0..<50).map { DownloadOperation(url: server.url("/bytes/10?\($0)"), destination: directory.file("f\($0)")) }
        let identifiers = try journal.track(downloads.map { ($0, nil) })
        #expect(Set(identifiers).count == 50)
        #expect(journal.writeCount.snapshot == 1)
        #expect(try entriesOnDisk(journalURL).count == 50)
        // The journal's disk is busy (as a slow disk would be) while every download succeeds.
        let disk = DispatchSemaphore(value: 0)
        journal.writer.async { disk.wait() }
        for download in downloads { try await download.run() }
        #expect(journal.entries.isEmpty, "each left before its completion, with the disk busy")
        disk.signal()
        try journal.flush()
        #expect(journal.writeCount.snapshot == 2, "50 successes, one write")
        #expect(try entriesOnDisk(journalURL).isEmpty)
        // A list given again replaces its entries when asked to; otherwise it is refused whole.
        let again = [DownloadOperation(url: server.url("/bytes/1"), destination: directory.file("g"))]
        try journal.track(again.map { ($0, "g") })
        #expect(throws: DownloadJournal.JournalError.self) {
            try journal.track([(DownloadOperation(url: server.url("/bytes/2"), destination: directory.file("h")), "h"),
                               (DownloadOperation(url: server.url("/bytes/3"), destination: directory.file("g")), "g")])
        }
        #expect(journal.entries.map(\.identifier) == ["g"], "nothing of a refused list is tracked")
        try journal.track([(DownloadOperation(url: server.url("/bytes/3"), destination: directory.file("g2")), "g")], replacingExisting: true)
        #expect(journal.entries.map(\.destination.lastPathComponent) == ["g2"])
        try journal.remove(["g", "absent"])
        #expect(journal.entries.isEmpty)
    }

    @Test func anInterruptedDownloadIsRestoredAndResumesItsPartialFile() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 400_000
        let cut = Locked(true)
        server.resumableRoute("/file", length: length, etag: Locked("v1"), cutFull: cut)
        let journalURL = directory.file("downloads.json")
        let destination = directory.file("file.bin")
        let pattern = TestResponse.patternBytes(count: length)
        let hasher = DigestHasher(.sha256)
        hasher.update(pattern)
        let digest = hasher.finish()
        do {
            let journal = try DownloadJournal(contentsOf: journalURL)
            let first = DownloadOperation(url: server.url("/file"), destination: destination)
            first.configuration.retryPolicy = .none
            first.expectedDigest = digest
            try journal.track(first, identifier: "file")
            await #expect(throws: FetchError.self) { try await first.run() }
            #expect(journal.entries.count == 1, "a failed download stays")
        }
        // The next run: a new journal on the same file.
        cut.withLock { $0 = false }
        let journal = try DownloadJournal(contentsOf: journalURL)
        let restored = journal.restore()
        #expect(restored.unresolved.isEmpty)
        let (identifier, operation) = try #require(restored.downloads.first)
        #expect(identifier == "file")
        #expect(operation.expectedDigest == digest)
        try await operation.run()
        #expect(contents(destination) == pattern)
        #expect(operation.resumedBytes == Int64(length / 2))
        #expect(server.requests("/file").last?.header("Range") == "bytes=\(length / 2)-")
        #expect(journal.entries.isEmpty)
        try journal.flush()
        #expect(try entriesOnDisk(journalURL).isEmpty)
    }

    @Test func secretsAreNotWrittenUnlessTheAppOptsIn() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        var components = URLComponents(url: server.url("/bytes/1000"), resolvingAgainstBaseURL: false)
        components?.user = "ann"
        components?.password = "hunter2pass"
        components?.queryItems = [URLQueryItem(name: "token", value: "tok3nsecret")]
        let url = try #require(components?.url)
        var request = URLRequest(url: url)
        request.setValue("Bearer b3arersecret", forHTTPHeaderField: "Authorization")
        request.setValue("kept", forHTTPHeaderField: "X-Plain")

        let plainURL = directory.file("plain.json")
        do {
            let journal = try DownloadJournal(contentsOf: plainURL)
            try journal.track(DownloadOperation(request: request, destination: directory.file("f")), identifier: "f")
            let text = String(decoding: try #require(contents(plainURL)), as: UTF8.self)
            for secret in ["hunter2pass", "tok3nsecret", "b3arersecret"] {
                #expect(!text.contains(secret), "\(secret) written in clear")
            }
            let entry = try #require(journal.entries.first)
            #expect(!entry.isComplete)
            #expect(entry.url == nil)
            #expect(entry.headers == ["X-Plain": "kept"])
            #expect(entry.redactedURL.contains(Redaction.placeholder))
            // Without the app's request, it cannot be restored; with it, it can.
            #expect(journal.restore().unresolved == [entry])
            let supplied = journal.restore { $0.identifier == "f" ? request : nil }
            #expect(supplied.downloads.first?.operation.request?.url == url)
        }
        let clearURL = directory.file("clear.json")
        let journal = try DownloadJournal(contentsOf: clearURL, storesSecrets: true)
        try journal.track(DownloadOperation(request: request, destination: directory.file("g")), identifier: "g")
        let entry = try #require(journal.entries.first)
        #expect(entry.isComplete)
        #expect(entry.request?.url == url)
        #expect(entry.request?.value(forHTTPHeaderField: "Authorization") == "Bearer b3arersecret")
    }

    @Test func aHostileOrBusyJournalIsRefusedWithAClearError() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        func kind(_ url: URL) -> DownloadJournal.JournalError.Kind? {
            do {
                _ = try DownloadJournal(contentsOf: url)
                return nil
            } catch {
                #expect(!error.description.isEmpty)
                return error.kind
            }
        }
        let garbage = directory.file("garbage.json")
        try Data("{\"version\": 1, \"entries\": [{\"identifier\": 5}]}".utf8).write(to: garbage)
        chmod(garbage.path, 0o600)
        #expect(kind(garbage) == .malformed)
        let future = directory.file("future.json")
        try Data("{\"version\": 2, \"entries\": []}".utf8).write(to: future)
        chmod(future.path, 0o600)
        #expect(kind(future) == .malformed)
        let huge = directory.file("huge.json")
        try Data(count: DownloadJournal.maximumSize + 1).write(to: huge)
        chmod(huge.path, 0o600)
        #expect(kind(huge) == .unreadable(nil))
        let target = directory.file("target.json")
        try Data("{\"version\": 1, \"entries\": []}".utf8).write(to: target)
        let link = directory.file("link.json")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        #expect(kind(link) == .unreadable(nil), "never read through a link")
        // A new file that a process killed while it wrote left behind is removed; others stay.
        let stale = directory.file(".busy.json.4242.new"), other = directory.file(".busy.json.note.new")
        try Data("{".utf8).write(to: stale)
        try Data("keep".utf8).write(to: other)
        // One process, one journal: a second opening while the first is open is refused.
        let busy = directory.file("busy.json")
        do {
            let first = try DownloadJournal(contentsOf: busy)
            #expect(kind(busy) == .inUse(by: getpid()))
            #expect(!FileManager.default.fileExists(atPath: stale.path))
            #expect(FileManager.default.fileExists(atPath: other.path))
            withExtendedLifetime(first) {}
        }
        #expect(kind(busy) == nil, "free again once the first is gone")
    }
}
