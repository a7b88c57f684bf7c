import Foundation

/// File names made safe from what a URL or a server says.
///
/// A name taken from a URL's path may hold anything a server chose: `..`, a slash encoded as
/// `%2F`, control characters that rewrite a terminal, bidirectional overrides that make
/// `gpj.exe` read as `exe.jpg`, a leading dot that hides the file, or more bytes than a file
/// system allows. `SafeFileName` turns such a name into one that stays inside the directory it
/// is put in, shows as what it is, and always fits:
///
/// - path separators (`/`, `\`), NUL, the C0 and C1 control characters, DEL, and the invisible
///   formatting characters that reorder or hide text (bidirectional marks, embeddings,
///   overrides and isolates, line and paragraph separators, zero-width space, byte-order mark)
///   become `_`;
/// - spaces at either end are trimmed; an empty name, `.` or `..` becomes ``fallback``;
/// - a leading `.` (a hidden file) or `-` (read as an option by command-line tools) becomes `_`;
/// - a name longer than ``maximumByteCount`` (255) UTF-8 bytes, the longest one name that
///   Linux, macOS and Windows file systems allow, is cut on a character boundary, keeping its
///   extension, and gets a short hash of its source so that two long names stay distinct:
///   `averyveryvery…long-1a2b3c4d.iso`. A name that fits is kept as it is.
///
/// The result is deterministic: the same input always gives the same name.
///
/// ```swift
/// if let hostile = URL(string: "https://example.com/a/..%2F..%2Fetc%2Fpasswd") {
///     let name = SafeFileName.name(for: hostile)             // "_.._.._etc_passwd"
///     queue.enqueue(DownloadOperation(url: hostile, destination: folder.appendingPathComponent(name)))
/// }
/// ```
public enum SafeFileName {
    /// The longest name, in UTF-8 bytes, that `SafeFileName` returns: 255, what Linux, macOS
    /// and Windows file systems allow for one name.
    ///
    /// (A ``DownloadOperation`` to a name longer than 232 bytes shortens the names of its own
    /// partial file and resume record, `.<name>.fetchkit-partial.json`, so that they fit too.)
    public static let maximumByteCount = 255

    /// The longest `<name>` in a download's `.<name>.fetchkit-partial.json`: 232 bytes.
    static let maximumPartialStemByteCount = maximumByteCount - ".".utf8.count - ".fetchkit-partial.json".utf8.count

    /// The name given when there is none (a URL with no path or only `/`, or a name that is
    /// empty, `.` or `..`): `index.html`. (``name(for:)`` names `https://host/dir/` `dir`, its
    /// last non-empty segment; to name it as wget does, `index.html`, ask for the name of
    /// `url.appendingPathComponent(SafeFileName.fallback)`, as the `fetchkit` command does.)
    public static let fallback = "index.html"

    /// A safe file name for what `url` points to: the last non-empty segment of its path,
    /// percent-decoded once, made safe.
    ///
    /// - Parameter url: The URL the file comes from.
    /// - Returns: A name of at most ``maximumByteCount`` bytes, never empty, hidden, `.` or
    ///   `..`, and free of path separators and control characters.
    public static func name(for url: URL) -> String {
        sanitize(lastSegment(of: url), source: url.absoluteString)
    }

