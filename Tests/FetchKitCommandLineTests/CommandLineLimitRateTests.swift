import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
@testable import fetchkit

@Suite("The fetchkit command: --limit-rate", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineLimitRateTests {
    @Test func theLimitHoldsTheServerToItsRate() async throws {
        // A small send buffer: what the server hands its kernel is close to what went on the wire.
        let server = try TestServer.standard(sendBufferSize: 32 << 10)
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
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

/// `--limit-rate` is per download, as curl and wget mean it; `--limit-rate-total` is the total.
@Suite("The fetchkit command: --limit-rate per download", .timeLimit(.minutes(2)))
struct CommandLineLimitRatePerDownloadTests {
    @Test func limitRateIsPerDownloadAndTheTotalIsItsOwnFlag() throws {
        let each = try Options.parse(["--limit-rate", "100k", "http://127.0.0.1:9/a"])
        #expect(each.limitRate == 100 << 10 && each.limitRateTotal == nil)
        let both = try Options.parse(["--limit-rate", "100k", "--limit-rate-total", "1M", "http://127.0.0.1:9/a"])
        #expect(both.limitRate == 100 << 10 && both.limitRateTotal == 1 << 20)
        #expect(try Options.parse(["--max-overall-download-limit", "2M", "http://127.0.0.1:9/a"]).limitRateTotal == 2 << 20)
        #expect(try Options.parse(["--max-download-limit", "2M", "http://127.0.0.1:9/a"]).limitRate == 2 << 20)
    }
}

/// A fetch's own limit holds for it alone, in a queue or not.
@Suite("A fetch's own bandwidth limit", .timeLimit(.minutes(2)))
struct FetchBandwidthLimitTests {
    @Test(arguments: [false, true])
    func aFetchReadsNoFasterThanItsOwnLimit(inQueue: Bool) async throws {
        let server = try TestServer.standard(sendBufferSize: 32 << 10)
        defer { server.shutDown() }
        // 300,000 bytes at 100,000 bytes a second: about 3 s (the first burst makes it a little less).
        let operation = FetchOperation<Data>(url: server.url("/bytes/300000"))
        operation.configuration.bandwidthLimit = 100_000
        let started = ContinuousClock.now
        if inQueue {
            _ = try await FetchQueue(maximumConcurrentTransfers: 4).fetch(operation)
        } else {
            try await operation.run()
        }
        let elapsed = ContinuousClock.now - started
        #expect(operation.responseBody?.count == 300_000)
        #expect(elapsed > .seconds(2), "300,000 bytes at 100,000 B/s took \(elapsed)")
    }

    @Test func twoFetchesWithTheirOwnLimitsAreNotSharedAndEachIsHeld() async throws {
        let server = try TestServer.standard(sendBufferSize: 32 << 10)
        defer { server.shutDown() }
        let queue = FetchQueue(maximumConcurrentTransfers: 4, coalescesIdenticalRequests: true)
        let operations = (0..<2).map { _ in FetchOperation<Data>(url: server.url("/bytes/200000")) }
        for operation in operations { operation.configuration.bandwidthLimit = 100_000 }
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Int.self) { group in
            for operation in operations { group.addTask { try await queue.fetch(operation).count } }
            for try await count in group { #expect(count == 200_000) }
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed > .milliseconds(1300), "each read at most 100,000 B/s: \(elapsed)")
        #expect(server.requests("/bytes/200000").count == 2, "a fetch with a limit of its own has its own transfer")
    }
}
