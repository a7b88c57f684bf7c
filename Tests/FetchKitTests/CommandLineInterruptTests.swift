import FetchKit
import Foundation
import LoopbackServer
import Testing
@testable import fetchkit

@Suite("fetchkit's transfer rate")
struct TransferRateTests {
    @Test func aResumedFileCountsOnlyThisRunsBytes() {
        var meter = TransferMeter()
        meter.report(300_000, requestedOffset: 300_000)    // the head of a 206: the bytes on disk
        meter.report(400_000, requestedOffset: 300_000)
        meter.report(1_300_000, requestedOffset: 300_000)
        #expect(meter.received == 1_300_000)
        #expect(meter.resumedFrom == 300_000)
        #expect(meter.bytesThisRun == 1_000_000)
    }

    @Test func aCoalescedFirstReportStillCountsFromTheResumePoint() {
        var resumed = TransferMeter()
        resumed.report(350_000, requestedOffset: 300_000)  // the 206's head report was coalesced
        resumed.report(1_300_000, requestedOffset: 300_000)
        #expect(resumed.bytesThisRun == 1_000_000)

        var refused = TransferMeter()
        refused.report(20_000, requestedOffset: 300_000)   // a 200: the file changed, it starts over
        refused.report(1_000_000, requestedOffset: 300_000)
        #expect(refused.bytesThisRun == 1_000_000)
        #expect(refused.resumedFrom == 0)
    }

    @Test func retriesAddUpWhetherTheyResumeOrStartOver() {
        var resumed = TransferMeter()
        resumed.report(0)
        resumed.report(500)
        resumed.attemptEnded()
        resumed.report(500, requestedOffset: 500)          // the retry resumes the partial file
        resumed.report(1_000, requestedOffset: 500)
        #expect(resumed.bytesThisRun == 1_000)
        #expect(resumed.resumedFrom == 0)

        var restarted = TransferMeter()
        restarted.report(0)
        restarted.report(500)
        restarted.attemptEnded()
        restarted.report(0)                                 // the retry starts over (no validator)
        restarted.report(800)
        #expect(restarted.bytesThisRun == 1_300)
        #expect(restarted.received == 800)
    }

    @Test func completionTakesTheExactResumePoint() {
        var meter = TransferMeter()
        meter.completed(size: 1_000, resumedBytes: 600)      // no report arrived before the end
        #expect(meter.bytesThisRun == 400)
        #expect(meter.resumedFrom == 600)
    }

    @Test func theFinishedLineOfAResumedFileShowsThisRunsRate() {
        let start = Date(timeIntervalSinceReferenceDate: 0)
        var item = Downloader.Item(url: URL(fileURLWithPath: "/x"), destination: URL(fileURLWithPath: "/tmp/big.bin"))
        item.meter.report(1 << 20, requestedOffset: 1 << 20)
        item.meter.completed(size: 2 << 20, resumedBytes: 1 << 20)
        item.state = .done
        item.startedAt = start
        item.finishedAt = start.addingTimeInterval(2)
        let line = ProgressDisplay.finalLine(item)
        #expect(line.contains("2.0 MiB in 2.0 s (512.0 KiB/s), resumed at 1.0 MiB"), "\(line)")
    }

    @Test func noTimeNoRate() {
        #expect(TransferMeter.rate(bytes: 100, seconds: 0) == nil)
        #expect(TransferMeter.rate(bytes: 100, seconds: 0.5) == 200)
        var request = URLRequest(url: URL(fileURLWithPath: "/x"))
        #expect(TransferMeter.requestedOffset(of: request) == 0)
        request.setValue("bytes=4096-", forHTTPHeaderField: "Range")
        #expect(TransferMeter.requestedOffset(of: request) == 4096)
    }
}
