import Foundation
import Measurements
import LoopbackServer

/// `fetchkit-bench report`: the three measurements issue 11 asks for, in one run — the
/// throughput table beside raw URLSession, peak RSS with 20,000 fetches queued beside raw
/// URLSession (16 tasks alive at a time, and all 20,000 tasks resumed at once) and beside the
/// floors of 20,000 `BlockOperation`s, of 20,000 operations holding their requests in no queue
/// and of 20,000 `URLRequest`s alone, and bytes per waiting
/// operation beside the
/// `BlockOperation` baseline.
enum ReportBenchmark {
    static func run(runs: Int, quick: Bool, queuedCount: Int) throws {
        print("== 1. Throughput ==\n")
        let samples = try ThroughputBenchmark.run(runs: runs, quick: quick, base: nil, only: [])

        print("\n== 2. Peak RSS with every fetch of a row queued ==\n")
        let queued = (quick ? Scenario.quick : Scenario.all).first { $0.name == "1k" }
        if let scenario = queued, let raw = samples[scenario.name]?["raw"], let fetchKit = samples[scenario.name]?["fetchkit"] {
            let rawRSS = median(raw.map(\.measurement.peakRSS))
            let fkRSS = median(fetchKit.map(\.measurement.peakRSS))
            let (allAtOnce, floor, requestsFloor, heldFloor) = try queuedBaselines(scenario, runs: fetchKit.count)
            let allRSS = median(allAtOnce.map(\.measurement.peakRSS))
            let floorRSS = median(floor.map(\.peakRSS))
            let requestsRSS = median(requestsFloor.map(\.peakRSS))
            let heldRSS = median(heldFloor.map(\.peakRSS))
            func versus(_ rss: Int) -> String {
                let difference = fkRSS - rss
                return String(format: "FetchKit %.2f× (%@ %@, %d B per queued fetch)", Double(fkRSS) / Double(rss),
                              Memory.format(bytes: abs(difference)), difference >= 0 ? "more" : "less", abs(difference) / scenario.count)
            }
            let rate = median(allAtOnce.map { Double($0.measurement.requests) / $0.measurement.seconds })
            let connections = allAtOnce.compactMap(\.connections)
            let errors = allAtOnce.map(\.measurement.errors).reduce(0, +)
            func line(_ label: String, _ rss: Int, _ comparison: String = "") {
                print("  " + pad(label, 62) + pad(Memory.format(bytes: rss), 12) + comparison)
            }
            print("\(scenario.title), all \(scenario.count) enqueued at once; peak RSS of each child process, medians of \(fetchKit.count) runs:")
            line("FetchKit, all \(scenario.count) enqueued at once", fkRSS)
            line("raw URLSession, \(scenario.concurrency) tasks alive at a time", rawRSS, versus(rawRSS))
            line("raw URLSession, all \(scenario.count) tasks created and resumed at once", allRSS, versus(allRSS))
            print("    (its session's httpMaximumConnectionsPerHost = \(scenario.concurrency) bounds it: "
                  + String(format: "%.0f req/s", rate) + ", connections \(connections.isEmpty ? "n/a" : "\(median(connections)) (max \(connections.max() ?? 0))"), errors \(errors))")
            line("floor: \(scenario.count) BlockOperations in an OperationQueue", floorRSS, versus(floorRSS))
            line("floor: \(scenario.count) Operations holding their URLRequests, no queue", heldRSS, versus(heldRSS))
            line("floor: \(scenario.count) URLRequests alone, in an array", requestsRSS, versus(requestsRSS))
            print(String(format: "    (to the %d-at-a-time raw client's peak: any client whose %d queued fetches are Operations %.2f×, any client that holds their requests %.2f×)",
                         scenario.concurrency, scenario.count, Double(heldRSS) / Double(rawRSS), Double(requestsRSS) / Double(rawRSS)))
        }

        print("\n== 3. Bytes per waiting operation ==\n")
        try QueueMemoryBenchmark.run(count: quick ? min(queuedCount, 20_000) : queuedCount, runs: quick ? 1 : 3)
    }

    /// Raw URLSession with every task of `scenario` created and resumed at once, the
    /// `BlockOperation` floor and the floor of the requests alone: `runs` of each, each in a
    /// fresh process, against a loopback server that counts the connections.
    private static func queuedBaselines(_ scenario: Scenario, runs: Int) throws
        -> ([ThroughputBenchmark.Sample], [RunMeasurement], [RunMeasurement], [RunMeasurement]) {
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        var allAtOnce: [ThroughputBenchmark.Sample] = []
        var floor: [RunMeasurement] = []
        var requestsFloor: [RunMeasurement] = []
        var heldFloor: [RunMeasurement] = []
        for _ in 0..<max(1, runs) {
            server.resetCounters()
            let output = try runSelf(["throughput-child", "raw-all", scenario.name, server.baseURL.absoluteString, String(scenario.count)])
            guard let measurement = RunMeasurement(parsing: output) else { throw BenchError("no measurement from raw-all: \(output)") }
            allAtOnce.append(.init(measurement: measurement, connections: server.connectionsAccepted))
            let floorOutput = try runSelf(["throughput-child", "operations-floor", scenario.name, server.baseURL.absoluteString, String(scenario.count)])
            guard let floorMeasurement = RunMeasurement(parsing: floorOutput) else { throw BenchError("no measurement from the floor: \(floorOutput)") }
            floor.append(floorMeasurement)
            let requestsOutput = try runSelf(["throughput-child", "requests-floor", scenario.name, server.baseURL.absoluteString, String(scenario.count)])
            guard let requestsMeasurement = RunMeasurement(parsing: requestsOutput) else { throw BenchError("no measurement from the requests floor: \(requestsOutput)") }
            requestsFloor.append(requestsMeasurement)
            let heldOutput = try runSelf(["throughput-child", "held-operations-floor", scenario.name, server.baseURL.absoluteString, String(scenario.count)])
            guard let heldMeasurement = RunMeasurement(parsing: heldOutput) else { throw BenchError("no measurement from the held floor: \(heldOutput)") }
            heldFloor.append(heldMeasurement)
        }
        return (allAtOnce, floor, requestsFloor, heldFloor)
    }
}
