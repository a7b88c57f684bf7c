import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the command's output goes in real use: a pipe that closes early (`| head -1`).
@Suite("fetchkit's output in pipes", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLinePipeTests {
    /// `fetchkit URL… | head -1`: the reader goes away after the header line, while the
    /// downloads are held at the server. They finish, the files are whole, and the exit status
    /// is the downloads' (0, or 11, ExitStatus.someFailed, when one of them failed) — not death by SIGPIPE (141).
    @Test(arguments: [false, true])
    func aClosedPipeStopsThePrintingNotTheDownloads(withAFailure: Bool) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let gate = TestGate()
        for name in ["a.bin", "b.bin"] {
            server.route("/held/\(name)") { _ in
                gate.wait(timeout: 120)
                return .pattern(count: 50_000)
            }
        }
        server.route("/held/missing.bin") { _ in
            gate.wait(timeout: 120)
            return .text("gone", status: 404)
        }
        let names = ["a.bin", "b.bin"] + (withAFailure ? ["missing.bin"] : [])
        let urls = names.map { server.url("/held/\($0)").absoluteString }

        // Given a run whose reader closes the pipe after the first line
        // A long idle timeout: the downloads are held until this test has seen the pipe close,
        // which a loaded machine may take longer than the default 30 s to tell it.
        let child = try ChildProcess("fetchkit", urls + ["-d", directory.url.path, "--timeout", "300"], standardOutput: .pipeClosedAfterFirstLine)
        defer { child.stop() }
        try #require(await child.outputClosed.wait(timeout: 60), "the header line never came")

        // When the downloads end after that (each then prints a line into the closed pipe)
        gate.open()
        let result = try await child.finish(timeout: 60)

        // Then every download finished, and the exit status says how they went
        #expect(result.ending == .exit(withAFailure ? 11 : 0), "\(result.ending)\n\(result.stdout)\(result.stderr)")
        #expect(result.stdout.hasPrefix("Downloading \(names.count) files"), "\(result.stdout)")
        for name in ["a.bin", "b.bin"] {
            #expect(FileManager.default.contents(atPath: directory.file(name).path) == TestResponse.patternBytes(count: 50_000), "\(name)")
        }
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(server.requests("/held/a.bin").count == 1 && server.requests("/held/b.bin").count == 1)
    }

    @Test func aStreamThatWentAwayIsClosedForGood() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        close(ends[0])
        let previous = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previous); close(ends[1]) }
        let stream = OutputStream(descriptor: ends[1])
        #expect(!stream.isClosed)
        stream.write("first line\n")
        #expect(stream.isClosed, "EPIPE closes the stream")
        stream.write("second line\n")
        #expect(stream.isClosed)
    }
}

/// The live display in a terminal: it never draws a line wider than the terminal, counted in
/// the columns a terminal gives each character (issue 20, 3.7).
@Suite("fetchkit's live display in a terminal", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineTerminalTests {
    /// Columns as a terminal draws this test's text: CJK ideographs two, ASCII and the
    /// display's own symbols one. (Independent of the tool's width function.)
    private func terminalColumns(_ line: Substring) -> Int {
        line.unicodeScalars.reduce(0) { total, scalar in
            (0x4E00...0x9FFF).contains(scalar.value) ? total + 2 : total + 1
        }
    }

    /// An 80-character CJK name (160 columns) downloading for about a second in a 60-column
    /// pseudo-terminal: every live line the tool draws fits in 59 columns, so a redraw leaves
    /// no stale line behind.
    @Test func aWideNameNeverWrapsALiveLine() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let name = String(repeating: "漢字", count: 40) + ".bin"
        let path = "/" + (name.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? name)
        var script: [TestResponse.Step] = [.head(status: 200, headers: ["Content-Length": "40000"])]
        for part in 0..<8 {
            script += [.patternBytes(offset: part * 5000, count: 5000), .pause(milliseconds: 150)]
        }
        let steps = script
        server.route(path) { _ in .steps(steps) }

        let child = try ChildProcess("fetchkit", [server.url(path).absoluteString, "-d", directory.url.path],
                                     standardOutput: .terminal(columns: 60), environment: ["TERM": "xterm"])
        defer { child.stop() }
        let result = try await child.finish(timeout: 60)

        #expect(result.ending == .exit(0), "\(result.ending)\n\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file(name).path) == TestResponse.patternBytes(count: 40000))
        // The live lines: a file's progress ("↓") and the total ("[…]"), between the cursor
        // moves and line ends that redraw them.
        let segments = result.stdout.components(separatedBy: "\u{1B}[J").flatMap { $0.components(separatedBy: "\r\n") }
        let live = segments.filter { $0.hasPrefix("  ↓ ") || $0.hasPrefix("  [") }
        #expect(!live.isEmpty, "no live line was drawn:\n\(result.stdout.debugDescription) stderr \(result.stderr)")
        for line in live {
            #expect(terminalColumns(line[...]) <= 59, "\(terminalColumns(line[...])) columns: \(line)")
        }
    }

    @Test func columnsAreCountedAsATerminalDrawsThem() {
        #expect(Terminal.columns(of: "abc") == 3)
        #expect(Terminal.columns(of: "漢字") == 4)                       // East Asian wide
        #expect(Terminal.columns(of: "ｆｕｌｌ") == 8)                     // fullwidth forms
        #expect(Terminal.columns(of: "e\u{301}") == 1)                   // a combining mark adds nothing
        #expect(Terminal.columns(of: "\u{200B}") == 0)                    // zero-width space
        #expect(Terminal.columns(of: "🎉") == 2)                          // emoji
        #expect(Terminal.columns(of: "❤\u{FE0F}") == 2)                   // emoji presentation selector
        #expect(Terminal.columns(of: "👩\u{200D}💻") == 2)                 // one ZWJ sequence
        #expect(Terminal.columns(of: "한국어") == 6)                       // Hangul syllables
    }

    @Test func fittingCutsByColumnsNotCharacters() {
        let wide = String(repeating: "漢", count: 40)                    // 80 columns
        let cut = Format.fit(wide, 59)
        #expect(Terminal.columns(of: cut) <= 59)
        #expect(cut.hasSuffix("…") && cut.hasPrefix("漢漢"))
        #expect(Format.fit("short", 59) == "short")
        #expect(Terminal.columns(of: Format.fit(String(repeating: "🎉a", count: 30), 20)) <= 20)
    }
}
