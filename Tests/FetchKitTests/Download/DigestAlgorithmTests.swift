import FetchKitTesting
import Foundation
import Testing
@testable import FetchKit
import FoundationNetworkingShims

/// One of the coreutils tools (`sha512sum`, `sha1sum`, `md5sum`, `sha256sum`) run on `file`: the
/// reference the hashers are checked against.
private func coreutilsDigest(_ algorithm: FileDigest.Algorithm, of file: URL) async throws -> FileDigest {
    let tool = "/usr/bin/\(algorithm.name)sum"
    let child = try ChildProcess(tool, [file.path])
    let (ending, stdout, stderr) = try await child.finish()
    guard ending == .exit(0) else { throw ChildProcess.SpawnError(description: "\(tool): \(ending): \(stderr)") }
    return try #require(FileDigest(algorithm, hex: String(stdout.prefix { $0 != " " })))
}

/// Both implementations of an algorithm: the system's (libcrypto's, found with `dlsym`) and
/// FetchKit's own in Swift.
private enum Implementation: String, CaseIterable, CustomTestStringConvertible {
    case system, portable
    var testDescription: String { rawValue }

    /// The hex digest of `pieces`, fed one after another.
    func hex(_ algorithm: FileDigest.Algorithm, _ pieces: [Data]) -> String {
        switch self {
        case .system:
            let hasher = DigestHasher(algorithm)
            for piece in pieces { hasher.update(piece) }
            return hasher.implementation == .system ? hasher.finish().hex : "not the system's"
        case .portable:
            let hasher = algorithm.makePortable()
            for piece in pieces { piece.withUnsafeBytes { hasher.update($0) } }
            return FileDigest(algorithm, bytes: hasher.finish())?.hex ?? "wrong length"
        }
    }
}

/// `data` cut where blocks begin and end (1, 63, 64, 65, 127, 128, 129 bytes…), to cross every
/// path of the buffering.
private func uneven(_ data: Data) -> [Data] {
    var pieces: [Data] = []
    var offset = 0
    var sizes = [1, 63, 64, 65, 127, 128, 129, 0, 1000].makeIterator()
    while offset < data.count {
        let size = sizes.next() ?? data.count
        let end = min(data.count, offset + size)
        pieces.append(data.subdata(in: offset..<end))
        offset = end
    }
    return pieces
}

