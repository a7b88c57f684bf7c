import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A body of `steps` × `step` bytes with a `Content-Length`, sent one step every `milliseconds`:
/// at most `step / milliseconds` bytes per millisecond (a loaded machine only makes it slower).
/// With `hold`, the steps after the first `hold.steps` wait for `hold.gate` to open.
private func pacedBody(steps: Int, step: Int, milliseconds: Int, offset: Int = 0,
                       hold: (steps: Int, gate: TestGate)? = nil) -> TestResponse {
    var actions: [TestResponse.Step] = [.head(status: 200, headers: ["Content-Length": "\(steps * step)"])]
    for index in 0..<steps {
        if let hold, index == hold.steps { actions.append(.wait(for: hold.gate)) }
        actions.append(.patternBytes(offset: offset + index * step, count: step))
        if index < steps - 1 { actions.append(.pause(milliseconds: milliseconds)) }
    }
    actions.append(.close)
    return .steps(actions)
}

private let second: UInt64 = 1_000_000_000

@Suite("Rate and time remaining", .timeLimit(.minutes(3)))
struct ProgressRateTests {
    // MARK: The window, as a value

    @Test func aSteadyRateIsMeasuredExactlyOnceHalfASecondHasPassed() {
        var window = RateWindow()
        window.begin(at: 10 * second)
        window.add(40_000, at: 10 * second + second / 4)     // 160 kB/s, a quarter second in
        #expect(window.bytesPerSecond == nil, "nothing before half a second")
        for tick in 2...40 {                                  // 10 s at 160,000 B/s
            window.add(40_000, at: 10 * second + UInt64(tick) * second / 4)
        }
        #expect(window.bytesPerSecond == 160_000)
        #expect(window.timeRemaining(for: 320_000) == 2)
        #expect(window.timeRemaining(for: 0) == 0)
    }

    @Test func theRateForgetsWhatCameBeforeTheWindow() {
        var window = RateWindow()
        window.begin(at: 0)
        for tick in 1...40 { window.add(250_000, at: UInt64(tick) * second / 4) }    // 1 MB/s for 10 s
        for tick in 41...80 { window.add(2_500, at: UInt64(tick) * second / 4) }     // 10 kB/s for 10 s
        #expect(window.bytesPerSecond == 10_000, "the window is 5 s: the fast part is gone")
        #expect(window.samples.count <= 22, "bounded: \(window.samples.count) samples")
    }

    @Test func manySmallChunksKeepFewSamples() {
        var window = RateWindow()
        window.begin(at: 0)
        for tick in 1...100_000 { window.add(10, at: UInt64(tick) * 100_000) }      // 10 s of 100 µs chunks
        #expect(window.samples.count <= 22)
        let rate = window.bytesPerSecond ?? 0
        #expect(abs(rate - 100_000) < 1, "\(rate)")
    }

    @Test func aStallLowersTheRateAtTheNextChunk() {
        var window = RateWindow()
        window.begin(at: 0)
        for tick in 1...20 { window.add(25_000, at: UInt64(tick) * second / 4) }     // 100 kB/s for 5 s
        window.add(25_000, at: 9 * second)                                           // then 4 s of nothing
        let rate = window.bytesPerSecond ?? 0
        #expect(rate < 60_000 && rate > 20_000, "\(rate)")
    }

    @Test func equalityComparesTheCountsNotTheEstimates() {
        let a = FetchProgress(bytesReceived: 5, bytesExpected: 10, bytesPerSecond: 1, estimatedTimeRemaining: 5)
        let b = FetchProgress(bytesReceived: 5, bytesExpected: 10)
        #expect(a == b)
        #expect(a != FetchProgress(bytesReceived: 6, bytesExpected: 10))
    }

    // MARK: Against a server that sends at a known pace

