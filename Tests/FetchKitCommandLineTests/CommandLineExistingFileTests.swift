import FetchKit
import Foundation
import FetchKitTesting
import Testing

/// Files already in the output directory (issue 20, 3.5): kept unless `--force`, as wget's
/// `--no-clobber` keeps them; a finished file is not downloaded again; the server is asked, by
/// a conditional `HEAD`, whether its copy changed, and the answer is said.

/// The requests for `path` that would fetch a body (not the `HEAD` that asks about a file).
private func gets(_ server: TestServer, _ path: String) -> Int {
    server.requests(path).filter { $0.method == "GET" }.count
}
@Suite("fetchkit and files that exist", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineExistingFileTests {
    @Test func aFileAlreadyThereIsKeptAndNotRequested() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/hello.txt") { _ in .text("from the server") }
        let mine = Data("the user's own hello.txt".utf8)
        try mine.write(to: directory.file("hello.txt"))

        let result = try await runTool("fetchkit", [server.url("/hello.txt").absoluteString, server.url("/bytes/100").absoluteString,
                                                    "-d", directory.url.path])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("hello.txt").path) == mine, "replaced without --force")
        #expect(gets(server, "/hello.txt") == 0)
        #expect(result.stdout.contains("= hello.txt  already there, kept; the server's copy differs (--force replaces it)"), "\(result.stdout)")
        #expect(result.stdout.contains("Downloaded 1 of 2 files"), "\(result.stdout)")
        #expect(result.stdout.contains("1 already there, kept"), "\(result.stdout)")
        #expect(FileManager.default.contents(atPath: directory.file("100").path) == TestResponse.patternBytes(count: 100))
    }

    @Test func forceReplacesIt() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/hello.txt") { _ in .text("from the server") }
        try Data("old".utf8).write(to: directory.file("hello.txt"))

        let result = try await runTool("fetchkit", [server.url("/hello.txt").absoluteString, "-d", directory.url.path, "--force"])

        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("hello.txt").path) == Data("from the server".utf8))
        #expect(server.requests("/hello.txt").count == 1)
    }

    @Test func theSameCommandTwiceDownloadsOnce() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let arguments = [server.url("/bytes/20000").absoluteString, "-d", directory.url.path]
        let first = try await runTool("fetchkit", arguments)
        let dated = try FileManager.default.attributesOfItem(atPath: directory.file("20000").path)[.modificationDate] as? Date
        #expect(dated == HTTPDate.parse(StandardRoutes.lastModified), "the file has the server's Last-Modified")
        let second = try await runTool("fetchkit", arguments)
        #expect(first.status == 0 && second.status == 0, "\(first.stdout)\(second.stdout)")
        #expect(gets(server, "/bytes/20000") == 1, "a finished file is fetched again")
        #expect(server.requests("/bytes/20000").last?.header("If-Modified-Since") == StandardRoutes.lastModified,
                "the second run asks about the copy it has, dated with the server's Last-Modified")
        #expect(second.stdout.contains("= 20000  already there, unchanged on the server"), "\(second.stdout)")
        #expect(FileManager.default.contents(atPath: directory.file("20000").path) == TestResponse.patternBytes(count: 20000))
    }

    @Test func helpNamesTheOption() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        #expect(result.stdout.contains("--force"))
        #expect(result.stdout.contains("--no-clobber"))
    }

    @Test func aNotModifiedAnswerSaysUnchangedAndAChangedCopyIsKeptAndNamed() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let version = Locked("Tue, 20 Oct 2026 10:00:00 GMT")
        server.route("/dated.txt") { request in
            let current = version.current
            if request.header("If-Modified-Since") == current {
                return TestResponse(status: 304, headers: ["Last-Modified": current])
            }
            return TestResponse.text("version of \(current)").with(header: "Last-Modified", current)
        }
        let arguments = [server.url("/dated.txt").absoluteString, "-d", directory.url.path]
        let first = try await runTool("fetchkit", arguments)
        let file = directory.file("dated.txt")
        let original = try #require(FileManager.default.contents(atPath: file.path), "\(first.stdout)")

        // Unchanged: 304 to the date the first run gave the file
        let second = try await runTool("fetchkit", arguments)
        #expect(second.status == 0 && second.stdout.contains("= dated.txt  already there, unchanged on the server"), "\(second.stdout)")

        // Changed on the server: kept, and said
        version.withLock { $0 = "Wed, 21 Oct 2026 10:00:00 GMT" }
        let third = try await runTool("fetchkit", arguments)
        #expect(third.status == 0, "\(third.stdout)")
        #expect(third.stdout.contains("the server's copy differs (--force replaces it)"), "\(third.stdout)")
        #expect(FileManager.default.contents(atPath: file.path) == original, "replaced without --force")
        #expect(gets(server, "/dated.txt") == 1)

        // --force takes the new copy
        let fourth = try await runTool("fetchkit", arguments + ["--force"])
        #expect(fourth.status == 0, "\(fourth.stdout)")
        #expect(FileManager.default.contents(atPath: file.path) == Data("version of Wed, 21 Oct 2026 10:00:00 GMT".utf8))
    }
}
