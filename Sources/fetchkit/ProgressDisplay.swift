import FetchKit
import Foundation

/// Draws download progress: on a terminal, a live block redrawn in place under the lines of
/// finished files; elsewhere, one plain line per event.
struct ProgressDisplay {
    let interactive: Bool
    private var liveLines = 0

    init(interactive: Bool) {
        self.interactive = interactive
    }

    func header(_ text: String) {
        Terminal.write(text + "\n")
    }

    /// A file finished: a permanent line.
    mutating func finished(_ item: Downloader.Item) {
        clearLive()
        Terminal.write(Self.finalLine(item) + "\n")
    }

    /// A line of its own, above the live block.
    mutating func note(_ text: String) {
        clearLive()
        Terminal.write(text + "\n")
    }

    mutating func retrying(_ item: Downloader.Item, attempt: Int, of attempts: Int, reason: String) {
        clearLive()
        Terminal.write("  ↻ \(item.shownName): \(Terminal.sanitized(reason)); retrying (attempt \(attempt) of \(attempts))\n")
    }

    /// Something the user should know about a file, such as a partial download that was
    /// ignored: a permanent line.
    mutating func note(_ item: Downloader.Item, _ text: String) {
        clearLive()
        Terminal.write("  ! \(item.shownName): \(Terminal.sanitized(text))\n")
    }

    /// Redraws the live block: the active files and the total.
    mutating func render(_ items: [Downloader.Item], startedAt: Date, final: Bool = false) {
        guard interactive else { return }
        clearLive()
        guard !final else { return }
        let width = Terminal.width
        var lines: [String] = []
        let active = items.filter { if case .active = $0.state { return true }; return false }
        for item in active.prefix(8) {
            lines.append(Format.fit(Self.activeLine(item), width - 1))
        }
        if active.count > 8 { lines.append("    … and \(active.count - 8) more downloading") }
        lines.append(Format.fit(Self.totalLine(items, startedAt: startedAt), width - 1))
        Terminal.write(lines.joined(separator: "\n") + "\n")
        liveLines = lines.count
    }

    func summary(_ items: [Downloader.Item], directory: URL, elapsed: TimeInterval, interruptedBy signal: String? = nil) {
        let done = items.filter { if case .done = $0.state { return true }; return false }
        let failed = items.compactMap { item -> (Downloader.Item, FetchError)? in
            if case .failed(let error) = item.state { return (item, error) }
            return nil
        }
        let bytes = done.reduce(Int64(0)) { $0 + $1.received }
        var text = "\n" + (signal.map { "Interrupted by \($0). " } ?? "")
        text += "Downloaded \(done.count) of \(items.count) file\(items.count == 1 ? "" : "s")"
        text += " (\(Format.bytes(bytes))) to \(Terminal.sanitized(directory.path)) in \(Format.duration(elapsed))"
        let thisRun = items.reduce(Int64(0)) { $0 + $1.meter.bytesThisRun }
        text += " (\(Format.rate(Double(thisRun) / max(elapsed, 0.001))))"
        let skipped = items.filter { if case .skipped = $0.state { return true }; return false }.count
        if skipped > 0 { text += "; \(skipped) already there, kept" }
        text += Self.stoppedCounts(items)
        if failed.isEmpty {
            text += ".\n"
        } else {
            text += "; \(failed.count) failed:\n"
            for (item, error) in failed {
                let url = Terminal.sanitized(Redaction.redacted(item.url))
                text += "  \(item.shownName): \(Terminal.sanitized(item.failureReason(error))) (\(url))\n"
            }
        }
        if items.contains(where: { $0.kept ?? 0 > 0 }) { text += "Run the same command again to resume.\n" }
        Terminal.write(text)
    }

    /// After a signal: "; 2 partial files kept to resume, 1 not started, 1 stopped with nothing kept".
    static func stoppedCounts(_ items: [Downloader.Item]) -> String {
        var kept = 0, notStarted = 0, lost = 0
        for item in items {
            guard case .stopped = item.state else { continue }
            if item.kept ?? 0 > 0 { kept += 1 } else if !item.started { notStarted += 1 } else { lost += 1 }
        }
        var parts: [String] = []
        if kept > 0 { parts.append("\(kept) partial file\(kept == 1 ? "" : "s") kept to resume") }
        if notStarted > 0 { parts.append("\(notStarted) not started") }
        if lost > 0 { parts.append("\(lost) stopped with nothing kept") }
        return parts.isEmpty ? "" : "; " + parts.joined(separator: ", ")
    }

