import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// What a wget/curl/aria2c user types every day, run as a subprocess: a typo's message that
/// stays on the screen, short options bundled (`-qJ`) or with their value attached (`-oDIR`),
/// wget's and aria2c's names for the output directory, and `--json` lines a script can diff.
@Suite("The fetchkit command: everyday use", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineEverydayTests {
    /// A mistyped option is a few lines — what was wrong, the synopsis and where the rest is —
    /// as curl, wget and aria2c print it, not the whole `--help` (90 lines that scroll the
    /// message itself off a terminal).
    @Test(arguments: [["--parallel", "abc", "http://127.0.0.1:1/x"], ["--bogus", "http://127.0.0.1:1/x"], ["-o"]])
    func aUsageErrorIsAFewLinesNotTheWholeHelp(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", arguments)
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        #expect(result.stdout.isEmpty)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count <= 3, "\(result.stderr)")
        #expect(lines.first?.hasPrefix("fetchkit: ") == true, "the error comes first: \(result.stderr)")
        #expect(result.stderr.contains("usage: fetchkit"), "\(result.stderr)")
        #expect(result.stderr.contains("fetchkit --help"), "\(result.stderr)")
    }

    /// `-qJ` and `-oDIR`, `-m30`, as getopt reads them for wget (`-qc`, `-P/tmp`) and curl
    /// (`-sSL`, `-ofile`).
    @Test func shortOptionsBundleAndTakeAnAttachedValue() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/download") { _ in
            TestResponse(status: 200, headers: ["Content-Disposition": "attachment; filename=report.csv"], body: Data("a,b\n".utf8))
        }
        let result = try await runTool("fetchkit", ["-qJ", "-m30", "-d" + directory.url.path, server.url("/download").absoluteString])
        #expect(result == (0, "", ""), "\(result)")
        #expect(FileManager.default.contents(atPath: directory.file("report.csv").path) == Data("a,b\n".utf8))
    }

    @Test func bundlesParse() throws {
        let url = "http://127.0.0.1:1/x"
        let bundled = try Options.parse(["-qcJ", url, "-HAccept: text/csv", "-m2.5"])
        #expect(bundled.verbosity == .quiet && bundled.continues && bundled.contentDisposition)
        #expect(bundled.headers == [Options.Header(name: "Accept", value: "text/csv")])
        #expect(bundled.maxTime == 2.5)
        // A value option last in a bundle takes the next argument.
        let last = try Options.parse(["-qd", "/tmp/somewhere", url])
        #expect(last.verbosity == .quiet && last.outputDirectory.path == "/tmp/somewhere")
        // Not every letter is an option: the whole bundle is refused, naming the letter.
        #expect(throws: Options.UsageError.self) { try Options.parse(["-qx", url]) }
        do {
            _ = try Options.parse(["-qx", url])
        } catch {
            #expect(error.description == "unknown option -x", "\(error.description)")
        }
        // A URL still never starts with a dash, and `-` alone is not an option.
        #expect(throws: Options.UsageError.self) { try Options.parse(["-", url]) }
    }

    /// wget's `-P DIR` (`--directory-prefix`) and aria2c's `-d DIR` (`--dir`) name the output
    /// directory as `--directory` does.
    @Test(arguments: [["-P"], ["--directory-prefix"], ["-d"], ["--dir"]])
    func wgetAndAria2NamesForTheDirectory(_ option: [String]) throws {
        let parsed = try Options.parse(option + ["/tmp/there", "http://127.0.0.1:1/x"])
        #expect(parsed.outputDirectory.path == "/tmp/there")
    }

    /// Every `--json` line has its keys in one order, sorted as the documented example shows,
    /// so that lines from two runs compare as text (`diff`, `sort | uniq`).
    @Test func jsonLinesHaveTheirKeysInOneSortedOrder() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = [server.url("/bytes/300").absoluteString, server.url("/status/404").absoluteString]
        let result = try await runTool("fetchkit", urls + ["--json", "-q", "--retry", "0", "-d", directory.url.path])
        #expect(result.status == ExitStatus.someFailed.rawValue, "\(result)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.count == 2, "\(result.stdout)")
        let keys = ["bytes", "checksum", "error", "message", "path", "result", "seconds", "sha256", "status", "url"]
        for line in lines {
            let positions = keys.map { key in line.range(of: "\"\(key)\":").map { line.distance(from: line.startIndex, to: $0.lowerBound) } ?? -1 }
            #expect(!positions.contains(-1) && positions == positions.sorted(), "keys in sorted order: \(line)")
        }
    }

    /// `--parallel 1000` where the open-file limit is 128 (`ulimit -n 128`): each download holds a
    /// socket, its partial file and its lock, so the tool runs as many at once as the limit
    /// allows and says so, rather than fail most of them with "Too many open files" (curl caps
    /// `--parallel-max` at 300 for the same reason).
    @Test func parallelBeyondTheOpenFileLimitRunsWhatFitsAndSaysSo() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = (1...60).map { server.url("/delay/400?n=\($0)").absoluteString }
        let tool = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("fetchkit").path
        let arguments = ["--parallel", "1000", "--per-host", "1000", "--retry", "0", "-d", directory.url.path] + urls
        // Soft and hard limit both 128: the tool cannot raise it.
        let result = try await runTool("/bin/sh", ["-c", "ulimit -n 128 && exec \"$0\" \"$@\"", tool] + arguments)
        #expect(result.status == 0, "\(result.stderr.suffix(2000))")
        #expect(!result.stderr.contains("Too many open files") && !result.stdout.contains("Too many open files"))
        #expect(result.stdout.contains("Downloaded 60 of 60 files"), "\(result.stdout.suffix(500))")
        #expect(result.stderr.contains("--parallel 1000") && result.stderr.contains("open files"), "said: \(result.stderr)")
        let saved = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter { !$0.hasPrefix(".") }
        #expect(saved.count == 60)
    }

    /// `--sha256` with a file already there: the file is what is checked (wget has no digest;
    /// aria2c checks the file it has). One that matches is kept and says so, with no request; one
    /// that does not is a checksum failure (exit 9), kept as it is for `--force` to replace,
    /// never "already there" with exit 0 while it is not the file asked for.
    @Test func aDigestIsCheckedAgainstAFileAlreadyThere() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let body = TestResponse.patternBytes(count: 3000)
        let hex = try await sha256sum(body)
        let url = server.url("/bytes/3000").absoluteString

        try Data("not the file".utf8).write(to: directory.file("3000"))
        let wrong = try await runTool("fetchkit", [url, "--sha256", hex, "-d", directory.url.path])
        #expect(wrong.status == ExitStatus.checksum.rawValue, "\(wrong)")
        #expect(wrong.stdout.contains("already there") && wrong.stdout.contains(hex), "\(wrong.stdout)")
        #expect(FileManager.default.contents(atPath: directory.file("3000").path) == Data("not the file".utf8), "kept as it was")
        #expect(server.requests("/bytes/3000").isEmpty, "nothing sent for it")

        try body.write(to: directory.file("3000"))
        let right = try await runTool("fetchkit", [url, "--sha256", hex, "--json", "-d", directory.url.path])
        #expect(right.status == 0, "\(right)")
        #expect(right.stderr.contains("SHA-256 matches"), "\(right.stderr)")
        #expect(right.stdout.contains("\"sha256\":\"\(hex)\""), "\(right.stdout)")
        #expect(server.requests("/bytes/3000").isEmpty, "nothing sent for it")

        // --force still downloads it again, checked as it is written.
        try Data("not the file".utf8).write(to: directory.file("3000"))
        let forced = try await runTool("fetchkit", [url, "--sha256", hex, "--force", "-d", directory.url.path])
        #expect(forced.status == 0, "\(forced)")
        #expect(FileManager.default.contents(atPath: directory.file("3000").path) == body)
    }
}
