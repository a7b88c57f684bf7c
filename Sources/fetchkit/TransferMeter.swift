import FetchKit
import Foundation

/// What one run of the tool moved for one file, and so how fast it went.
///
/// FetchKit's progress counts from the start of the file: a download that resumes a partial
/// file (a `206` answering `Range: bytes=N-`) reports the N bytes already on disk, then adds
/// to them. A rate must count only the bytes this run moved, so each attempt is counted from
/// where it started, and a retry (which resumes the file or starts it over) begins a new
/// attempt.
struct TransferMeter: Equatable {
    /// The latest progress, counted from the start of the file.
    private(set) var received: Int64 = 0
    /// The bytes already on disk when this run started on the file (a resumed partial file).
    private(set) var resumedFrom: Int64 = 0
    /// Where the current attempt started; `nil` before it reports.
    private var attemptStart: Int64?
    /// What the earlier attempts of this run moved.
    private var earlierAttempts: Int64 = 0
    private var attempts = 0

    init() {}

    /// Records a progress report.
    ///
    /// - Parameters:
    ///   - bytesReceived: `FetchProgress.bytesReceived`.
    ///   - requestedOffset: Where the attempt's request asked to continue (its `Range`), or 0.
    mutating func report(_ bytesReceived: Int64, requestedOffset: Int64 = 0) {
        if attemptStart == nil {
            // Reports are coalesced, so the first one seen may come after the response head.
            // A `206` counts from the offset asked for, so it reports at least that; a `200`
            // starts from 0, and a report below the offset can only be one.
            let start = requestedOffset > 0 && bytesReceived >= requestedOffset ? requestedOffset : 0
            begin(at: start)
        }
        received = bytesReceived
    }

    /// The attempt ended and a retry follows.
    mutating func attemptEnded() {
        earlierAttempts += thisAttempt
        attemptStart = nil
    }

    /// The file is complete: `size` bytes, the last attempt having continued from
    /// `resumedBytes` (`DownloadOperation.resumedBytes`, exact where reports are not).
    mutating func completed(size: Int64, resumedBytes: Int64) {
        if attemptStart == nil {
            begin(at: resumedBytes)
        } else if attempts == 1 {
            resumedFrom = resumedBytes
        }
        attemptStart = resumedBytes
        received = size
    }

    /// The bytes this run moved, over all its attempts.
    var bytesThisRun: Int64 { earlierAttempts + thisAttempt }

    private var thisAttempt: Int64 {
        attemptStart.map { max(0, received - $0) } ?? 0
    }

    private mutating func begin(at start: Int64) {
        attemptStart = start
        if attempts == 0 { resumedFrom = start }
        attempts += 1
    }

    /// Bytes per second, or `nil` when no time has passed.
    static func rate(bytes: Int64, seconds: TimeInterval) -> Double? {
        seconds > 0 ? Double(bytes) / seconds : nil
    }

    /// N in a request's `Range: bytes=N-` (0 without one).
    static func requestedOffset(of request: URLRequest?) -> Int64 {
        guard let range = request?.value(forHTTPHeaderField: "Range"), range.hasPrefix("bytes="), range.hasSuffix("-") else { return 0 }
        return Int64(range.dropFirst("bytes=".count).dropLast()) ?? 0
    }
}
