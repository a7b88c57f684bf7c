import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `fetchkit` tool, started as a subprocess that a test can signal while it runs.
private final class RunningTool: Sendable {
    private let child: ChildProcess

    init(_ arguments: [String]) throws {
        child = try ChildProcess("fetchkit", arguments)
    }

    func send(_ signal: Int32) {
        child.send(signal)
    }

    /// Waits for the exit; a tool that does not exit is killed and the test fails.
    func finish() async throws -> (ending: ChildProcess.Ending, stdout: String, stderr: String) {
        try await child.finish(timeout: 60)
    }

    /// For a test that failed before the tool exited.
    func stop() {
        child.stop()
    }
}

/// Polls `condition` until it holds or `timeout` passes: for a state with no event to wait on
/// (a file growing in another process). The deadline only turns a hang into a failure.
private func eventually(timeout: TimeInterval = 90, _ condition: () -> Bool) async -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}

private func fileSize(_ url: URL) -> Int64? {
    (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value
}

/// A resumable file (a strong ETag, `Accept-Ranges`) whose first answer sends `firstPart`
/// bytes and then holds the connection open: the download is mid-body for as long as the
/// test needs. A `Range: bytes=N-` request gets the rest, as a 206.
private func serveResumableFile(_ server: TestServer, path: String, size: Int, firstPart: Int) {
    server.route(path) { request in
        let lastModified = "Wed, 21 Oct 2026 07:28:00 GMT"
        if let range = request.header("Range"), range.hasPrefix("bytes="), range.hasSuffix("-"),
           let start = Int(range.dropFirst("bytes=".count).dropLast()), start < size,
           request.header("If-Range") == "\"v1\"" {
            // `bytes=start-` with the right validator: a 206 of the rest.
            return TestResponse.ranged(patternCount: size, for: request, etag: "\"v1\"").with(header: "Last-Modified", lastModified)
        }
        return .steps([
            .head(status: 200, headers: ["ETag": "\"v1\"", "Last-Modified": lastModified, "Accept-Ranges": "bytes",
                                         "Content-Type": "application/octet-stream", "Content-Length": String(size)]),
            .patternBytes(offset: 0, count: firstPart),
            .stall,
        ])
    }
}

@Suite("fetchkit stops cleanly on a signal", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineInterruptTests {
    // The file is larger than the part the server sends at first, and that part larger than
    // what the download buffers before writing (256 KiB): the partial file grows on disk
    // while the transfer is still open.
    static let size = 1_000_000
    static let firstPart = 300_000

    @Test func ctrlCKeepsThePartialFileAndTheSameCommandResumesIt() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        serveResumableFile(server, path: "/big.bin", size: Self.size, firstPart: Self.firstPart)
        // The server holds the rest: no idle timeout may end the wait, however slow the run.
        let arguments = [server.url("/big.bin").absoluteString, "-d", directory.url.path, "--timeout", "3600"]
        let partial = directory.file(".big.bin.fetchkit-partial")
        let record = directory.file(".big.bin.fetchkit-partial.json")

        // Given a download that is mid-body
        let tool = try RunningTool(arguments)
        defer { tool.stop() }
        try #require(await eventually { (fileSize(partial) ?? 0) > 0 }, "the partial file never grew")

        // When the user presses Ctrl-C
        tool.send(SIGINT)
        let first = try await tool.finish()

        // Then it stops with 130, says so, and keeps the partial file and its record
        #expect(first.ending == .exit(130), "\(first.ending)\n\(first.stdout)\(first.stderr)")
        #expect(first.stdout.contains("Interrupted by SIGINT"), "\(first.stdout)")
        #expect(first.stdout.contains("1 partial file kept"), "\(first.stdout)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("big.bin").path))
        let kept = try #require(fileSize(partial))
        #expect(kept > 0 && kept <= Int64(Self.firstPart))
        #expect(FileManager.default.fileExists(atPath: record.path))
        let keptBytes = try #require(FileManager.default.contents(atPath: partial.path))
        #expect(keptBytes == TestResponse.patternBytes(count: keptBytes.count), "the partial file holds the body's first bytes")

        // When the same command runs again
        let second = try await RunningTool(arguments).finish()

        // Then it asks for the rest only, and the file is whole
        #expect(second.ending == .exit(0), "\(second.stdout)\(second.stderr)")
        let requests = server.requests("/big.bin")
        #expect(requests.count == 2)
        #expect(requests.last?.header("Range") == "bytes=\(kept)-")
        #expect(requests.last?.header("If-Range") == "\"v1\"")
        let file = try #require(FileManager.default.contents(atPath: directory.file("big.bin").path))
        #expect(file.count == Self.size && file == TestResponse.patternBytes(count: file.count))
        #expect(!FileManager.default.fileExists(atPath: partial.path))
        #expect(!FileManager.default.fileExists(atPath: record.path))
        #expect(second.stdout.contains("resumed at \(Format.bytes(kept))"), "\(second.stdout)")
    }

    /// Issue 20, 3.2: a Ctrl-C 0.2 s in, while the server pours a large body and a second file
    /// could start beside it. What reached FetchKit is on disk with a resume record, and the
    /// second file was requested at once. Three rounds, for the timing of the signal; one
    /// under a sanitizer, whose slowdown makes each round take ten seconds.
    @Test(arguments: runsUnderSanitizer ? [1] : [1, 2, 3])
    func anEarlyCtrlCKeepsWhatArrived(round: Int) async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let big = "/bytes/4000000000", small = "/bytes/1000"
        let arguments = [server.url(big).absoluteString, server.url(small).absoluteString,
                         "-d", directory.url.path, "--per-host", "2", "--timeout", "3600"]
        let partial = directory.file(".4000000000.fetchkit-partial")
        let record = directory.file(".4000000000.fetchkit-partial.json")

        let tool = try RunningTool(arguments)
        defer { tool.stop() }
        // Well past what the sockets' buffers hold: most of it has reached the process.
        #expect(await server.waitUntil(timeout: 60) { $0.patternBytesSent >= 96 << 20 }, "the body never flowed")
        tool.send(SIGINT)
        let ended = try await tool.finish()

        #expect(ended.ending == .exit(130), "\(ended.ending)\n\(ended.stdout)\(ended.stderr)")
        #expect(server.requests(small).count == 1, "the second file was not started beside the first")
        let kept = fileSize(partial) ?? 0
        #expect(kept >= 32 << 20, "kept \(kept) bytes of the \(server.counters.patternBytesSent) sent\n\(ended.stdout)")
        #expect(FileManager.default.fileExists(atPath: record.path), "no resume record\n\(ended.stdout)")
        #expect(!ended.stdout.contains("before it started"), "\(ended.stdout)")
    }

    @Test func sigtermStopsWith143AndKeepsThePartialFile() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // Two files, one transfer at once: whichever the queue starts first, the other waits
        // behind it and never starts. (Fetches prepare concurrently: the order is not fixed.)
        for name in ["a.bin", "b.bin"] {
            serveResumableFile(server, path: "/\(name)", size: Self.size, firstPart: Self.firstPart)
        }
        let arguments = [server.url("/a.bin").absoluteString, server.url("/b.bin").absoluteString,
                         "-d", directory.url.path, "--parallel", "1", "--timeout", "3600"]
        let partials = ["a.bin", "b.bin"].map { directory.file(".\($0).fetchkit-partial") }

        let tool = try RunningTool(arguments)
        defer { tool.stop() }
        try #require(await eventually { partials.contains { (fileSize($0) ?? 0) > 0 } }, "no partial file grew")
        tool.send(SIGTERM)
        let result = try await tool.finish()

        #expect(result.ending == .exit(143), "\(result.ending)\n\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("Interrupted by SIGTERM"), "\(result.stdout)")
        #expect(result.stdout.contains("1 not started"), "\(result.stdout)")
        let started = partials.filter { FileManager.default.fileExists(atPath: $0.path) }
        #expect(started.count == 1, "one partial file kept, the other download never started")
        #expect(started.allSatisfy { FileManager.default.fileExists(atPath: $0.path + ".json") })
        #expect(server.requests("/a.bin").count + server.requests("/b.bin").count == 1, "the waiting download sent nothing")
    }
}

