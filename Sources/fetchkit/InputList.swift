import FetchKit
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The list `-i FILE` (or `-i -`, standard input) names: one download a line, as wget's and
/// aria2c's `-i` read them.
///
/// ```
/// # a comment, and blank lines, are skipped
/// https://example.com/a.iso
/// https://example.com/b.iso sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
/// https://example.com/c.tar.gz md5:d41d8cd98f00b204e9800998ecf8427e
/// ```
///
/// A line is a URL, then optionally, after spaces or a tab, the digest the file must have:
/// `sha256:`, `sha512:`, `sha1:` or `md5:` (`sha-256:` and the rest too, any case) and its hex
/// digits. A list is hostile input like any other: a line that is not
/// one of these, longer than ``maximumLineBytes``, not UTF-8 or holding a NUL stops the run
/// before anything is downloaded, with one line naming the list and the line number and the
/// URL redacted; so does a list of more than ``maximumEntries`` downloads or ``maximumBytes``
/// bytes (an endless standard input is refused, not held in memory).
enum InputList {
    /// The longest line read: 64 KiB (a signed URL is a few KiB).
    static let maximumLineBytes = 64 << 10
    /// The most downloads one list holds.
    static let maximumEntries = 1_000_000
    /// The largest list read: 256 MiB.
    static let maximumBytes = 256 << 20

    /// One download of the list.
    struct Entry: Equatable {
        let url: URL
        let digest: FileDigest?
    }

    /// Reads the list at `path` (`-` for standard input), of at most `maximumEntries` downloads
    /// and `maximumBytes` bytes (tests give smaller limits).
    static func read(_ path: String, maximumEntries: Int = maximumEntries,
                     maximumBytes: Int = maximumBytes) throws(Options.UsageError) -> [Entry] {
        let shown = path == "-" ? "standard input" : Terminal.sanitized(path)
        let descriptor: Int32
        if path == "-" {
            descriptor = STDIN_FILENO
        } else {
            descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else {
                throw .line("-i: cannot read \(shown): \(String(cString: strerror(errno)))")
            }
        }
        defer { if descriptor != STDIN_FILENO { close(descriptor) } }

        var entries: [Entry] = []
        var line: [UInt8] = []
        var number = 0
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        func finishLine() throws(Options.UsageError) {
            number += 1
            if let entry = try parse(line, number: number, list: shown) {
                guard entries.count < maximumEntries else {
                    throw .line("\(shown):\(number): more than \(maximumEntries) downloads in one list")
                }
                entries.append(entry)
            }
            line.removeAll(keepingCapacity: true)
        }
        while true {
            let count = buffer.withUnsafeMutableBytes { systemRead(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .line("-i: cannot read \(shown): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            total += count
            guard total <= maximumBytes else {
                throw .line("\(shown):\(number + 1): the list is larger than \(Format.size(Int64(maximumBytes)))")
            }
            // A block at a time: each run of bytes up to a newline (or the block's end) is
            // appended whole, checked against the line limit before it is.
            var start = 0
            while start < count {
                let newline = Self.newline(in: buffer, from: start, to: count)
                let end = newline ?? count
                guard line.count + (end - start) <= maximumLineBytes else {
                    throw .line("\(shown):\(number + 1): line longer than \(maximumLineBytes / 1024) KiB")
                }
                line.append(contentsOf: buffer[start..<end])
                guard newline != nil else { break }
                try finishLine()
                start = end + 1
            }
        }
        if !line.isEmpty { try finishLine() }
        return entries
    }

    /// The index of the first `\n` in `buffer[start..<end]`, or `nil`: `memchr`, which is fast
    /// in a debug build too.
    private static func newline(in buffer: [UInt8], from start: Int, to end: Int) -> Int? {
        buffer.withUnsafeBytes { bytes -> Int? in
            guard let base = bytes.baseAddress, start < end,
                  let found = memchr(base + start, Int32(UInt8(ascii: "\n")), end - start) else { return nil }
            return base.distance(to: UnsafeRawPointer(found))
        }
    }

    /// The entry on one line, `nil` for a blank line or a comment.
    static func parse(_ bytes: [UInt8], number: Int, list: String) throws(Options.UsageError) -> Entry? {
        let at = "\(list):\(number)"
        guard !contains(0, in: bytes) else { throw .line("\(at): a NUL byte in the line") }
        guard var text = String(validating: bytes, as: UTF8.self) else { throw .line("\(at): the line is not UTF-8") }
        if number == 1, text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        // Fields are separated by spaces, tabs and CRs, between characters. In a line of ASCII
        // (nearly every line) each byte is one character (a CR before an LF would be one
        // with it, but a line holds no LF), so the bytes are split instead: the same fields,
        // without the cost of finding character boundaries.
        let ascii = isASCII(bytes)
        // A blank line or a comment, seen from its first byte that is not a separator.
        if ascii, firstNonSeparator(in: bytes).map({ $0 == UInt8(ascii: "#") }) ?? true { return nil }
        let fields = ascii
            ? text.utf8.split(whereSeparator: { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }).map { Substring($0) }
            : text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
        guard let first = fields.first, !first.hasPrefix("#") else { return nil }
        guard let url = Options.httpURL(String(first)) else {
            throw .line("\(at): not an http or https URL: '\(Terminal.sanitized(Redaction.redacted(String(first.prefix(2048)))))'")
        }
        return try entry(url: url, digests: fields.dropFirst(), at: at)
    }

    /// The entry of `url` with the digest of `digests` (the fields after the URL): none, or one
    /// `sha256:HEX` (`sha512:`, `sha1:`, `md5:`).
    static func entry(url: URL, digests: some Collection<Substring>, at: String) throws(Options.UsageError) -> Entry {
        var digest: FileDigest?
        for field in digests {
            guard let colon = field.firstIndex(of: ":"), let algorithm = FileDigest.Algorithm(named: String(field[..<colon])),
                  digest == nil else {
                throw .line("\(at): after the URL, only 'sha256:' and 64 hex digits (or sha512:, sha1:, md5: and theirs), "
                    + "not '\(Terminal.sanitized(String(field.prefix(80))))'")
            }
            let hex = field[field.index(after: colon)...]
            guard let parsed = FileDigest(algorithm, hex: String(hex)) else {
                throw .line("\(at): \(algorithm.name): needs \(algorithm.byteCount * 2) hexadecimal digits, "
                    + "not '\(Terminal.sanitized(String(hex.prefix(80))))'")
            }
            digest = parsed
        }
        return Entry(url: url, digest: digest)
    }
}

extension InputList {
    /// Whether `bytes` holds `byte`: `memchr`, which is fast in a debug build too.
    static func contains(_ byte: UInt8, in bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return false }
            return memchr(base, Int32(byte), raw.count) != nil
        }
    }

    /// The first byte of `bytes` that is not a space, a tab or a CR; `nil` if there is none.
    static func firstNonSeparator(in bytes: [UInt8]) -> UInt8? {
        bytes.withUnsafeBufferPointer { buffer in
            buffer.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }
        }
    }

    /// Whether every byte of `bytes` is ASCII, read eight at a time.
    static func isASCII(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset + 8 <= raw.count {
                if raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
                offset += 8
            }
            while offset < raw.count {
                if raw[offset] >= 0x80 { return false }
                offset += 1
            }
            return true
        }
    }
}

/// read(2), by a name that no `read` in scope hides.
private func systemRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}
