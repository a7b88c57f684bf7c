import FetchKit
import Foundation
import LoopbackServer
import Testing
@testable import fetchkit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the command's output goes in real use: a pipe that closes early (`| head -1`).
@Suite("fetchkit's output in pipes", .timeLimit(.minutes(3)))
struct CommandLinePipeTests {
    /// `fetchkit URL… | head -1`: the reader goes away after the header line, while the
    /// downloads are held at the server. They finish, the files are whole, and the exit status
    /// is the downloads' (0, or 1 when one failed) — not death by SIGPIPE (141).
    @Test(arguments: [false, true])
    func aClosedPipeStopsThePrintingNotTheDownloads(withAFailure: Bool) async throws {
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let gate = ServerGate()
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
        let child = try ChildProcess("fetchkit", urls + ["-o", directory.url.path], standardOutput: .pipeClosedAfterFirstLine)
        defer { child.stop() }
        try #require(await child.outputClosed.wait(timeout: 60), "the header line never came")

        // When the downloads end after that (each then prints a line into the closed pipe)
        gate.open()
        let result = try await child.finish(timeout: 60)

        // Then every download finished, and the exit status says how they went
        #expect(result.ending == .exit(withAFailure ? 1 : 0), "\(result.ending)\n\(result.stdout)\(result.stderr)")
        #expect(result.stdout.hasPrefix("Downloading \(names.count) files"), "\(result.stdout)")
        for name in ["a.bin", "b.bin"] {
            #expect(FileManager.default.contents(atPath: directory.file(name).path) == BytePattern.data(offset: 0, count: 50_000), "\(name)")
        }
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(server.requestCount(path: "/held/a.bin") == 1 && server.requestCount(path: "/held/b.bin") == 1)
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
