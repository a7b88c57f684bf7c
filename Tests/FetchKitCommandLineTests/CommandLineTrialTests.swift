import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// What a new user's trial of the command found, run as a subprocess: a directory's URL saved
/// under the directory's name, `-v` silent about redirects, a slow server's answer about a file
/// already there awaited in silence, `--sha256` not checking a file already there under its
/// `Content-Disposition` name, and a long `-i` list read a byte at a time.
@Suite("The fetchkit command: a new user's trial", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineTrialTests {
    /// `http://host/dir/` is the directory's index, which wget saves as `index.html`; the name
    /// of the directory (`dir`) is not the file's. Two such URLs get distinct names.
    @Test func aURLWhosePathEndsInASlashIsSavedAsIndexHTML() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/dir/") { _ in .text("the index of dir") }
        server.route("/other/") { _ in .text("the index of other") }
        let result = try await runTool("fetchkit", [server.url("/dir/").absoluteString, server.url("/other/?page=2").absoluteString,
                                                    "-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
        #expect(FileManager.default.contents(atPath: directory.file("index.html").path) == Data("the index of dir".utf8))
        #expect(FileManager.default.contents(atPath: directory.file("index-1.html").path) == Data("the index of other".utf8))
        #expect(!FileManager.default.fileExists(atPath: directory.file("dir").path), "named after the directory")
        #expect(result.stdout.contains("✓ index.html") && result.stdout.contains("✓ index-1.html"), "\(result.stdout)")
    }

    @Test func helpSaysIt() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        // Words, whatever the lines they are wrapped on.
        let help = result.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(help.contains("a URL whose path ends in '/' is saved as index.html, as wget does"), "\(help)")
        #expect(help.contains("each redirect followed (its status, the Location it leads to"), "\(help)")
        #expect(help.contains("with --content-disposition, one under the server's name too"), "\(help)")
        #expect(help.contains("While the answers are awaited, a line says so"), "\(help)")
    }

    @Test func namesOfURLsWithAndWithoutAFinalSlash() {
        let names = Downloader.fileNames(for: [
            "http://127.0.0.1:1/dir/", "http://127.0.0.1:1", "http://127.0.0.1:1/", "http://127.0.0.1:1/a/b.iso",
            "http://127.0.0.1:1/a/b.iso/?x=1", "http://127.0.0.1:1/a%2F", "http://127.0.0.1:1/..%2F/",
        ].compactMap(URL.init(string:)))
        #expect(names == ["index.html", "index-1.html", "index-2.html", "b.iso", "index-3.html", "a_", "index-4.html"])
    }

    /// `-v` shows each redirect: the status and where it leads, then the request that follows,
    /// as `curl -v` shows its hops — the secrets in each URL redacted, as in every other line.
    @Test func verboseShowsEachRedirectWithItsURLRedacted() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/start") { _ in TestResponse(status: 302, headers: ["Location": "/middle?token=hunter2&page=1"]) }
        let final = server.url("/final.bin?sig=s3cret-sig").absoluteString
        server.route("/middle") { _ in TestResponse(status: 307, headers: ["Location": final]) }
        server.route("/final.bin") { _ in TestResponse(status: 200, body: Data("at last".utf8)) }

        let result = try await runTool("fetchkit", [server.url("/start").absoluteString, "-v", "-d", directory.url.path])

        #expect(result.status == 0, "\(result)")
        #expect(FileManager.default.contents(atPath: directory.file("start").path) == Data("at last".utf8))
        let lines = [
            "  > start: GET \(server.url("/start").absoluteString)",
            "  < start: HTTP 302, Location: \(server.url("/middle?token=REDACTED&page=1").absoluteString)",
            "  > start: GET \(server.url("/middle?token=REDACTED&page=1").absoluteString)",
            "  < start: HTTP 307, Location: \(server.url("/final.bin?sig=REDACTED").absoluteString)",
            "  > start: GET \(server.url("/final.bin?sig=REDACTED").absoluteString)",
            "  < start: HTTP 200",
            "  ✓ start",
        ]
        let positions = lines.map { line in result.stdout.range(of: line)?.lowerBound }
        #expect(!positions.contains(nil), "every hop shown: \(result.stdout)")
        #expect(positions.compactMap { $0 } == positions.compactMap { $0 }.sorted(), "in order: \(result.stdout)")
        #expect(!result.stdout.contains("hunter2") && !result.stdout.contains("s3cret"), "\(result.stdout)")

        let plain = try await runTool("fetchkit", [server.url("/start").absoluteString, "--force", "-d", directory.url.path])
        #expect(plain.status == 0 && !plain.stdout.contains("HTTP 302"), "not without -v: \(plain.stdout)")
    }

    /// With `-v`, a file's end waits for its redirects to be heard: with many files at once, a
    /// failed one among them, every file still ends once, with its hops, before the summary.
    @Test func verboseWithManyFilesEndsEachOnceWithItsHops() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = (1...8).map { server.url("/redirect/\($0 % 3)?n=\($0)").absoluteString } + [server.url("/status/404").absoluteString]
        let result = try await runTool("fetchkit", urls + ["-v", "--retry", "0", "--parallel", "8", "--per-host", "8", "-d", directory.url.path])
        #expect(result.status == ExitStatus.someFailed.rawValue, "\(result)")
        #expect(result.stdout.components(separatedBy: ", Location: ").count - 1 == (1...8).map { $0 % 3 }.reduce(0, +), "\(result.stdout)")
        #expect(result.stdout.components(separatedBy: "\n  ✓ ").count - 1 == 8, "\(result.stdout)")
        #expect(result.stdout.contains("  < 404: HTTP 404") && result.stdout.contains("  ✗ 404  HTTP 404"), "\(result.stdout)")
        let summary = try #require(result.stdout.range(of: "Downloaded 8 of 9 files"), "\(result.stdout)")
        #expect(result.stdout.range(of: "  ✓ ", options: .backwards).map { $0.lowerBound < summary.lowerBound } == true)
    }

    /// The question about a file already there, to a server that takes its time to answer:
    /// off a terminal, a line every `--summary-interval` says what the command waits for (here
    /// on standard error, which `--json` gives the human output), rather than nothing at all.
    /// The server answers only once the line was seen (or after 30 s, when the test fails).
    @Test func aSlowAnswerAboutAFileAlreadyThereIsSaidToBeAwaited() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let seen = Countdown(1)
        server.route("/slow.txt") { request in
            if request.method == "HEAD" { _ = seen.waitBlocking(timeout: 30) }
            return .text("from the server")
        }
        try Data("mine".utf8).write(to: directory.file("slow.txt"))
        let child = try ChildProcess("fetchkit", [server.url("/slow.txt").absoluteString, "-d", directory.url.path, "--json",
                                                  "--summary-interval", "0.2", "--timeout", "120"],
                                     errorMarker: "asking the server whether 1 file already there changed: 0 of 1 answered")
        defer { child.stop() }
        _ = await child.errorMarkerSeen.wait(timeout: 60)
        let said = child.errorMarkerFound
        seen.signal()
        let (ending, stdout, stderr) = try await child.finish()
        #expect(said, "a line while it waits: \(stderr)")
        #expect(ending == .exit(0), "\(ending) \(stderr)")
        #expect(stderr.contains("= slow.txt  already there"), "\(stderr)")
        #expect(stdout.contains("\"result\":\"kept\""), "\(stdout)")
        #expect(FileManager.default.contents(atPath: directory.file("slow.txt").path) == Data("mine".utf8))
    }

    /// On a terminal the same question shows a live line from the moment it is asked (before
    /// any answer can come), which goes once the answers are in. With `-q`, nothing.
    @Test func onATerminalTheQuestionIsALiveLineThatGoes() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/named") { _ in
            TestResponse(status: 200, headers: ["Content-Disposition": "attachment; filename=\"report.csv\""], body: Data("a,b\n".utf8))
        }
        try Data("mine".utf8).write(to: directory.file("kept.txt"))
        server.route("/kept.txt") { _ in .text("from the server") }
        let arguments = [server.url("/kept.txt").absoluteString, server.url("/named").absoluteString, "-J", "-d", directory.url.path]
        let child = try ChildProcess("fetchkit", arguments, standardOutput: .terminal(columns: 200))
        defer { child.stop() }
        let (ending, stdout, _) = try await child.finish()
        #expect(ending == .exit(0), "\(ending) \(stdout)")
        let status = "  … asking the server whether 1 file already there changed, and the name of 1 file (--content-disposition): 0 of 2 answered"
        let header = try #require(stdout.range(of: "Downloading 2 files"), "\(stdout.debugDescription)")
        #expect(stdout.range(of: status, range: stdout.startIndex..<header.lowerBound) != nil, "the live line: \(stdout.debugDescription)")
        // Its last drawing is cleared (cursor up over it, clear to the end of the screen) before
        // the files' lines.
        let last = try #require(stdout.range(of: " answered, ", options: .backwards, range: stdout.startIndex..<header.lowerBound))
        #expect(stdout[last.upperBound..<header.lowerBound].contains("\u{1B}[1F\u{1B}[J"), "\(stdout.debugDescription)")
        #expect(FileManager.default.contents(atPath: directory.file("report.csv").path) == Data("a,b\n".utf8))

        let quiet = try ChildProcess("fetchkit", arguments + ["-q"], standardOutput: .terminal(columns: 200))
        defer { quiet.stop() }
        let (quietEnding, quietOutput, quietErrors) = try await quiet.finish()
        #expect(quietEnding == .exit(0) && quietOutput.isEmpty && quietErrors.isEmpty, "\(quietOutput)\(quietErrors)")
    }

    /// `-J --force` where the server's name is a symbolic link someone planted in the output
    /// directory, pointing outside it: the link is replaced by the download; the file it
    /// pointed to is never written, with or without a digest to check.
    @Test func forceReplacesAPlantedLinkAndNeverWritesThroughIt() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove(); outside.remove() }
        server.route("/named") { _ in
            TestResponse(status: 200, headers: ["Content-Disposition": "attachment; filename=\"report.csv\""], body: Data("a,b\n".utf8))
        }
        let victim = outside.file("victim.txt")
        try Data("precious".utf8).write(to: victim)
        try FileManager.default.createSymbolicLink(at: directory.file("report.csv"), withDestinationURL: victim)
        for extra in [[], ["--sha256", try await sha256sum(Data("a,b\n".utf8))]] {
            let run = try await runTool("fetchkit", [server.url("/named").absoluteString, "-J", "--force", "-q", "-d", directory.url.path] + extra)
            #expect(run.status == 0, "\(run)")
            #expect(FileManager.default.contents(atPath: victim.path) == Data("precious".utf8), "never written through the link")
            let kind = try FileManager.default.attributesOfItem(atPath: directory.file("report.csv").path)[.type] as? FileAttributeType
            #expect(kind == .typeRegular, "the link itself was replaced")
            #expect(FileManager.default.contents(atPath: directory.file("report.csv").path) == Data("a,b\n".utf8))
            try FileManager.default.removeItem(at: directory.file("report.csv"))
            try FileManager.default.createSymbolicLink(at: directory.file("report.csv"), withDestinationURL: victim)
        }
    }

    /// `--sha256` with `-J`: the file already there under the server's name is the one the
    /// digest checks, as one under the URL's name is — a mismatch is a checksum failure (exit 9)
    /// that keeps it, a match keeps it with nothing downloaded — never "already there" without
    /// a look. Without one there, the download is checked and saved under the server's name.
    @Test func aDigestChecksTheFileUnderItsContentDispositionName() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let body = TestResponse.patternBytes(count: 5000)
        let hex = try await sha256sum(body)
        server.route("/get") { _ in
            TestResponse(status: 200, headers: ["Content-Disposition": "attachment; filename=\"real.bin\""], body: body)
        }
        let url = server.url("/get?id=7").absoluteString
        func gets() -> Int { server.requests("/get").filter { $0.method == "GET" }.count }

        try Data("another file".utf8).write(to: directory.file("real.bin"))
        let wrong = try await runTool("fetchkit", [url, "-J", "--sha256", hex, "-d", directory.url.path])
        #expect(wrong.status == ExitStatus.checksum.rawValue, "\(wrong)")
        #expect(wrong.stdout.contains("✗ real.bin  already there, but its SHA-256 is"), "\(wrong.stdout)")
        #expect(FileManager.default.contents(atPath: directory.file("real.bin").path) == Data("another file".utf8), "kept as it was")
        #expect(gets() == 0, "nothing downloaded")

        try body.write(to: directory.file("real.bin"))
        let right = try await runTool("fetchkit", [url, "-J", "--sha256", hex, "--json", "-d", directory.url.path])
        #expect(right.status == 0, "\(right)")
        #expect(right.stderr.contains("= real.bin  already there, SHA-256 matches"), "\(right.stderr)")
        #expect(right.stdout.contains("\"sha256\":\"\(hex)\""), "\(right.stdout)")
        #expect(gets() == 0, "nothing downloaded")

        try FileManager.default.removeItem(at: directory.file("real.bin"))
        let fresh = try await runTool("fetchkit", [url, "-J", "--sha256", hex, "--json", "-d", directory.url.path])
        #expect(fresh.status == 0, "\(fresh)")
        #expect(FileManager.default.contents(atPath: directory.file("real.bin").path) == body)
        #expect(fresh.stdout.contains("\"sha256\":\"\(hex)\"") && fresh.stdout.contains("real.bin\""), "\(fresh.stdout)")

        try FileManager.default.removeItem(at: directory.file("real.bin"))
        let mismatch = try await runTool("fetchkit", [url, "-J", "--sha256", String(repeating: "0", count: 64), "-d", directory.url.path])
        #expect(mismatch.status == ExitStatus.checksum.rawValue, "\(mismatch)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter { !$0.hasPrefix(".") }.isEmpty,
                "a wrong digest leaves no file under either name")
    }

    /// A 40 MiB list — comments, blank lines, CRLF, and a URL with its digest at the end — is
    /// read in blocks: well under the processor time a byte at a time took (about 9 s in a
    /// debug build; now under half a second), measured as the child's CPU time, which other
    /// work on the machine barely changes.
    @Test func aLargeListIsReadQuickly() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let hex = try await sha256sum(TestResponse.patternBytes(count: 700))
        var list = Data()
        let chunk = Data((String(repeating: "# a comment that is not a download, of a hundred bytes or so, with CRLF \r\n\r\n", count: 1024)).utf8)
        while list.count < 40 << 20 { list += chunk }
        list += Data("\(server.url("/bytes/700").absoluteString) sha256:\(hex)\r\n".utf8)
        try list.write(to: directory.file("urls.txt"))
        let child = try ChildProcess("fetchkit", ["-i", directory.file("urls.txt").path, "-d", directory.file("out").path])
        defer { child.stop() }
        let (ending, stdout, stderr) = try await child.finish()
        #expect(ending == .exit(0), "\(ending) \(stdout) \(stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("out/700").path) == TestResponse.patternBytes(count: 700))
        let seconds = try #require(child.cpuSeconds)
        #expect(seconds < 4, "processor time: \(seconds) s")
    }
}

