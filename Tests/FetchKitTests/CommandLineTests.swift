import Foundation
import LoopbackServer
import Testing
@testable import FetchKit

/// Runs an executable built beside the test bundle and collects its output.
func runTool(_ name: String, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let process = Process()
    process.executableURL = directory.appendingPathComponent(name)
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let exited = Countdown(1)
    process.terminationHandler = { _ in exited.signal() }
    try process.run()
    // Read both pipes to the end (a full pipe would block the tool), then wait for the exit.
    async let stdout = Task.detached { out.fileHandleForReading.readDataToEndOfFile() }.value
    async let stderr = Task.detached { err.fileHandleForReading.readDataToEndOfFile() }.value
    let (output, errors) = await (stdout, stderr)
    guard await exited.wait(timeout: 120) else {
        process.terminate()
        throw ParseTestError(reason: "\(name) did not exit")
    }
    return (process.terminationStatus, String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self))
}

@Suite("The fetchkit command")
struct CommandLineTests {
    @Test func downloadsEveryURLAndSummarises() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let urls = ["/bytes/100000", "/bytes/5000", "/status/404"].map { server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + ["-o", directory.url.path, "--parallel", "2"])
        #expect(result.status == 1, "a failed download makes the exit status 1")
        #expect(FileManager.default.contents(atPath: directory.file("100000").path) == BytePattern.data(offset: 0, count: 100_000))
        #expect(FileManager.default.contents(atPath: directory.file("5000").path) == BytePattern.data(offset: 0, count: 5000))
        #expect(!FileManager.default.fileExists(atPath: directory.file("404").path))
        #expect(result.stdout.contains("✓ 100000"))
        #expect(result.stdout.contains("✗ 404  HTTP 404"))
        #expect(result.stdout.contains("Downloaded 2 of 3 files"))
        #expect(result.stdout.contains("1 failed"))
        #expect(!result.stdout.contains("\u{1B}["), "no terminal escapes when the output is not a terminal")
    }

    @Test func succeedsWithStatusZeroAndUniqueNames() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let urls = ["/bytes/10", "/bytes/10?again=1"].map { server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + ["-o", directory.url.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: directory.file("10").path))
        #expect(FileManager.default.fileExists(atPath: directory.file("10-1").path))
        #expect(result.stdout.contains("Downloaded 2 of 2 files"))
    }

    @Test func namesASiteRootIndexHtml() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        server.route("/") { _ in HTTPResponse(status: 200, body: Data("home".utf8)) }
        let result = try await runTool("fetchkit", [server.url("/").absoluteString, "-o", directory.url.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("index.html").path) == Data("home".utf8))
    }

    @Test func retriesTransientFailures() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let url = server.url("/flaky/cli/2/503").absoluteString
        let result = try await runTool("fetchkit", [url, "-o", directory.url.path, "--retry", "2"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("HTTP 503"))
        #expect(result.stdout.contains("retrying (attempt 3 of 3)"))
        #expect(server.requestCount(path: "/flaky/cli/2/503") == 3)
        #expect(FileManager.default.contents(atPath: directory.file("503").path) == Data("ok after 2".utf8))
    }

    @Test func givesUpAfterItsRetries() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let url = server.url("/flaky/cli-hard/5/503").absoluteString
        let result = try await runTool("fetchkit", [url, "-o", directory.url.path, "--retry", "1"])
        #expect(result.status == 1)
        #expect(server.requestCount(path: "/flaky/cli-hard/5/503") == 2)
    }

    @Test func timeoutOptionBoundsASilentServer() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let url = server.url("/stall-head").absoluteString
        let result = try await runTool("fetchkit", [url, "-o", directory.url.path, "--timeout", "0.3", "--retry", "0"])
        #expect(result.status == 1)
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

    @Test func withNoURLTheOfflineDemoRefreshesTheSampleFeeds() async throws {
        let result = try await runTool("fetchkit", [])
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
