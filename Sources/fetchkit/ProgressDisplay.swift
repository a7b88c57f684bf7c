import FetchKit
import Foundation

/// Draws download progress: on a terminal, a live block redrawn in place under the lines of
/// finished files; elsewhere, one plain line per event, and every few seconds one per active
/// file. Quiet (`-q`), it prints only a line per failed file, on standard error.
struct ProgressDisplay {
    /// Where it writes: standard output, or standard error when `--json` has standard output.
    let out: OutputStream
    let interactive: Bool
    let verbosity: Options.Verbosity
    private var liveLines = 0

    init(out: OutputStream = Terminal.output, interactive: Bool, verbosity: Options.Verbosity = .normal) {
        self.out = out
        self.interactive = interactive && verbosity != .quiet
        self.verbosity = verbosity
    }

    private var quiet: Bool { verbosity == .quiet }

    private func write(_ text: String) {
        if !quiet { out.write(text) }
    }

    func header(_ text: String) {
        write(text + "\n")
    }

    /// A file finished: a permanent line (quiet: a failure only, with its URL, on standard error).
    mutating func finished(_ item: Downloader.Item) {
        if quiet {
            if case .failed(let error) = item.state {
                Terminal.errors.write("fetchkit: \(item.shownName): \(Terminal.sanitized(item.failureReason(error))) "
                    + "(\(Terminal.sanitized(Redaction.redacted(item.url))))\n")
            }
            return
        }
        clearLive()
        write(Self.finalLine(item) + "\n")
    }

    /// A line of its own, above the live block.
    mutating func note(_ text: String) {
        clearLive()
        write(text + "\n")
    }

    mutating func retrying(_ item: Downloader.Item, attempt: Int, of attempts: Int, reason: String) {
        clearLive()
        write("  ↻ \(item.shownName): \(Terminal.sanitized(reason)); retrying (attempt \(attempt) of \(attempts))\n")
    }

    /// Something the user should know about a file, such as a partial download that was
    /// ignored: a permanent line.
    mutating func note(_ item: Downloader.Item, _ text: String) {
        clearLive()
        write("  ! \(item.shownName): \(Terminal.sanitized(text))\n")
    }

    /// `-v`: what was sent for a file and what came back — the request's headers, the values
    /// of credentials and cookies redacted, each redirect followed (its status, then the
    /// request that followed it, to the `Location` resolved, redacted), and the last response's
    /// status.
    mutating func exchange(_ item: Downloader.Item, request: URLRequest?, hops: [RedirectRecorder.Hop] = [],
                           response: HTTPURLResponse?) {
        clearLive()
        var text = ""
        if let request {
            text += "  > \(item.shownName): \(request.httpMethod ?? "GET") \(Terminal.sanitized(Redaction.redacted(request.url ?? item.url)))\n"
            for (name, value) in (request.allHTTPHeaderFields ?? [:]).sorted(by: { $0.key.lowercased() < $1.key.lowercased() }) {
                text += "  >   \(Terminal.sanitized(name)): \(Terminal.sanitized(Redaction.redacted(headerValue: value, forName: name)))\n"
            }
        }
        for hop in hops {
            let next = hop.url.map { Terminal.sanitized(Redaction.redacted($0)) } ?? "?"
            text += "  < \(item.shownName): HTTP \(hop.status), Location: \(next)\n"
            text += "  > \(item.shownName): \(Terminal.sanitized(hop.method)) \(next)\n"
        }
        if let response {
            text += "  < \(item.shownName): HTTP \(response.statusCode)"
            if let length = response.value(forHTTPHeaderField: "Content-Length") { text += ", Content-Length \(Terminal.sanitized(String(length.prefix(40))))" }
            text += "\n"
        }
        write(text)
    }

    /// On a terminal, `line` alone in the live block, in place of what was there (a status while
    /// no file downloads yet); ``clearStatus()`` removes it.
    mutating func status(_ line: String) {
        guard interactive else { return }
        clearLive()
        write(Format.fit(line, Terminal.width(of: out.descriptor) - 1) + "\n")
        liveLines = 1
    }

    /// Removes the live block (a ``status(_:)`` line) from a terminal.
    mutating func clearStatus() {
        clearLive()
    }

    /// Where the output is not a terminal (a CI log): a plain line per active file — bytes,
    /// total, rate — with no escape sequence.
    func plainProgress(_ items: [Downloader.Item]) {
        let active = items.filter { if case .active = $0.state { return true }; return false }
        guard !active.isEmpty else { return }
        write(active.map { Self.activeLine($0) + "\n" }.joined())
    }

    /// Redraws the live block: the active files and the total.
    mutating func render(_ items: [Downloader.Item], startedAt: Date, final: Bool = false) {
        guard interactive else { return }
        clearLive()
        guard !final else { return }
        let width = Terminal.width(of: out.descriptor)
        var lines: [String] = []
        let active = items.filter { if case .active = $0.state { return true }; return false }
        for item in active.prefix(8) {
            lines.append(Format.fit(Self.activeLine(item), width - 1))
        }
        if active.count > 8 { lines.append("    … and \(active.count - 8) more downloading") }
        lines.append(Format.fit(Self.totalLine(items, startedAt: startedAt), width - 1))
        write(lines.joined(separator: "\n") + "\n")
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
        write(text)
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
        write("\u{1B}[\(liveLines)F\u{1B}[J")
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
                if let digest = item.verifiedDigest { return "  = \(item.shownName)  already there, \(digest.algorithm.shownName) matches" }
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
