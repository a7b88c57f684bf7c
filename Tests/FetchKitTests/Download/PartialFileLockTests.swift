import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A resumable file whose first answer sends `firstPart` bytes, waits for `gate`, then sends
/// the rest; a `Range` request gets the rest at once, as a 206.
private func serveGatedFile(_ server: TestServer, path: String, size: Int, firstPart: Int, gate: TestGate) {
    server.route(path) { request in
        if let range = request.header("Range"), range.hasPrefix("bytes="), range.hasSuffix("-"),
           let start = Int(range.dropFirst("bytes=".count).dropLast()), start < size {
            let head = TestResponse.Step.head(status: 206, headers: [
                "ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Range": "bytes \(start)-\(size - 1)/\(size)",
                "Content-Type": "application/octet-stream", "Content-Length": String(size - start),
            ])
            return ResumeFixtures.patternAnswer(head, offset: start, count: size - start, for: request)
        }
        return .steps([
            .head(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": String(size)]),
            .patternBytes(offset: 0, count: firstPart),
            .wait(for: gate),
            .patternBytes(offset: firstPart, count: size - firstPart),
        ])
    }
}

private func fileSize(_ url: URL) -> Int64? {
    (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value
}

/// Two processes downloading into one directory (issue 20, 3.3).
@Suite("One process per partial file", .timeLimit(.minutes(3)))
struct PartialFileLockTests {
    /// A second `fetchkit` into the same `-o`, while the first is mid-body: it skips the file
    /// with a message naming the first, sends nothing, and the first finishes a whole file.
    @Test func aSecondFetchkitSkipsAFileTheFirstIsDownloading() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let gate = TestGate()
        defer { gate.open() }
        let size = 1_000_000
        serveGatedFile(server, path: "/big.bin", size: size, firstPart: 300_000, gate: gate)
        let arguments = [server.url("/big.bin").absoluteString, "-d", directory.url.path, "--timeout", "3600"]
        let partial = directory.file(".big.bin.fetchkit-partial")

        // Given a first run that is mid-body
        let first = try ChildProcess("fetchkit", arguments)
        defer { first.stop() }
        let deadline = Date(timeIntervalSinceNow: 90)
        while (fileSize(partial) ?? 0) == 0 && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        try #require((fileSize(partial) ?? 0) > 0, "the first run's partial file never grew")

        // When a second run downloads the same URL into the same directory
        let second = try await ChildProcess("fetchkit", arguments).finish(timeout: 60)

        // Then it skips the file, says who is downloading it, and sends nothing
        #expect(second.ending == .exit(3), "ExitStatus.fileSystem: \(second.ending)\n\(second.stdout)\(second.stderr)")
        #expect(second.stdout.contains("✗ big.bin  skipped: being downloaded by another fetchkit (pid \(first.pid))"), "\(second.stdout)")
        #expect(server.requests("/big.bin").count == 1, "the second run sent a request")

        // And the first run finishes a whole file
        gate.open()
        let result = try await first.finish(timeout: 60)
        #expect(result.ending == .exit(0), "\(result.ending)\n\(result.stdout)\(result.stderr)")
        let file = try #require(FileManager.default.contents(atPath: directory.file("big.bin").path))
        #expect(file.count == size && file == TestResponse.patternBytes(count: size))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path) == ["big.bin"], "no lock or partial file is left")
    }

    /// The same, for a `DownloadOperation`: a lock held elsewhere (here by the test, as another
    /// process would hold it) fails the download before anything is sent or written.
    @Test func aDownloadWhosePartialFileIsLockedFailsWithoutTouchingIt() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let destination = directory.file("5000")
        let download = DownloadOperation(url: server.url("/bytes/5000"), destination: destination)
        let partialBytes = TestResponse.patternBytes(count: 1000)
        try partialBytes.write(to: download.partialFileURL)
        let held = try PartialFileLock.acquire(at: download.partialLockURL).get()

        let error = await outcome(of: download)

        guard case .fileSystem(let failure)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(failure.kind == .destinationInUse)
        #expect(download.otherProcessDownloading == getpid())
        #expect(server.requests("/bytes/5000").count == 0)
        #expect(FileManager.default.contents(atPath: download.partialFileURL.path) == partialBytes, "the partial file is untouched")

        // Once the lock is let go, the same download goes through and cleans up after itself.
        held.release()
        let again = DownloadOperation(url: server.url("/bytes/5000"), destination: destination)
        try await again.run()
        #expect(again.otherProcessDownloading == nil)
        #expect(FileManager.default.contents(atPath: destination.path) == TestResponse.patternBytes(count: 5000))
        #expect(!FileManager.default.fileExists(atPath: again.partialLockURL.path))
    }

    @Test func theLockIsOneHoldersAndALeftoverFileIsTakenOver() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let url = directory.file(".x.fetchkit-partial.lock")
        // A lock file left by a process that was killed: no one holds it.
        try Data("999999\n".utf8).write(to: url)
        let lock = try PartialFileLock.acquire(at: url).get()
        #expect(FileManager.default.contents(atPath: url.path) == Data("\(getpid())\n".utf8))
        guard case .failure(let failure) = PartialFileLock.acquire(at: url) else {
            Issue.record("locked twice")
            return
        }
        #expect(failure == .held(by: getpid()))
        lock.release()
        #expect(!FileManager.default.fileExists(atPath: url.path))
        let next = try PartialFileLock.acquire(at: url).get()
        next.release()
    }

    @Test func aLinkAtTheLockPathIsRefused() throws {
        let directory = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        defer { directory.remove(); outside.remove() }
        let target = outside.file("target")
        try Data("keep".utf8).write(to: target)
        let url = directory.file(".x.fetchkit-partial.lock")
        try FileManager.default.createSymbolicLink(at: url, withDestinationURL: target)
        guard case .failure(.unusable) = PartialFileLock.acquire(at: url) else {
            Issue.record("a link was locked")
            return
        }
        #expect(FileManager.default.contents(atPath: target.path) == Data("keep".utf8))
    }
}
