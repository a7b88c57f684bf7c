import Foundation

/// Writes a download's chunks to its file on a serial queue of its own, so that the session
/// router's queue only hands each chunk over (no copy, no system call) and keeps up with
/// URLSession, which delivers ~16 KiB chunks with no backpressure (libcurl reads the socket as
/// fast as it can; see ``DownloadBodySink``).
///
/// The writer gathers whatever has been handed over since its last write into one `writev(2)`
/// of up to ``batchLimit`` chunks. ``backlog`` is what has been handed over and not yet
/// written: the memory the writer holds. A write error is kept, every later chunk dropped, and
/// the error reported to the next ``append(_:)`` and to ``drain()``.
final class FileWriter: @unchecked Sendable {
    /// What the writer has done, read under its lock.
    struct Status: Sendable {
        /// Bytes written to the file by this writer.
        var written: Int64 = 0
        /// Bytes handed over and not yet written.
        var backlog: Int64 = 0
        /// The largest ``backlog`` seen.
        var peakBacklog: Int64 = 0
        /// The `errno` of the first failed write.
        var failure: Int32?
    }

    private struct State {
        var chunks: [Data] = []
        var status = Status()
        /// A drain of ``chunks`` is queued or running on ``queue``.
        var scheduled = false
    }

    /// The most chunks gathered into one `writev(2)` (~1 MiB of URLSession's chunks).
    static let batchLimit = 64

    private let descriptor: Int32
    /// Overcommitting, like every labelled queue: it always gets a thread. (On libdispatch's
    /// non-overcommit pool, `target: .global()`, a download made 13–19 % fewer context switches,
    /// but callers that block the pool's few threads would starve the writer.)
    private let queue = DispatchQueue(label: "FetchKit.FileWriter")
    private let state = Protected(State())
    /// A test hook run on the writer's queue before each write, with its size: a throttle
    /// that makes the writer slower than the network.
    private let throttle: (@Sendable (Int) -> Void)?
    /// Hashes each batch once it is written (on ``queue`` only).
    private let hasher: DigestHasher?
    /// Told the backlog as it changes: it holds the reading while the writer is behind.
    private let gate: BacklogGate?

    /// - Parameters:
    ///   - descriptor: An open file, positioned where the chunks go. The writer does not close it.
    ///   - throttle: Run before each write (tests only).
    ///   - hasher: Given every byte written, in order, on the writer's queue.
    ///   - gate: Told the backlog after each chunk handed over and each batch written.
    init(descriptor: Int32, throttle: (@Sendable (Int) -> Void)? = nil, hasher: DigestHasher? = nil, gate: BacklogGate? = nil) {
        self.gate = gate
        self.descriptor = descriptor
        self.throttle = throttle
        self.hasher = hasher
    }

    /// Runs `body` on the writer's queue before any chunk appended after this call is written.
    func perform(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
    }

    /// Hands `chunk` to the writer; returns at once. The writer is woken once a batch of
    /// ``wakeThreshold`` bytes is waiting, not for every chunk (a wake-up costs more than
    /// handing over a chunk); ``drain()`` and ``whenDrained(_:)`` write the rest.
    ///
    /// - Returns: the backlog, and the `errno` of an earlier failed write, if any (the chunk
    ///   is then dropped).
    func append(_ chunk: Data) -> (backlog: Int64, failure: Int32?) {
        let (backlog, failure, schedule) = state.withLock { state -> (Int64, Int32?, Bool) in
            if let failure = state.status.failure { return (state.status.backlog, failure, false) }
            state.chunks.append(chunk)
            state.status.backlog += Int64(chunk.count)
            state.status.peakBacklog = max(state.status.peakBacklog, state.status.backlog)
            return (state.status.backlog, nil, Self.shouldSchedule(&state, threshold: Self.wakeThreshold))
        }
        if schedule {
            queue.async { self.run() }
        }
        gate?.noteBacklog(backlog)
        return (backlog, failure)
    }

