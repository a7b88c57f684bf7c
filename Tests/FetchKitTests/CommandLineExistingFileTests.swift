import FetchKit
import Foundation
import LoopbackServer
import Testing

/// Files already in the output directory (issue 20, 3.5): kept unless `--force`, as wget's
/// `--no-clobber` keeps them; a finished file is not downloaded again.
@Suite("fetchkit and files that exist", .timeLimit(.minutes(3)))
struct CommandLineExistingFileTests {
    @Test func aFileAlreadyThereIsKeptAndNotRequested() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        server.route("/hello.txt") { _ in .text("from the server") }
        let mine = Data("the user's own hello.txt".utf8)
        try mine.write(to: directory.file("hello.txt"))

        let result = try await runTool("fetchkit", [server.url("/hello.txt").absoluteString, server.url("/bytes/100").absoluteString,
                                                    "-o", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("hello.txt").path) == mine, "replaced without --force")
        #expect(server.requestCount(path: "/hello.txt") == 0)
        #expect(result.stdout.contains("= hello.txt  already there, kept (--force downloads it again)"), "\(result.stdout)")
        #expect(result.stdout.contains("Downloaded 1 of 2 files"), "\(result.stdout)")
        #expect(result.stdout.contains("1 already there, kept"), "\(result.stdout)")
        #expect(FileManager.default.contents(atPath: directory.file("100").path) == BytePattern.data(offset: 0, count: 100))
    }

    @Test func forceReplacesIt() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        server.route("/hello.txt") { _ in .text("from the server") }
        try Data("old".utf8).write(to: directory.file("hello.txt"))

        let result = try await runTool("fetchkit", [server.url("/hello.txt").absoluteString, "-o", directory.url.path, "--force"])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("hello.txt").path) == Data("from the server".utf8))
        #expect(server.requestCount(path: "/hello.txt") == 1)
    }

    @Test func theSameCommandTwiceDownloadsOnce() async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let arguments = [server.url("/bytes/20000").absoluteString, "-o", directory.url.path]
        let first = try await runTool("fetchkit", arguments)
        let second = try await runTool("fetchkit", arguments)
        #expect(first.status == 0 && second.status == 0, "\(first.stdout)\(second.stdout)")
        #expect(server.requestCount(path: "/bytes/20000") == 1, "a finished file is fetched again")
        #expect(FileManager.default.contents(atPath: directory.file("20000").path) == BytePattern.data(offset: 0, count: 20000))
    }

    @Test func helpNamesTheOption() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        #expect(result.stdout.contains("--force"))
        #expect(result.stdout.contains("--no-clobber"))
    }
}