    @Test func aFetchReportsTheRateTheServerSendsAtAndTheTimeLeft() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // 8 KiB every 50 ms: at most 163,840 B/s, for 3 s. The last 15 steps wait until the
        // test has heard of the first 46: a loaded machine may deliver progress late, and the
        // newest value then is the last (no value before the end would be left to check).
        let gate = TestGate()
        server.route("/paced") { _ in pacedBody(steps: 61, step: 8192, milliseconds: 50, hold: (46, gate)) }
        let operation = FetchOperation<Data>(url: server.url("/paced"))
        let progress = operation.progress                 // asked for: it gets the rate too
        let seen = Locked<[FetchProgress]>([])
        operation.onProgress(on: .global) { value in
            seen.withLock { $0.append(value) }
            if value.bytesReceived >= 46 * 8192 { gate.open() }
        }
        operation.start()
        let data = try await operation.value
        #expect(data.count == 61 * 8192)
        let values = seen.withLock { $0 }
        let pace = 163_840.0
        // After 2.25 s (three quarters of the body), the window has the pace to measure: the last
        // report before the gate that has a rate (the one that opened it). Not one after: the
        // server waits at the gate for as long as the test takes to hear of step 46, and on a
        // loaded machine that wait (seconds, beside two CPU hogs) fills the window, which then
        // measures the wait, not the pace (2,199 B/s once in 20 runs).
        let late = try #require(values.last { $0.bytesReceived <= 46 * 8192 && $0.bytesPerSecond != nil })
        let rate = try #require(late.bytesPerSecond)
        // Generous: a loaded machine delays chunks and then hands them over in a burst, which a
        // 5-second window averages only in part, and slows the server's own pace (the CI runs
        // that failed here had other work beside the suite). The bounds catch a rate in the
        // wrong unit or over the wrong bytes; the precise figures are fetchkit-bench's.
        #expect(rate <= pace * 8 && rate >= pace / 50, "measured \(rate) B/s against a pace of \(pace)")
        let remaining = try #require(late.estimatedTimeRemaining)
        let left = Double(61 * 8192 - late.bytesReceived)
        #expect(abs(remaining - left / rate) < 0.001, "the time left is what remains at the rate")
        #expect(remaining >= left / pace / 8, "never much sooner than the pace allows: \(remaining) s for \(left) B")
        // (No rate before the window spans half a second: `RateWindow`'s own tests; here the
        // first report's time depends on the machine's load.)
        // Foundation's Progress carries the same, as Foundation names them.
        let throughput = try #require(progress.userInfo[.throughputKey] as? NSNumber)
        #expect(Double(throughput.intValue) <= pace * 8 && Double(throughput.intValue) >= pace / 50)
        #expect(progress.userInfo[.estimatedTimeRemainingKey] is NSNumber)
    }

    /// A paused fetch receives nothing, so it shows no rate and no time remaining (before,
    /// it kept the last ones, as if it still ran at that rate).
    @Test func aPausedFetchShowsNoRate() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // 8 KiB every 50 ms for 100 s: it is paused long before (then cancelled), however
        // late a loaded machine hands the test its first value with a rate.
        server.route("/paced") { _ in pacedBody(steps: 2000, step: 8192, milliseconds: 50) }
        let queue = FetchQueue(maximumConcurrentTransfers: 1)
        let operation = FetchOperation<Data>(url: server.url("/paced"))
        var updates = operation.progressUpdates.makeAsyncIterator()
        queue.enqueue(operation)
        while let value = await updates.next(), value.bytesPerSecond == nil {}
        #expect(operation.pause())
        var paused: FetchProgress?
        while let value = await updates.next() {
            if value.bytesPerSecond == nil { paused = value; break }
        }
        let value = try #require(paused, "a value without a rate follows the pause")
        #expect(value.estimatedTimeRemaining == nil && value.bytesReceived > 0)
        #expect(operation.isPaused)
        operation.cancel()
        await #expect(throws: FetchError.self) { try await operation.value }
    }

    @Test func aResumedDownloadCountsOnlyTheBytesThatArrive() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let onDisk = 4 << 20        // 4 MiB already there, then 8 KiB every 50 ms
        let steps = 41
        let total = onDisk + steps * 8192
        // Past the first half, the server waits until the client has heard of it: the second
        // half's second of 50 ms steps is then the client's too, however late a loaded machine
        // let it read the first (a client that read everything at once saw no rate at all).
        let halfway = TestGate()
        defer { halfway.open() }
        server.route("/resumable") { request in
            guard request.header("Range") == "bytes=\(onDisk)-" else {
                // The first attempt: cut after what becomes the partial file.
                return .steps([.head(status: 200, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes", "Content-Length": "\(total)"]),
                               .patternBytes(offset: 0, count: onDisk), .close])
            }
            var actions: [TestResponse.Step] = [.head(status: 206, headers: ["ETag": "\"v1\"", "Accept-Ranges": "bytes",
                                                                            "Content-Length": "\(total - onDisk)",
                                                                            "Content-Range": "bytes \(onDisk)-\(total - 1)/\(total)"])]
            for index in 0..<steps {
                if index == steps / 2 { actions.append(.wait(for: halfway)) }
                actions.append(.patternBytes(offset: onDisk + index * 8192, count: 8192))
                actions.append(.pause(milliseconds: 50))
            }
            actions.append(.close)
            return .steps(actions)
        }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let destination = directory.file("resumed.bin")
        let first = DownloadOperation(url: server.url("/resumable"), destination: destination)
        first.configuration.retryPolicy = .none     // leaves its 4 MiB partial file
        await #expect(throws: FetchError.self) { try await first.run() }
        let download = DownloadOperation(url: server.url("/resumable"), destination: destination)
        let seen = Locked<[FetchProgress]>([])
        let last = Countdown(1)
        download.onProgress(on: .global) { value in
            seen.withLock { $0.append(value) }
            if value.bytesReceived >= Int64(onDisk + steps / 2 * 8192) { halfway.open() }
            if value.bytesReceived == Int64(total) { last.signal() }
        }
        try await download.run()
        // The last value is ordered after the completion only on the main actor (documented).
        #expect(await last.wait())
        #expect(download.resumedBytes == Int64(onDisk))
        let rates = seen.withLock { $0 }.compactMap(\.bytesPerSecond)
        #expect(!rates.isEmpty)
        // Counted, the 4 MiB on disk would show as 4 MB/s or more (25× the pace) in the first
        // second; 8× allows the bursts of a loaded machine (3× and more seen in full runs).
        #expect(rates.allSatisfy { $0 <= 163_840 * 8 }, "the 4 MiB on disk never count: \(rates.max() ?? 0) B/s")
    }

    @Test func aBatchReportsTheRateOfItsMembersTogether() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // Each member's last 15 steps wait until the test has heard of both members' first 46
        // (late progress on a loaded machine would otherwise leave only the final status).
        let gate = TestGate()
        server.route("/paced") { _ in pacedBody(steps: 61, step: 8192, milliseconds: 50, hold: (46, gate)) }
        let queue = FetchQueue(maximumConcurrentTransfers: 2)
        let seen = Locked<[FetchBatch.Status]>([])
        let batch = queue.enqueue(batch: [FetchOperation<Data>(url: server.url("/paced?a")),
                                          FetchOperation<Data>(url: server.url("/paced?b"))],
                                  on: .global, progress: { status in
                                      seen.withLock { $0.append(status) }
                                      if status.bytesReceived >= 2 * 46 * 8192 { gate.open() }
                                  })
        for await _ in batch.statusUpdates {}
        #expect(batch.status.succeeded == 2)
        let statuses = seen.withLock { $0 }
        let pace = 2 * 163_840.0
        // The last report before the end that has a rate.
        let late = try #require(statuses.last { $0.bytesReceived < 122 * 8192 && $0.bytesPerSecond != nil && $0.estimatedTimeRemaining != nil },
                                "\(statuses.map(\.bytesReceived))")
        let rate = try #require(late.bytesPerSecond)
        // Generous, as in the single fetch's test: the bounds catch a wrong unit or wrong bytes.
        #expect(rate <= pace * 8 && rate >= pace / 50, "measured \(rate) B/s against \(pace)")
        let remaining = try #require(late.estimatedTimeRemaining, "both lengths are known")
        #expect(abs(remaining - Double(122 * 8192 - late.bytesReceived) / rate) < 0.001)
        let throughput = try #require(batch.byteProgress.userInfo[.throughputKey] as? NSNumber)
        #expect(throughput.intValue > 0)
    }
}