    /// How much waits before the writer is woken: 256 KiB.
    ///
    /// Measured on two cores (KVM, Linux 6.18), release build, FetchKit to disk, medians of
    /// runs interleaved and taken only while the machine was otherwise idle:
    /// `fetchkit-bench throughput-child fetchkit 256m-disk` against a separate `serve`:
    /// 256 KiB 692 MB/s; 128 KiB 601, 512 KiB 643, 1 MiB 563 (8 runs each); in another series
    /// 256 KiB 767, 2 MiB 670, 4 MiB 602, 8 MiB 565 (10 each; 8 MiB also took 660 ms of CPU
    /// against 540, with 43 k context switches against 26 k).
    ///
    /// Where the rest goes (`perf record -a -g`, `perf record -e sched:sched_switch`): the
    /// router's own work is 1–3 % of the samples. Each 16 KiB chunk reaches the router queue
    /// through `OperationQueue.addOperation` on URLSession's thread, and when the router has
    /// run dry that wakes a thread for it (`_dispatch_root_queue_poke_slow`, about twice as
    /// many samples as when the router wrote the file itself); the writer's own park and wake
    /// per batch come on top (3.4 k worker parks per 256 MiB against 0.6 k, one traced run
    /// each). Writing each batch on the router queue while the writer is idle keeps the
    /// router busy, so that URLSession's next chunks queue behind it instead:
    /// `fetchkit-bench throughput --runs 1 --only 256m-disk`, 6 runs each, 714 MB/s against
    /// 582 with this writer and 691 for FetchKit before the writer, which wrote on the router
    /// (two more series, this writer against the one before: 641 against 720, 622 against
    /// 724; one run varies by ±20 %). But a write that blocks (a stalled disk) would then hold
    /// up every transfer of the session, and the non-blocking buffered write that could make
    /// it safe (`pwritev2` with `RWF_NOWAIT`) fails with `EOPNOTSUPP` on ext4 and tmpfs
    /// (Linux 6.18). Waiting on the router queue for the write it woke, at most 0.5 ms and
    /// only while the router has caught up, did not help (654 and 602 against 582 and 622):
    /// the wait parks the router, and the writer must wake it.
    static let wakeThreshold: Int64 = 256 << 10

    /// Whether to queue a drain now (none is queued, and at least `threshold` waits).
    private static func shouldSchedule(_ state: inout State, threshold: Int64) -> Bool {
        guard !state.scheduled, !state.chunks.isEmpty, state.status.backlog >= threshold else { return false }
        state.scheduled = true
        return true
    }

    /// Wakes the writer for whatever waits, however little.
    private func flush() {
        if state.withLock({ Self.shouldSchedule(&$0, threshold: 0) }) {
            queue.async { self.run() }
        }
    }

    /// What the writer has done so far.
    var status: Status {
        state.withLock { $0.status }
    }

    /// Waits until every chunk handed over is written (or dropped after a failure).
    ///
    /// Call it from the queue that appends (nothing may be appended meanwhile): the drain
    /// queued before this call runs until the chunks run out.
    func drain() -> Status {
        flush()
        queue.sync {}
        return status
    }

    /// Runs `body` on the writer's queue once the chunks handed over so far are written.
    /// Nothing may be appended afterwards.
    func whenDrained(_ body: @escaping @Sendable () -> Void) {
        flush()
        queue.async(execute: body)
    }

    /// Drops the chunks not yet written (the file is being removed).
    func discard() {
        let backlog = state.withLock { state in
            state.status.backlog -= state.chunks.reduce(0) { $0 + Int64($1.count) }
            state.chunks = []
            return state.status.backlog
        }
        gate?.noteBacklog(backlog)
    }

    // MARK: Writer queue

