import FetchKit
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `--content-disposition`: the file name a response's `Content-Disposition` header gives
/// (RFC 6266), made safe exactly as a name from a URL is (``SafeFileName/sanitize(_:source:)``),
/// and the downloaded file renamed to it inside the output directory.
///
/// The download itself goes to the name from its URL, as without the option, so that an
/// interrupted run resumes it the same way; only the finished file is renamed. The name is a
/// server's word, so it is hostile input: `../x`, `/etc/passwd`, control characters, an empty
/// or an overlong name all become a plain name in the directory, never a path out of it.
enum ContentDisposition {
    /// The file name in `header`: the `filename*` parameter (RFC 8187, `UTF-8''…` or
    /// `ISO-8859-1''…`, percent-encoded) if it has a usable one, otherwise `filename` (a token or
    /// a quoted string); `nil` if there is neither. Not yet safe: see ``safeName(in:for:)``.
    static func fileName(in header: String) -> String? {
        var plain: String?
        var extended: String?
        for (name, value) in parameters(of: header) {
            switch name.lowercased() {
            case "filename*": if extended == nil { extended = decodeExtended(value) }
            case "filename": if plain == nil { plain = value }
            default: break
            }
        }
        return extended ?? plain
    }

    /// The safe name `header` gives a download of `url`, or `nil` if it gives none.
    static func safeName(in header: String?, for url: URL) -> String? {
        guard let header, header.utf8.count <= 16 << 10, let name = fileName(in: header) else { return nil }
        return SafeFileName.sanitize(name, source: url.absoluteString)
    }

    /// The `name=value` parameters after the disposition type, values unquoted.
    static func parameters(of header: String) -> [(String, String)] {
        var result: [(String, String)] = []
        var scalars = Substring(header).unicodeScalars[...]
        // The disposition type, up to the first `;`.
        guard let firstSemicolon = scalars.firstIndex(of: ";") else { return [] }
        scalars = scalars[scalars.index(after: firstSemicolon)...]
        while !scalars.isEmpty {
            scalars = scalars.drop { $0 == " " || $0 == "\t" }
            let nameEnd = scalars.firstIndex { $0 == "=" || $0 == ";" } ?? scalars.endIndex
            let name = String(String.UnicodeScalarView(scalars[..<nameEnd])).trimmingCharacters(in: .whitespaces)
            scalars = scalars[nameEnd...]
            guard scalars.first == "=" else {
                scalars = scalars.dropFirst()   // a `;` or the end: a parameter without a value
                continue
            }
            scalars = scalars.dropFirst().drop { $0 == " " || $0 == "\t" }
            var value = String.UnicodeScalarView()
            if scalars.first == "\"" {
                scalars = scalars.dropFirst()
                while let scalar = scalars.first {
                    scalars = scalars.dropFirst()
                    if scalar == "\"" { break }
                    if scalar == "\\", let escaped = scalars.first {
                        value.append(escaped)
                        scalars = scalars.dropFirst()
                    } else {
                        value.append(scalar)
                    }
                }
                scalars = scalars.drop { $0 != ";" }
            } else {
                let end = scalars.firstIndex(of: ";") ?? scalars.endIndex
                value.append(contentsOf: scalars[..<end])
                scalars = scalars[end...]
                let trimmed = String(value).trimmingCharacters(in: .whitespaces)
                value = trimmed.unicodeScalars
            }
            scalars = scalars.dropFirst()   // the `;`
            if !name.isEmpty { result.append((name, String(value))) }
        }
        return result
    }

    /// An RFC 8187 value, `charset'language'percent-encoded`, decoded; `nil` for another
    /// charset or bytes that are not text in it.
    static func decodeExtended(_ value: String) -> String? {
        let parts = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var bytes: [UInt8] = []
        var utf8 = parts[2].utf8[...]
        while let byte = utf8.first {
            utf8 = utf8.dropFirst()
            if byte == UInt8(ascii: "%") {
                guard utf8.count >= 2, let high = hexValue(utf8[utf8.startIndex]),
                      let low = hexValue(utf8[utf8.index(after: utf8.startIndex)]) else { return nil }
                bytes.append(high << 4 | low)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        switch parts[0].lowercased() {
        case "utf-8": return String(validating: bytes, as: UTF8.self)
        case "iso-8859-1": return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
        default: return nil
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Renames the downloaded `file` to `name` in its directory; returns where it is now.
    ///
    /// With `replacing`, a file already called `name` is replaced (`rename(2)`, atomic);
    /// otherwise the first of `name`, `stem-1.ext`, `stem-2.ext`… that is free and not in
    /// `reserved` (the names other downloads of the run will take) is used, taken with
    /// `link(2)`, which never replaces anything. Both stay in the directory: `name` has no
    /// separator. Throws, leaving the file where it was, when no name could be taken.
    static func place(_ file: URL, as name: String, replacing: Bool, reserved: Set<String>) throws -> URL {
        let directory = file.deletingLastPathComponent()
        if name == file.lastPathComponent { return file }
        precondition(!name.contains("/") && name != "." && name != "..", "a sanitized name")
        if replacing && !reserved.contains(name) {
            let target = directory.appendingPathComponent(name, isDirectory: false)
            guard rename(file.path, target.path) == 0 else { throw error(errno, target) }
            return target
        }
        for attempt in 0..<1000 {
            let candidate = attempt == 0 ? name : numbered(name, attempt)
            guard !reserved.contains(candidate), candidate != file.lastPathComponent else { continue }
            let target = directory.appendingPathComponent(candidate, isDirectory: false)
            if link(file.path, target.path) == 0 {
                unlink(file.path)
                return target
            }
            guard errno == EEXIST else { throw error(errno, target) }
        }
        throw error(EEXIST, directory.appendingPathComponent(name, isDirectory: false))
    }

    /// `stem-N.ext`, cut to fit 255 bytes.
    static func numbered(_ name: String, _ number: Int) -> String {
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let stem = dot.map { String(name[..<$0]) } ?? name
        let ext = dot.map { String(name[$0...]) } ?? ""
        var cut = stem
        let suffix = "-\(number)\(ext)"
        while cut.utf8.count + suffix.utf8.count > SafeFileName.maximumByteCount, !cut.isEmpty { cut.removeLast() }
        return cut + suffix
    }

    private static func error(_ code: Int32, _ target: URL) -> NSError {
        NSError(domain: NSPOSIXErrorDomain, code: Int(code), userInfo: [
            NSLocalizedDescriptionKey: "cannot name it \(target.lastPathComponent): \(String(cString: strerror(code)))",
        ])
    }
}
