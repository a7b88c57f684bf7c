/// Which bytes of one file a download in segments has, is fetching, and has still to fetch —
/// a pure value, decided apart from the transfers it drives (issue 36).
///
/// A file of ``length`` bytes is tiled by three kinds of byte ranges that never overlap and
/// leave no gap: ``done`` (written and synced: what a record may say is on disk), the
/// ``segments`` in flight (each from what it has synced to its end), and the ``unassigned``
/// rest. A plan starts from what is on disk (nothing, or a resumed
/// record's ranges) and assigns the holes to at most `connections` segments of at least
/// `minimumSegmentSize` bytes each; a segment that finishes early takes half of the largest
/// remainder of another (``steal()``, aria2's rule), so one slow connection does not hold the
/// end of the file.
struct SegmentPlan: Sendable, Equatable {
    /// One range in flight on a connection of its own.
    struct Segment: Sendable, Equatable {
        /// Names the segment while it lives (never reused in one plan).
        let id: Int
        /// Its first byte.
        let start: Int64
        /// One past its last byte: it may move down (``SegmentPlan/steal()`` takes the upper
        /// half of what has not arrived), never up.
        fileprivate(set) var end: Int64
        /// The bytes from `start` that arrived and were written.
        fileprivate(set) var received: Int64 = 0
        /// The bytes from `start` that were synced to disk (and so are in ``SegmentPlan/done``).
        fileprivate(set) var synced: Int64 = 0

        /// The next byte it needs.
        var next: Int64 { start + received }
        /// The bytes it still needs.
        var remaining: Int64 { end - next }
        /// What its request asks for: `Range: bytes=<start>-<end - 1>` (HTTP's last byte is
        /// inclusive).
        var rangeHeader: String { "bytes=\(next)-\(end - 1)" }
    }

    /// The file's length.
    let length: Int64
    /// The smallest segment the plan makes (a split leaves both halves at least this large).
    let minimumSegmentSize: Int64
    /// The most segments in flight at once.
    let connections: Int
    /// The ranges on disk, sorted and merged.
    private(set) var done: [Range<Int64>]
    /// The segments in flight, by start.
    private(set) var segments: [Segment] = []
    /// The ranges neither done nor in flight, sorted.
    private(set) var unassigned: [Range<Int64>]
    private var nextID = 0

    /// A plan for a file of `length` bytes of which `done` is already on disk.
    ///
    /// - Parameters:
    ///   - length: The file's length (`Content-Range`'s total, checked against the validator).
    ///   - connections: The most segments at once (at least 1).
    ///   - minimumSegmentSize: The smallest segment (at least 1 byte).
    ///   - done: Ranges already on disk; clamped to the file and merged.
    init(length: Int64, connections: Int, minimumSegmentSize: Int64, done: [Range<Int64>] = []) {
        let length = max(0, length)
        self.length = length
        self.connections = max(1, connections)
        self.minimumSegmentSize = max(1, minimumSegmentSize)
        let merged = Self.merged(done.compactMap { range -> Range<Int64>? in
            let lower = max(0, range.lowerBound), upper = min(length, range.upperBound)
            return lower < upper ? lower..<upper : nil
        })
        self.done = merged
        unassigned = Self.complement(of: merged, in: 0..<length)
    }

    /// Whether every byte is done.
    var isComplete: Bool { done == [0..<length] || length == 0 }

    /// The bytes done from the start with no hole: what can be hashed in order.
    var contiguousPrefix: Int64 {
        guard let first = done.first, first.lowerBound == 0 else { return 0 }
        return first.upperBound
    }

    /// The bytes not yet on disk: what a restart must fetch.
    var holes: [Range<Int64>] { Self.complement(of: done, in: 0..<length) }

