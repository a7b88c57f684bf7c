import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// The command line beside curl, wget and aria2c (issue 32, point 6): `-o` names the file,
/// `-d`/`-P`/`--directory` the directory; no argument is a usage error and the demo is
/// `fetchkit demo`; the flags typed from habit (`-fsSL`, `-O`, `-C -`, `-j`, `-u`, `--cacert`,
/// `--pinnedpubkey`) work, and a mistyped one names the closest.
@Suite("The fetchkit command: habits from curl, wget and aria2c", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineHabitTests {
    // MARK: -o names the file

    @Test func dashONamesTheOutputFile() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let file = directory.file("name.iso")
        let result = try await runTool("fetchkit", [server.url("/bytes/1000").absoluteString, "-o", file.path])
        #expect(result.status == 0, "\(result)")
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: file.path, isDirectory: &isDirectory) && !isDirectory.boolValue,
                "a file, not a directory: \(result)")
        #expect(FileManager.default.contents(atPath: file.path) == TestResponse.patternBytes(count: 1000))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path) == ["name.iso"], "nothing else")
    }

    /// As aria2c reads `-d DIR -o NAME`: the name is in the directory.
    @Test func aRelativeDashOIsInTheDirectory() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", ["-d", directory.url.path, "-o", "sub.iso", server.url("/bytes/300").absoluteString])
        #expect(result.status == 0, "\(result)")
        #expect(FileManager.default.contents(atPath: directory.file("sub.iso").path) == TestResponse.patternBytes(count: 300))
    }

    @Test func dashOWithSeveralURLsIsAUsageError() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", [server.url("/bytes/10").absoluteString, server.url("/bytes/20").absoluteString,
                                                    "-o", directory.file("one").path])
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        #expect(result.stderr.contains("-o"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
        #expect(server.requests.isEmpty, "nothing downloaded")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty)
    }

    @Test(arguments: ["-d", "-P", "--directory", "--directory-prefix", "--dir"])
    func theDirectoryFlagsSaveIntoADirectory(_ flag: String) async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", [server.url("/bytes/100").absoluteString, flag, directory.file("into").path])
        #expect(result.status == 0, "\(result)")
        #expect(FileManager.default.contents(atPath: directory.file("into/100").path) == TestResponse.patternBytes(count: 100))
    }

    // MARK: no argument, and the demo

    /// An empty `xargs fetchkit` runs `fetchkit` alone: an error, as curl and wget make it.
    @Test func noArgumentIsAUsageErrorOfOneLine() async throws {
        let result = try await runTool("fetchkit", [])
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        #expect(result.stdout.isEmpty, "\(result.stdout)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
        #expect(result.stderr.hasPrefix("fetchkit: ") && result.stderr.contains("--help"), "\(result.stderr)")
    }

    // MARK: flags typed from habit

    /// `curl -fsSL -O URL`: fail on HTTP errors (always), silent, show errors, follow
    /// redirects (always), the remote name (the default).
    @Test func curlsEverydayFlagsAreAccepted() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", ["-fsSL", "-O", server.url("/redirect/2").absoluteString, "-d", directory.url.path])
        #expect(result == (0, "", ""), "\(result)")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        #expect(names.count == 1, "\(names)")
        let long = try await runTool("fetchkit", ["--silent", "--location", "--remote-name", "--fail", "--show-error",
                                                  server.url("/bytes/50").absoluteString, "-d", directory.url.path])
        #expect(long == (0, "", ""), "\(long)")
        #expect(FileManager.default.contents(atPath: directory.file("50").path) == TestResponse.patternBytes(count: 50))
        let failed = try await runTool("fetchkit", ["-s", server.url("/status/404").absoluteString, "-d", directory.url.path])
        #expect(failed.status == ExitStatus.httpStatus.rawValue && failed.stdout.isEmpty && failed.stderr.contains("404"), "\(failed)")
    }

    @Test func dashCDashIsContinue() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for arguments in [["-C", "-"], ["-C-"]] {
            let result = try await runTool("fetchkit", arguments + ["-d", directory.url.path])
            #expect(result.status == 0, "\(arguments): \(result)")
            #expect(result.stdout.contains("Nothing to continue"), "\(result.stdout)")
        }
        let offset = try await runTool("fetchkit", ["-C", "100", "http://127.0.0.1:9/x", "-d", directory.url.path])
        #expect(offset.status == ExitStatus.usage.rawValue, "\(offset)")
        #expect(offset.stderr.contains("-C -"), "\(offset.stderr)")
    }

    @Test(arguments: [["-j", "1"], ["-j1"], ["--max-concurrent-downloads", "1"]])
    func dashJIsParallel(_ flag: [String]) async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = ["/bytes/10", "/bytes/20"].map { server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + flag + ["-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("(1 at once, 1 per host)"), "\(result.stdout)")
    }

    /// A route that asks for HTTP Basic credentials and serves only `alice:s3cr3t-pw`.
    private func protected(_ server: TestServer) {
        let expected = "Basic " + Data("alice:s3cr3t-pw".utf8).base64EncodedString()
        server.route("/private/report.csv") { request in
            guard request.header("Authorization") == expected else {
                return TestResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="test""#], body: Data("no".utf8))
            }
            return TestResponse(status: 200, body: Data("a,b\n".utf8))
        }
    }

    @Test func dashUGivesTheCredentialsAndNeverPrintsThePassword() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        protected(server)
        let url = server.url("/private/report.csv").absoluteString
        let result = try await runTool("fetchkit", [url, "-u", "alice:s3cr3t-pw", "-v", "-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
        #expect(FileManager.default.contents(atPath: directory.file("report.csv").path) == Data("a,b\n".utf8))
        #expect(!(result.stdout + result.stderr).contains("s3cr3t"), "\(result)")
        let wrong = try await runTool("fetchkit", [url, "--user=alice:wr0ng-pw", "-v", "--json", "--retry", "0", "-d", directory.file("wrong").path])
        #expect(wrong.status == ExitStatus.httpStatus.rawValue, "\(wrong)")
        #expect(!(wrong.stdout + wrong.stderr).contains("wr0ng"), "\(wrong)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("wrong/report.csv").path))
        let journal = FileManager.default.contents(atPath: directory.file("wrong/.fetchkit-journal.json").path) ?? Data()
        #expect(!String(decoding: journal, as: UTF8.self).contains("wr0ng"))
    }

    @Test(arguments: [["-u", "alice"], ["-u", "alice:"], ["-u", ":s3cr3t-pw"], ["-u"], ["-u", "alice:s3cr3t-pw\r\nX: y"]])
    func aBadDashUIsAUsageErrorThatDoesNotEchoIt(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", ["http://127.0.0.1:9/x"] + arguments)
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        #expect(result.stderr.contains("-u"), "\(result.stderr)")
        #expect(!result.stderr.contains("s3cr3t") && !result.stderr.contains("alice"), "\(result.stderr)")
    }

    @Test func badTrustFilesAndPinsAreUsageErrors() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Data("not a certificate".utf8).write(to: directory.file("junk.pem"))
        let url = "https://127.0.0.1:9/x"
        for arguments in [["--cacert", directory.file("missing.pem").path], ["--cacert", directory.file("junk.pem").path],
                          ["--pinnedpubkey", "sha256//short"], ["--pinnedpubkey", "/some/key.pem"],
                          ["--pinnedpubkey", "sha256//" + Data(count: 32).base64EncodedString() + ";sha256//bad"]] {
            let result = try await runTool("fetchkit", arguments + [url, "-d", directory.url.path])
            #expect(result.status == ExitStatus.usage.rawValue, "\(arguments): \(result)")
            #expect(result.stderr.contains(arguments[0]), "\(arguments): \(result.stderr)")
        }
    }

    @Test func helpDescribesTheNewFlags() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        #expect(result.status == 0)
        for words in ["fetchkit demo", "-o, --output FILE", "-d, --directory DIR", "-j,", "-C -", "-u, --user USER:PASSWORD",
                      "--cacert FILE", "--pinnedpubkey sha256//", "-L, --location", "-s, --silent", "-O,"] {
            #expect(result.stdout.contains(words), "\(words)")
        }
    }

    @Test func namesThatAreNotAFileAreUsageErrors() {
        for name in ["-", "", "dir/", ".", "/tmp/.."] {
            #expect(throws: Options.UsageError.self, "\(name.debugDescription)") { try Options.parse(["http://127.0.0.1:9/x", "-o", name]) }
        }
        #expect(throws: Options.UsageError.self) { try Options.parse(["-c", "-o", "name.iso"]) }
    }

    /// On Linux FoundationNetworking answers a challenge on a libcurl handle FetchKit cannot set
    /// the CAs and pins on: the combination is refused before anything is sent, not left unpinned.
    @Test func dashUWithAPinIsRefusedOnLinux() throws {
        let pin = "sha256//" + Data(count: 32).base64EncodedString()
        #if canImport(FoundationNetworking)
        do {
            _ = try Options.parse(["http://127.0.0.1:9/x", "-u", "alice:s3cr3t-pw", "--pinnedpubkey", pin])
            Issue.record("-u with --pinnedpubkey was taken")
        } catch {
            #expect(error.description.contains("-u cannot go with --cacert or --pinnedpubkey"), "\(error.description)")
            #expect(!error.description.contains("s3cr3t"))
        }
        #else
        _ = try Options.parse(["http://127.0.0.1:9/x", "-u", "alice:s3cr3t-pw", "--pinnedpubkey", pin])
        #endif
    }

    /// A pin is checked on HTTPS only (curl's too); over plain HTTP it changes nothing, and a
    /// well-formed list of them is taken.
    @Test func wellFormedPinsAreTaken() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let pins = "sha256//" + Data(count: 32).base64EncodedString() + ";sha256//" + Data(repeating: 1, count: 32).base64EncodedString()
        let result = try await runTool("fetchkit", [server.url("/bytes/10").absoluteString, "--pinnedpubkey", pins, "-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
    }

    @Test(arguments: [("--paralel", "--parallel"), ("--retries", "--retry"), ("--quite", "--quiet"), ("--continu", "--continue"),
                      ("--max-sise", "--max-size"), ("--pinnedpubkeys", "--pinnedpubkey")])
    func anUnknownOptionNamesTheClosest(_ typed: String, _ meant: String) async throws {
        let result = try await runTool("fetchkit", [typed, "3", "http://127.0.0.1:9/x"])
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        let first = try #require(result.stderr.split(separator: "\n").first)
        #expect(first == "fetchkit: unknown option \(typed); did you mean \(meant)?", "\(result.stderr)")
    }

    @Test func anUnknownOptionFarFromAnyIsOnlyUnknown() async throws {
        let result = try await runTool("fetchkit", ["--zzzzzzzzzz", "http://127.0.0.1:9/x"])
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        #expect(result.stderr.hasPrefix("fetchkit: unknown option --zzzzzzzzzz\n"), "\(result.stderr)")
    }
}