/// The `-i` reader, read in blocks, against the reader it replaces (a byte at a time, each
/// line split into characters) as the definition of what a list means: on seeded random lists
/// across the reader's 64 KiB blocks — long lines near the limit, CR, tabs, comments, a
/// byte-order mark, non-ASCII and combining marks after separators, NUL, bytes that are not
/// UTF-8 — both give the same downloads or the same error, word for word.
@Suite("The -i reader reads blocks as it read bytes", .timeLimit(.minutes(3)))
struct InputListBlockTests {
    @Test func blocksReadAsBytesDid() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.file("urls")
        let hex = String(repeating: "0123456789abcdef", count: 4)
        let urls = ["http://127.0.0.1:9/a", "https://127.0.0.1:9/b?token=t", "http://127.0.0.1:9/é%20x", "HTTP://127.0.0.1:9/c#frag"]
        let separators = [" ", "\t", "\r", "  \t"]
        let text = ["x", "é", "\u{FEFF}", "#", " ", "\t", "\r", "日本", "sha256:", "md5:", "SHA-1:", "http://127.0.0.1:9/d"]
        // Rare: each makes the list fail at its line.
        let hostile: [[UInt8]] = [[0], [0xFF], [0xC3], Array("ftp://h/x".utf8), Array(" sha256:abc".utf8), Array(" extra".utf8),
                                  Array("\u{301}".utf8), Array(" sha256:\(hex) sha256:\(hex)".utf8)]
        var random = SplitMix64(seed: 24)
        for round in 0..<fuzzRounds(60) {
            var bytes: [UInt8] = []
            let target = random.pick([200, 5000, 70_000, 140_000, 300_000])
            while bytes.count < target {
                var line = ""
                for _ in 0..<random.below(3) { line += random.pick(separators) }
                switch random.below(10_000) {
                case 0..<3000:
                    line += "#"
                    for _ in 0..<random.below(40) { line += random.pick(text) }
                case 3000..<4000:
                    break   // blank
                case 4000..<4002:
                    // A combining mark after a separator or `#` joins it into another character:
                    // not a separator, not a comment (the line is then refused).
                    line += random.pick([" ", "#", "\t"]) + "\u{301}" + random.pick(urls)
                case 4002..<4006:
                    // Near the 64 KiB line limit, on either side.
                    let unit = random.pick(["x", " ", "é"])
                    line += random.pick(["#", "x", " "]) + String(repeating: unit, count: (65_533 + random.below(5)) / unit.utf8.count)
                default:
                    line += random.pick(urls)
                    if random.chance(40) { line += random.pick(separators) + random.pick(["sha256:", "SHA256:", "Sha256:"]) + hex }
                }
                for _ in 0..<random.below(3) { line += random.pick(separators) }
                var lineBytes = Array(line.utf8)
                if random.below(5000) == 0 { lineBytes.insert(contentsOf: random.pick(hostile), at: random.below(lineBytes.count + 1)) }
                bytes += lineBytes
                if random.below(5000) != 0 { bytes += random.chance(30) ? Array("\r\n".utf8) : Array("\n".utf8) }
            }
            if random.chance(50) { bytes = Array("\u{FEFF}".utf8) + bytes }
            try Data(bytes).write(to: file)
            let limits = (entries: random.pick([3, 500, InputList.maximumEntries, InputList.maximumEntries, InputList.maximumEntries]),
                          bytes: random.pick([100_000, InputList.maximumBytes, InputList.maximumBytes]))
            let expected = Result { () throws(Options.UsageError) in
                try ByteAtATimeList.read(bytes, list: file.path, maximumEntries: limits.entries, maximumBytes: limits.bytes)
            }
            let actual = Result { () throws(Options.UsageError) in
                try InputList.read(file.path, maximumEntries: limits.entries, maximumBytes: limits.bytes)
            }
            switch (expected, actual) {
            case (.success(let old), .success(let new)):
                #expect(old == new, "round \(round): \(old.count) against \(new.count) downloads")
            case (.failure(let old), .failure(let new)):
                #expect(old.description == new.description, "round \(round)")
            default:
                Issue.record("round \(round): \(expected) against \(actual)")
            }
        }
    }
}

