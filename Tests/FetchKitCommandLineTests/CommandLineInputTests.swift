import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// `fetchkit -i FILE` and `-i -`: lists of URLs, with comments, blank lines and digests, and
/// the hostile lines a list can hold.
@Suite("The fetchkit command: -i lists", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineInputTests {
    @Test func aListFileDownloadsEveryURLSkippingCommentsAndBlankLinesAndChecksDigests() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let hex = try await sha256sum(TestResponse.patternBytes(count: 3001))
        let list = """
        \u{FEFF}# downloads for the test
           
        \(server.url("/bytes/1000").absoluteString)\r
        \t\(server.url("/bytes/2000").absoluteString)   # not a comment: a bad field
        """
        // The second line has a stray field: first see that it is refused, with its number.
        try Data(list.utf8).write(to: directory.file("bad.txt"))
        let refused = try await runTool("fetchkit", ["-i", directory.file("bad.txt").path, "-d", directory.file("out").path])
        #expect(refused.status == 2, "\(refused)")
        #expect(refused.stderr.contains("bad.txt:4: after the URL, only 'sha256:'"), "\(refused.stderr)")
        #expect(server.counters.requestsReceived == 0, "nothing is downloaded from a list with a bad line")

        let good = """
        \u{FEFF}# downloads for the test

        \(server.url("/bytes/1000").absoluteString)\r
          # an indented comment
        \t\(server.url("/bytes/2000").absoluteString)
        \(server.url("/bytes/3001").absoluteString)  sha256:\(hex.uppercased())
        """
        try Data(good.utf8).write(to: directory.file("list.txt"))
        let result = try await runTool("fetchkit", ["--input-file", directory.file("list.txt").path, "-d", directory.file("out").path])
        #expect(result.status == 0, "\(result)")
        for size in [1000, 2000, 3001] {
            #expect(FileManager.default.contents(atPath: directory.file("out/\(size)").path) == TestResponse.patternBytes(count: size))
        }
        #expect(result.stdout.contains("Downloaded 3 of 3 files"), "\(result.stdout)")
    }

    @Test func standardInputIsAListAndItsDigestsAreChecked() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let wrong = String(repeating: "ab", count: 32)
        let list = "\(server.url("/bytes/500").absoluteString)\n\(server.url("/bytes/700").absoluteString) sha256:\(wrong)\n"
        let result = try await runTool("fetchkit", ["-i", "-", "-d", directory.url.path], input: Data(list.utf8))
        #expect(result.status == ExitStatus.someFailed.rawValue, "one saved, one mismatch: \(result)")
        #expect(FileManager.default.contents(atPath: directory.file("500").path) == TestResponse.patternBytes(count: 500))
        #expect(!FileManager.default.fileExists(atPath: directory.file("700").path), "a wrong digest leaves no file")
        #expect(result.stdout.contains("✗ 700  SHA-256 mismatch: expected \(wrong)"), "\(result.stdout)")
    }

    @Test func aListAndAURLTogetherAndOneWrongDigestIsAChecksumFailure() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let wrong = String(repeating: "0", count: 64)
        let result = try await runTool("fetchkit", ["-i", "-", "-d", directory.url.path],
                                       input: Data("\(server.url("/bytes/900").absoluteString) SHA256:\(wrong)".utf8))
        #expect(result.status == ExitStatus.checksum.rawValue, "\(result)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty)
    }

    /// Each hostile line: one line on standard error naming the list and the line, exit 2,
    /// nothing sent, and the secrets in it (a password, a token) not shown.
    @Test(arguments: [
        ("# fine\nftp://user:hunter2@127.0.0.1/file\n", ":2: not an http or https URL: 'ftp://user:REDACTED@127.0.0.1/file'"),
        ("http://127.0.0.1:9/a?token=hunter2 sha256:xyz\n", ":1: sha256: needs 64 hexadecimal digits, not 'xyz'"),
        ("http://127.0.0.1:9/a sha256:\(String(repeating: "a", count: 63))\n", ":1: sha256: needs 64 hexadecimal digits"),
        ("\n\nhttp://127.0.0.1:9/\(String(repeating: "x", count: 70_000))?token=hunter2\n", ":3: line longer than 64 KiB"),
        ("http://127.0.0.1:9/a\nhttp://127.0.0.1:9/b\u{0}?token=hunter2\n", ":2: a NUL byte in the line"),
        ("http://127.0.0.1:9/a\n\u{1B}[31mhttp://127.0.0.1:9/hunter2\n", ":2: not an http or https URL: '\\e[31mhttp://127.0.0.1:9/hunter2'"),
    ])
    func aHostileLineIsOneUsageErrorWithItsNumber(_ list: String, _ expected: String) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Data(list.utf8).write(to: directory.file("urls"))
        let result = try await runTool("fetchkit", ["-i", directory.file("urls").path, "-d", directory.file("out").path])
        #expect(result.status == 2, "\(result)")
        #expect(result.stdout.isEmpty)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "one line: \(result.stderr.prefix(500))")
        #expect(result.stderr.contains("\(directory.file("urls").path)\(expected)"), "\(result.stderr.prefix(500))")
        if !expected.contains("hunter2") {
            #expect(!result.stderr.contains("hunter2"), "no secret: \(result.stderr.prefix(500))")
        }
        #expect(result.stderr.utf8.count < 3000, "a huge line is not echoed whole")
        #expect(!FileManager.default.fileExists(atPath: directory.file("out").path), "nothing was done")
    }

    /// The list's limits: downloads counted (comments and blank lines are not), bytes counted
    /// as read, each a usage error naming the line it was reached at. The real limits
    /// (1,000,000 downloads, 256 MiB) are these constants; the counting is tested at small ones.
    @Test func aListOverItsLimitsIsRefusedAtTheLineThatPassesThem() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let list = directory.file("urls")
        var text = "# ten downloads and a comment\n\n"
        for index in 1...10 { text += "http://127.0.0.1:9/\(index)\n" }
        try Data(text.utf8).write(to: list)
        #expect(try InputList.read(list.path, maximumEntries: 10).count == 10, "at the limit: read whole")
        try Data((text + "# more\nhttp://127.0.0.1:9/11\n").utf8).write(to: list)
        #expect { try InputList.read(list.path, maximumEntries: 10) } throws: { error in
            String(describing: error).hasSuffix("urls:14: more than 10 downloads in one list")
        }
        // 2 MiB of comment lines against a 1 MiB limit: refused once 1 MiB is passed, not read to the end.
        try Data(String(repeating: "# x\n", count: 512 << 10).utf8).write(to: list)
        #expect { try InputList.read(list.path, maximumBytes: 1 << 20) } throws: { error in
            String(describing: error).hasSuffix("urls:262145: the list is larger than 1 MiB")
        }
        #expect(InputList.maximumEntries == 1_000_000 && InputList.maximumBytes == 256 << 20)
    }

    /// An endless list (`/dev/zero`: no line ever ends) is refused at once, not held in memory.
    @Test func anEndlessListIsRefused() async throws {
        let result = try await runTool("fetchkit", ["-i", "/dev/zero"])
        #expect(result.status == 2, "\(result)")
        #expect(result.stderr.contains("/dev/zero:1: line longer than 64 KiB"), "\(result.stderr)")
    }

    @Test func invalidUTF8AndAMissingListAreUsageErrors() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Data([0x68, 0x74, 0xFF, 0xFE, 0x0A]).write(to: directory.file("binary"))
        let binary = try await runTool("fetchkit", ["-i", directory.file("binary").path])
        #expect(binary.status == 2)
        #expect(binary.stderr.contains("binary:1: the line is not UTF-8"), "\(binary.stderr)")
        let missing = try await runTool("fetchkit", ["-i", directory.file("absent").path])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("-i: cannot read \(directory.file("absent").path): No such file or directory"), "\(missing.stderr)")
        let empty = try await runTool("fetchkit", ["-i", "-"], input: Data("# nothing\n\n".utf8))
        #expect(empty.status == 2)
        #expect(empty.stderr.contains("no URL to download"), "\(empty.stderr)")
    }

    @Test func sha256IsRefusedForSeveralDownloadsFromAList() async throws {
        let hex = String(repeating: "a", count: 64)
        let result = try await runTool("fetchkit", ["-i", "-", "--sha256", hex],
                                       input: Data("http://127.0.0.1:9/a\nhttp://127.0.0.1:9/b\n".utf8))
        #expect(result.status == 2)
        #expect(result.stderr.contains("--sha256 checks one download: give exactly one URL, not 2"), "\(result.stderr)")
    }
}
