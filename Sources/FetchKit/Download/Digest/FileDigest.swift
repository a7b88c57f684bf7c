import Foundation
import FoundationNetworkingShims

/// A digest of a file's bytes: what a ``DownloadOperation`` checks its file against before
/// moving it into place (``DownloadOperation/expectedDigest``).
///
/// ```swift
/// if let digest = FileDigest(.sha256, hex: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08") {
///     download.expectedDigest = digest
/// }
/// ```
///
/// The algorithms are ``Algorithm`` values, not an enum: more can come without breaking code
/// that names one. Two digests are equal when they are of the same algorithm and the same bytes.
public struct FileDigest: Sendable, Hashable, CustomStringConvertible {
    /// A hash algorithm FetchKit can compute while it writes a download.
    public struct Algorithm: Sendable, Hashable, CustomStringConvertible {
        /// The algorithm's usual name, lowercase: `sha256`, `sha512`, `sha1`, `md5`.
        public let name: String
        /// The length of its digests in bytes.
        public let byteCount: Int
        /// Whether no one can make two files with the same digest: `true` for SHA-256 and
        /// SHA-512. SHA-1 and MD5 are broken for collisions — whoever makes a file can make a
        /// second with its digest — so a match with one of them shows a file arrived intact, not
        /// that it is the file its publisher meant: an integrity check, not a security one.
        public let isCollisionResistant: Bool

        /// SHA-256 (FIPS 180-4): 32 bytes.
        public static let sha256 = Algorithm(name: "sha256", byteCount: 32, isCollisionResistant: true)

        /// SHA-512 (FIPS 180-4): 64 bytes.
        public static let sha512 = Algorithm(name: "sha512", byteCount: 64, isCollisionResistant: true)

        /// SHA-1 (FIPS 180-4): 20 bytes. For the checksums mirrors and package repositories still
        /// publish: an integrity check only (``isCollisionResistant`` is `false`).
        public static let sha1 = Algorithm(name: "sha1", byteCount: 20, isCollisionResistant: false)

        /// MD5 (RFC 1321): 16 bytes. For the checksums mirrors and package repositories still
        /// publish: an integrity check only (``isCollisionResistant`` is `false`).
        public static let md5 = Algorithm(name: "md5", byteCount: 16, isCollisionResistant: false)

        /// The algorithms FetchKit supports.
        public static let all: [Algorithm] = [.sha256, .sha512, .sha1, .md5]

        /// The algorithm named `name`, if FetchKit supports it: case-insensitive, with or
        /// without a hyphen (`sha256`, `SHA-256`, `sha-512`, `SHA1`, `md5`, as aria2 and the
        /// `*sum` tools write them).
        public init?(named name: String) {
            let key = name.lowercased().filter { $0 != "-" && $0 != "_" }
            guard let found = Self.all.first(where: { $0.name == key }) else { return nil }
            self = found
        }

        private init(name: String, byteCount: Int, isCollisionResistant: Bool) {
            self.name = name
            self.byteCount = byteCount
            self.isCollisionResistant = isCollisionResistant
        }

        /// The system's implementation of it (``SystemDigest``).
        var systemFunction: SystemDigest.Function {
            switch name {
            case "sha512": return .sha512
            case "sha1": return .sha1
            case "md5": return .md5
            default: return .sha256
            }
        }

        /// FetchKit's own implementation of it, in Swift.
        func makePortable() -> any PortableDigest {
            switch name {
            case "sha512": return PortableSHA512()
            case "sha1": return PortableSHA1()
            case "md5": return PortableMD5()
            default: return PortableSHA256()
            }
        }

        /// The name, as in `sha256`.
        public var description: String { name }
    }

    /// The algorithm.
    public let algorithm: Algorithm
    /// The digest's bytes (``Algorithm/byteCount`` of them).
    public let bytes: [UInt8]

    /// A digest of `algorithm` given as its bytes; `nil` unless there are
    /// ``Algorithm/byteCount`` of them.
    public init?(_ algorithm: Algorithm, bytes: [UInt8]) {
        guard bytes.count == algorithm.byteCount else { return nil }
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// A digest of `algorithm` written in hexadecimal, as `sha256sum` (`sha512sum`, `sha1sum`, `md5sum`) prints it (either case;
    /// surrounding spaces allowed). `nil` unless it is exactly ``Algorithm/byteCount`` bytes of hex.
    public init?(_ algorithm: Algorithm, hex: String) {
        let digits = Array(hex.trimmingCharacters(in: .whitespaces).utf8)
        guard digits.count == algorithm.byteCount * 2 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(algorithm.byteCount)
        var index = 0
        while index < digits.count {
            guard let high = Self.nibble(digits[index]), let low = Self.nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self.init(algorithm, bytes: bytes)
    }

    /// A digest that FetchKit computed: the length is right by construction.
    init(uncheckedAlgorithm algorithm: Algorithm, bytes: [UInt8]) {
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// The bytes in lowercase hexadecimal, as `sha256sum` prints them.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// `sha256:` and the hex digits.
    public var description: String { "\(algorithm.name):\(hex)" }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

extension FileDigest {
    /// The digest of the regular file at `fileURL`, read to its end: to check a file that is
    /// already there against the digest a download would have to have.
    ///
    /// ```swift
    /// let there = URL(fileURLWithPath: "/tmp/downloads/report.pdf")
    /// if let expected = FileDigest(.sha256, hex: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ///    FileDigest(.sha256, of: there) == expected {
    ///     print("already downloaded")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - algorithm: The algorithm (``Algorithm/sha256``, ``Algorithm/sha512``, ``Algorithm/sha1``, ``Algorithm/md5``).
    ///   - fileURL: A regular file; a symbolic link is not followed.
    /// - Returns: `nil` if the file is not a regular file or cannot be read to its end.
    public init?(_ algorithm: Algorithm, of fileURL: URL) {
        let descriptor = LocalFile.open(fileURL, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        guard let status = LocalFile.status(descriptor: descriptor), status.isRegular else { return nil }
        let hasher = DigestHasher(algorithm)
        guard hasher.update(descriptor: descriptor, length: status.size) == nil else { return nil }
        self = hasher.finish()
    }
}
