import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// What a progress handler saw: how many times it was entered while already running, and how
/// many values were older than the one before.
private final class HandlerRecord: Sendable {
    private let state = Locked((active: 0, peak: 0, backwards: 0, last: Int64(-1), values: [Int64](), entries: [UInt64]()))

    /// Runs `body` as the handler, counting overlapping entries and values that went back.
    func enter(_ progress: FetchProgress, body: () -> Void) {
        state.withLock { state in
            state.active += 1
            state.peak = max(state.peak, state.active)
            if progress.bytesReceived < state.last { state.backwards += 1 }
            state.last = progress.bytesReceived
            state.values.append(progress.bytesReceived)
            state.entries.append(DispatchTime.now().uptimeNanoseconds)
        }
        body()
        state.withLock { $0.active -= 1 }
    }

    var peak: Int { state.withLock { $0.peak } }
    var backwards: Int { state.withLock { $0.backwards } }
    var values: [Int64] { state.withLock { $0.values } }
    /// When each call began (monotonic nanoseconds).
    var entries: [UInt64] { state.withLock { $0.entries } }
}

@Suite("Progress handler delivery", .timeLimit(.minutes(3)))
struct ProgressDeliveryTests {
    /// A slow handler on the global (concurrent) queue, during a real download of many reports:
    /// it is never entered again before it returns and never sees an older value after a newer
    /// one, and its last value is the body's length; at the default rate and at none. (The relay
    /// cleared its flag before calling the handler: a handler that took two milliseconds ran
    /// twice at once, and went backwards.)
    @Test(arguments: [nil, 0] as [TimeInterval?])
    func aSlowHandlerOnTheGlobalQueueRunsOneAtATimeAndNeverGoesBack(minimumInterval: TimeInterval?) async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let length = 16 << 20               // 256 reports or more (one per 64 KiB at most)
        let operation = FetchOperation<Data>(url: server.url("/bytes/\(length)"))
        let record = HandlerRecord()
        let complete = Countdown(1)
        let handler: @Sendable (FetchProgress) -> Void = { progress in
            record.enter(progress) { usleep(2_000) }
            if progress.bytesReceived == Int64(length) { complete.signal() }
        }
        if let minimumInterval {
            operation.onProgress(on: .global, minimumInterval: minimumInterval, handler)
        } else {
            operation.onProgress(on: .global, handler)
        }
        operation.start()
        _ = try await operation.value
        #expect(await complete.wait(), "the final value is delivered")
        #expect(record.peak == 1, "entered again before it returned: \(record.peak) at once")
        #expect(record.backwards == 0, "went backwards \(record.backwards) times in \(record.values.count) calls")
        #expect(record.values.last == Int64(length))
        #expect(complete.overSignals == 0, "the final value is delivered once")
    }

    /// By default a handler is called at most every 0.1 s (a transfer reports every chunk,
    /// hundreds of times a second); a chosen interval is kept the same way. The final value
    /// is delivered either way.
    @Test(arguments: [nil, 0.25] as [TimeInterval?])
    func aHandlerIsCalledAtMostOncePerInterval(minimumInterval: TimeInterval?) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        // 8 KiB every 10 ms for 1.2 s or more: about 120 reports.
        server.route("/paced") { _ in pacedBody(steps: 120, step: 8192, milliseconds: 10) }
        let operation = FetchOperation<Data>(url: server.url("/paced"))
        let record = HandlerRecord()
        let complete = Countdown(1)
        let handler: @Sendable (FetchProgress) -> Void = { progress in
            record.enter(progress) {}
            if progress.bytesReceived == 120 * 8192 { complete.signal() }
        }
        if let minimumInterval {
            operation.onProgress(on: .global, minimumInterval: minimumInterval, handler)
        } else {
            operation.onProgress(on: .global, handler)
        }
        let started = DispatchTime.now().uptimeNanoseconds
        operation.start()
        _ = try await operation.value
        #expect(await complete.wait(), "the final value is delivered")
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        let interval = minimumInterval ?? FetchProgress.defaultMinimumInterval
        let entries = record.entries
        // Every call but the final one (which waits for no interval) began an interval after
        // the one before. The relay reads its clock just before it calls the handler, the
        // handler reads its own inside a lock: a thread preempted between the two (TSan on a
        // loaded machine: 3.3 ms once) shortens one gap by that much, so the bound allows a
        // tenth of the interval. A relay that did not wait would show gaps of the body's
        // pace, 10 ms.
        let gaps = zip(entries, entries.dropFirst()).map { Double($1 - $0) / 1e9 }.dropLast()
        #expect(gaps.allSatisfy { $0 >= interval * 0.9 }, "shortest gap \(gaps.min() ?? 0) s")
        #expect(Double(entries.count) <= elapsed / interval + 2, "\(entries.count) calls in \(elapsed) s")
        // (No lower bound on the calls: on a loaded machine the global queue may start the first
        // delivery only after the body arrived, and then the final value is the only one.)
        #expect(record.values.last == Int64(120 * 8192))
        #expect(record.backwards == 0)
    }

    /// The final value waits for no interval: a main-actor handler with a long one still has
    /// the body's length before the operation's main-actor completion handler runs.
    @Test func theFinalValueIsDeliveredBeforeTheCompletionWhateverTheInterval() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let length = 4 << 20
        let operation = FetchOperation<Data>(url: server.url("/bytes/\(length)"))
        let seen = Locked<[Int64]>([])
        let atCompletion = Locked<[Int64]?>(nil)
        let done = Countdown(1)
        operation.onProgress(minimumInterval: 3600) { progress in seen.withLock { $0.append(progress.bytesReceived) } }
        operation.onCompletion { _ in
            atCompletion.withLock { $0 = seen.current }
            done.signal()
        }
        operation.start()
        #expect(await done.wait())
        let values = try #require(atCompletion.current)
        #expect(values.last == Int64(length), "the final value came first: \(values)")
        #expect(values.count <= 2, "an hour apart, but the first and the final: \(values)")
    }

    /// A progress sequence gives a value at most every interval, and the final one at once.
    @Test func aSequenceYieldsAtMostOncePerIntervalAndTheFinalValue() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/paced") { _ in pacedBody(steps: 120, step: 8192, milliseconds: 10) }
        let operation = FetchOperation<Data>(url: server.url("/paced"))
        let interval = 0.25
        let stream = operation.progressUpdates(minimumInterval: interval)
        let started = DispatchTime.now().uptimeNanoseconds
        operation.start()
        var values: [FetchProgress] = []
        for await value in stream { values.append(value) }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        #expect(values.last == FetchProgress(bytesReceived: 120 * 8192, bytesExpected: 120 * 8192))
        #expect(values.count >= 2 && Double(values.count) <= elapsed / interval + 2, "\(values.count) values in \(elapsed) s")
        #expect(values.map(\.bytesReceived) == values.map(\.bytesReceived).sorted())
    }

    /// A value held back for the interval is not lost when the transfer stalls: the sequence
    /// and the handler get it once the interval has passed, before any more bytes come.
    @Test func theNewestValueOfAStalledTransferArrivesAfterTheInterval() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let gate = TestGate()
        // Two reports close together (the head's, then 30,000 bytes), then nothing until the gate opens.
        server.route("/held") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "40000"]),
                    .patternBytes(offset: 0, count: 30_000), .wait(for: gate), .patternBytes(offset: 30_000, count: 10_000)])
        }
        let operation = FetchOperation<Data>(url: server.url("/held"))
        let handled = Countdown(1)
        let once = Locked(false)
        operation.onProgress(on: .global, minimumInterval: 0.5) { progress in
            if progress.bytesReceived == 30_000, once.withLock({ seen in defer { seen = true }; return !seen }) { handled.signal() }
        }
        var updates = operation.progressUpdates(minimumInterval: 0.5).makeAsyncIterator()
        operation.start()
        var streamed: FetchProgress?
        while let value = await updates.next() {
            if value.bytesReceived == 30_000 { streamed = value; break }
        }
        #expect(streamed != nil, "the sequence had the bytes before the stall")
        #expect(await handled.wait(), "the handler had the bytes before the stall")
        gate.open()
        _ = try await operation.value
    }
}

