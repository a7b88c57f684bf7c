import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// `--parallel N` without `--per-host` lets one host have all N, as curl's and aria2c's do; the
/// server counts how many it serves at once.
@Suite("The fetchkit command: --parallel and one host", .timeLimit(.minutes(2)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own; CI's time"))
struct CommandLineParallelTests {
    /// Serves `/slow/<n>` in 10 pieces 30 ms apart: each request lasts about 0.3 s, so that the
    /// server's peak of requests in flight shows how many ran at once.
    private static func serveSlowly(_ server: TestServer) {
        for index in 0..<8 {
            server.route("/slow/\(index)") { _ in
                var steps: [TestResponse.Step] = [.head(status: 200, headers: ["Content-Length": "1000"])]
                for piece in 0..<10 {
                    steps += [.patternBytes(offset: piece * 100, count: 100), .pause(milliseconds: 30)]
                }
                return .steps(steps)
            }
        }
    }

    @Test(arguments: [(["--parallel", "8"], 8), (["--parallel", "8", "--per-host", "3"], 3), ([String](), 4)])
    func oneHostGetsWhatTheLimitsAllow(_ flags: [String], _ expected: Int) async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        Self.serveSlowly(server)
        let urls = (0..<8).map { server.url("/slow/\($0)").absoluteString }
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path] + flags)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("per host)"), "\(result.stdout)")
        #expect(result.stdout.contains("\(expected) per host)"), "\(result.stdout)")
        let peak = server.counters.peakRequestsInFlight
        #expect(peak <= expected, "never more than the limit: \(peak)")
        if expected > 2 {
            #expect(peak > 2, "more than the old default of 2 at once: \(peak)")
        }
    }
}