    // MARK: Lines

    private mutating func clearLive() {
        guard interactive, liveLines > 0 else { return }
        // Up to the first live line, then clear to the end of the screen.
        Terminal.write("\u{1B}[\(liveLines)F\u{1B}[J")
        liveLines = 0
    }

    static func finalLine(_ item: Downloader.Item) -> String {
        let elapsed = item.finishedAt.flatMap { end in item.startedAt.map { end.timeIntervalSince($0) } } ?? 0
        switch item.state {
        case .done:
            // The rate counts this run's bytes only: a resumed file's earlier part is not.
            let rate = TransferMeter.rate(bytes: item.meter.bytesThisRun, seconds: elapsed)
            return "  ✓ \(item.shownName)  \(Format.bytes(item.received)) in \(Format.duration(elapsed))"
                + (rate.map { " (\(Format.rate($0)))" } ?? "")
                + (item.meter.resumedFrom > 0 ? ", resumed at \(Format.bytes(item.meter.resumedFrom))" : "")
        case .failed(let error):
            return "  ✗ \(item.shownName)  \(Terminal.sanitized(item.failureReason(error)))"
        case .skipped:
            switch item.verdict {
            case .unchanged?:
                return "  = \(item.shownName)  already there, unchanged on the server"
            case .differs?:
                return "  = \(item.shownName)  already there, kept; the server's copy differs (--force replaces it)"
            case .unknown?, nil:
                return "  = \(item.shownName)  already there, kept (--force downloads it again)"
            }
        case .stopped:
            guard let kept = item.kept, kept > 0 else { return "  ■ \(item.shownName)  stopped" + (item.started ? "" : " before it started") }
            return "  ■ \(item.shownName)  stopped at \(Format.bytes(kept))" + (item.expected.map { " of \(Format.bytes($0))" } ?? "") + ", kept to resume"
        default:
            return "  · \(item.shownName)"
        }
    }

    static func activeLine(_ item: Downloader.Item) -> String {
        let elapsed = item.startedAt.map { Date().timeIntervalSince($0) } ?? 0
        let rate = TransferMeter.rate(bytes: item.meter.bytesThisRun, seconds: elapsed) ?? 0
        var line = "  ↓ \(item.shownName)  "
        if let expected = item.expected, expected > 0 {
            let percent = Int(Double(item.received) / Double(expected) * 100)
            line += "\(percent)%  \(Format.bytes(item.received)) of \(Format.bytes(expected))"
            if rate > 0 { line += "  \(Format.rate(rate))  ETA \(Format.duration(Double(expected - item.received) / rate))" }
        } else {
            line += "\(Format.bytes(item.received))  \(Format.rate(rate))"
        }
        return line
    }

    static func totalLine(_ items: [Downloader.Item], startedAt: Date) -> String {
        var done = 0, failed = 0, waiting = 0
        var received: Int64 = 0, expected: Int64 = 0, thisRun: Int64 = 0
        var unknown = false
        for item in items {
            switch item.state {
            case .done: done += 1
            case .failed: failed += 1
            case .waiting, .retrying: waiting += 1
            case .active, .stopped, .skipped: break
            }
            received += item.received
            thisRun += item.meter.bytesThisRun
            if let length = item.expected { expected += length } else if case .failed = item.state {} else { unknown = true }
        }
        let elapsed = Date().timeIntervalSince(startedAt)
        let rate = Double(thisRun) / max(elapsed, 0.001)
        var line = "  [\(done)/\(items.count) done"
        if failed > 0 { line += ", \(failed) failed" }
        if waiting > 0 { line += ", \(waiting) waiting" }
        line += "]  \(Format.bytes(received))"
        if !unknown, expected > 0 {
            line += " of \(Format.bytes(expected))  \(Format.rate(rate))  ETA \(Format.duration(Double(expected - received) / max(rate, 1)))"
        } else {
            line += "  \(Format.rate(rate))"
        }
        return line
    }
}

extension Downloader.Item {
    /// The file's name, safe to print: it comes from the URL (``Terminal/sanitized(_:)``).
    var shownName: String { Terminal.sanitized(name) }
}
