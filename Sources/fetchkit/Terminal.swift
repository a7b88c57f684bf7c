import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the tool writes: a terminal gets a live, redrawn display; a pipe or file gets lines.
enum Terminal {
    static var isInteractive: Bool {
        isInteractive(STDOUT_FILENO)
    }

    /// Whether `descriptor` is a terminal that draws escape sequences.
    static func isInteractive(_ descriptor: Int32) -> Bool {
        isatty(descriptor) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    static var width: Int {
        width(of: STDOUT_FILENO)
    }

    /// The width in columns of the terminal at `descriptor`; 80 if it has none.
    static func width(of descriptor: Int32) -> Int {
        var size = winsize()
        if ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 20 { return Int(size.ws_col) }
        return 80
    }

    /// Standard output: progress, finished files, the summary.
    static let output = OutputStream(descriptor: STDOUT_FILENO)
    /// Standard error: usage and fatal errors.
    static let errors = OutputStream(descriptor: STDERR_FILENO)

    static func write(_ text: String) {
        output.write(text)
    }

    static func error(_ text: String) {
        errors.write(text + "\n")
    }

    /// `text` made safe to print: every character that could drive the terminal rather than
    /// show itself is written as a visible escape.
    ///
    /// Everything the tool prints that came from a URL, a header or a body — file names, URLs
    /// (after ``Redaction``), reasons, error descriptions, feed titles — goes through this, so
    /// that a server cannot colour the output, move the cursor, set the window title (ESC
    /// starts every CSI and OSC sequence), forge a line (`\n`, `\r`) or reverse what follows
    /// (bidi overrides). ESC is shown as `\e`, newline, carriage return and tab as `\n`,
    /// `\r`, `\t`, other C0 controls and DEL as `\xNN`, C1 controls, bidi controls and the
    /// Unicode line and paragraph separators as `\u{NNNN}`. Other text, including a
    /// backslash, is left as it is.
    static func sanitized(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x1B: result += "\\e"
            case 0x0A: result += "\\n"
            case 0x0D: result += "\\r"
            case 0x09: result += "\\t"
            case 0x00...0x1F, 0x7F: result += String(format: "\\x%02X", scalar.value)
            case _ where needsEscape(scalar): result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true            // C0, DEL, C1 (CSI is also 0x9B)
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true   // bidi controls
        case 0x2028, 0x2029: true                       // line and paragraph separators
        default: false
        }
    }
}

/// A standard stream the tool prints to, written with `write(2)`.
///
/// The tool ignores SIGPIPE (see `main.swift`), so a reader that goes away — `fetchkit URL… |
/// head -1`, a closed terminal — makes a write fail with `EPIPE` (or `EIO`) rather than kill
/// the process and abandon its downloads. The first such failure closes the stream for good:
/// nothing more is written to it, the downloads go on, and the exit status still says how
/// they went (curl and wget do the same with their progress output). Foundation's
/// `FileHandle.write(_:)` would trap on that error instead.
final class OutputStream: @unchecked Sendable {
    let descriptor: Int32
    private let lock = NSLock()
    /// Guarded by `lock`.
    private var closed = false

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Whether a write failed: the reader went away.
    var isClosed: Bool {
        lock.withLock { closed }
    }

    /// Writes all of `text`, unless the stream is closed or closes now. Writes are whole
    /// under the lock: lines from two threads never interleave.
    func write(_ text: String) {
        lock.withLock {
            guard !closed else { return }
            var bytes = Array(text.utf8)[...]
            while !bytes.isEmpty {
                let count = bytes.withUnsafeBytes { systemWrite(descriptor, $0.baseAddress, $0.count) }
                if count > 0 {
                    bytes = bytes.dropFirst(count)
                } else if count < 0 && errno == EINTR {
                    continue
                } else {
                    // EPIPE, EIO, EBADF, a full disk behind a redirect…: stop printing, not
                    // downloading.
                    closed = true
                    return
                }
            }
        }
    }
}

/// write(2), by a name that the stream's own `write` does not hide.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer?, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}

