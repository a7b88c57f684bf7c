import Foundation
import LoopbackServer
import Testing
@testable import FetchKit
@testable import fetchkit

@Suite("The fetchkit command: --limit-rate", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineLimitRateTests {
    @Test func theLimitHoldsTheServerToItsRate() async throws {
        // A small send buffer: what the server hands its kernel is close to what went on the wire.
        let server = try LoopbackServer(sendBufferSize: 32 << 10)
        let directory = try TemporaryDirectory()
        defer { server.stop(); directory.remove() }
        let started = Date()
        // 1 MiB at 200 KiB/s: about 5 s (the first burst and socket buffers make it a little less).
        let result = try await runTool("fetchkit", [server.url("/bytes/1048576").absoluteString, "-d", directory.url.path,
                                                    "--limit-rate", "200k"])
        let seconds = Date().timeIntervalSince(started)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("1048576").path)?.count == 1_048_576)
        #expect(seconds > 3.5, "1 MiB at 200 KiB/s took \(seconds) s")
    }

    @Test(arguments: [["--limit-rate", "0", "http://127.0.0.1:9/a"], ["--limit-rate", "fast", "http://127.0.0.1:9/a"],
                      ["http://127.0.0.1:9/a", "--limit-rate"], ["--limit-rate", "-5k", "http://127.0.0.1:9/a"]])
    func badRatesAreUsageErrors(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", arguments)
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("--limit-rate"))
    }

    @Test func ratesTakeSuffixesAsCurlAndWgetDo() throws {
        let options = try Options.parse(["--limit-rate", "500k", "http://127.0.0.1:9/a"])
        #expect(options.limitRate == 500 * 1024)
        #expect(try Options.parse(["--limit-rate", "2M", "http://127.0.0.1:9/a"]).limitRate == 2 << 20)
        #expect(try Options.parse(["--limit-rate", "1000", "http://127.0.0.1:9/a"]).limitRate == 1000)
        #expect(try Options.parse(["http://127.0.0.1:9/a"]).limitRate == nil)
    }
}
