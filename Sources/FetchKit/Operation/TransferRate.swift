import Foundation

/// A transfer rate smoothed over a sliding window: the bytes counted since the newest sample
/// that is at least ``window`` old (or since the window began, if younger), divided by the
/// time between that sample and the latest count.
///
/// Samples are kept at most one every ``sampleSpacing``, so that a window holds about 21 of
/// them whatever the chunk rate; the window is therefore ``window`` long to within one
/// spacing. No rate is given until ``minimumSpan`` has passed since the window began: the
/// first chunks of a response say little about the rate that follows.
///
/// The rate is computed when bytes are counted: a transfer that stalls keeps the rate of its
/// last report until its next one (which then spans the stall).
struct RateWindow: Sendable, Equatable {
    /// How far back the rate looks: 5 seconds, as curl's progress meter.
    static let window: TimeInterval = 5
    /// The least time between two kept samples: a quarter second.
    static let sampleSpacing: TimeInterval = 0.25
    /// No rate before the window spans this much: half a second.
    static let minimumSpan: TimeInterval = 0.5

    struct Sample: Sendable, Equatable {
        /// Uptime, in nanoseconds.
        var time: UInt64
        /// Bytes counted up to then.
        var bytes: Int64
    }

    /// The kept samples, oldest first; the first is the newest one at least ``window`` old
    /// (or the window's start). Empty before ``begin(at:)``.
    private(set) var samples: [Sample] = []
    /// The latest count.
    private(set) var latest = Sample(time: 0, bytes: 0)

    /// Starts (or starts again) the window at `now`, with nothing counted in it.
    mutating func begin(at now: UInt64) {
        latest = Sample(time: now, bytes: latest.bytes)
        samples = [latest]
    }

    /// Whether ``begin(at:)`` was called.
    var hasBegun: Bool { !samples.isEmpty }

    /// Counts `bytes` more at `now` (the window begins here if it had not).
    mutating func add(_ bytes: Int64, at now: UInt64) {
        guard hasBegun else {
            begin(at: now)
            latest.bytes += max(0, bytes)
            return
        }
        let now = max(now, latest.time)
        latest = Sample(time: now, bytes: latest.bytes + max(0, bytes))
        if let last = samples.last, Self.seconds(from: last.time, to: now) >= Self.sampleSpacing {
            samples.append(latest)
        }
        // Keep one sample at or before the window's start.
        while samples.count > 1, Self.seconds(from: samples[1].time, to: now) >= Self.window {
            samples.removeFirst()
        }
    }

    /// Bytes per second over the window, or `nil` before ``minimumSpan``.
    var bytesPerSecond: Double? {
        guard let first = samples.first else { return nil }
        let span = Self.seconds(from: first.time, to: latest.time)
        guard span >= Self.minimumSpan else { return nil }
        return Double(latest.bytes - first.bytes) / span
    }

    /// How long `remaining` more bytes take at ``bytesPerSecond``: 0 when nothing remains,
    /// `nil` when the rate is unknown or zero.
    func timeRemaining(for remaining: Int64) -> TimeInterval? {
        if remaining <= 0 { return 0 }
        guard let rate = bytesPerSecond, rate > 0 else { return nil }
        return Double(remaining) / rate
    }

    static func seconds(from start: UInt64, to end: UInt64) -> TimeInterval {
        end > start ? Double(end - start) / 1e9 : 0
    }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}

/// Writes to one Foundation `Progress`, one at a time and in the order their values were
/// taken. corelibs' `Progress` has no lock of its own (its `userInfo` is a plain dictionary:
/// two threads setting the rate at once crashed `fetchkit` in a dictionary's release), and
/// values taken under another lock reach their writers in any order.
final class ProgressWrites: Sendable {
    private let state = Protected((taken: UInt64(0), written: UInt64(0)))

    /// Numbers a value: call it under the lock where the value is taken.
    func take() -> UInt64 {
        state.withLock { state in
            state.taken += 1
            return state.taken
        }
    }

    /// Runs `body` for the value numbered `number`, unless a later one was written already.
    func write(_ number: UInt64, _ body: () -> Void) {
        state.withLock { state in
            guard number > state.written else { return }
            state.written = number
            body()
        }
    }

    /// Runs `body` one at a time with the other writes.
    func write(_ body: () -> Void) {
        state.withLock { _ in body() }
    }
}

extension Progress {
    /// Sets Foundation's throughput and time-remaining entries (`ProgressUserInfoKey.throughputKey`,
    /// in bytes per second, and `.estimatedTimeRemainingKey`, in seconds), or removes them when
    /// unknown.
    func setRate(_ bytesPerSecond: Double?, timeRemaining: TimeInterval?) {
        setUserInfoObject(bytesPerSecond.map { NSNumber(value: Int(min($0, Double(Int.max)).rounded())) }, forKey: .throughputKey)
        setUserInfoObject(timeRemaining.map { NSNumber(value: $0) }, forKey: .estimatedTimeRemainingKey)
    }
}
