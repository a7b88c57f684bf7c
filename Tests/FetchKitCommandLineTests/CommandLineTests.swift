import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("The fetchkit command", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineTests {
    @Test func downloadsEveryURLAndSummarises() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = ["/bytes/100000", "/bytes/5000", "/status/404"].map { server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path, "--parallel", "2"])
        #expect(result.status == 11, "one failed, others succeeded: ExitStatus.someFailed")
        #expect(FileManager.default.contents(atPath: directory.file("100000").path) == TestResponse.patternBytes(count: 100_000))
        #expect(FileManager.default.contents(atPath: directory.file("5000").path) == TestResponse.patternBytes(count: 5000))
        #expect(!FileManager.default.fileExists(atPath: directory.file("404").path))
        #expect(result.stdout.contains("✓ 100000"))
        #expect(result.stdout.contains("✗ 404  HTTP 404"))
        #expect(result.stdout.contains("Downloaded 2 of 3 files"))
        #expect(result.stdout.contains("1 failed"))
        #expect(!result.stdout.contains("\u{1B}["), "no terminal escapes when the output is not a terminal")
    }

    @Test func succeedsWithStatusZeroAndUniqueNames() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = ["/bytes/10", "/bytes/10?again=1"].map { server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: directory.file("10").path))
        #expect(FileManager.default.fileExists(atPath: directory.file("10-1").path))
        #expect(result.stdout.contains("Downloaded 2 of 2 files"))
    }

    @Test func namesASiteRootIndexHtml() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/") { _ in TestResponse(status: 200, body: Data("home".utf8)) }
        let result = try await runTool("fetchkit", [server.url("/").absoluteString, "-d", directory.url.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("index.html").path) == Data("home".utf8))
    }

    @Test func retriesTransientFailures() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let url = server.url("/flaky/cli/2/503").absoluteString
        let result = try await runTool("fetchkit", [url, "-d", directory.url.path, "--retry", "2"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("HTTP 503"))
        #expect(result.stdout.contains("retrying (attempt 3 of 3)"))
        #expect(server.requests("/flaky/cli/2/503").count == 3)
        #expect(FileManager.default.contents(atPath: directory.file("503").path) == Data("ok after 2".utf8))
    }

    @Test func givesUpAfterItsRetries() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let url = server.url("/flaky/cli-hard/5/503").absoluteString
        let result = try await runTool("fetchkit", [url, "-d", directory.url.path, "--retry", "1"])
        #expect(result.status == 8, "ExitStatus.httpStatus")
        #expect(server.requests("/flaky/cli-hard/5/503").count == 2)
    }

    @Test func timeoutOptionBoundsASilentServer() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let url = server.url("/stall-head").absoluteString
        let result = try await runTool("fetchkit", [url, "-d", directory.url.path, "--timeout", "0.3", "--retry", "0"])
        #expect(result.status == 4, "ExitStatus.network")
        #expect(result.stdout.contains("no data for"))
    }

    @Test(arguments: [["--bogus"], ["ftp://example.com/x"], ["--parallel", "0", "http://127.0.0.1:9/"], ["--timeout"], ["-o"]])
    func badArgumentsGetUsage(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", arguments)
        #expect(result.status == 2)
        #expect(result.stderr.contains("usage: fetchkit"))
        #expect(result.stdout.isEmpty)
    }

    @Test func helpPrintsUsage() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("--per-host N"))
    }

    @Test func theOfflineDemoRefreshesTheSampleFeeds() async throws {
        let result = try await runTool("fetchkit", ["demo"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("runs offline"))
        #expect(result.stdout.contains("Nothing leaves this machine"))
        for title in ["Swift on Server", "Networking Weekly", "An Atom Feed", "A Relocated Feed", "A Slow Server"] {
            #expect(result.stdout.contains("✓ \(title)"), "\(title) missing from:\n\(result.stdout)")
        }
        #expect(result.stdout.contains("✗ broken.xml"))
        #expect(result.stdout.contains("the document ends too early"))
        #expect(result.stdout.contains("✗ not-a-feed.xml"))
        #expect(result.stdout.contains("✗ gone.xml"))
        #expect(result.stdout.contains("13 feeds in"))
        #expect(result.stdout.contains("10 refreshed, 3 failed"))
        let peak = result.stdout.split(separator: "\n").first { $0.contains("at most") }
            .flatMap { line in line.split(separator: " ").drop { $0 != "most" }.dropFirst().first }.flatMap { Int($0) }
        #expect(peak.map { $0 >= 1 && $0 <= 4 } == true, "the server's peak must respect the bound of 4")
    }
}

