import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(Glibc)
import Glibc
#endif

/// `sha256sum` (coreutils) run as a child process on `file`: the reference the hashers are
/// checked against.
private func sha256sum(_ file: URL) async throws -> String {
    let child = try ChildProcess("/usr/bin/sha256sum", [file.path])
    let (ending, stdout, stderr) = try await child.finish()
    guard ending == .exit(0) else { throw ChildProcess.SpawnError(description: "sha256sum: \(ending): \(stderr)") }
    return String(stdout.prefix { $0 != " " })
}

/// `sha256sum` of `data`, written to a file in `directory`.
private func sha256sum(of data: Data, in directory: TemporaryDirectory) async throws -> FileDigest {
    let file = directory.file("reference-\(UUID().uuidString)")
    try data.write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    return try #require(FileDigest(.sha256, hex: try await sha256sum(file)))
}

/// Both implementations: the system's (libcrypto, found with `dlsym`) and FetchKit's own.
private enum Hasher: String, CaseIterable, CustomTestStringConvertible {
    case system, portable
    var testDescription: String { rawValue }

    /// The hex digest of `pieces` fed one after another.
    func hex(_ pieces: [Data]) -> String {
        switch self {
        case .system:
            let hasher = DigestHasher(.sha256)
            for piece in pieces { hasher.update(piece) }
            return hasher.finish().hex
        case .portable:
            let hasher = PortableSHA256()
            for piece in pieces { piece.withUnsafeBytes { hasher.update($0) } }
            return FileDigest(.sha256, bytes: hasher.finish())?.hex ?? "wrong length"
        }
    }
}

@Suite("SHA-256: published test vectors and sha256sum", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: single-threaded hashing, checked against vectors, costs CI 19 s; the digest suite runs the hasher on the writer's queue"))
struct SHA256Tests {
    /// FIPS 180-4 examples (NIST CSRC "Examples with intermediate values") and the one-million
    /// `a` message of FIPS 180-2's appendix B.3.
    static let vectors: [(String, Data)] = [
        ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Data()),
        ("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", Data("abc".utf8)),
        ("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
         Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)),
        ("cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
         Data(("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
               + "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu").utf8)),
        ("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", Data(repeating: UInt8(ascii: "a"), count: 1_000_000)),
    ]

    @Test(arguments: Hasher.allCases)
    fileprivate func thePublishedVectors(_ hasher: Hasher) {
        for (expected, message) in Self.vectors {
            #expect(hasher.hex([message]) == expected, "\(message.count) bytes")
        }
    }

    @Test(arguments: Hasher.allCases)
    fileprivate func theVectorsFedInPiecesOfEverySize(_ hasher: Hasher) {
        // Pieces that start and end anywhere in a block: the partial block is carried over.
        var random = SplitMix64(seed: 0x5A256)
        for (expected, message) in Self.vectors {
            var pieces: [Data] = []
            var offset = 0
            while offset < message.count {
                let size = min(message.count - offset, random.pick([0, 1, 3, 55, 56, 63, 64, 65, 127, 4096, 70_001]))
                pieces.append(message.subdata(in: offset..<offset + size))
                offset += size
            }
            #expect(hasher.hex(pieces) == expected, "\(message.count) bytes in \(pieces.count) pieces")
        }
    }

    @Test func theSystemImplementationIsFoundOnLinux() {
        #if os(Linux)
        // libcurl, under FoundationNetworking, has loaded libcrypto.
        #expect(DigestHasher(.sha256).implementation == .system)
        #endif
    }

    @Test(arguments: Hasher.allCases)
    fileprivate func randomFilesOfOddSizesHashAsSha256sumDoes(_ hasher: Hasher) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SplitMix64(seed: 24)
        let sizes = [1, 55, 56, 57, 63, 64, 65, 119, 120, 121, 1_000_003] + (0..<6).map { _ in random.below(3 << 20) | 1 }
        for size in sizes {
            var bytes = [UInt8](repeating: 0, count: size)
            for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: random.next()) }
            let data = Data(bytes)
            let reference = try await sha256sum(of: data, in: directory)
            var pieces: [Data] = []
            var offset = 0
            while offset < size {
                let piece = min(size - offset, 1 + random.below(40_000))
                pieces.append(data.subdata(in: offset..<offset + piece))
                offset += piece
            }
            #expect(hasher.hex([data]) == reference.hex, "\(size) bytes at once")
            #expect(hasher.hex(pieces) == reference.hex, "\(size) bytes in \(pieces.count) pieces")
        }
    }

    /// `FileDigest(_:of:)` (what `fetchkit --sha256` checks a file already there with) reads
    /// the file to its end, and refuses what is not a regular file.
    @Test func aFileOnDiskHashesAsSha256sumDoesAndOnlyARegularFile() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SplitMix64(seed: 7)
        for size in [0, 1, 64, 1_048_577, 3 << 20 | 1] {
            let data = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            let reference = try await sha256sum(of: data, in: directory)
            let file = directory.file("f\(size)")
            try data.write(to: file)
            #expect(FileDigest(.sha256, of: file)?.hex == reference.hex, "\(size) bytes")
        }
        let link = directory.file("link")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: directory.file("f1"))
        #expect(FileDigest(.sha256, of: link) == nil, "a link is not followed")
        #expect(FileDigest(.sha256, of: directory.url) == nil, "a directory")
        #expect(FileDigest(.sha256, of: directory.file("missing")) == nil)
    }

    @Test func hexIsParsedStrictly() {
        let hex = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
        #expect(FileDigest(.sha256, hex: hex)?.hex == hex.lowercased())
        #expect(FileDigest(.sha256, hex: " \(hex) ")?.description == "sha256:" + hex.lowercased())
        #expect(FileDigest(.sha256, hex: String(hex.dropLast())) == nil, "too short")
        #expect(FileDigest(.sha256, hex: hex + "0") == nil, "too long")
        #expect(FileDigest(.sha256, hex: "g" + hex.dropFirst()) == nil, "not hex")
        #expect(FileDigest(.sha256, hex: "") == nil)
        #expect(FileDigest(.sha256, bytes: [1, 2, 3]) == nil)
        #expect(FileDigest.Algorithm(named: "SHA-256") == .sha256)
        #expect(FileDigest.Algorithm(named: "sha-384") == nil)
    }
}

