import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A file whose server can change while a download is paused: its content and `ETag`
/// (``version``), whether it still accepts ranges, and whether it lies (answers a `Range` with
/// other bytes under the same `ETag`).
private final class ChangingFile: Sendable {
    let length: Int
    let held: Int
    let version = Locked(1)
    let acceptsRanges = Locked(true)
    let lies = Locked(false)
    let gate = TestGate()

    init(length: Int, held: Int) {
        self.length = length
        self.held = held
    }

    /// Where the content of `version` starts in the byte pattern.
    static func base(of version: Int) -> Int { (version - 1) * 1_000 }

    func content(version: Int) -> Data { ResumeFixtures.patternBytes(offset: Self.base(of: version), count: length) }

    func digest(version: Int) -> FileDigest {
        let hasher = DigestHasher(.sha256)
        hasher.update(content(version: version))
        return hasher.finish()
    }

    /// A full answer sends its first `held` bytes, then waits for `gate`; a `Range` answer
    /// (validated with `If-Range`, when ranges are accepted) is sent at once.
    func route(_ path: String, on server: TestServer) {
        server.route(path) { [self] request in
            let version = version.current
            let tag = "\"v\(version)\""
            let ranges = acceptsRanges.current
            if ranges, let range = request.header("Range"), request.header("If-Range") == tag,
               range.hasPrefix("bytes="), let start = Int(range.dropFirst(6).prefix { $0 != "-" }), start < length {
                let base = Self.base(of: lies.current ? version + 1 : version)
                let head = TestResponse.Step.head(status: 206, headers: [
                    "ETag": tag, "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                    "Content-Range": "bytes \(start)-\(length - 1)/\(length)", "Content-Length": String(length - start),
                ])
                return ResumeFixtures.patternAnswer(head, offset: base + start, count: length - start, for: request)
            }
            let base = Self.base(of: version)
            let head: TestResponse.Step = ranges
                ? .head(status: 200, headers: ["ETag": tag, "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                                               "Content-Length": String(length)])
                : .head(status: 200, headers: ["ETag": tag, "Content-Type": "application/octet-stream", "Content-Length": String(length)])
            return .steps([head, .patternBytes(offset: base, count: held), .wait(for: gate),
                           .patternBytes(offset: base + held, count: length - held)])
        }
    }
}

/// A download manager used as its users use it: pause and resume against a server that
/// changes meanwhile, pauses racing completions, a journal restored after the user touched
/// the partial files, and a journal edited by hand.
@Suite("Download manager: adversarial use", .timeLimit(.minutes(3)))
struct DownloadManagerAdversarialUseTests {
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }
    private func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }

    /// A countdown signalled once `download` has received `bytes`.
    private func reached(_ bytes: Int64, _ download: DownloadOperation) -> Countdown {
        let countdown = Countdown(1)
        let signal = signalOnce(countdown)
        download.onProgress(on: .global) { progress in signal(progress.bytesReceived >= bytes) }
        return countdown
    }

    enum Change: String, CaseIterable, Sendable {
        /// The file changed (a new `ETag`): `If-Range` fails and the server sends it whole.
        case newVersion
        /// The server no longer accepts ranges: it sends the file whole.
        case noRanges
        /// The server answers the `Range` with other bytes under the same `ETag`.
        case lyingServer
    }

