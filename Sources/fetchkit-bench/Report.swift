import Foundation

/// `fetchkit-bench report`: the three measurements issue 11 asks for, in one run — the
/// throughput table beside raw URLSession, peak RSS with 20,000 fetches queued beside raw
/// URLSession, and bytes per waiting operation beside the `BlockOperation` baseline.
enum ReportBenchmark {
    static func run(runs: Int, quick: Bool, queuedCount: Int) throws {
        print("== 1. Throughput ==\n")
        let samples = try ThroughputBenchmark.run(runs: runs, quick: quick, base: nil, only: [])

        print("\n== 2. Peak RSS with every fetch of a row queued ==\n")
        let queued = (quick ? Scenario.quick : Scenario.all).first { $0.name == "1k" }
        if let scenario = queued, let raw = samples[scenario.name]?["raw"], let fetchKit = samples[scenario.name]?["fetchkit"] {
            let rawRSS = median(raw.map(\.measurement.peakRSS))
            let fkRSS = median(fetchKit.map(\.measurement.peakRSS))
            print("\(scenario.title), all \(scenario.count) enqueued at once (raw URLSession keeps only \(scenario.concurrency) tasks):")
            print("  raw URLSession \(Memory.format(bytes: rawRSS)), FetchKit \(Memory.format(bytes: fkRSS)): "
                  + "\(Memory.format(bytes: fkRSS - rawRSS)) more, \((fkRSS - rawRSS) / scenario.count) B per queued fetch "
                  + "(medians of \(fetchKit.count) runs, peak RSS of each child process)")
        }

        print("\n== 3. Bytes per waiting operation ==\n")
        try QueueMemoryBenchmark.run(count: quick ? min(queuedCount, 20_000) : queuedCount, runs: quick ? 1 : 3)
    }
}
