import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// The flags wget, curl and aria2c users know: --json, -q, -v, --version, -H, -A,
/// --content-disposition, --max-time, and the plain progress lines of a CI log.
/// The request's target as the request line gave it, for the queries these tests send (names
/// without values, or `name=value`).
private func target(of request: TestRequest) -> String {
    guard !request.query.isEmpty else { return request.path }
    return request.path + "?" + request.query.map { $0.value.isEmpty ? $0.key : "\($0.key)=\($0.value)" }.sorted().joined(separator: "&")
}

@Suite("The fetchkit command: flags", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineFlagsTests {
    /// Parses each line of `text` as a JSON object.
    private func jsonLines(_ text: String) throws -> [[String: Any]] {
        try text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
            return try #require(object as? [String: Any], "an object: \(line)")
        }
    }

    @Test func jsonIsOneValidObjectPerFileEvenWithHostileNamesAndURLs() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let hex = try await sha256sum(TestResponse.patternBytes(count: 2000))
        // A name with a quote, a backslash, a newline, ESC and a bidi override, and a token in the query.
        let path = "/file%22%5C%0A%1B%5B31m%E2%80%AEgpj.exe"
        let hostile = path + "?token=s3cr3t-value&x=%22%0A"
        server.route(path) { _ in TestResponse(status: 200, body: TestResponse.patternBytes(count: 2000)) }
        let list = """
        \(server.url(hostile).absoluteString) sha256:\(hex)
        \(server.url("/status/404").absoluteString)
        """
        let result = try await runTool("fetchkit", ["--json", "-i", "-", "-d", directory.url.path], input: Data(list.utf8))
        #expect(result.status == ExitStatus.someFailed.rawValue, "\(result)")
        let objects = try jsonLines(result.stdout)
        #expect(objects.count == 2, "one line per file: \(result.stdout)")
        #expect(!result.stdout.contains("s3cr3t-value"), "the URL is redacted")
        #expect(result.stderr.contains("Downloaded 1 of 2 files"), "the human output goes to standard error: \(result.stderr)")
        let saved = try #require(objects.first { $0["result"] as? String == "downloaded" })
        let savedPath = try #require(saved["path"] as? String)
        #expect(URL(fileURLWithPath: savedPath).deletingLastPathComponent().standardizedFileURL.path == directory.url.standardizedFileURL.path)
        #expect(FileManager.default.contents(atPath: savedPath) == TestResponse.patternBytes(count: 2000))
        #expect(saved["bytes"] as? Int == 2000)
        #expect(saved["status"] as? Int == 200)
        #expect(saved["sha256"] as? String == hex)
        #expect(saved["error"] is NSNull && saved["message"] is NSNull)
        #expect((saved["seconds"] as? Double).map { $0 >= 0 && $0 < 60 } == true)
        #expect((saved["url"] as? String)?.contains("token=REDACTED") == true, "\(saved)")
        let failed = try #require(objects.first { $0["result"] as? String == "failed" })
        #expect(failed["error"] as? String == "http")
        #expect(failed["status"] as? Int == 404)
        #expect(failed["message"] as? String == "HTTP 404 Not Found")
        #expect(failed["sha256"] is NSNull && failed["bytes"] as? Int == 0)
        #expect(!FileManager.default.fileExists(atPath: try #require(failed["path"] as? String)))
    }

    @Test func jsonAndQuietPrintOnlyTheJSONAndAFileKeptIsReported() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        try Data("mine".utf8).write(to: directory.file("300"))
        let result = try await runTool("fetchkit", [server.url("/bytes/300").absoluteString, server.url("/bytes/400").absoluteString,
                                                    "--json", "-q", "-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        let objects = try jsonLines(result.stdout)
        let results: [String] = objects.map { ($0["result"] as? String) ?? "" }.sorted()
        #expect(results == ["downloaded", "kept"], "\(result.stdout)")
        #expect(objects.first { $0["result"] as? String == "kept" }?["bytes"] as? Int == 4)
    }

    @Test func quietPrintsNothingButAFailedFileOnStandardError() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let ok = try await runTool("fetchkit", [server.url("/bytes/100").absoluteString, "-q", "-d", directory.url.path])
        #expect(ok == (0, "", ""), "\(ok)")
        #expect(FileManager.default.fileExists(atPath: directory.file("100").path))
        let failed = try await runTool("fetchkit", [server.url("/status/500?sig=hunter22").absoluteString, "--quiet", "--retry", "0", "-d", directory.url.path])
        #expect(failed.status == ExitStatus.httpStatus.rawValue)
        #expect(failed.stdout.isEmpty)
        #expect(failed.stderr == "fetchkit: 500: HTTP 500 Internal Server Error (\(server.url("/status/500?sig=REDACTED").absoluteString))\n", "\(failed.stderr)")
    }

    @Test func verboseShowsTheHeadersSentWithSecretsRedactedAndTheStatus() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", [server.url("/bytes/100").absoluteString, "-v", "-d", directory.url.path,
                                                    "-H", "X-Trace: trace-42", "-H", "Authorization: Bearer hunter2-token"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("X-Trace: trace-42"), "\(result.stdout)")
        #expect(result.stdout.contains("Authorization: REDACTED"), "\(result.stdout)")
        #expect(!result.stdout.contains("hunter2"), "\(result.stdout)")
        #expect(result.stdout.contains("< 100: HTTP 200"), "\(result.stdout)")
        let plain = try await runTool("fetchkit", [server.url("/bytes/101").absoluteString, "-d", directory.url.path])
        #expect(!plain.stdout.contains("HTTP 200"), "not without -v: \(plain.stdout)")
    }

    @Test(arguments: ["--version", "-V"])
    func versionPrintsTheVersionAndTheWorkaroundsAndExitsZero(_ flag: String) async throws {
        let result = try await runTool("fetchkit", [flag])
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "fetchkit \(Version.current)", "\(result)")
        #if os(Linux)
        for id in ["socket-wakeups", "connection-pool", "task-options", "response-heads", "openssl-exit"] {
            #expect(lines.contains("  \(id): active"), "\(id): \(result.stdout)")
        }
        #expect(lines.contains("  trust-settings: not needed: this session has no trust settings"), "\(result.stdout)")
        #endif
    }

    @Test func headersAndTheUserAgentReachTheServer() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", [server.url("/bytes/10").absoluteString, "-d", directory.url.path,
                                                    "-H", "X-One: 1", "--header", "X-Two:  two words ", "-H", "X-One: replaced",
                                                    "-A", "Agent/9 (test)"])
        #expect(result.status == 0, "\(result)")
        let request = try #require(server.requests("/bytes/10").first)
        #expect(request.headerFields.filter { $0.name.caseInsensitiveCompare("X-One") == .orderedSame }.map(\.value) == ["replaced"])
        #expect(request.header("X-Two") == "two words")
        #expect(request.header("User-Agent") == "Agent/9 (test)")
        let plain = try await runTool("fetchkit", [server.url("/bytes/11").absoluteString, "-d", directory.url.path, "--user-agent=Other/1"])
        #expect(plain.status == 0)
        #expect(server.requests("/bytes/11").first?.header("User-Agent") == "Other/1")
        _ = try await runTool("fetchkit", [server.url("/bytes/12").absoluteString, "-d", directory.url.path])
        #expect(server.requests("/bytes/12").first?.header("User-Agent") == "fetchkit/\(Version.current)")
    }

    @Test(arguments: [
        ["-H", "X Bad: v"], ["-H", "X-Inject: a\r\nInjected: yes"], ["-H", "X-Del: a\u{7F}Injected"], ["-H", "X-C1: a\u{85}Injected"], ["-H", "NoColon"],
        ["-H", ": no-name"], ["-H", "X-Empty:"], ["-H", "X-Bell: a\u{7}b"], ["-A", "Agent\nInjected: yes"], ["-H"],
    ])
    func badHeadersAreUsageErrorsThatDoNotEchoTheValue(_ flags: [String]) async throws {
        // (A NUL cannot be passed: an argument ends at its first NUL.)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let result = try await runTool("fetchkit", ["http://127.0.0.1:9/a", "-d", directory.url.path] + flags)
        #expect(result.status == 2, "\(result)")
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains("usage: fetchkit"))
        #expect(!result.stderr.contains("Injected"), "\(result.stderr)")
    }

    /// A hostile `Content-Disposition` name is sanitised exactly as a name from a URL is, and
    /// the file stays in the output directory.
    @Test(arguments: [
        ("attachment; filename=\"../../escaped.txt\"", "../../escaped.txt"),
        ("attachment; filename=/etc/passwd", "/etc/passwd"),
        ("attachment; filename*=UTF-8''..%2F..%2Fescaped%2Ftwice.txt", "../../escaped/twice.txt"),
        ("attachment; filename=\"ignored.txt\"; filename*=utf-8''caf%C3%A9%20menu.pdf", "café menu.pdf"),
        ("attachment; filename=\"a\\\"quoted\\\\name.txt\"", "a\"quoted\\name.txt"),
        ("attachment; filename=\"\u{1B}[31mred\u{202E}txt.exe\"", "\u{1B}[31mred\u{202E}txt.exe"),
        ("attachment; filename=\"..\"", ".."),
        ("attachment; filename=\"\"", ""),
        ("attachment; filename=\"\(String(repeating: "long", count: 200)).iso\"", String(repeating: "long", count: 200) + ".iso"),
        ("attachment; filename=\".hidden\"", ".hidden"),
    ])
    func contentDispositionNamesAreMadeSafe(_ header: String, _ raw: String) async throws {
        let server = try TestServer()
        let base = try TemporaryDirectory()
        defer { server.shutDown(); base.remove() }
        let output = base.file("out")
        server.route("/download") { _ in TestResponse(status: 200, headers: ["Content-Disposition": header], body: Data("payload".utf8)) }
        let url = server.url("/download")
        let result = try await runTool("fetchkit", [url.absoluteString, "--content-disposition", "-d", output.path])
        #expect(result.status == 0, "\(result)")
        let expected = SafeFileName.sanitize(raw, source: url.absoluteString)
        let files = try FileManager.default.contentsOfDirectory(atPath: output.path)
        #expect(files == [expected], "\(files)")
        #expect(FileManager.default.contents(atPath: output.appendingPathComponent(expected).path) == Data("payload".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: base.url.path) == ["out"], "nothing outside the directory")
        #expect(!result.stdout.contains("\u{1B}"), "\(result.stdout)")
    }

    /// A file already there under the server's name is kept, as one under the URL's name is:
    /// the server is asked the name with a `HEAD` (as wget does), and nothing is downloaded again
    /// beside it — a second run of the same command sends no `GET`. Within one run, two
    /// downloads the server names alike get `NAME-1.ext`; `--force` replaces.
    @Test func contentDispositionKeepsAFileAlreadyThereUnlessForced() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/get") { request in
            TestResponse(status: 200, headers: ["Content-Disposition": "attachment; filename=report.csv"], body: Data("new \(target(of: request))".utf8))
        }
        server.route("/other") { request in
            TestResponse(status: 200, headers: ["Content-Disposition": "attachment; filename=data.csv"], body: Data("\(target(of: request))".utf8))
        }
        let gets = { server.requests.filter { $0.method == "GET" }.map(target(of:)) }
        try Data("mine".utf8).write(to: directory.file("report.csv"))
        let kept = try await runTool("fetchkit", [server.url("/get?a").absoluteString, "--content-disposition", "-d", directory.url.path])
        #expect(kept.status == 0, "\(kept)")
        #expect(kept.stdout.contains("report.csv") && kept.stdout.contains("already there, kept"), "\(kept.stdout)")
        #expect(gets().isEmpty, "asked its name with a HEAD, then kept: \(gets())")
        #expect(FileManager.default.contents(atPath: directory.file("report.csv").path) == Data("mine".utf8))

        let twice = [server.url("/other?1").absoluteString, server.url("/other?2").absoluteString, "--content-disposition", "-d", directory.url.path]
        let first = try await runTool("fetchkit", twice)
        #expect(first.status == 0, "\(first)")
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: directory.url.path)) == ["report.csv", "data.csv", "data-1.csv"])
        let getsBefore = gets().count
        let second = try await runTool("fetchkit", twice)
        #expect(second.status == 0, "\(second)")
        #expect(gets().count == getsBefore, "the second run downloads nothing again: \(gets())")
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: directory.url.path)) == ["report.csv", "data.csv", "data-1.csv"])

        let forced = try await runTool("fetchkit", [server.url("/get?c").absoluteString, "--content-disposition", "--force", "-d", directory.url.path])
        #expect(forced.status == 0, "\(forced)")
        #expect(FileManager.default.contents(atPath: directory.file("report.csv").path) == Data("new /get?c".utf8))

        let without = try await runTool("fetchkit", [server.url("/get?d").absoluteString, "-d", directory.url.path])
        #expect(without.status == 0)
        #expect(FileManager.default.fileExists(atPath: directory.file("get").path), "without the flag, the URL's name")
    }

    @Test func maxTimeBoundsAWholeDownloadThatKeepsTrickling() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // A chunk every 100 ms, for ever: never idle, so only --max-time can end it (a run
        // that ignored it would hang until the child's deadline turns it into a failure).
        server.route("/endless") { _ in
            .slowBody(count: .max, chunkSize: 100, intervalMilliseconds: 100)
        }
        let result = try await runTool("fetchkit", [server.url("/endless").absoluteString, "-d", directory.url.path,
                                                    "--max-time", "0.5", "--timeout", "30"])
        #expect(result.status == ExitStatus.network.rawValue, "\(result)")
        #expect(result.stdout.contains("✗ endless  not complete within 0.5 s (--max-time)"), "\(result.stdout)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("endless").path))
    }

    @Test func outsideATerminalProgressIsAPlainLinePerActiveFileEveryInterval() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // 20 chunks of 5000 bytes, one each 100 ms: about 2 s.
        let url = server.url("/trickle/100000/5000/100").absoluteString
        let result = try await runTool("fetchkit", [url, "-d", directory.url.path, "--summary-interval", "0.3"])
        #expect(result.status == 0, "\(result)")
        // A tick before the first bytes (a loaded machine starts the process late) shows none:
        // `0 B  –`. Every later line has bytes and a rate.
        let lines = result.stdout.split(separator: "\n").filter { $0.hasPrefix("  ↓ 100  ") }
            .drop { $0.hasPrefix("  ↓ 100  0 B") }
        #expect(lines.count >= 2, "\(result.stdout)")
        #expect(lines.allSatisfy { $0.contains(" KiB") && $0.contains("/s") }, "bytes and rate: \(lines)")
        #expect(!result.stdout.contains("\u{1B}"), "no escape sequence: \(result.stdout)")

        let silent = try await runTool("fetchkit", [url, "-d", directory.file("again").path, "--summary-interval=0"])
        #expect(silent.status == 0)
        #expect(!silent.stdout.contains("↓"), "\(silent.stdout)")
    }
}
