import Foundation

/// A transfer's body chunks between the thread they arrive on and the router queue that
/// handles them: counted against the size limit the moment they arrive, gathered, and dropped
/// for almost nothing once they are of no use.
///
/// On Linux, URLSession's serial work queue reads the socket and hands each chunk to the
/// delegate queue; with no backpressure, chunks that the router queue has not taken yet wait
/// in memory. ``SessionRouter`` therefore takes each chunk on the work queue itself, where it
/// arrives, and puts it here: the transfer's ``limit`` is checked before anything is queued,
/// so a body past its limit stops growing at once — not when the router queue, behind by
/// hundreds of megabytes of 256-byte chunks, gets to it — and its task is cancelled from there.
///
/// Small chunks are copied into shared blocks of up to ``blockCapacity`` bytes as they arrive:
/// each costs its bytes, not an object and a queued callback besides (three times the chunk's
/// size for 256-byte chunks). Chunks of ``copyLimit`` bytes or more are kept as they are. One
/// wake-up of the router queue takes every chunk waiting (``take()``). Every
/// ``breathInterval`` bytes the reading pauses until URLSession's own queue has caught up.
///
/// The phases, one way only: `open` (counting and keeping) → `full` (the limit was passed:
/// nothing more is kept; the transfer ends when it takes the chunk that passed it) →
/// `closed` (the transfer ended: what waits is released, nothing more is kept).
final class TransferInbox: Sendable {
    /// What became of an arriving chunk.
    enum Arrival: Equatable {
        /// Not kept: the limit was passed before, or the transfer ended.
        case dropped
        /// Kept; `wake`: the caller must queue ``take()`` on the router queue (nothing was
        /// waiting, or a take already ran). `reading`: what to do with libcurl's reading.
        case kept(wake: Bool, reading: Reading)
    }

    /// What the thread that delivers chunks does about the reading of the body, from inside
    /// the callback that delivered this one (``ReceivePause``).
    enum Reading: Equatable {
        /// Nothing.
        case goOn
        /// Let URLSession's queue catch up: pause, and resume after what waits there.
        case breathe
        /// Stop reading and cancel the task: this chunk passed the limit.
        case stopPastLimit
    }

    enum Phase: Equatable {
        case open
        case full
        case closed
    }

    private struct State {
        var phase = Phase.open
        /// Body bytes that arrived since the last response head.
        var arrived: Int64 = 0
        var chunks: [Data] = []
        /// Bytes in ``chunks``.
        var waiting: Int64 = 0
        /// The most bytes that waited at once.
        var peakWaiting: Int64 = 0
        /// The last of ``chunks`` is a block of the inbox's own with room left.
        var lastIsOpenBlock = false
        /// A ``take()`` is queued and has not run yet.
        var wakeQueued = false
        /// Bytes since the reading last paused for URLSession's queue to catch up.
        var sinceBreath: Int64 = 0
        /// The transfer stopped for the disk and takes the task's last chunks
        /// (``takeLastChunks()``): no more pauses.
        var takingLastChunks = false
    }

    /// Chunks smaller than this are copied into a shared block: 8 KiB.
    static let copyLimit = 8 << 10
    /// The size of a block that gathers small chunks: 64 KiB.
    static let blockCapacity = 64 << 10

    /// How many bytes libcurl reads between two pauses that let URLSession's queue catch up
    /// (``Reading/breathe``): 4 MiB.
    ///
    /// FoundationNetworking makes a dispatch timer for every chunk libcurl delivers (the
    /// request's idle timeout, restarted), and the one it replaces is freed only when its
    /// serial work queue gets to it — which a body arriving faster than that queue handles it
    /// never lets happen: measured (Swift 6.3.1, 256-byte chunks over loopback), 60–90 MB of
    /// cancelled timers by the time 64 MiB had arrived. A pause whose resume is queued behind
    /// them lets the queue free them every 4 MiB: the same fetch then grew by 70 MiB in all,
    /// its 64 MiB body included, against 150 MiB (1 MiB and 4 MiB measured alike).
    static let breathInterval: Int64 = 4 << 20

    /// The most body bytes kept after a response head; the chunk that passes it is the last.
    let limit: Int64
    private let state = Protected(State())

    init(limit: Int64) {
        self.limit = limit
    }

    /// A response head arrived: the body starts over (a request answered again after an
    /// authentication challenge).
    func headArrived() {
        state.withLock { $0.arrived = 0 }
    }

    /// Counts and keeps `chunk`, unless it is of no use. On the thread that delivers chunks, in
    /// order.
    func arrive(_ chunk: Data) -> Arrival {
        state.withLock { state in
            guard state.phase == .open else { return .dropped }
            state.arrived += Int64(chunk.count)
            if chunk.count < Self.copyLimit {
                if state.lastIsOpenBlock, state.chunks[state.chunks.count - 1].count + chunk.count <= Self.blockCapacity {
                    state.chunks[state.chunks.count - 1].append(chunk)
                } else {
                    // Grown as chunks come: a block that a take seals early holds no spare room.
                    var block = Data(capacity: 4 << 10)
                    block.append(chunk)
                    state.chunks.append(block)
                    state.lastIsOpenBlock = true
                }
            } else {
                state.chunks.append(chunk)
                state.lastIsOpenBlock = false
            }
            state.waiting += Int64(chunk.count)
            state.peakWaiting = max(state.peakWaiting, state.waiting)
            let wake = !state.wakeQueued
            state.wakeQueued = true
            guard state.arrived <= limit else {
                state.phase = .full
                return .kept(wake: wake, reading: .stopPastLimit)
            }
            state.sinceBreath += Int64(chunk.count)
            guard state.sinceBreath >= Self.breathInterval, !state.takingLastChunks else { return .kept(wake: wake, reading: .goOn) }
            state.sinceBreath = 0
            return .kept(wake: wake, reading: .breathe)
        }
    }

    /// The bytes waiting for the router queue to take them.
    var waiting: Int64 {
        state.withLock { $0.waiting }
    }

    /// Every chunk waiting, in order; the next arrival asks for another wake-up. On the router
    /// queue.
    func take() -> [Data] {
        state.withLock { state in
            state.wakeQueued = false
            state.lastIsOpenBlock = false
            state.waiting = 0
            defer { state.chunks = [] }
            return state.chunks
        }
    }

    /// The transfer stopped for the disk to catch up, and wants the chunks its task still
    /// delivers until the cancel lands: the reading is no longer paused. A pause would leave
    /// the body in the sockets' buffers — tens of MiB on loopback — when the cancel closes the
    /// connection, to be sent again: measured, a 32 MiB download stopped eight times made the
    /// server send 58–60 MB with pauses. On the router queue.
    func takeLastChunks() {
        state.withLock { $0.takingLastChunks = true }
    }

    /// The transfer ended: drops what waits, and every later chunk.
    func close() {
        let dropped = state.withLock { state -> [Data] in
            state.phase = .closed
            state.waiting = 0
            state.lastIsOpenBlock = false
            defer { state.chunks = [] }
            return state.chunks
        }
        // Released here, outside the lock.
        withExtendedLifetime(dropped) {}
    }

    var phase: Phase { state.withLock { $0.phase } }

    /// The most bytes that waited for the router queue at once (tests and diagnostics).
    var peakWaiting: Int64 { state.withLock { $0.peakWaiting } }
}
