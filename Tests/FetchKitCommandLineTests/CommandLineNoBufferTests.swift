import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// `fetchkit -N URL` (curl's `-N`, issue 34 point 5): the body to standard output as it
/// arrives, usable in a pipe.
@Suite("fetchkit -N: a body to standard output as it arrives", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineNoBufferTests {
    /// The first line reaches the pipe while the server holds the rest (so it was written as
    /// it arrived, not at the end); then the reader goes away (`| head -1`) and the server
    /// sends on: the command ends quietly with exit 0, not with SIGPIPE or an error, and its
    /// connection closes.
    @Test func aLineArrivesAtOnceAndAReaderThatGoesAwayEndsTheStreamQuietly() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        let response = TestResponse.steps([
            .head(status: 200, headers: ["Content-Type": "text/plain", "Connection": "close"]),
            .write(Data("first line\n".utf8)),
            .wait(for: gate),
            .patternBytes(offset: 0, count: 256 << 20),
            .close,
        ])
        server.route("/tail") { _ in response }
        let child = try ChildProcess("fetchkit", ["-N", server.url("/tail").absoluteString], standardOutput: .pipeClosedAfterFirstLine)
        defer { child.stop() }
        try #require(await child.outputClosed.wait(timeout: 60), "the first line never came while the server held the rest")
        gate.open()
        let result = try await child.finish(timeout: 60)
        #expect(result.ending == .exit(0), "\(result.ending)\n\(result.stderr)")
        #expect(result.stdout == "first line\n", "\(result.stdout.prefix(200))")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(await server.waitUntil(timeout: 10) { $0.connectionsOpen == 0 })
    }

    /// The whole body, byte for byte, and a failure's line and exit status as for a download.
    @Test func theWholeBodyAndAFailureAsADownloadsWouldBe() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let text = (1...20_000).map { "line \($0)\n" }.joined()
        server.route("/lines") { _ in .text(text) }
        let body = try await runTool("fetchkit", ["-N", server.url("/lines").absoluteString])
        #expect(body.status == 0, "\(body.stderr)")
        #expect(body.stdout == text)
        let missing = try await runTool("fetchkit", ["-N", "--retry", "0", server.url("/status/404").absoluteString])
        #expect(missing.status == ExitStatus.httpStatus.rawValue, "\(missing.stderr)")
        #expect(missing.stderr.contains("404"), "\(missing.stderr)")
        #expect(missing.stdout.isEmpty)
    }

    @Test func itTakesOneURLAndNoFileOptions() throws {
        #expect(throws: Options.UsageError.self) { try Options.parse(["-N", "http://a.example/", "http://b.example/"]) }
        for extra in [["-o", "x"], ["--json"], ["-c"], ["--content-disposition"]] {
            #expect(throws: Options.UsageError.self, "\(extra)") { try Options.parse(["-N", "http://a.example/"] + extra) }
        }
        let options = try Options.parse(["--no-buffer", "http://a.example/"])
        #expect(options.noBuffer)
    }
}
