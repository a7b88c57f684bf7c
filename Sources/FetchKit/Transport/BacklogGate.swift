import Foundation

/// Holds a transfer's reading while what it has read waits for its consumer — a download's
/// writer, a stream's reader — so that what waits in memory stays under ``pauseAbove`` (plus
/// what is already on its way) however far behind the consumer is and however large the body
/// (issue 32, 6.7; issue 34).
///
/// URLSession on Linux reads the socket as fast as it can (see ``DownloadBodySink``), and a
/// `suspend()` of the task does not stop libcurl. What does is a pause of the receive from
/// inside the callback that delivers a chunk (``ReceivePause``): ``SessionRouter`` asks
/// ``holdIfBehind(waiting:_:)`` there, on URLSession's work queue, for every chunk of a body
/// whose sink has a gate. The consumer tells the gate its backlog (``noteBacklog(_:sequence:)``):
/// past ``pauseAbove`` (counting what still waits for the router queue) the next chunk pauses
/// the reading; once the consumer has worked its backlog down to ``resumeBelow``, the gate runs
/// the resume that the pause left (on the work queue). Meanwhile the kernel's socket buffer —
/// not this process — holds the bytes; its receive window closes, and the server waits. Only a
/// backlog that shrank resumes: the router handing over what waited for it makes the backlog
/// grow, and must not undo the pause it caused. A resume that something else issues (a
/// bandwidth limit's pause ending, a breath) lets one chunk through; that chunk pauses again.
/// While the gate holds the reading, the transfer's idle timeout does not run
/// (``heldUntil(now:)``): the silence is the consumer's, not the server's.
///
/// Where the pause cannot be had (another platform, another FoundationNetworking layout), the
/// gate does nothing, and its consumer keeps its own bound: a download stops and continues its
/// transfer past ``Backpressure/bound``, a stream fails (``FetchError/streamOverflow(_:)``).
/// Safe from any thread.
final class BacklogGate: Sendable {
    /// Resumes a paused reading, then calls its argument (on URLSession's work queue).
    typealias Resume = @Sendable (_ resumed: @escaping @Sendable () -> Void) -> Void

    private struct State {
        /// The consumer's backlog, as it last said.
        var backlog: Int64 = 0
        /// The sequence number of that note (0: notes that carry none).
        var sequence: UInt64 = 0
        /// Resumes the paused reading (`nil`: not paused by the gate); its argument runs once
        /// the reading goes on.
        var resume: Resume?
        /// Resumes issued whose reading has not gone on yet (they wait for URLSession's work
        /// queue): the hold lasts until then.
        var releasing = 0
        /// How many times the gate paused the reading (diagnostics and tests).
        var pauses = 0
        /// When the last hold ended (uptime nanoseconds; 0: none yet).
        var releasedAt: UInt64 = 0
    }

    /// The bytes waiting (for the router queue and for the consumer) past which the reading is
    /// held.
    let pauseAbove: Int64
    /// The consumer's backlog at which the reading goes on.
    let resumeBelow: Int64
    private let state = Protected(State())

    init(pauseAbove: Int64) {
        self.pauseAbove = max(1, pauseAbove)
        resumeBelow = max(0, pauseAbove / 2)
    }

    /// The consumer's backlog now (after a chunk was handed over, written, or read).
    ///
    /// - Parameter sequence: For a consumer whose notes come from several threads, the order
    ///   in which it took the readings (from 1): a note older than the last is stale, and
    ///   ignored. 0: notes from one thread, in order.
    func noteBacklog(_ backlog: Int64, sequence: UInt64 = 0) {
        let resume = state.withLock { state -> Resume? in
            if sequence != 0 {
                guard sequence > state.sequence else { return nil }
                state.sequence = sequence
            }
            let shrank = backlog < state.backlog
            state.backlog = backlog
            guard shrank || backlog == 0, backlog <= resumeBelow, let resume = state.resume else { return nil }
            state.resume = nil
            state.releasing += 1
            return resume
        }
        guard let resume else { return }
        let delay = resumeDelay
        let release: @Sendable () -> Void = {
            resume {
                self.state.withLock { state in
                    state.releasing -= 1
                    state.releasedAt = DispatchTime.now().uptimeNanoseconds
                }
                self.releaseObserver.snapshot?()
            }
        }
        if delay > 0 {
            DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: release)
        } else {
            release()
        }
    }

    /// On URLSession's work queue, for each chunk as it arrives, with the bytes that wait for
    /// the router queue (``TransferInbox``), read under the gate's lock: if those and the
    /// consumer's backlog pass ``pauseAbove``, `pause` pauses the reading and returns how to
    /// resume it (`nil`: it could not). The resume comes when the consumer is down to
    /// ``resumeBelow``: what waits for the router goes to the consumer first, which says so.
    ///
    /// The waiting bytes are read under the lock that the consumer's notes take, so that a
    /// pause is never decided on bytes that the consumer has already read and noted: no note
    /// would come after it, and the reading would stay held with nothing left to read.
    func holdIfBehind(waiting: () -> Int64, _ pause: () -> Resume?) {
        state.withLock { state in
            guard state.backlog + waiting() > pauseAbove else { return }
            // Paused again even if paused before: something else may have resumed it.
            guard let resume = pause() else { return }
            if state.resume == nil {
                state.resume = resume
                state.pauses += 1
            }
        }
    }

    /// Seconds between a resume's decision and its issue: 0, except in a test that stands for
    /// a work queue busy with other transfers.
    var resumeDelay: TimeInterval {
        get { delays.snapshot }
        set { delays.withLock { $0 = newValue } }
    }
    private let delays = Protected(TimeInterval(0))

    /// Seconds for which the reading stays paused just after each resume: 0, except in a test
    /// that stands for a work queue that gets to libcurl's next read late
    /// (``ReceivePause/pauseUntilResumed(_:stall:)``).
    var readingStall: TimeInterval {
        get { stalls.snapshot }
        set { stalls.withLock { $0 = newValue } }
    }
    private let stalls = Protected(TimeInterval(0))

    /// The slack of URLSession's own timer beyond the idle timeout for a transfer without a
    /// consumer that may hold it (``Transfer/backstop(idleTimeout:consumerMayHold:slack:)``):
    /// 30 s, except in a test that shows what the timer would do to a long hold, quickly.
    var backstopSlack: TimeInterval {
        get { slacks.snapshot }
        set { slacks.withLock { $0 = newValue } }
    }
    private let slacks = Protected(TimeInterval(30))

    /// Runs once each hold has ended (the reading went on), for a test that waits for it.
    var onRelease: (@Sendable () -> Void)? {
        get { releaseObserver.snapshot }
        set { releaseObserver.withLock { $0 = newValue } }
    }
    private let releaseObserver = Protected<(@Sendable () -> Void)?>(nil)

    /// How many times the gate held the reading.
    var pauses: Int {
        state.withLock { $0.pauses }
    }

    /// Until when the consumer held the reading: `now` while the gate holds it (from its pause
    /// until the reading has gone on again, which waits for URLSession's work queue), else when
    /// its last hold ended (uptime nanoseconds; 0 for never). The transfer's idle clock runs
    /// from no earlier than this.
    func heldUntil(now: UInt64) -> UInt64 {
        state.withLock { $0.resume != nil || $0.releasing > 0 ? now : $0.releasedAt }
    }
}
