import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The DocC article's "A complete manager" (A download manager), as printed there but for its
// names, compiled and used as an app uses it.

/// One row of the list a window shows.
nonisolated struct ExampleRow: Sendable {
    let name: String
    var fraction: Double?
    var rate: Double?
    var secondsLeft: TimeInterval?
    var finished: Result<URL, FetchError>?
}

/// Files downloaded two at a time and at most 1 MB/s together, verified, and restored where they
/// stopped at the next launch. `onChange` hears every change of a row.
nonisolated final class ExampleDownloadManager: Sendable {
    let queue = FetchQueue(name: "downloads", maximumConcurrentTransfers: 2, bandwidthLimit: 1_000_000)
    let journal: DownloadJournal
    let onChange: @Sendable (ExampleRow) -> Void

    init(folder: URL, onChange: @escaping @Sendable (ExampleRow) -> Void) throws {
        self.onChange = onChange
        journal = try DownloadJournal(contentsOf: folder.appendingPathComponent("downloads.json"))
        // Only into the folder, whatever the journal's file says.
        let folderPath = folder.standardizedFileURL.path
        let restored = journal.restore { entry in
            entry.destination.deletingLastPathComponent().path == folderPath ? entry.request : nil
        }
        for download in restored.downloads {
            start(download.operation)
        }
    }

    /// Adds a download, listed in the journal under its file's path until it succeeds.
    @discardableResult
    func add(_ url: URL, to file: URL, sha256: String? = nil) throws -> FetchID {
        let download = DownloadOperation(url: url, destination: file)
        download.expectedDigest = sha256.flatMap { FileDigest(.sha256, hex: $0) }
        try journal.track(download, identifier: download.destination.path)
        return start(download)
    }

    @discardableResult
    private func start(_ download: DownloadOperation) -> FetchID {
        let name = download.destination.lastPathComponent
        let onChange = onChange
        download.onProgress(on: .global) { progress in
            onChange(ExampleRow(name: name, fraction: progress.fractionCompleted,
                         rate: progress.bytesPerSecond, secondsLeft: progress.estimatedTimeRemaining))
        }
        return queue.enqueue(download, on: .global) { result in
            onChange(ExampleRow(name: name, finished: result))
        }
    }

    func pause(_ id: FetchID) { queue.pause(id) }
    func resume(_ id: FetchID) { queue.resume(id) }
    /// The user cancelled it: it stops, and the next launch does not restore it.
    func cancel(_ id: FetchID, file: URL) {
        queue.cancel(id)
        try? journal.remove(file.standardizedFileURL.path)
    }
    func moveUp(_ id: FetchID) { queue.setPriority(.high, of: id) }
    func moveDown(_ id: FetchID) { queue.setPriority(.low, of: id) }
    func pauseEverything() { queue.pauseAll() }
    func resumeEverything() { queue.resumeAll() }
}

@Suite("The DocC download manager, used", .timeLimit(.minutes(3)))
struct DownloadManagerExampleTests {
    private func listed(_ journal: URL) throws -> [String] {
        let data = try #require(FileManager.default.contents(atPath: journal.path))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let entries = try #require(object["entries"] as? [[String: Any]])
        return entries.compactMap { $0["identifier"] as? String }
    }

    @Test func aCancelledDownloadIsForgottenAPausedOneIsKeptAndFinishes() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let length = 150_000, held = 50_000
        for name in ["a", "b"] { server.heldResumableRoute("/\(name)", length: length, held: held, gate: gate) }
        let halfway = ["a": Countdown(1), "b": Countdown(1)]
        let finished = ["a": Countdown(1), "b": Countdown(1)]
        let results = Locked<[String: Result<URL, FetchError>]>([:])
        let signals = halfway.mapValues { signalOnce($0) }
        let manager = try ExampleDownloadManager(folder: directory.url) { row in
            let name = String(row.name.prefix(1))
            if let result = row.finished {
                results.withLock { $0[name] = result }
                finished[name]?.signal()
            } else {
                signals[name]?((row.fraction ?? 0) >= Double(held) / Double(length))
            }
        }
        let (a, b) = (directory.file("a.bin"), directory.file("b.bin"))
        let idA = try manager.add(server.url("/a"), to: a)
        let idB = try manager.add(server.url("/b"), to: b)
        for countdown in halfway.values { #expect(await countdown.wait()) }

        manager.cancel(idB, file: b)
        manager.pause(idA)
        #expect(await finished["b"]?.wait() == true)
        #expect(results.current["b"].map { if case .failure(let error) = $0 { error.isCancellation } else { false } } == true)
        try manager.journal.flush()
        #expect(try listed(manager.journal.fileURL) == [a.standardizedFileURL.path], "the cancelled one is forgotten")
        #expect(manager.queue.isPaused(idA))
        #expect(await counts(of: manager.queue) { $0.inFlight == 0 && $0.waiting == 0 }, "both stopped")
        #expect(DownloadOperation.fileSize(DownloadOperation(url: server.url("/a"), destination: a).partialFileURL) == Int64(held))

        gate.open()
        manager.resume(idA)
        #expect(await finished["a"]?.wait() == true)
        #expect(FileManager.default.contents(atPath: a.path) == TestResponse.patternBytes(count: length))
        #expect(server.requests("/a").last?.header("Range") == "bytes=\(held)-")
        try manager.journal.flush()
        #expect(try listed(manager.journal.fileURL).isEmpty)
    }
}
