import Foundation

/// Holds a download's reading while its writer is behind the network, so that what waits in
/// memory for the disk stays under ``pauseAbove`` (plus what is already on its way) however
/// far behind the disk is and however large the file (issue 32, 6.7).
///
/// URLSession on Linux reads the socket as fast as it can (see ``DownloadBodySink``), and a
/// `suspend()` of the task does not stop libcurl. What does is a pause of the receive from
/// inside the callback that delivers a chunk (``ReceivePause``): ``SessionRouter`` asks
/// ``holdIfBehind(_:)`` there, on URLSession's work queue, for every chunk of a download.
/// The ``FileWriter`` tells the gate its backlog (``noteBacklog(_:)``): past ``pauseAbove``
/// the gate is behind, and the next chunk pauses the reading; once the writer is down to
/// ``resumeBelow``, the gate runs the resume that the pause left (on the work queue), and the
/// kernel's socket buffer — not this process — has held the bytes meanwhile. A resume that
/// something else issues (a bandwidth limit's pause ending, a breath) lets one chunk through;
/// that chunk pauses again.
///
/// Where the pause cannot be had (another platform, another FoundationNetworking layout), the
/// gate does nothing and the transfer is stopped and continued past ``Backpressure/bound``, as
/// before. Safe from any thread.
final class DiskGate: Sendable {
    private struct State {
        /// The writer's backlog, as it last said.
        var backlog: Int64 = 0
        /// Resumes the paused reading (`nil`: not paused by the gate).
        var resume: (@Sendable () -> Void)?
        /// How many times the gate paused the reading (diagnostics and tests).
        var pauses = 0
    }

    /// The bytes waiting (for the router queue and for the writer) past which the reading is
    /// held.
    let pauseAbove: Int64
    /// The writer's backlog at which it goes on.
    let resumeBelow: Int64
    private let state = Protected(State())

    init(pauseAbove: Int64) {
        self.pauseAbove = max(1, pauseAbove)
        resumeBelow = max(0, pauseAbove / 2)
    }

    /// The writer's backlog now (after a chunk was handed over, or a batch written).
    func noteBacklog(_ backlog: Int64) {
        let resume = state.withLock { state -> (@Sendable () -> Void)? in
            state.backlog = backlog
            guard backlog <= resumeBelow else { return nil }
            defer { state.resume = nil }
            return state.resume
        }
        resume?()
    }

    /// On URLSession's work queue, for each chunk as it arrives, with the bytes that wait for
    /// the router queue (``TransferInbox``): if those and the writer's backlog pass
    /// ``pauseAbove``, `pause` pauses the reading and returns how to resume it (`nil`: it
    /// could not). The resume comes when the writer is down to ``resumeBelow``: what waits for
    /// the router goes to the writer first, which says so.
    func holdIfBehind(waiting: Int64, _ pause: () -> (@Sendable () -> Void)?) {
        state.withLock { state in
            guard state.backlog + waiting > pauseAbove else { return }
            // Paused again even if paused before: something else may have resumed it.
            guard let resume = pause() else { return }
            if state.resume == nil {
                state.resume = resume
                state.pauses += 1
            }
        }
    }

    /// How many times the gate held the reading.
    var pauses: Int {
        state.withLock { $0.pauses }
    }
}