/// The reader `InputList` replaced, kept as the definition: a byte at a time, each line split
/// into characters. (A file is read in 64 KiB blocks, as the reader did, so that the byte limit
/// is met at the same line.)
private enum ByteAtATimeList {
    static func read(_ data: [UInt8], list: String, maximumEntries: Int, maximumBytes: Int) throws(Options.UsageError) -> [InputList.Entry] {
        var entries: [InputList.Entry] = []
        var line: [UInt8] = []
        var number = 0
        var total = 0
        func finishLine() throws(Options.UsageError) {
            number += 1
            if let entry = try parse(line, number: number, list: list) {
                guard entries.count < maximumEntries else {
                    throw .line("\(list):\(number): more than \(maximumEntries) downloads in one list")
                }
                entries.append(entry)
            }
            line.removeAll(keepingCapacity: true)
        }
        var offset = 0
        while offset < data.count {
            let block = data[offset..<min(data.count, offset + (64 << 10))]
            offset += block.count
            total += block.count
            guard total <= maximumBytes else {
                throw .line("\(list):\(number + 1): the list is larger than \(Format.size(Int64(maximumBytes)))")
            }
            for byte in block {
                if byte == UInt8(ascii: "\n") {
                    try finishLine()
                } else {
                    guard line.count < InputList.maximumLineBytes else {
                        throw .line("\(list):\(number + 1): line longer than \(InputList.maximumLineBytes / 1024) KiB")
                    }
                    line.append(byte)
                }
            }
        }
        if !line.isEmpty { try finishLine() }
        return entries
    }

    static func parse(_ bytes: [UInt8], number: Int, list: String) throws(Options.UsageError) -> InputList.Entry? {
        let at = "\(list):\(number)"
        guard !bytes.contains(0) else { throw .line("\(at): a NUL byte in the line") }
        guard var text = String(validating: bytes, as: UTF8.self) else { throw .line("\(at): the line is not UTF-8") }
        if number == 1, text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
        guard let first = fields.first, !first.hasPrefix("#") else { return nil }
        guard let url = Options.httpURL(String(first)) else {
            throw .line("\(at): not an http or https URL: '\(Terminal.sanitized(Redaction.redacted(String(first.prefix(2048)))))'")
        }
        return try InputList.entry(url: url, digests: fields.dropFirst(), at: at)
    }
}