/// The command against hostile servers, URLs and output directories (see also SafeFilesTests).
@Suite("The fetchkit command's files", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineFileTests {
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }
    private let secretBytes = Data("precious bytes outside the output directory".utf8)

    @Test func aLinkPlantedAtAPartialFileInTheOutputDirectoryIsRefused() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove(); outside.remove() }
        server.resumableRoute("/planted", length: 50_000, etag: Locked("v1"), cutFull: Locked(false))
        let secret = outside.file("secret")
        try secretBytes.write(to: secret)
        // The partial file and a record that looks right, as an earlier run would leave them,
        // except that the partial file is a link to a file outside the output directory.
        try FileManager.default.createSymbolicLink(at: directory.file(".planted.fetchkit-partial"), withDestinationURL: secret)
        let record = #"{"url":"\#(server.url("/planted").absoluteString)","entityTag":"\"v1\"","length":\#(secretBytes.count)}"#
        try Data(record.utf8).write(to: directory.file(".planted.fetchkit-partial.json"))

        let result = try await runTool("fetchkit", [server.url("/planted").absoluteString, "-d", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(contents(secret) == secretBytes, "nothing is written through the link")
        #expect(contents(directory.file("planted")) == TestResponse.patternBytes(count: 50_000))
        #expect(server.requests("/planted").last?.header("Range") == nil)
        #expect(result.stdout.contains("Ignored the partial download"), "\(result.stdout)")
        #expect(result.stdout.contains("not a regular file"), "\(result.stdout)")
    }

    @Test func aDestinationThatIsALinkIsRefused() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove(); outside.remove() }
        let secret = outside.file("secret")
        try secretBytes.write(to: secret)
        try FileManager.default.createSymbolicLink(at: directory.file("5000"), withDestinationURL: secret)

        let result = try await runTool("fetchkit", [server.url("/bytes/5000").absoluteString, "-d", directory.url.path])

        #expect(result.status == 3, "ExitStatus.fileSystem")
        #expect(contents(secret) == secretBytes)
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: directory.file("5000").path)) == secret.path)
        #expect(result.stdout.contains("symbolic link"), "\(result.stdout)")
        #expect(server.requests("/bytes/5000").count == 0)
    }

    @Test func aDestinationThatIsADirectoryFailsClearly() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        try FileManager.default.createDirectory(at: directory.file("5000"), withIntermediateDirectories: false)
        let result = try await runTool("fetchkit", [server.url("/bytes/5000").absoluteString, "-d", directory.url.path])
        #expect(result.status == 3, "ExitStatus.fileSystem")
        #expect(result.stdout.contains("Is a directory"), "\(result.stdout)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("5000").path).isEmpty)
        #expect(server.requests("/bytes/5000").count == 0)
    }

    /// A real partial file with a record that must not be trusted: a link to a record outside,
    /// a record for another URL, a record whose length is not the file's.
    @Test(arguments: ["linked record", "another URL", "another length"])
    func anUntrustworthyRecordIsIgnoredWithANote(_ attack: String) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove(); outside.remove() }
        server.resumableRoute("/rec", length: 40_000, etag: Locked("v1"), cutFull: Locked(false))
        try TestResponse.patternBytes(count: 10_000).write(to: directory.file(".rec.fetchkit-partial"))
        let url = attack == "another URL" ? server.url("/other").absoluteString : server.url("/rec").absoluteString
        let length = attack == "another length" ? 9_999 : 10_000
        let record = Data(#"{"url":"\#(url)","entityTag":"\"v1\"","length":\#(length)}"#.utf8)
        let recordPath = directory.file(".rec.fetchkit-partial.json")
        let forged = outside.file("record.json")
        if attack == "linked record" {
            try record.write(to: forged)
            try FileManager.default.createSymbolicLink(at: recordPath, withDestinationURL: forged)
        } else {
            try record.write(to: recordPath)
        }

        let result = try await runTool("fetchkit", [server.url("/rec").absoluteString, "-d", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(server.requests("/rec").last?.header("Range") == nil, "not resumed")
        #expect(FileManager.default.contents(atPath: directory.file("rec").path) == TestResponse.patternBytes(count: 40_000))
        #expect(result.stdout.contains("Ignored the partial download"), "\(result.stdout)")
        if attack == "linked record" {
            #expect(FileManager.default.contents(atPath: forged.path) == record, "the record outside is untouched")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path) == ["rec"], "no partial files are left")
    }

    @Test func aVeryLongNameIsShortenedToFit() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let path = "/" + String(repeating: "long", count: 70) + ".tar.gz"      // 287 bytes
        server.route(path) { _ in .pattern(count: 2000) }
        let url = server.url(path)

        let result = try await runTool("fetchkit", [url.absoluteString, "-d", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        #expect(names == [SafeFileName.name(for: url)])
        let name = try #require(names.first)
        #expect(name.utf8.count <= SafeFileName.maximumByteCount)
        #expect(name.hasPrefix("longlong") && name.hasSuffix(".gz"))
        #expect(contents(directory.file(name)) == TestResponse.patternBytes(count: 2000))
    }

    /// Names up to the file system's limit, 255 bytes, are kept as the URL gives them; the
    /// download's own partial files shorten their names to fit beside them.
    @Test(arguments: [250, 255])
    func aLongNameThatFitsIsKeptAsGiven(_ bytes: Int) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // Two-byte characters as well: the limit is in bytes, not characters.
        let name = "é" + String(repeating: "x", count: bytes - 2 - ".bin".utf8.count) + ".bin"
        try #require(name.utf8.count == bytes)
        let path = "/files/" + (name.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? name)
        server.route(path) { _ in .pattern(count: 3000) }

        let result = try await runTool("fetchkit", [server.url(path).absoluteString, "-d", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path) == [name])
        #expect(contents(directory.file(name)) == TestResponse.patternBytes(count: 3000))
    }

    @Test func hostileNamesStayInsideTheOutputDirectory() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let paths = ["/a/..%2F..%2Fescape.txt", "/.bashrc", "/red%1B%5B31m.txt", "/%E2%80%AEgpj.exe", "/-rf", "/nul%00.bin"]
        for path in paths { server.route(path) { _ in .pattern(count: 100) } }
        let urls = paths.map { server.url($0) }

        let result = try await runTool("fetchkit", urls.map(\.absoluteString) + ["-d", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted()
        #expect(names == SafeFileName.uniqueNames(for: urls).sorted())
        #expect(names.contains("_._.._escape.txt"))
        #expect(names.contains("_bashrc"))
        #expect(names.contains("_rf"))
        for name in names {
            #expect(!name.hasPrefix(".") && !name.unicodeScalars.contains { SafeFileName.isUnsafe($0) }, "\(name.debugDescription)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.url.deletingLastPathComponent().appendingPathComponent("escape.txt").path))
    }

    @Test func maxSizeStopsALargeDownload() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let result = try await runTool("fetchkit", [server.url("/bytes/5000").absoluteString, "-d", directory.url.path, "--max-size", "1K"])
        #expect(result.status == 10, "ExitStatus.sizeLimit")
        #expect(result.stdout.contains("larger than the 1 KiB limit"), "\(result.stdout)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty)

        let roomy = try await runTool("fetchkit", [server.url("/bytes/5000").absoluteString, "-d", directory.url.path, "--max-size", "1M"])
        #expect(roomy.status == 0, "\(roomy.stdout)\(roomy.stderr)")
        let unlimited = try await runTool("fetchkit", [server.url("/bytes/6000").absoluteString, "-d", directory.url.path, "--max-size", "0"])
        #expect(unlimited.status == 0, "\(unlimited.stdout)\(unlimited.stderr)")
    }

    @Test func maxSizeStopsAGzipBomb() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let bomb = Gzip.zeros(count: 32 << 20)
        server.route("/bomb.bin") { _ in TestResponse(status: 200, headers: ["Content-Encoding": "gzip"], body: bomb) }
        let result = try await runTool("fetchkit", [server.url("/bomb.bin").absoluteString, "-d", directory.url.path,
                                                    "--max-size", "2M", "--retry", "0"])
        #expect(result.status == 10, "ExitStatus.sizeLimit")
        #expect(result.stdout.contains("larger than the 2 MiB limit"), "\(result.stdout)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty, "no partial file is left")
    }

    @Test(arguments: [["--max-size"], ["--max-size", "12Q"], ["--max-size", "-1"], ["--max-size", "99999999999G"]])
    func badMaxSizesGetUsage(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", arguments + ["http://127.0.0.1:9/"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("usage: fetchkit"))
    }

    @Test func helpDocumentsMaxSize() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        #expect(result.stdout.contains("--max-size SIZE"))
        #expect(result.stdout.contains("default 16G"))
    }
}
