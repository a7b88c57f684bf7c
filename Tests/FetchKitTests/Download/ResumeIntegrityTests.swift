import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

// A resumed download must never splice two versions of a file. `If-Range` is a request, not a
// guarantee: a server (a CDN that replaced the object) may ignore it and answer `206` with the
// new version's bytes. The `206` must carry the validator the partial file was made with, and a
// `Content-Range` total equal to the length known for it; otherwise the partial is discarded and
// the download starts over.

@Suite("Resumed downloads never splice two files", .timeLimit(.minutes(3)))
struct ResumeIntegrityTests {
    /// The object's bytes in version `version` (``ResumeFixtures/content(version:length:)``).
    static func content(version: Int, length: Int) -> Data {
        ResumeFixtures.content(version: version, length: length)
    }

    typealias LyingServer = ResumeFixtures.LyingServer

    /// Leaves half of version 1 on disk, then replaces the object.
    static func leaveHalfOfVersion1(_ lying: LyingServer, at destination: URL, newLength: Int? = nil) async throws {
        let first = DownloadOperation(url: lying.server.url("/object"), destination: destination)
        first.configuration.retryPolicy = .none
        await #expect(throws: FetchError.self) { try await first.run() }
        #expect(DownloadOperation.fileSize(first.partialFileURL) == 100_000, "half of version 1 is kept")
        lying.version.withLock { $0 = 2 }
        if let newLength { lying.length.withLock { $0 = newLength } }
    }

    @Test func aResumeAnsweredWithAnotherETagStartsOver() async throws {
        let lying = try LyingServer()
        let directory = try TemporaryDirectory()
        defer { lying.server.shutDown(); directory.remove() }
        let destination = directory.file("object.bin")
        try await Self.leaveHalfOfVersion1(lying, at: destination)

        let second = DownloadOperation(url: lying.server.url("/object"), destination: destination)
        try await second.run()
        #expect(FileManager.default.contents(atPath: destination.path) == Self.content(version: 2, length: 200_000),
                "the file is version 2, whole: never half of each")
        let requests = lying.server.requests("/object")
        #expect(requests.count == 3)
        #expect(requests[1].header("If-Range") == "\"v1\"")
        #expect(requests[2].header("Range") == nil, "started over from byte 0")
        #expect(second.partialFileNotices.map(\.reason) == [.changedOnServer])
        #expect(!FileManager.default.fileExists(atPath: second.partialFileURL.path))
    }

    @Test func aResumeAnsweredWithAnotherLastModifiedStartsOver() async throws {
        let lying = try LyingServer(sendsETag: false, sendsLastModified: true)
        let directory = try TemporaryDirectory()
        defer { lying.server.shutDown(); directory.remove() }
        let destination = directory.file("object.bin")
        try await Self.leaveHalfOfVersion1(lying, at: destination)

        let second = DownloadOperation(url: lying.server.url("/object"), destination: destination)
        try await second.run()
        #expect(FileManager.default.contents(atPath: destination.path) == Self.content(version: 2, length: 200_000))
        let requests = lying.server.requests("/object")
        #expect(requests.count == 3)
        #expect(requests[1].header("If-Range") == "Mon, 01 Jun 2026 10:00:00 GMT")
        #expect(requests[2].header("Range") == nil)
    }

    @Test func aResumeWhoseContentRangeTotalDiffersStartsOver() async throws {
        // The same ETag, but the object is now longer: its Content-Range total gives it away.
        let lying = try LyingServer(fixedETag: true)
        let directory = try TemporaryDirectory()
        defer { lying.server.shutDown(); directory.remove() }
        let destination = directory.file("object.bin")
        try await Self.leaveHalfOfVersion1(lying, at: destination, newLength: 250_000)

        let second = DownloadOperation(url: lying.server.url("/object"), destination: destination)
        try await second.run()
        #expect(FileManager.default.contents(atPath: destination.path) == Self.content(version: 2, length: 250_000))
        #expect(lying.server.requests("/object").count == 3)
        #expect(lying.server.requests("/object").last?.header("Range") == nil)
    }

    @Test func aTruthfulResumeStillAppends() async throws {
        let lying = try LyingServer()
        let directory = try TemporaryDirectory()
        defer { lying.server.shutDown(); directory.remove() }
        let destination = directory.file("object.bin")
        try await Self.leaveHalfOfVersion1(lying, at: destination)
        lying.version.withLock { $0 = 1 }   // nothing changed after all

        let second = DownloadOperation(url: lying.server.url("/object"), destination: destination)
        try await second.run()
        #expect(FileManager.default.contents(atPath: destination.path) == Self.content(version: 1, length: 200_000))
        #expect(second.resumedBytes == 100_000)
        #expect(lying.server.requests("/object").count == 2)
        #expect(second.partialFileNotices.isEmpty)
    }

    @Test func whereItCannotStartOverItFailsClearlyAndKeepsNoSplice() async throws {
        // A download told not to start over fails, and says why.
        let lying = try LyingServer()
        let directory = try TemporaryDirectory()
        defer { lying.server.shutDown(); directory.remove() }
        let destination = directory.file("object.bin")
        try await Self.leaveHalfOfVersion1(lying, at: destination)

        let second = DownloadOperation(url: lying.server.url("/object"), destination: destination)
        second.restartsWhenSourceChanges = false
        await #expect(throws: FetchError.self) { try await second.run() }
        guard case .invalidResponse(let failure)? = second.error, case .changedWhileResuming(let detail) = failure.reason else {
            Issue.record("expected changedWhileResuming, got \(String(describing: second.error))")
            return
        }
        #expect(detail.contains("\"v1\"") && detail.contains("\"v2\""), "\(detail)")
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        #expect(!FileManager.default.fileExists(atPath: second.partialFileURL.path), "the old half is gone: nothing left to splice")
        #expect(lying.server.requests("/object").count == 2)
    }
}

/// Every initializer of the four operation classes called through `super` from another module
/// (`SubclassProbe`, which is built with the tests: a call that compiles but does not link
/// fails the build before this runs).
@Suite("Subclass initializers link from another module", .timeLimit(.minutes(3)))
struct SubclassInitializerTests {
    @Test func everyInitializerCalledThroughSuperWorks() async throws {
        let (status, stdout, stderr) = try await runTool("SubclassProbe", [])
        #expect(status == 0, "\(stderr)")
        let lines: [String] = stdout.split(separator: "\n").map(String.init)
        let expected: [String] = [
            "GetUserByRequest https://api.example.com/v1/users/1",
            "GetUser https://api.example.com/v1/users/2",
            "GetFeed https://api.example.com/v1/feed",
            "GetFeedByRequest https://api.example.com/v1/feed",
            "GetArchive https://api.example.com/v1/archive.zip",
            "GetArchiveByRequest https://api.example.com/v1/archive.zip",
            "StreamTokens https://api.example.com/v1/tokens",
            "StreamTokensByRequest https://api.example.com/v1/tokens",
        ]
        #expect(lines == expected)
    }
}