    private func run() {
        while true {
            let batch = state.withLock { state -> [Data] in
                guard !state.chunks.isEmpty else {
                    state.scheduled = false
                    return []
                }
                let count = min(state.chunks.count, Self.batchLimit)
                let batch = Array(state.chunks.prefix(count))
                state.chunks.removeFirst(count)
                return batch
            }
            guard !batch.isEmpty else { return }
            let size = batch.reduce(0) { $0 + $1.count }
            throttle?(size)
            let failure = Self.gather(batch[...], into: [], descriptor: descriptor)
            if failure == nil, let hasher {
                hasher.markCheckpoint()
                // Hashed after the write, from the same buffers: the bytes are still in the
                // cache, and a failed write leaves nothing to hash (the download fails).
                for chunk in batch { hasher.update(chunk) }
            }
            let backlog = state.withLock { state in
                state.status.backlog -= Int64(size)
                if let failure {
                    state.status.failure = failure
                    // Dropped: the file ends where the failure left it.
                    state.status.backlog -= state.chunks.reduce(0) { $0 + Int64($1.count) }
                    state.chunks = []
                } else {
                    state.status.written += Int64(size)
                }
                return state.status.backlog
            }
            gate?.noteBacklog(backlog)
        }
    }

    /// Writes `chunks` to `descriptor` where it stands, on the caller's thread, in `writev(2)`s
    /// of at most ``batchLimit`` chunks (a whole body that arrived in one piece).
    ///
    /// - Returns: the `errno` of a failed write, if any.
    static func write(_ chunks: [Data], to descriptor: Int32) -> Int32? {
        var start = 0
        while start < chunks.count {
            let end = min(chunks.count, start + batchLimit)
            if let failure = gather(chunks[start..<end], into: [], descriptor: descriptor) { return failure }
            start = end
        }
        return nil
    }

    /// Collects the chunks' buffers, each valid only inside its `withUnsafeBytes`, by nesting
    /// one call per chunk; the innermost writes them all.
    private static func gather(_ chunks: ArraySlice<Data>, into vectors: [iovec], descriptor: Int32) -> Int32? {
        guard let first = chunks.first else {
            return writeAll(vectors, descriptor: descriptor)
        }
        return first.withUnsafeBytes { buffer in
            var vectors = vectors
            if let base = buffer.baseAddress, buffer.count > 0 {
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: base), iov_len: buffer.count))
            }
            return gather(chunks.dropFirst(), into: vectors, descriptor: descriptor)
        }
    }

    /// Writes every vector, resuming after short writes and interruptions.
    private static func writeAll(_ vectors: [iovec], descriptor: Int32) -> Int32? {
        var vectors = vectors
        var index = 0
        while index < vectors.count {
            let written = vectors[index...].withUnsafeBufferPointer { pending in
                writev(descriptor, pending.baseAddress, Int32(pending.count))
            }
            if written < 0 {
                if errno == EINTR { continue }
                return errno
            }
            var left = written
            while index < vectors.count, left >= vectors[index].iov_len {
                left -= vectors[index].iov_len
                index += 1
            }
            if left > 0 {
                vectors[index].iov_base = vectors[index].iov_base.map { $0 + left }
                vectors[index].iov_len -= left
            }
        }
        return nil
    }
}

/// How far a download's writer may fall behind the network before the transfer is stopped and
/// continued with `Range` from what is on disk.
struct Backpressure: Sendable {
    /// The most bytes waiting for the writer. Default 32 MiB.
    var bound: Int64 = Self.defaultBound
    /// Run on the writer's queue before each write, with its size (tests: a slow disk).
    var throttle: (@Sendable (Int) -> Void)?

    static let defaultBound: Int64 = 32 << 20

    /// The backlog past which the transfer's reading is held until the writer is down to half
    /// of it (``BacklogGate``): default 8 MiB. Below ``bound``, so that where the reading can be
    /// held the transfer is never stopped.
    var pauseAbove: Int64 = Self.defaultPauseAbove

    static let defaultPauseAbove: Int64 = 8 << 20
}
