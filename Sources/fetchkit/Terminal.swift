import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the tool writes: a terminal gets a live, redrawn display; a pipe or file gets lines.
enum Terminal {
    static var isInteractive: Bool {
        isatty(STDOUT_FILENO) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    static var width: Int {
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 20 { return Int(size.ws_col) }
        return 80
    }

    static func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    static func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
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

    static func fit(_ text: String, _ width: Int) -> String {
        text.count <= width ? text : String(text.prefix(max(1, width - 1))) + "…"
    }
}