@Suite("SHA-512, SHA-1 and MD5: published vectors, the coreutils tools, downloads", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: single-threaded hashing, checked against vectors; the download suites run the hasher on the writer's queue"))
struct DigestAlgorithmTests {
    static let abc = Data("abc".utf8)
    static let twoBlocks448 = Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
    static let twoBlocks896 = Data(("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                                    + "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu").utf8)
    static let millionA = Data(repeating: UInt8(ascii: "a"), count: 1_000_000)

    /// FIPS 180-4's examples (NIST CSRC "Examples with intermediate values") and the
    /// one-million `a` message; RFC 1321's test suite for MD5.
    static let vectors: [(FileDigest.Algorithm, String, Data)] = [
        (.sha512, "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e", Data()),
        (.sha512, "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f", abc),
        (.sha512, "8e959b75dae313da8cf4f72814fc143f8f7779c6eb9f7fa17299aeadb6889018501d289e4900f7e4331b99dec4b5433ac7d329eeb6dd26545e96e55b874be909", twoBlocks896),
        (.sha512, "e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973ebde0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa2e4eadb217ad8cc09b", millionA),
        (.sha1, "da39a3ee5e6b4b0d3255bfef95601890afd80709", Data()),
        (.sha1, "a9993e364706816aba3e25717850c26c9cd0d89d", abc),
        (.sha1, "84983e441c3bd26ebaae4aa1f95129e5e54670f1", twoBlocks448),
        (.sha1, "34aa973cd4c4daa4f61eeb2bdbad27316534016f", millionA),
        (.md5, "d41d8cd98f00b204e9800998ecf8427e", Data()),
        (.md5, "0cc175b9c0f1b6a831c399e269772661", Data("a".utf8)),
        (.md5, "900150983cd24fb0d6963f7d28e17f72", abc),
        (.md5, "f96b697d7cb7938d525a2f31aaf161d0", Data("message digest".utf8)),
        (.md5, "c3fcd3d76192e4007dfb496cca67e13b", Data("abcdefghijklmnopqrstuvwxyz".utf8)),
        (.md5, "d174ab98d277d9f5a5611c2c9f419d9f", Data("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)),
        (.md5, "57edf4a22be3c955ac49da2e2107b67a", Data(String(repeating: "1234567890", count: 8).utf8)),
    ]

    @Test(arguments: Implementation.allCases)
    fileprivate func thePublishedVectorsWholeAndInUnevenPieces(_ implementation: Implementation) {
        for (algorithm, expected, message) in Self.vectors {
            #expect(implementation.hex(algorithm, [message]) == expected, "\(algorithm) of \(message.count) bytes, whole")
            #expect(implementation.hex(algorithm, uneven(message)) == expected, "\(algorithm) of \(message.count) bytes, in pieces")
        }
    }

    /// Every algorithm's functions are in the libcrypto libcurl loaded: the fast path is taken.
    @Test func libcryptoHasEveryAlgorithm() {
        #if os(Linux)
        for function in SystemDigest.Function.allCases {
            #expect(SystemDigest.loaded(function) != nil, "\(function)")
        }
        #endif
        for algorithm in FileDigest.Algorithm.all {
            #expect(DigestHasher(algorithm).implementation == .system, "\(algorithm)")
        }
    }

    /// Seeded random files of the sizes around the block and padding boundaries, and a larger
    /// one, against the coreutils tools, through `FileDigest(_:of:)` and both implementations.
    @Test func seededFilesMatchTheCoreutilsTools() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var random = SplitMix64(seed: 0x5EED_D16E)
        for size in [0, 1, 55, 56, 63, 64, 111, 112, 119, 127, 128, 129, 1000, (1 << 20) + 7] {
            let data = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            let file = directory.file("seeded-\(size)")
            try data.write(to: file)
            for algorithm in FileDigest.Algorithm.all {
                let reference = try await coreutilsDigest(algorithm, of: file)
                #expect(FileDigest(algorithm, of: file) == reference, "\(algorithm) of \(size) bytes")
                for implementation in Implementation.allCases {
                    #expect(implementation.hex(algorithm, uneven(data)) == reference.hex, "\(implementation) \(algorithm) of \(size) bytes")
                }
            }
        }
    }

    /// A checkpoint and a catch-up (a transfer resumed after its last bytes were cut back) give
    /// the digest of the bytes on disk, for each algorithm.
    @Test func aCheckpointAndACatchUpGiveTheFilesDigest() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let data = TestResponse.patternBytes(count: 300_000)
        let file = directory.file("pattern")
        try data.write(to: file)
        let descriptor = open(file.path, O_RDONLY)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        for algorithm in FileDigest.Algorithm.all {
            let hasher = DigestHasher(algorithm)
            hasher.update(data.prefix(100_000))
            hasher.markCheckpoint()
            hasher.update(data.subdata(in: 100_000..<200_000))
            hasher.catchUp(to: 150_000, descriptor: descriptor)   // cut back past the checkpoint
            #expect(hasher.length == 150_000)
            hasher.update(data.subdata(in: 150_000..<300_000))
            #expect(hasher.finish() == FileDigest(algorithm, of: file), "\(algorithm)")
        }
    }

    @Test func namesAsAria2AndTheToolsWriteThem() {
        #expect(FileDigest.Algorithm(named: "SHA-512") == .sha512 && FileDigest.Algorithm(named: "sha512") == .sha512)
        #expect(FileDigest.Algorithm(named: "sha-1") == .sha1 && FileDigest.Algorithm(named: "SHA1") == .sha1)
        #expect(FileDigest.Algorithm(named: "MD5") == .md5 && FileDigest.Algorithm(named: "md-5") == .md5)
        #expect(FileDigest.Algorithm(named: "sha-384") == nil && FileDigest.Algorithm(named: "crc32") == nil)
        #expect(FileDigest.Algorithm.all.map(\.byteCount) == [32, 64, 20, 16])
        #expect(FileDigest.Algorithm.all.filter(\.isCollisionResistant) == [.sha256, .sha512])
        #expect(FileDigest(.md5, hex: "d41d8cd98f00b204e9800998ecf8427e")?.description == "md5:d41d8cd98f00b204e9800998ecf8427e")
        #expect(FileDigest(.sha1, hex: "d41d8cd98f00b204e9800998ecf8427e") == nil, "an MD5's length is not a SHA-1's")
    }

    /// A download checked against each algorithm: the right digest keeps the file, a wrong one
    /// fails with `digestMismatch` naming both and leaves no file.
    @Test func aDownloadIsCheckedWithEachAlgorithm() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let body = TestResponse.patternBytes(count: 200_001)
        server.route("GET", "/file") { _ in .bytes(body) }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.file("reference")
        try body.write(to: source)
        let queue = FetchQueue()
        for algorithm in [FileDigest.Algorithm.sha512, .sha1, .md5] {
            let right = try #require(FileDigest(algorithm, of: source))
            let good = DownloadOperation(url: server.url("/file"), destination: directory.file("good-\(algorithm)"))
            good.expectedDigest = right
            _ = try await queue.fetch(good)
            #expect(FileDigest(algorithm, of: directory.file("good-\(algorithm)")) == right)

            let wrongBytes = right.bytes.map { $0 ^ 0xff }
            let wrong = try #require(FileDigest(algorithm, bytes: wrongBytes))
            let bad = DownloadOperation(url: server.url("/file"), destination: directory.file("bad-\(algorithm)"))
            bad.expectedDigest = wrong
            bad.configuration.retryPolicy = .none
            await #expect(throws: FetchError.self) { _ = try await queue.fetch(bad) }
            guard case .digestMismatch(let mismatch)? = bad.error else {
                Issue.record("\(algorithm): expected digestMismatch, got \(String(describing: bad.error))")
                continue
            }
            #expect(mismatch.expected == wrong && mismatch.actual == right, "\(algorithm)")
            #expect(!FileManager.default.fileExists(atPath: directory.file("bad-\(algorithm)").path))
        }
    }
}