/// Human-readable sizes, rates and durations.
enum Format {
    static func bytes(_ count: Int64) -> String {
        let value = Double(count)
        switch count {
        case ..<1024: return "\(count) B"
        case ..<(1 << 20): return String(format: "%.1f KiB", value / 1024)
        case ..<(1 << 30): return String(format: "%.1f MiB", value / Double(1 << 20))
        default: return String(format: "%.2f GiB", value / Double(1 << 30))
        }
    }

    /// A size as a user writes it, such as a limit: in whole units when it is a whole number
    /// of them ("1 MiB", "16 GiB", "1500 B"), otherwise as ``bytes(_:)`` does.
    static func size(_ count: Int64) -> String {
        for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] where count >= Int64(1) << shift {
            if count & ((Int64(1) << shift) - 1) == 0 { return "\(count >> shift) \(unit)" }
        }
        return count < 1 << 20 && count % 1024 != 0 ? "\(count) B" : bytes(count)
    }

    static func rate(_ bytesPerSecond: Double) -> String {
        bytesPerSecond.isFinite && bytesPerSecond > 0 ? bytes(Int64(bytesPerSecond)) + "/s" : "–"
    }

    static func duration(_ seconds: TimeInterval) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "–" }
        if seconds < 10 { return String(format: "%.1f s", seconds) }
        let total = Int(seconds.rounded())
        return total >= 3600 ? String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
                             : String(format: "%d:%02d", total / 60, total % 60)
    }

    /// `text` cut to at most `width` terminal columns (see ``Terminal/columns(of:)``), with
    /// "…" where it was cut: a live line that fits never wraps, so redrawing it in place
    /// leaves nothing behind.
    static func fit(_ text: String, _ width: Int) -> String {
        guard Terminal.columns(of: text) > width else { return text }
        var result = ""
        var used = 0
        for character in text {
            let columns = Terminal.columns(of: character)
            guard used + columns <= max(0, width - 1) else { break }
            result.append(character)
            used += columns
        }
        return result + "…"
    }
}

extension Terminal {
    /// How many terminal columns `text` takes, as terminals draw it (the rules of `wcwidth`):
    /// East Asian wide and fullwidth characters and emoji take two, combining marks and other
    /// zero-width characters none, everything else one.
    static func columns(of text: String) -> Int {
        text.reduce(0) { $0 + columns(of: $1) }
    }

    /// The columns one character (a grapheme cluster) takes: its first scalar decides, and
    /// the marks and joiners that follow it in the cluster add nothing — except that an emoji
    /// variation selector (U+FE0F) makes it two.
    static func columns(of character: Character) -> Int {
        let scalars = character.unicodeScalars
        guard let first = scalars.first else { return 0 }
        if isWide(first) || first.properties.isEmojiPresentation { return 2 }
        if scalars.contains("\u{FE0F}"), first.properties.isEmoji { return 2 }
        return isZeroWidth(first) ? 0 : 1
    }

    private static func isZeroWidth(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return true
        default: return scalar.value == 0x200B || (0x1160...0x11FF).contains(scalar.value)   // ZWSP, Hangul medial jamo
        }
    }

    /// East Asian Wide (W) and Fullwidth (F) ranges of Unicode's EastAsianWidth.txt, which
    /// Swift does not expose.
    private static func isWide(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x1100...0x115F, 0x231A...0x231B, 0x2329...0x232A, 0x2E80...0x303E, 0x3041...0x33FF,
             0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF, 0xA960...0xA97F, 0xAC00...0xD7A3,
             0xF900...0xFAFF, 0xFE10...0xFE19, 0xFE30...0xFE6F, 0xFF00...0xFF60, 0xFFE0...0xFFE6,
             0x16FE0...0x16FE4, 0x17000...0x18CFF, 0x1B000...0x1B16F, 0x1F200...0x1F2FF,
             0x20000...0x2FFFD, 0x30000...0x3FFFD:
            return true
        default:
            return false
        }
    }
}