    /// `name` made safe to create in a directory (see ``SafeFileName`` for the rules).
    ///
    /// - Parameters:
    ///   - name: A name as received (already percent-decoded), from a URL or a header.
    ///   - source: What the name came from, such as the URL's absolute string. Its hash is
    ///     appended when the name must be shortened, so that names from different sources stay
    ///     distinct. Defaults to `name` itself.
    /// - Returns: A name of at most ``maximumByteCount`` bytes, never empty, hidden, `.` or
    ///   `..`, and free of path separators and control characters.
    public static func sanitize(_ name: String, source: String? = nil) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in name.unicodeScalars {
            scalars.append(isUnsafe(scalar) ? "_" : scalar)
        }
        var safe = String(scalars).trimmingCharacters(in: .whitespaces)
        if safe.isEmpty || safe == "." || safe == ".." { return fallback }
        // Bytes, not characters: "." followed by a combining mark is a different character,
        // but the name would still start with a dot.
        if let first = safe.utf8.first, first == UInt8(ascii: ".") || first == UInt8(ascii: "-") {
            safe = "_" + String(safe.unicodeScalars.dropFirst())
        }
        return fitted(safe, source: source ?? name)
    }

    /// Safe names for `urls`, in order, distinct from one another.
    ///
    /// Each is ``name(for:)``; when one equals an earlier name (ignoring case, for file systems
    /// that do), it gets `-1`, `-2`… before its extension, shortened again if it must be.
    ///
    /// - Parameter urls: The URLs the files come from.
    /// - Returns: One name per URL, each distinct from the others.
    public static func uniqueNames(for urls: [URL]) -> [String] {
        var used: Set<String> = []
        return urls.map { url in
            let base = name(for: url)
            var name = base
            var counter = 1
            while used.contains(name.lowercased()) {
                name = appending("-\(counter)", to: base)
                counter += 1
            }
            used.insert(name.lowercased())
            return name
        }
    }

    // MARK: Internals

    /// Whether `scalar` must not appear in a file name.
    static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F, 0x80...0x9F:            // NUL, C0, DEL, C1
            return true
        case 0x2F, 0x5C:                                // "/" and "\"
            return true
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069:
            return true                                 // bidirectional marks, embeddings, overrides, isolates
        case 0x200B, 0x2028, 0x2029, 0xFEFF:            // zero-width space, line/paragraph separators, BOM
            return true
        default:
            return false
        }
    }

    /// The last non-empty segment of `url`'s path, percent-decoded once (invalid UTF-8 becomes
    /// U+FFFD), or an empty string.
    static func lastSegment(of url: URL) -> String {
        let path = URLComponents(url: url, resolvingAgainstBaseURL: true)?.percentEncodedPath ?? url.path
        guard let segment = path.split(separator: "/").last else { return "" }
        return percentDecoded(segment)
    }

    /// `text` with each `%XX` replaced by its byte; a `%` without two hex digits stays.
    static func percentDecoded(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = Array(text.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%"), iterator.count >= 2,
               let high = hexValue(iterator[iterator.startIndex]),
               let low = hexValue(iterator[iterator.startIndex + 1]) {
                bytes.append(high << 4 | low)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// `name` if it fits in `limit` bytes; otherwise its start, a hash of `source`, and its
    /// extension: `start-1a2b3c4d.ext`.
    static func fitted(_ name: String, source: String, limit: Int = maximumByteCount) -> String {
        guard name.utf8.count > limit else { return name }
        let (stem, ext) = split(name)
        let tag = hash(source)
        let suffix = ext.map { ".\($0)" } ?? ""
        let start = prefix(of: stem, bytes: limit - tag.utf8.count - 1 - suffix.utf8.count)
        // A name never starts with "-": with nothing of the stem left, the hash leads.
        return (start.isEmpty ? tag : "\(start)-\(tag)") + suffix
    }

    /// `suffix` inserted before `name`'s extension, the stem cut so that it fits.
    static func appending(_ suffix: String, to name: String) -> String {
        let (stem, ext) = split(name)
        let tail = suffix + (ext.map { ".\($0)" } ?? "")
        let start = prefix(of: stem, bytes: maximumByteCount - tail.utf8.count)
        return (start.isEmpty ? "_" : start) + tail
    }

    /// The stem and the extension (up to 16 bytes, after the last dot that is not the first
    /// character), if there is one.
    private static func split(_ name: String) -> (stem: Substring, ext: Substring?) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name[...], nil) }
        let ext = name[name.index(after: dot)...]
        guard !ext.isEmpty, ext.utf8.count <= 16 else { return (name[...], nil) }
        return (name[..<dot], ext)
    }

    /// The longest run of whole characters from the start of `text` within `bytes` UTF-8 bytes.
    private static func prefix(of text: Substring, bytes: Int) -> String {
        var count = 0
        var end = text.startIndex
        for character in text {
            let size = character.utf8.count
            guard count + size <= bytes else { break }
            count += size
            end = text.index(after: end)
        }
        return String(text[..<end])
    }

    /// Eight hex digits of the 64-bit FNV-1a hash of `text`'s UTF-8: stable across runs and
    /// platforms (unlike `Hasher`, which is seeded per process).
    static func hash(_ text: String) -> String {
        let value = FNV1a.hash(text)
        return FNV1a.hex(UInt64(UInt32(truncatingIfNeeded: value ^ (value >> 32))), digits: 8)
    }
}