    /// Pauses a running download with an expected digest, changes the server, resumes: the
    /// download starts over or fails the check, and never puts a wrong file in place.
    @Test(arguments: Change.allCases)
    func aResumeAgainstAChangedServerStartsOverOrFailsTheCheckNeverCorrupts(change: Change) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let file = ChangingFile(length: 300_000, held: 100_000)
        defer { file.gate.open(); server.shutDown(); directory.remove() }
        file.route("/file", on: server)
        let queue = makeFetchQueue(total: 1)
        let destination = directory.file("file.bin")
        let download = DownloadOperation(url: server.url("/file"), destination: destination)
        // The digest the publisher gives for what the server serves after the change.
        download.expectedDigest = file.digest(version: change == .newVersion ? 2 : 1)
        let halfway = reached(Int64(file.held), download)
        let completions = Locked<[Result<URL, FetchError>]>([])
        let done = Countdown(1)
        let id = queue.enqueue(download, on: .global) { result in completions.withLock { $0.append(result) }; done.signal() }
        #expect(await halfway.wait())
        #expect(queue.pause(id))
        #expect(await counts(of: queue) { $0.inFlight == 0 })
        #expect(DownloadOperation.fileSize(download.partialFileURL) == Int64(file.held), "its bytes kept")
        switch change {
        case .newVersion: file.version.withLock { $0 = 2 }
        case .noRanges: file.acceptsRanges.withLock { $0 = false }
        case .lyingServer: file.lies.withLock { $0 = true }
        }
        file.gate.open()
        #expect(queue.resume(id))
        #expect(await done.wait())
        #expect(completions.current.count == 1, "one completion")
        let requests = server.requests("/file")
        #expect(requests.count == 2)
        #expect(requests.last?.header("Range") == "bytes=\(file.held)-", "the resume asked for the rest")
        switch change {
        case .newVersion, .noRanges:
            #expect(download.error == nil, "\(String(describing: download.error))")
            let version = change == .newVersion ? 2 : 1
            #expect(contents(destination) == file.content(version: version), "started over: the file is the server's now")
            #expect(download.resumedBytes == 0)
        case .lyingServer:
            #expect(download.error?.code == .digestMismatch, "\(String(describing: download.error))")
            #expect(!exists(destination), "no wrong file in place")
            #expect(!exists(download.partialFileURL), "the bad bytes are not kept to be resumed")
        }
    }

    /// A file that changed length while its download was paused: the resumed download starts
    /// over, and its batch counts the new length, not the old (it kept the first length a
    /// member announced, and reported more bytes received than expected).
    @Test func aBatchCountsTheNewLengthOfAFileThatChangedWhilePaused() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let length = Locked(300_000)
        let held = 100_000
        server.route("/file") { request in
            let length = length.current
            let tag = "\"\(length)\""
            if let range = request.header("Range"), request.header("If-Range") == tag,
               let start = Int(range.dropFirst(6).prefix { $0 != "-" }) {
                let head = TestResponse.Step.head(status: 206, headers: [
                    "ETag": tag, "Accept-Ranges": "bytes", "Content-Range": "bytes \(start)-\(length - 1)/\(length)",
                    "Content-Length": String(length - start),
                ])
                return ResumeFixtures.patternAnswer(head, offset: start, count: length - start, for: request)
            }
            return .steps([.head(status: 200, headers: ["ETag": tag, "Accept-Ranges": "bytes", "Content-Length": String(length)]),
                           .patternBytes(offset: 0, count: held), .wait(for: gate),
                           .patternBytes(offset: held, count: length - held)])
        }
        let queue = makeFetchQueue(total: 1)
        let download = DownloadOperation(url: server.url("/file"), destination: directory.file("file.bin"))
        let halfway = reached(Int64(held), download)
        let done = Countdown(1)
        let final = Locked<FetchBatch.Status?>(nil)
        let batch = queue.enqueue(batch: [download], on: .global, completion: { status in
            final.withLock { $0 = status }
            done.signal()
        })
        #expect(await halfway.wait())
        #expect(batch.status.bytesExpected == 300_000)
        #expect(queue.pause(batch.ids[0]))
        #expect(await counts(of: queue) { $0.inFlight == 0 })
        length.withLock { $0 = 250_000 }
        gate.open()
        #expect(queue.resume(batch.ids[0]))
        #expect(await done.wait())
        #expect(download.error == nil)
        #expect(contents(download.destination) == TestResponse.patternBytes(count: 250_000))
        let status = try #require(final.current)
        #expect(status.bytesExpected == 250_000, "the new length")
        #expect(status.bytesReceived == 250_000)
        #expect(batch.byteProgress.totalUnitCount == 250_000)
    }

    /// A member that failed partway receives nothing more: the batch's time remaining is that
    /// of the members still running, 0 once they have all they asked for (it counted the failed
    /// member's missing bytes as still to come, for good).
    @Test func aBatchsTimeRemainingLeavesOutAMemberThatFailed() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        server.route("/cut") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "100000"]),
                    .patternBytes(offset: 0, count: 30_000), .close])
        }
        server.heldResumableRoute("/held", length: 100_000, held: 50_000, gate: gate)
        let queue = makeFetchQueue(total: 2)
        let failing = DownloadOperation(url: server.url("/cut"), destination: directory.file("cut.bin"))
        failing.configuration.retryPolicy = .none
        let held = DownloadOperation(url: server.url("/held"), destination: directory.file("held.bin"))
        let failed = Countdown(1), done = Countdown(1)
        failing.onCompletion(on: .global) { _ in failed.signal() }
        let final = Locked<FetchBatch.Status?>(nil)
        queue.enqueue(batch: [failing, held], on: .global, completion: { status in
            final.withLock { $0 = status }
            done.signal()
        })
        #expect(await failed.wait())
        #expect(failing.error != nil)
        gate.open()
        #expect(await done.wait())
        #expect(held.error == nil)
        let status = try #require(final.current)
        #expect(status.failed == 1 && status.succeeded == 1)
        #expect(status.estimatedTimeRemaining == 0, "nothing is left to come: \(String(describing: status.estimatedTimeRemaining))")
    }

    /// Pauses and resumes every download of a queue again and again, from its own progress
    /// handler (from the moment its first request's part is in: whatever moment its resumed
    /// transfer is at, its last chunk included, when the body is complete and the pause comes
    /// too late) and, now and then, all of them at once: each completes once, with its whole
    /// file.
    @Test func pausesRacingCompletionsStillCompleteEachDownloadOnceAndWhole() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let count = 16, pausesEach = 12
        let lengths = (0..<count).map { 400_000 + $0 * 37_919 }
        // A first request sends part of its file and waits (for a gate never opened): each
        // download is paused there at least once; a resumed one (a `Range`) gets the rest at
        // once, its later pauses racing its end.
        let gate = TestGate()
        defer { gate.open() }
        for (index, length) in lengths.enumerated() {
            server.heldResumableRoute("/f\(index)", length: length, held: 50_000 + index, gate: gate)
        }
        let queue = makeFetchQueue(total: 3)
        let completions = Locked([Int](repeating: 0, count: count))
        let done = Countdown(count)
        let pausesLeft = Locked([Int](repeating: pausesEach, count: count))
        let paused = Locked(0)
        let downloads = (0..<count).map { DownloadOperation(url: server.url("/f\($0)"), destination: directory.file("f\($0).bin")) }
        for (index, download) in downloads.enumerated() {
            // Only once the first request's part is in: a pause before it (at the response's
            // head) leaves nothing to resume from, and the next request is held again; with its
            // pauses spent there, a download would wait for the gate forever (seen: all 16, one
            // run in six).
            let heldPart = Int64(50_000 + index)
            download.onProgress(on: .global) { progress in
                guard progress.bytesReceived >= heldPart else { return }
                let turn = pausesLeft.withLock { left -> Int? in
                    guard left[index] > 0 else { return nil }
                    left[index] -= 1
                    return left[index]
                }
                guard let turn else { return }
                if index == 0, turn % 4 == 0 {
                    let all = queue.pauseAll()
                    paused.withLock { $0 += all }
                    queue.resumeAll()
                } else if download.pause() {
                    paused.withLock { $0 += 1 }
                    download.resume()
                }
            }
        }
        for (index, download) in downloads.enumerated() {
            queue.enqueue(download, on: .global) { _ in
                completions.withLock { $0[index] += 1 }
                done.signal()
            }
        }
        #expect(await done.wait())
        #expect(paused.current >= count, "the pauses met the downloads: \(paused.current)")
        #expect(completions.current == [Int](repeating: 1, count: count), "each completed once")
        for (index, download) in downloads.enumerated() {
            #expect(download.error == nil, "f\(index): \(String(describing: download.error))")
            #expect(contents(download.destination) == TestResponse.patternBytes(count: lengths[index]), "f\(index) whole")
            #expect(!download.isPaused)
        }
        #expect(queue.count == 0)
        #expect(queue.transferCounts == .init(inFlight: 0, waiting: 0))
    }

    enum Ending: String, CaseIterable, Sendable { case cancelAll, cancelEach, pauseThenCancelAtOnce }

    /// A batch whose downloads are running, waiting, paused while running and paused while
    /// waiting is cancelled: every member completes once, as cancelled; the batch once; the
    /// queue is left empty, its slots free.
    @Test(arguments: Ending.allCases)
    func cancellingAMixOfPausedRunningAndWaitingDownloadsCompletesEachOnce(ending: Ending) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let count = 6, length = 100_000, held = 30_000
        for index in 0..<count { server.heldResumableRoute("/f\(index)", length: length, held: held, gate: gate) }
        let queue = makeFetchQueue(total: 2)
        let downloads = (0..<count).map { DownloadOperation(url: server.url("/f\($0)"), destination: directory.file("f\($0)")) }
        // The first two to have `held` bytes (the server then holds them) are the running ones.
        let arrived = Locked<[Int]>([]), firstTwo = Countdown(2)
        for (index, download) in downloads.enumerated() {
            let signal = signalOnce(firstTwo)
            download.onProgress(on: .global) { progress in
                guard progress.bytesReceived >= Int64(held) else { return }
                signal(arrived.withLock { list in
                    guard !list.contains(index) else { return false }
                    list.append(index)
                    return true
                })
            }
        }
        let completions = Locked([Int](repeating: 0, count: count))
        let memberDone = Countdown(count), batchDone = Countdown(1)
        let batchCompletions = Locked<[FetchBatch.Status]>([])
        for (index, download) in downloads.enumerated() {
            download.onCompletion(on: .global) { _ in completions.withLock { $0[index] += 1 }; memberDone.signal() }
        }
        let batch = queue.enqueue(batch: downloads, on: .global, completion: { status in
            batchCompletions.withLock { $0.append(status) }
            batchDone.signal()
        })
        // An `OperationQueue` starts operations in no set order: the two that asked first run.
        #expect(await counts(of: queue) { $0.inFlight == 2 && $0.waiting == count - 2 })
        #expect(await firstTwo.wait())
        let running = arrived.current.sorted()
        try #require(running.count == 2)
        let waiting = (0..<count).filter { !running.contains($0) }
        let ids = batch.ids
        #expect(queue.pause(ids[running[0]]), "running")
        #expect(queue.pause(ids[waiting[2]]), "waiting")
        // The paused ones are in neither count; the running one's slot went to the next.
        #expect(await counts(of: queue) { $0.inFlight == 2 && $0.waiting == count - 4 })
        switch ending {
        case .cancelAll:
            queue.cancelAll()
        case .cancelEach:
            for id in ids { queue.cancel(id) }
        case .pauseThenCancelAtOnce:
            // A running one paused and cancelled before its stop took; the others cancelled.
            #expect(queue.pause(ids[running[1]]))
            for id in ids { queue.cancel(id) }
        }
        #expect(await memberDone.wait())
        #expect(await batchDone.wait())
        #expect(completions.current == [Int](repeating: 1, count: count), "each once")
        #expect(downloads.allSatisfy { $0.error?.isCancellation == true && !$0.isPaused && $0.isFinished })
        #expect(batchCompletions.current.count == 1)
        #expect(batchCompletions.current.first?.cancelled == count)
        #expect(batchCompletions.current.first?.failed == 0)
        #expect(!queue.resume(ids[running[0]]) && queue.resumeAll() == 0, "nothing left to resume")
        #expect(await counts(of: queue) { $0.inFlight == 0 && $0.waiting == 0 })
        #expect(queue.count == 0)
        #expect(server.requests("/f\(waiting[2])").count == 0, "the one paused while waiting sent nothing")
    }

    /// A server that gives no validator cannot resume: a paused download with an expected
    /// digest drops its bytes, starts over when resumed, and its digest is that of the file.
    @Test func aPausedDownloadThatCannotResumeStartsOverAndItsDigestHolds() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let length = 200_000, held = 70_000
        server.route("/plain") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": String(length)]),
                    .patternBytes(offset: 0, count: held), .wait(for: gate), .patternBytes(offset: held, count: length - held)])
        }
        let download = DownloadOperation(url: server.url("/plain"), destination: directory.file("plain.bin"))
        let hasher = DigestHasher(.sha256)
        hasher.update(TestResponse.patternBytes(count: length))
        download.expectedDigest = hasher.finish()
        let halfway = reached(Int64(held), download)
        let done = Countdown(1)
        let completions = Locked(0)
        let queue = makeFetchQueue(total: 1)
        let id = queue.enqueue(download, on: .global) { _ in completions.withLock { $0 += 1 }; done.signal() }
        #expect(await halfway.wait())
        #expect(queue.pause(id))
        #expect(await counts(of: queue) { $0.inFlight == 0 })
        gate.open()
        #expect(queue.resume(id))
        #expect(await done.wait())
        #expect(completions.current == 1)
        #expect(download.error == nil, "\(String(describing: download.error))")
        #expect(contents(download.destination) == TestResponse.patternBytes(count: length))
        #expect(server.requests("/plain").map { $0.header("Range") } == [nil, nil], "asked again from the start")
        #expect(download.resumedBytes == 0)
    }

    enum Touch: String, CaseIterable, Sendable { case deleted, truncated, emptied }

    /// The user deleted or cut the partial file between two runs: the restored download starts
    /// over, or resumes from what is left, and its digest is checked over the whole file.
    @Test(arguments: Touch.allCases)
    func aRestoredDownloadWhosePartialFileTheUserTouchedEndsWhole(touch: Touch) async throws {
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
        let partialURL: URL
        do {
            let journal = try DownloadJournal(contentsOf: journalURL)
            let first = DownloadOperation(url: server.url("/file"), destination: destination)
            first.configuration.retryPolicy = .none
            first.expectedDigest = digest
            try journal.track(first, identifier: "file")
            await #expect(throws: FetchError.self) { try await first.run() }
            partialURL = first.partialFileURL
            #expect(DownloadOperation.fileSize(partialURL) == Int64(length / 2))
        }
        switch touch {
        case .deleted: try FileManager.default.removeItem(at: partialURL)
        case .truncated: #expect(truncate(partialURL.path, off_t(length / 4)) == 0)
        case .emptied: #expect(truncate(partialURL.path, 0) == 0)
        }
        cut.withLock { $0 = false }
        let journal = try DownloadJournal(contentsOf: journalURL)
        let (_, operation) = try #require(journal.restore().downloads.first)
        try await operation.run()
        #expect(contents(destination) == pattern)
        #expect(journal.entries.isEmpty)
        #expect(!exists(partialURL))
    }

    /// The app supplies the request of an entry the journal kept without its secret header:
    /// the restored download sends it and resumes its partial file.
    @Test func aRestoredDownloadWithTheAppsRequestResumesItsPartialFile() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 300_000
        let cut = Locked(true)
        server.resumableRoute("/private", length: length, etag: Locked("v1"), cutFull: cut)
        let journalURL = directory.file("downloads.json")
        let destination = directory.file("private.bin")
        var request = URLRequest(url: server.url("/private"))
        request.setValue("Bearer s3cret", forHTTPHeaderField: "Authorization")
        do {
            let journal = try DownloadJournal(contentsOf: journalURL)
            let first = DownloadOperation(request: request, destination: destination)
            first.configuration.retryPolicy = .none
            try journal.track(first, identifier: "private")
            await #expect(throws: FetchError.self) { try await first.run() }
        }
        #expect(String(decoding: contents(journalURL) ?? Data(), as: UTF8.self).contains("s3cret") == false)
        cut.withLock { $0 = false }
        let journal = try DownloadJournal(contentsOf: journalURL)
        #expect(journal.restore().downloads.isEmpty, "not restorable without the app's request")
        let asked = Locked<[String]>([])
        let restored = journal.restore { entry in
            asked.withLock { $0.append(entry.identifier) }
            return entry.identifier == "private" ? request : nil
        }
        #expect(asked.current == ["private"])
        let (_, operation) = try #require(restored.downloads.first)
        try await operation.run()
        #expect(contents(destination) == TestResponse.patternBytes(count: length))
        #expect(operation.resumedBytes == Int64(length / 2))
        let last = server.requests("/private").last
        #expect(last?.header("Range") == "bytes=\(length / 2)-")
        #expect(last?.header("Authorization") == "Bearer s3cret")
        #expect(journal.entries.isEmpty)
    }

    /// An entry replaced under its identifier while the download it listed still ran: that
    /// download's success does not take the new entry with it (it did, and the new download,
    /// unfinished, was not restored after a crash).
    @Test func aReplacedEntryIsNotRemovedByTheSuccessOfTheDownloadItReplaced() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        server.route("/old") { _ in TestResponse.text("open").held(by: gate) }
        let journal = try DownloadJournal(contentsOf: directory.file("downloads.json"))
        let old = DownloadOperation(url: server.url("/old"), destination: directory.file("file.bin"))
        try journal.track(old, identifier: "file")
        old.start()
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        // The user gives the file again, from another mirror, while the first still runs.
        let new = DownloadOperation(url: server.url("/bytes/1000"), destination: directory.file("other.bin"))
        try journal.track([(new, "file")], replacingExisting: true)
        gate.open()
        try await old.finished()
        try journal.flush()
        #expect(journal.entries.map(\.url) == [server.url("/bytes/1000")], "the new entry stays")
        let onDisk = try #require(FileManager.default.contents(atPath: journal.fileURL.path))
        #expect(String(decoding: onDisk, as: UTF8.self).contains("other.bin"))
        // Its own download's success removes it.
        try await new.run()
        #expect(journal.entries.isEmpty)
    }

    /// A journal edited by hand: entries whose destination is not a local file, or is a
    /// directory, or whose digest is not one; a download to them is refused clearly and writes
    /// nothing.
    @Test func aHandEditedJournalRestoresNothingUnsafe() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let journalURL = directory.file("downloads.json")
        let url = server.url("/bytes/1000").absoluteString
        func entry(_ identifier: String, url: String = url, destination: String, digest: String? = nil,
                   headers: String = "{}") -> String {
            let digestField = digest.map { ", \"expectedDigest\": \"\($0)\"" } ?? ""
            return """
            {"identifier": "\(identifier)", "url": "\(url)", "redactedURL": "\(url)", "destination": "\(destination)", \
            "headers": \(headers), "isComplete": true\(digestField)}
            """
        }
        let subdirectory = directory.file("sub")
        try FileManager.default.createDirectory(at: subdirectory, withIntermediateDirectories: false)
        let entries = [
            entry("remote", destination: "https://example.com/x"),
            entry("directory", destination: subdirectory.absoluteString),
            entry("badDigest", destination: directory.file("d").absoluteString, digest: "sha256:nothex"),
            entry("unknownAlgorithm", destination: directory.file("e").absoluteString, digest: "md5:00"),
            // A local file copied into the folder; a header that smuggles another line.
            entry("localFile", url: "file:///etc/passwd", destination: directory.file("passwd").absoluteString),
            entry("smuggled", destination: directory.file("s").absoluteString,
                  headers: #"{"X-A": "1\r\nX-Injected: 2"}"#),
        ]
        try Data("{\"version\": 1, \"entries\": [\(entries.joined(separator: ","))]}".utf8).write(to: journalURL)
        chmod(journalURL.path, 0o600)
        let journal = try DownloadJournal(contentsOf: journalURL)
        let restored = journal.restore()
        #expect(Set(restored.unresolved.map(\.identifier)) == ["remote", "badDigest", "unknownAlgorithm"])
        #expect(restored.downloads.map(\.identifier) == ["directory", "localFile", "smuggled"])
        for (identifier, operation) in restored.downloads where identifier != "smuggled" {
            await #expect(throws: FetchError.self) { try await operation.run() }
            let expected: FetchError.Code = identifier == "directory" ? .fileSystem : .invalidRequest
            #expect(operation.error?.code == expected, "\(identifier): \(String(describing: operation.error))")
        }
        #expect(server.requests("/bytes/1000").count == 0, "refused before anything was sent")
        #expect(try FileManager.default.contentsOfDirectory(atPath: subdirectory.path).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: directory.file("passwd").path))
        #expect(journal.entries.count == 6, "nothing restored succeeded: all stay listed")
        // Foundation drops a header value with a line break (URLRequest.setValue): nothing
        // is smuggled into the request.
        let smuggled = try #require(restored.downloads.last?.operation)
        try await smuggled.run()
        let request = try #require(server.requests("/bytes/1000").last)
        #expect(request.header("X-Injected") == nil && request.header("X-A") == nil)
    }

    /// A hand-edited destination cannot hide where it writes: one relative to the process's
    /// working directory (`file:name`) is not restored, and one with `..` reads back
    /// standardized, so that an app that restores only into its folder (checking
    /// ``DownloadJournal/Entry/destination`` in `restore`'s closure) is not fooled.
    @Test func aHandEditedDestinationCannotHideWhereItWrites() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let journalURL = directory.file("downloads.json")
        let url = "http://127.0.0.1:9/file"
        let folder = directory.url.standardizedFileURL
        let outside = folder.deletingLastPathComponent().appendingPathComponent("outside-\(UUID().uuidString).bin")
        let entries = [
            ("relative", "file:relative-\(UUID().uuidString).bin"),
            ("climbing", folder.appendingPathComponent("sub").absoluteString + "/../../" + outside.lastPathComponent),
            ("inside", folder.appendingPathComponent("inside.bin").absoluteString),
        ].map { identifier, destination in
            """
            {"identifier": "\(identifier)", "url": "\(url)", "redactedURL": "\(url)", "destination": "\(destination)", \
            "headers": {}, "isComplete": true}
            """
        }
        try Data("{\"version\": 1, \"entries\": [\(entries.joined(separator: ","))]}".utf8).write(to: journalURL)
        chmod(journalURL.path, 0o600)
        let journal = try DownloadJournal(contentsOf: journalURL)
        let climbing = try #require(journal.entries.first { $0.identifier == "climbing" })
        #expect(climbing.destination.path == outside.path, "read back standardized: \(climbing.destination.path)")
        let all = journal.restore()
        #expect(all.unresolved.map(\.identifier) == ["relative"], "not written relative to the working directory")
        #expect(all.downloads.map(\.operation.destination.path).sorted()
                == [outside.path, folder.appendingPathComponent("inside.bin").path].sorted())
        // An app that restores only into its folder.
        let mine = journal.restore { entry in
            entry.destination.deletingLastPathComponent().path == folder.path ? entry.request : nil
        }
        #expect(mine.downloads.map(\.identifier) == ["inside"])
        #expect(Set(mine.unresolved.map(\.identifier)) == ["relative", "climbing"])
    }
}