@Suite("Downloads checked against an expected digest", .timeLimit(.minutes(3)))
struct DigestDownloadTests {
    private func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }
    /// A digest that is not the file's: the right one with its last byte changed.
    private func wrong(_ digest: FileDigest) -> FileDigest {
        FileDigest(.sha256, bytes: digest.bytes.dropLast() + [digest.bytes[31] ^ 1]) ?? digest
    }

    @Test func theRightDigestSucceedsHashedAsWritten() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 1_234_567
        let expected = try await sha256sum(of: TestResponse.patternBytes(count: length), in: directory)
        let destination = directory.file("file.bin")
        let download = DownloadOperation(url: server.url("/bytes/\(length)"), destination: destination)
        download.expectedDigest = expected

        try await download.run()

        #expect(contents(destination) == TestResponse.patternBytes(count: length))
        #expect(download.digestBytesReadBack == 0, "hashed as written, never read back")
    }

    @Test func aWrongDigestLeavesNoFileInPlaceAndSaysWhatWasExpectedAndGot() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 300_001
        let actual = try await sha256sum(of: TestResponse.patternBytes(count: length), in: directory)
        let destination = directory.file("file.bin")
        try Data("the old file".utf8).write(to: destination)
        let download = DownloadOperation(url: server.url("/bytes/\(length)"), destination: destination)
        download.expectedDigest = wrong(actual)

        await #expect(throws: FetchError.self) { try await download.run() }

        guard case .digestMismatch(let mismatch)? = download.error else {
            Issue.record("expected a digest mismatch, got \(String(describing: download.error))")
            return
        }
        #expect(mismatch.expected == wrong(actual))
        #expect(mismatch.actual == actual)
        #expect(mismatch.byteCount == Int64(length))
        #expect(download.error?.code == .digestMismatch)
        let text = download.error?.description ?? ""
        #expect(text.contains(wrong(actual).hex) && text.contains(actual.hex), "\(text)")
        #expect(contents(destination) == Data("the old file".utf8), "the old file is untouched")
        #expect(!exists(download.partialFileURL), "a corrupt partial file is not kept to be resumed")
        #expect(!exists(download.partialRecordURL))
        #expect(download.downloadedFileURL == nil)
        #expect(server.requests("/bytes/\(length)").count == 1, "not retried")
    }

    /// A first download cancelled mid-body keeps a resumable partial file.
    private func interruptedDownload(_ server: TestServer, to destination: URL, digest: FileDigest?) async throws -> Int {
        let first = DownloadOperation(url: server.url("/big"), destination: destination)
        first.expectedDigest = digest
        first.onProgress(on: .immediate) { progress in
            if progress.bytesReceived >= 1 << 20 { first.cancel() }
        }
        await #expect(throws: FetchError.self) { try await first.run() }
        #expect(first.error?.code == .cancelled)
        let partial = try #require(contents(first.partialFileURL), "a resumable partial file is kept")
        return partial.count
    }

    @Test(arguments: [false, true])
    func aResumedDownloadIsCheckedAcrossTheResume(rightDigest: Bool) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 4 << 20
        server.resumableRoute("/big", length: length, etag: Locked("v1"), cutFull: Locked(false))
        let actual = try await sha256sum(of: TestResponse.patternBytes(count: length), in: directory)
        let digest = rightDigest ? actual : wrong(actual)
        let destination = directory.file("big.bin")
        let kept = try await interruptedDownload(server, to: destination, digest: digest)

        let second = DownloadOperation(url: server.url("/big"), destination: destination)
        second.expectedDigest = digest
        if rightDigest {
            try await second.run()
            #expect(contents(destination) == TestResponse.patternBytes(count: length))
        } else {
            await #expect(throws: FetchError.self) { try await second.run() }
            guard case .digestMismatch(let mismatch)? = second.error else {
                Issue.record("expected a digest mismatch, got \(String(describing: second.error))")
                return
            }
            #expect(mismatch.actual == actual, "the digest of the whole file, resumed part included")
            #expect(!exists(destination))
            #expect(!exists(second.partialFileURL), "not resumed again")
        }
        #expect(second.resumedBytes == Int64(kept) || !rightDigest)
        #expect(server.requests("/big").last?.header("Range") == "bytes=\(kept)-")
        #expect(second.digestBytesReadBack == Int64(kept), "what was on disk is read once")
    }

    @Test func aPartialFileCorruptedOnDiskBeforeTheResumeFailsTheCheck() async throws {
        // The bytes before the resume point are hashed from the disk, not trusted.
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 4 << 20
        server.resumableRoute("/big", length: length, etag: Locked("v1"), cutFull: Locked(false))
        let actual = try await sha256sum(of: TestResponse.patternBytes(count: length), in: directory)
        let destination = directory.file("big.bin")
        let kept = try await interruptedDownload(server, to: destination, digest: actual)
        let partialURL = DownloadOperation(url: server.url("/big"), destination: destination).partialFileURL
        let handle = try FileHandle(forUpdating: partialURL)
        try handle.seek(toOffset: UInt64(kept / 2))
        handle.write(Data([0xFF ^ ResumeFixtures.patternBytes(offset: kept / 2, count: 1)[0]]))
        try handle.close()

        let second = DownloadOperation(url: server.url("/big"), destination: destination)
        second.expectedDigest = actual
        await #expect(throws: FetchError.self) { try await second.run() }

        #expect(second.resumedBytes == 0)
        #expect(second.error?.code == .digestMismatch)
        #expect(!exists(destination))
        #expect(!exists(second.partialFileURL))
    }

    @Test func aRetryThatResumesGoesOnFromTheHashItHad() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 600_000
        // The full response breaks off halfway; the retry asks for the rest.
        server.resumableRoute("/cut", length: length, etag: Locked("v1"), cutFull: Locked(true))
        let expected = try await sha256sum(of: TestResponse.patternBytes(count: length), in: directory)
        let destination = directory.file("cut.bin")
        let download = DownloadOperation(url: server.url("/cut"), destination: destination)
        download.expectedDigest = expected
        download.configuration.retryPolicy = RetryPolicy(maximumRetries: 2, baseDelay: 0.01)

        try await download.run()

        #expect(contents(destination) == TestResponse.patternBytes(count: length))
        #expect(download.attempts == 2)
        #expect(server.requests("/cut").last?.header("Range") == "bytes=\(length / 2)-")
        #expect(download.digestBytesReadBack == 0, "the retry went on from the hash of what it had written")
    }

    @Test(arguments: [false, true])
    func aDownloadContinuedAfterTheDiskFellBehindIsVerified(rightDigest: Bool) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let length = 8 << 20
        server.resumableRoute("/big", length: length, etag: Locked("v1"), cutFull: Locked(false))
        let actual = try await sha256sum(of: TestResponse.patternBytes(count: length), in: directory)
        let destination = directory.file("big.bin")
        let download = DownloadOperation(url: server.url("/big"), destination: destination)
        download.expectedDigest = rightDigest ? actual : wrong(actual)
        let rate = runsUnderSanitizer ? 2 : 50
        download.backpressure = Backpressure(bound: 1 << 20, throttle: { size in usleep(useconds_t(size / rate)) })

        if rightDigest {
            try await download.run()
            #expect(contents(destination) == TestResponse.patternBytes(count: length))
        } else {
            await #expect(throws: FetchError.self) { try await download.run() }
            #expect(download.error?.code == .digestMismatch)
            #expect(!exists(destination))
            #expect(!exists(download.partialFileURL))
        }
        #expect(download.backpressureContinuations >= 1)
        // A continuation goes on from the hash it had; one that asks for the last byte again
        // reads back at most the batch before it.
        #expect(download.digestBytesReadBack <= 2 << 20, "read back \(download.digestBytesReadBack)")
    }
}
