import Testing
@testable import FetchKit

/// The ranges of `plan` that must tile its file: done, each segment from what it synced to its
/// end, unassigned — sorted.
private func tiles(_ plan: SegmentPlan) -> [Range<Int64>] {
    (plan.done + plan.segments.map { ($0.start + $0.synced)..<$0.end }.filter { !$0.isEmpty } + plan.unassigned)
        .sorted { $0.lowerBound < $1.lowerBound }
}

/// Whether `ranges` (sorted) cover `0..<length` with no gap and no overlap.
private func tileExactly(_ ranges: [Range<Int64>], _ length: Int64) -> Bool {
    var cursor: Int64 = 0
    for range in ranges {
        guard range.lowerBound == cursor, !range.isEmpty else { return false }
        cursor = range.upperBound
    }
    return cursor == length
}

@Suite("A segmented download's plan: tiling, stealing, resuming", .timeLimit(.minutes(1)))
struct SegmentPlanTests {
    static let mebibyte: Int64 = 1 << 20

    @Test func aFreshFileIsSharedEvenlyAmongTheConnections() {
        var plan = SegmentPlan(length: 32 * Self.mebibyte, connections: 4, minimumSegmentSize: Self.mebibyte)
        let started = plan.assign()
        #expect(started.map { $0.end - $0.start } == Array(repeating: 8 * Self.mebibyte, count: 4))
        #expect(tileExactly(started.map { $0.start..<$0.end }, 32 * Self.mebibyte))
        #expect(started.map(\.rangeHeader).first == "bytes=0-8388607")
        #expect(plan.unassigned.isEmpty && plan.done.isEmpty && !plan.isComplete)
        let more = plan.assign()
        #expect(more.isEmpty, "every connection is busy")
    }

    @Test func theMinimumSizeBoundsHowManySegmentsAFileGets() {
        var small = SegmentPlan(length: 3 * Self.mebibyte + 5, connections: 8, minimumSegmentSize: Self.mebibyte)
        let three = small.assign()
        #expect(three.count == 3 && three.allSatisfy { $0.end - $0.start >= Self.mebibyte })
        #expect(tileExactly(three.map { $0.start..<$0.end }, 3 * Self.mebibyte + 5))
        var tiny = SegmentPlan(length: 1000, connections: 8, minimumSegmentSize: Self.mebibyte)
        let one = tiny.assign()
        #expect(one.map { $0.start..<$0.end } == [0..<1000], "smaller than the minimum: one stream")
        var empty = SegmentPlan(length: 0, connections: 4, minimumSegmentSize: 1)
        let none = empty.assign()
        #expect(none.isEmpty && empty.isComplete)
    }

    /// Bytes written are not done until synced: a record may say only what fsync vouched for.
    @Test func writtenBytesBecomeDoneOnlyWhenSynced() {
        var plan = SegmentPlan(length: 4000, connections: 2, minimumSegmentSize: 1000)
        let segments = plan.assign()
        plan.received(700, in: segments[1].id)
        #expect(plan.done.isEmpty && plan.holes == [0..<4000])
        plan.synced(segments[1].id)
        #expect(plan.done == [2000..<2700] && plan.holes == [0..<2000, 2700..<4000] && plan.contiguousPrefix == 0)
        plan.received(2000, in: segments[0].id)
        let complete = plan.synced(segments[0].id)
        #expect(complete, "the first segment is complete")
        #expect(plan.done == [0..<2700] && plan.contiguousPrefix == 2700, "touching ranges merge")
        #expect(plan.segments.map(\.id) == [segments[1].id])
    }