    /// Assigns what is unassigned to new segments, up to ``connections`` in flight: each
    /// unassigned range is cut into pieces of at least ``minimumSegmentSize`` (one piece if it
    /// is smaller), the largest first, so that the connections share the file evenly.
    ///
    /// - Returns: The new segments, to start.
    mutating func assign() -> [Segment] {
        var started: [Segment] = []
        while segments.count < connections, !unassigned.isEmpty {
            // How many new segments may still start, shared among the unassigned ranges by size.
            let room = connections - segments.count
            let total = unassigned.reduce(Int64(0)) { $0 + Int64($1.count) }
            let largest = unassigned.indices.max { unassigned[$0].count < unassigned[$1].count } ?? 0
            let range = unassigned.remove(at: largest)
            let share = max(1, Int((Int64(room) * Int64(range.count) + total - 1) / max(1, total)))
            let pieces = max(1, min(share, Int(Int64(range.count) / minimumSegmentSize)))
            let size = Int64(range.count) / Int64(pieces)
            var start = range.lowerBound
            for index in 0..<pieces {
                let end = index == pieces - 1 ? range.upperBound : start + size
                started.append(begin(start..<end))
                start = end
            }
        }
        return started
    }

    /// Notes `count` more bytes of segment `id` written (not yet synced).
    mutating func received(_ count: Int64, in id: Int) {
        guard let index = segments.firstIndex(where: { $0.id == id }) else { return }
        segments[index].received = min(segments[index].end - segments[index].start, segments[index].received + max(0, count))
    }

    /// Notes what segment `id` has written as synced to disk: its bytes so far become done
    /// (a record may now say so). A segment whose end arrived leaves the plan.
    ///
    /// - Returns: Whether the segment is complete (and gone).
    @discardableResult
    mutating func synced(_ id: Int) -> Bool {
        guard let index = segments.firstIndex(where: { $0.id == id }) else { return false }
        let segment = segments[index]
        if segment.received > segment.synced { done = Self.merged(done + [segment.start + segment.synced..<segment.next]) }
        segments[index].synced = segment.received
        guard segment.remaining == 0 else { return false }
        segments.remove(at: index)
        return true
    }

    /// Ends segment `id` where it stands (its connection failed or was stopped): what was
    /// synced stays done; the rest — bytes written but not synced included, which no record
    /// vouches for — goes back to be assigned again.
    mutating func abandon(_ id: Int) {
        guard let index = segments.firstIndex(where: { $0.id == id }) else { return }
        let segment = segments.remove(at: index)
        let unsynced = segment.start + segment.synced
        if unsynced < segment.end { unassigned = Self.merged(unassigned + [unsynced..<segment.end]) }
    }

    /// Takes the upper half of the largest remainder of a segment in flight for a new segment
    /// (aria2's work stealing), when that remainder is at least twice ``minimumSegmentSize``
    /// and a connection is free. The victim's ``Segment/end`` moves down to the split: its
    /// transfer must stop there.
    ///
    /// - Returns: The new segment and the victim's id, or `nil` when nothing is worth taking.
    mutating func steal() -> (segment: Segment, victim: Int)? {
        guard segments.count < connections, unassigned.isEmpty,
              let index = segments.indices.max(by: { segments[$0].remaining < segments[$1].remaining }),
              segments[index].remaining >= 2 * minimumSegmentSize
        else { return nil }
        let victim = segments[index]
        let split = victim.next + victim.remaining / 2
        segments[index].end = split
        return (begin(split..<victim.end), victim.id)
    }

    private mutating func begin(_ range: Range<Int64>) -> Segment {
        let segment = Segment(id: nextID, start: range.lowerBound, end: range.upperBound)
        nextID += 1
        segments.append(segment)
        segments.sort { $0.start < $1.start }
        return segment
    }

    /// `ranges` sorted, with overlapping and touching ones merged.
    static func merged(_ ranges: [Range<Int64>]) -> [Range<Int64>] {
        var result: [Range<Int64>] = []
        for range in ranges.filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, range.lowerBound <= last.upperBound {
                result[result.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                result.append(range)
            }
        }
        return result
    }

    /// The parts of `whole` that `ranges` (sorted, merged) do not cover.
    static func complement(of ranges: [Range<Int64>], in whole: Range<Int64>) -> [Range<Int64>] {
        var result: [Range<Int64>] = []
        var cursor = whole.lowerBound
        for range in ranges where range.upperBound > cursor {
            if range.lowerBound > cursor { result.append(cursor..<min(range.lowerBound, whole.upperBound)) }
            cursor = max(cursor, range.upperBound)
        }
        if cursor < whole.upperBound { result.append(cursor..<whole.upperBound) }
        return result
    }
}