/// A body of `steps` × `step` bytes with a `Content-Length`, sent one step every `milliseconds`.
private func pacedBody(steps: Int, step: Int, milliseconds: Int) -> TestResponse {
    var actions: [TestResponse.Step] = [.head(status: 200, headers: ["Content-Length": "\(steps * step)"])]
    for index in 0..<steps {
        actions.append(.patternBytes(offset: index * step, count: step))
        if index < steps - 1 { actions.append(.pause(milliseconds: milliseconds)) }
    }
    actions.append(.close)
    return .steps(actions)
}

/// corelibs' `Progress` has no lock of its own: its `userInfo` is a plain dictionary, and two
/// threads setting the rate at once crashed `fetchkit --parallel 8` (a dictionary's release in
/// `Progress.setUserInfoObject`). A batch's members report from many threads; its `Progress`
/// objects take one write at a time, and never an older value after a newer one.
@Suite("Progress objects written from many threads", .timeLimit(.minutes(1)))
struct ProgressWritesTests {
    @Test func aBatchsMembersReportingAtOnceWriteItsProgressOneAtATime() {
        let members = 8
        let batch = FetchBatch(ids: (0..<members).map { FetchID(rawValue: UInt64($0) + 1) }, callbackQueue: .immediate,
                               progress: nil, completion: nil)
        _ = batch.byteProgress.userInfo
        DispatchQueue.concurrentPerform(iterations: members) { index in
            for step in 1...2_000 {
                batch.member(index, received: Int64(step), expected: 2_000, moved: 1)
            }
        }
        #expect(batch.byteProgress.completedUnitCount == Int64(members * 2_000))
        #expect(batch.byteProgress.totalUnitCount == Int64(members * 2_000))
    }

    /// Writes from many threads run one at a time (corelibs' `Progress`, not built for the
    /// sanitizer, cannot show its race to TSan: the writer's exclusion is what is checked).
    @Test func writesFromManyThreadsRunOneAtATime() {
        let writes = ProgressWrites()
        let active = Locked(0)
        let overlaps = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<500 {
                writes.write(writes.take()) {
                    if active.withLock({ count -> Int in count += 1; return count }) > 1 { overlaps.withLock { $0 += 1 } }
                    for _ in 0..<50 { _ = active.withLock { $0 } }
                    active.withLock { $0 -= 1 }
                }
            }
        }
        #expect(overlaps.withLock { $0 } == 0)
    }

    /// Writes numbered when their values were taken land in that order: a late older one is
    /// dropped.
    @Test func anOlderValueNeverOverwritesANewerOne() {
        let writes = ProgressWrites()
        let first = writes.take(), second = writes.take()
        var written: [UInt64] = []
        writes.write(second) { written.append(second) }
        writes.write(first) { written.append(first) }
        #expect(written == [second])
    }
}