@Suite("fetchkit's transfer rate", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct TransferRateTests {
    @Test func aResumedFileCountsOnlyThisRunsBytes() {
        var meter = TransferMeter()
        meter.report(300_000, requestedOffset: 300_000)    // the head of a 206: the bytes on disk
        meter.report(400_000, requestedOffset: 300_000)
        meter.report(1_300_000, requestedOffset: 300_000)
        #expect(meter.received == 1_300_000)
        #expect(meter.resumedFrom == 300_000)
        #expect(meter.bytesThisRun == 1_000_000)
    }

    @Test func aCoalescedFirstReportStillCountsFromTheResumePoint() {
        var resumed = TransferMeter()
        resumed.report(350_000, requestedOffset: 300_000)  // the 206's head report was coalesced
        resumed.report(1_300_000, requestedOffset: 300_000)
        #expect(resumed.bytesThisRun == 1_000_000)

        var refused = TransferMeter()
        refused.report(20_000, requestedOffset: 300_000)   // a 200: the file changed, it starts over
        refused.report(1_000_000, requestedOffset: 300_000)
        #expect(refused.bytesThisRun == 1_000_000)
        #expect(refused.resumedFrom == 0)
    }

    @Test func retriesAddUpWhetherTheyResumeOrStartOver() {
        var resumed = TransferMeter()
        resumed.report(0)
        resumed.report(500)
        resumed.attemptEnded()
        resumed.report(500, requestedOffset: 500)          // the retry resumes the partial file
        resumed.report(1_000, requestedOffset: 500)
        #expect(resumed.bytesThisRun == 1_000)
        #expect(resumed.resumedFrom == 0)

        var restarted = TransferMeter()
        restarted.report(0)
        restarted.report(500)
        restarted.attemptEnded()
        restarted.report(0)                                 // the retry starts over (no validator)
        restarted.report(800)
        #expect(restarted.bytesThisRun == 1_300)
        #expect(restarted.received == 800)
    }

    @Test func completionTakesTheExactResumePoint() {
        var meter = TransferMeter()
        meter.completed(size: 1_000, resumedBytes: 600)      // no report arrived before the end
        #expect(meter.bytesThisRun == 400)
        #expect(meter.resumedFrom == 600)
    }

    @Test func theFinishedLineOfAResumedFileShowsThisRunsRate() {
        let start = Date(timeIntervalSinceReferenceDate: 0)
        var item = Downloader.Item(url: URL(fileURLWithPath: "/x"), destination: URL(fileURLWithPath: "/tmp/big.bin"))
        item.meter.report(1 << 20, requestedOffset: 1 << 20)
        item.meter.completed(size: 2 << 20, resumedBytes: 1 << 20)
        item.state = .done
        item.startedAt = start
        item.finishedAt = start.addingTimeInterval(2)
        let line = ProgressDisplay.finalLine(item)
        #expect(line.contains("2.0 MiB in 2.0 s (512.0 KiB/s), resumed at 1.0 MiB"), "\(line)")
    }

    @Test func noTimeNoRate() {
        #expect(TransferMeter.rate(bytes: 100, seconds: 0) == nil)
        #expect(TransferMeter.rate(bytes: 100, seconds: 0.5) == 200)
        var request = URLRequest(url: URL(fileURLWithPath: "/x"))
        #expect(TransferMeter.requestedOffset(of: request) == 0)
        request.setValue("bytes=4096-", forHTTPHeaderField: "Range")
        #expect(TransferMeter.requestedOffset(of: request) == 4096)
    }
}