    /// A free connection takes the upper half of the largest remainder; the victim stops at the
    /// split. Nothing is taken when the remainder is under twice the minimum.
    @Test func aFreeConnectionStealsHalfOfTheLargestRemainder() throws {
        var plan = SegmentPlan(length: 40_000, connections: 4, minimumSegmentSize: 1000)
        let segments = plan.assign()
        #expect(segments.count == 4)
        plan.received(10_000, in: segments[0].id)
        let first = plan.synced(segments[0].id)
        #expect(first)
        plan.received(2000, in: segments[1].id)        // 8000 left
        plan.received(9000, in: segments[2].id)        // 1000 left
        let steal = plan.steal()
        let (stolen, victim) = try #require(steal)
        #expect(victim == segments[3].id, "the largest remainder: the untouched last segment")
        #expect(stolen.start == 35_000 && stolen.end == 40_000)
        #expect(plan.segments.first { $0.id == victim }?.end == 35_000)
        let again = plan.steal()
        #expect(again == nil, "every connection is busy again")
        #expect(tileExactly(tiles(plan), 40_000))

        var late = SegmentPlan(length: 3000, connections: 2, minimumSegmentSize: 1000)
        let one = late.assign()
        #expect(one.count == 2)
        late.received(1500, in: one[0].id)
        let lateFirst = late.synced(one[0].id)
        #expect(lateFirst)
        late.received(1, in: one[1].id)
        let nothing = late.steal()
        #expect(nothing == nil, "1499 left: halves under the minimum are not worth a connection")
    }

    /// A restart after a crash fetches only the holes of what the record says is on disk.
    @Test func aResumedPlanFetchesOnlyTheHoles() {
        var plan = SegmentPlan(length: 10_000, connections: 4, minimumSegmentSize: 100,
                               done: [0..<1000, 3000..<4000, 3500..<6000, 9900..<20_000])
        #expect(plan.done == [0..<1000, 3000..<6000, 9900..<10_000], "clamped and merged")
        #expect(plan.holes == [1000..<3000, 6000..<9900])
        let started = plan.assign()
        #expect(started.allSatisfy { segment in plan.holes.contains { $0.contains(segment.start) && segment.end <= $0.upperBound } })
        #expect(tileExactly(tiles(plan), 10_000))
        #expect(started.count == 4, "the connections share the holes by size")
    }

    /// An abandoned segment gives back what it did not sync, written bytes included.
    @Test func anAbandonedSegmentGivesBackWhatItDidNotSync() {
        var plan = SegmentPlan(length: 2000, connections: 1, minimumSegmentSize: 100)
        let first = plan.assign()[0]
        plan.received(500, in: first.id)
        plan.synced(first.id)
        plan.received(300, in: first.id)
        plan.abandon(first.id)
        #expect(plan.done == [0..<500] && plan.unassigned == [500..<2000] && plan.segments.isEmpty)
        let again = plan.assign()
        #expect(again.map(\.rangeHeader) == ["bytes=500-1999"])
    }

    /// Seeded random runs of every step: after each, done, the segments and the unassigned rest
    /// tile the file exactly, done only grows, and the run ends with the file complete.
    @Test(arguments: 0..<40)
    func anyOrderOfEventsKeepsTheFileTiledAndEnds(seed: Int) {
        var random = SplitMix64(seed: UInt64(seed))
        let length = Int64(random.below(5_000_000) + 1)
        var plan = SegmentPlan(length: length, connections: random.below(8) + 1, minimumSegmentSize: Int64(random.below(200_000) + 1))
        var doneBytes: Int64 = 0
        var steps = 0
        while !plan.isComplete, steps < 100_000 {
            steps += 1
            _ = plan.assign()
            if random.chance(20), let (stolen, victim) = plan.steal() {
                #expect(stolen.end - stolen.start >= plan.minimumSegmentSize && plan.segments.contains { $0.id == victim })
            }
            guard let segment = plan.segments.isEmpty ? nil : random.pick(plan.segments) else { continue }
            switch random.below(10) {
            case 0: plan.abandon(segment.id)
            case 1...3: plan.synced(segment.id)
            default: plan.received(Int64(random.below(Int(max(1, segment.remaining))) + 1), in: segment.id)
            }
            #expect(tileExactly(tiles(plan), length), "seed \(seed), step \(steps): \(plan)")
            let now = plan.done.reduce(Int64(0)) { $0 + Int64($1.count) }
            #expect(now >= doneBytes)
            doneBytes = now
            if !tileExactly(tiles(plan), length) { return }
        }
        #expect(plan.isComplete && plan.contiguousPrefix == length && plan.holes.isEmpty, "seed \(seed) after \(steps) steps")
    }
}
