import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A response body, once the transfer is complete.
enum ResponseBody: Sendable {
    /// Held in memory.
    case data(Data)
    /// Written to a file.
    case file(URL)

    var data: Data? {
        if case .data(let data) = self { return data }
        return nil
    }
}

/// Where a ``Transfer`` puts the body of an accepted response: in memory, or a download's file
/// (a ``DownloadBodySink``).
///
/// A sink is used on the session router's serial queue only: opened once, written in order,
/// then either closed (the transfer succeeded) or abandoned (it failed or was cancelled).
protocol ResponseBodySink: AnyObject {
    /// The response was accepted; `expectedLength` is its `Content-Length`, if any.
    func open(response: HTTPURLResponse, expectedLength: Int64?) throws(FetchError)
    /// The next chunk of the body, in order.
    func write(_ chunk: Data) throws(FetchError)
    /// The transfer completed: hand over the body.
    func close() throws(FetchError) -> ResponseBody
    /// The transfer failed or was cancelled: release or clean up what was written.
    func abandon()
    /// Holds the reading while the sink's consumer is behind (``BacklogGate``): a download's
    /// writer, a stream's reader; `nil` (a body in memory) for none. Read once, when the
    /// transfer is made.
    var backlogGate: BacklogGate? { get }
}

extension ResponseBodySink {
    var backlogGate: BacklogGate? { nil }
}

/// A download's sink (``FileBodySink``): it stores bytes after they are handed over, and may
/// stop its transfer when the body arrives faster than it can store it, to continue it later
/// from what is stored. A body kept in memory needs none of this.
protocol DownloadBodySink: ResponseBodySink {
    /// Asked after each chunk: whether to stop the transfer because the body is arriving
    /// faster than the sink can store it, to continue it later from what is stored.
    func shouldStopTransfer() -> Bool
    /// Whether ``shouldStopTransfer()`` stopped the transfer. Safe from any thread.
    var stoppedForBackpressure: Bool { get }
    /// A chunk that the task ``shouldStopTransfer()`` stopped delivered after the stop: the
    /// body's next bytes, in order. Never throws: a chunk the sink cannot take is dropped, and
    /// the continuation asks for it again.
    func writeLate(_ chunk: Data)
    /// The task that ``shouldStopTransfer()`` stopped has completed: nothing more arrives.
    /// `bodyComplete`: it completed without an error, so every byte of the body arrived.
    func stoppedTaskDidComplete(bodyComplete: Bool)
    /// Runs `body`, on any thread, once a transfer stopped by ``shouldStopTransfer()`` can be
    /// continued: everything written is stored, and the stopped task has completed.
    func whenReadyToContinue(_ body: @escaping @Sendable () -> Void)
    /// Runs `body`, on any thread, once every byte handed to the sink is stored (the writer
    /// caught up). ``ResponseBodySink/close()`` then does not wait.
    func whenWritten(_ body: @escaping @Sendable () -> Void)
    /// Whether bytes handed to the sink may still wait to be stored (a writer of its own), so
    /// that ``ResponseBodySink/close()`` must wait for ``whenWritten(_:)``.
    var storesLater: Bool { get }
}

/// Keeps the body in memory, in one buffer whose growth it controls.
///
/// Nothing is reserved from an announced length alone: a server may announce a terabyte and
/// send ten bytes. Up front the sink reserves at most ``upfrontReservation`` (and never more
/// than the limit or the announced length); after that it grows from the bytes that actually
/// arrive, doubling, but never past the limit (``grownCapacity(current:needed:limit:expected:)``)
/// — so a body that runs into a 64 MiB limit has reserved at most 64 MiB, not 128. The buffer
/// is `realloc`ed (large blocks move by remapping pages, not by copying them) and handed over
/// as `Data` without a copy.
final class MemoryBodySink: ResponseBodySink {
    /// The most reserved before any byte arrived: 4 MiB.
    static let upfrontReservation = 4 << 20
    /// The smallest growth step: 64 KiB.
    static let minimumGrowth = 64 << 10

    private let limit: Int
    private var expected: Int?
    private var bytes: UnsafeMutableRawPointer?
    private var count = 0
    /// How many bytes the buffer can hold now (tests).
    private(set) var capacity = 0

    /// A sink for bodies of at most `limit` bytes (the transfer enforces the limit; the sink
    /// only never reserves beyond it).
    init(limit: Int64 = .max) {
        self.limit = Int(clamping: max(0, limit))
    }

    deinit {
        free(bytes)
    }

    /// The transfer has already refused a `Content-Length` above the maximum response size.
    func open(response: HTTPURLResponse, expectedLength: Int64?) throws(FetchError) {
        expected = expectedLength.map { Int(clamping: max(0, $0)) }
        if let expected, expected > 0 {
            try reserve(min(expected, limit, Self.upfrontReservation))
        }
    }

    func write(_ chunk: Data) throws(FetchError) {
        guard !chunk.isEmpty else { return }
        let needed = count + chunk.count
        if needed > capacity {
            try reserve(Self.grownCapacity(current: capacity, needed: needed, limit: limit, expected: expected))
        }
        guard let bytes else { return }
        chunk.withUnsafeBytes { source in
            guard let base = source.baseAddress else { return }
            (bytes + count).copyMemory(from: base, byteCount: source.count)
        }
        count = needed
    }

    func close() throws(FetchError) -> ResponseBody {
        guard let filled = bytes, count > 0 else {
            abandon()
            return .data(Data())
        }
        // Give back what was reserved and not used (a lying length, a last doubling).
        let kept = count < capacity ? (realloc(filled, count) ?? filled) : filled
        bytes = nil
        capacity = 0
        defer { count = 0 }
        return .data(Data(bytesNoCopy: kept, count: count, deallocator: .free))
    }

    func abandon() {
        free(bytes)
        bytes = nil
        count = 0
        capacity = 0
    }

    /// The capacity to grow to when `needed` bytes no longer fit in `current`: double (at
    /// least ``minimumGrowth`` more), stop at a truthful `expected` length, and never pass
    /// `limit` (unless `needed` itself does, which the transfer does not let happen).
    static func grownCapacity(current: Int, needed: Int, limit: Int, expected: Int?) -> Int {
        let doubled = current > Int.max / 2 ? Int.max : current * 2
        let stepped = current > Int.max - minimumGrowth ? Int.max : current + minimumGrowth
        var target = max(needed, doubled, stepped)
        if let expected, needed <= expected {
            target = min(target, expected)
        }
        return max(needed, min(target, limit))
    }

    private func reserve(_ newCapacity: Int) throws(FetchError) {
        guard newCapacity > capacity else { return }
        guard let grown = realloc(bytes, newCapacity) else {
            throw .transport(URLError(.dataLengthExceedsMaximum, userInfo: [
                NSLocalizedDescriptionKey: "not enough memory to hold \(newCapacity) bytes of the response body",
            ]))
        }
        bytes = grown
        capacity = newCapacity
    }
}
