import FetchKit
import Foundation
import Measurements
import LoopbackServer

/// `fetchkit-bench throughput`: FetchKit against raw URLSession on the same server.
///
/// Every (client, workload, run) is a fresh child process, so that each peak RSS is its own;
/// the server runs in this process and counts the connections each child opened. Runs are
/// interleaved — raw then FetchKit, then FetchKit then raw — and the table shows medians.
enum ThroughputBenchmark {
    static let clients = ["raw", "fetchkit"]
    /// With `--fix-off`: FetchKit with its fix for FoundationNetworking's socket wake-ups off too.
    static let clientsWithFixOff = ["raw", "fetchkit", "fetchkit-unfixed"]
    /// With `--digest`: FetchKit checking a SHA-256, with libcrypto's and with its own (to disk only).
    static let digestClients = ["fetchkit-sha256", "fetchkit-sha256-swift"]

    struct Sample {
        let measurement: RunMeasurement
        let connections: Int?
    }

    /// Runs the table and returns the samples by workload name and client.
    @discardableResult
    static func run(runs: Int, quick: Bool, base externalBase: URL?, only: Set<String>,
                    fixOff: Bool = false, digest: Bool = false) throws -> [String: [String: [Sample]]] {
        let clients = (fixOff ? clientsWithFixOff : clients) + (digest ? digestClients : [])
        let server = externalBase == nil ? try LoopbackServer(recordRequests: false) : nil
        defer { server?.stop() }
        let base = externalBase ?? server!.baseURL
        let scenarios = (quick ? Scenario.quick : Scenario.all).filter { only.isEmpty || only.contains($0.name) }

        print("FetchKit vs raw URLSession — \(externalBase == nil ? "loopback server" : base.absoluteString), release build,")
        print("\(runs) interleaved runs, medians; every client × workload × run in a fresh process\n")
        var samples: [String: [String: [Sample]]] = [:]
        var digests: [Int: String] = [:]
        if digest {
            for scenario in scenarios where scenario.destination == .disk && digests[scenario.bodySize] == nil {
                digests[scenario.bodySize] = try patternSHA256(count: scenario.bodySize)
            }
        }
        for run in 0..<runs {
            for scenario in scenarios {
                for client in run.isMultiple(of: 2) ? clients : clients.reversed() {
                    if digestClients.contains(client) {
                        guard let hex = digests[scenario.bodySize] else { continue }
                        setenv("FETCHKIT_BENCH_SHA256", hex, 1)
                    }
                    server?.resetCounters()
                    let output = try runSelf(["throughput-child", client, scenario.name, base.absoluteString, String(scenario.count)])
                    guard let measurement = RunMeasurement(parsing: output) else {
                        throw BenchError("no measurement from \(client) \(scenario.name): \(output)")
                    }
                    samples[scenario.name, default: [:]][client, default: []].append(
                        Sample(measurement: measurement, connections: server?.connectionsAccepted))
                }
            }
            FileHandle.standardError.write(Data("run \(run + 1) of \(runs) done\n".utf8))
        }
        printTable(scenarios, samples)
        if fixOff { printFixTable(scenarios, samples) }
        if digest { printDigestTable(scenarios, samples) }
        return samples
    }

    /// The SHA-256 of the server's first `count` pattern bytes, from `sha256sum` on a file of them.
    private static func patternSHA256(count: Int) throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-pattern-\(getpid())")
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: file) }
        let handle = try FileHandle(forWritingTo: file)
        var offset = 0
        while offset < count {
            let step = min(count - offset, 8 << 20)
            try handle.write(contentsOf: BytePattern.data(offset: offset, count: step))
            offset += step
        }
        try handle.close()
        guard let hex = try DigestsBenchmark.tool(.sha256, file), hex.count == 64 else {
            throw BenchError("sha256sum failed")
        }
        return hex
    }

    /// FetchKit to disk checking a SHA-256 (libcrypto's, and FetchKit's own), against FetchKit
    /// without a digest and raw URLSession, from the same interleaved runs.
    private static func printDigestTable(_ scenarios: [Scenario], _ samples: [String: [String: [Sample]]]) {
        print("\nFetchKit to disk checking the file's SHA-256 (DownloadOperation.expectedDigest):\n")
        let columns = [28, 12, 12, 16, 16, 12, 12]
        let header = ["workload", "raw", "FetchKit", "FK+SHA libcrypto", "FK+SHA Swift", "lib/FK", "Swift/FK"]
        print(zip(header, columns).map { pad($0, $1) }.joined())
        var verdicts: [String] = []
        for scenario in scenarios where scenario.destination == .disk {
            guard let raw = samples[scenario.name]?["raw"], let plain = samples[scenario.name]?["fetchkit"],
                  let system = samples[scenario.name]?["fetchkit-sha256"],
                  let swift = samples[scenario.name]?["fetchkit-sha256-swift"] else { continue }
            func rate(_ sample: Sample) -> Double { Double(sample.measurement.bytes) / sample.measurement.seconds / 1e6 }
            let (rawRate, plainRate) = (median(raw.map(rate)), median(plain.map(rate)))
            let (systemRate, swiftRate) = (median(system.map(rate)), median(swift.map(rate)))
            let errors = (system + swift).map(\.measurement.errors).reduce(0, +)
            let row = [scenario.title, String(format: "%.0f MB/s", rawRate), String(format: "%.0f MB/s", plainRate),
                       String(format: "%.0f MB/s", systemRate), String(format: "%.0f MB/s", swiftRate),
                       String(format: "%.2f×", systemRate / plainRate), String(format: "%.2f×", swiftRate / plainRate)]
            print(zip(row, columns).map { pad($0, $1) }.joined())
            for (name, value) in [("libcrypto", systemRate), ("Swift", swiftRate)] {
                let ratio = value / plainRate
                verdicts.append("\(ratio >= 0.9 ? "✓" : "✗") \(scenario.title): with the \(name) SHA-256 at \(String(format: "%.2f", ratio))× FetchKit without (target ≥ 0.90×)")
            }
            if errors > 0 { verdicts.append("✗ \(scenario.title): \(errors) downloads failed their digest check") }
        }
        print("")
        for verdict in verdicts { print(verdict) }
    }

    /// FetchKit with and without its fix for the socket wake-ups, beside raw URLSession.
    private static func printFixTable(_ scenarios: [Scenario], _ samples: [String: [String: [Sample]]]) {
        print("\nFetchKit with its socket fix (on) and without it (off):\n")
        let columns = [28, 14, 14, 14, 10, 10]
        let header = ["workload", "raw", "FK fix off", "FK fix on", "off/raw", "on/raw"]
        print(zip(header, columns).map { pad($0, $1) }.joined())
        for scenario in scenarios {
            guard let raw = samples[scenario.name]?["raw"], let on = samples[scenario.name]?["fetchkit"],
                  let off = samples[scenario.name]?["fetchkit-unfixed"] else { continue }
            func rate(_ sample: Sample) -> Double {
                let m = sample.measurement
                return scenario.reportsRequests ? Double(m.requests) / m.seconds : Double(m.bytes) / m.seconds / 1e6
            }
            let unit = scenario.reportsRequests ? "req/s" : "MB/s"
            let (rawRate, onRate, offRate) = (median(raw.map(rate)), median(on.map(rate)), median(off.map(rate)))
            let row = [scenario.title, String(format: "%.0f %@", rawRate, unit), String(format: "%.0f %@", offRate, unit),
                       String(format: "%.0f %@", onRate, unit), String(format: "%.2f×", offRate / rawRate),
                       String(format: "%.2f×", onRate / rawRate)]
            print(zip(row, columns).map { pad($0, $1) }.joined())
        }
    }

    private static func printTable(_ scenarios: [Scenario], _ samples: [String: [String: [Sample]]]) {
        let columns = [28, 14, 14, 7, 11, 11, 12, 12, 7]
        let header = ["workload", "raw", "FetchKit", "ratio", "raw RSS", "FK RSS", "raw conn", "FK conn", "errors"]
        print(zip(header, columns).map { pad($0, $1) }.joined())
        var verdicts: [String] = []
        for scenario in scenarios {
            guard let raw = samples[scenario.name]?["raw"], let fetchKit = samples[scenario.name]?["fetchkit"] else { continue }
            func rate(_ sample: Sample) -> Double {
                let m = sample.measurement
                return scenario.reportsRequests ? Double(m.requests) / m.seconds : Double(m.bytes) / m.seconds / 1e6
            }
            let rawRate = median(raw.map(rate))
            let fkRate = median(fetchKit.map(rate))
            let unit = scenario.reportsRequests ? "req/s" : "MB/s"
            let ratio = fkRate / rawRate
            let rawRSS = median(raw.map(\.measurement.peakRSS))
            let fkRSS = median(fetchKit.map(\.measurement.peakRSS))
            // Connections the loopback server accepted (median; max in brackets); "n/a" for --url.
            func connections(_ samples: [Sample]) -> String {
                let counts = samples.compactMap(\.connections)
                return counts.isEmpty ? "n/a" : "\(median(counts)) (\(counts.max() ?? 0))"
            }
            let rawConnections = connections(raw)
            let fkConnections = connections(fetchKit)
            let errors = raw.map(\.measurement.errors).reduce(0, +) + fetchKit.map(\.measurement.errors).reduce(0, +)
            let row = [scenario.title, String(format: "%.0f %@", rawRate, unit), String(format: "%.0f %@", fkRate, unit),
                       String(format: "%.2f×", ratio), Memory.format(bytes: rawRSS), Memory.format(bytes: fkRSS),
                       rawConnections, fkConnections, String(errors)]
            print(zip(row, columns).map { pad($0, $1) }.joined())
            verdicts.append("\(ratio >= 1.0 ? "✓" : "✗") \(scenario.title): FetchKit at \(String(format: "%.2f", ratio))× raw URLSession (target ≥ 1.0×)")
            if scenario.count == 1, scenario.destination == .memory {
                let limit = Double(scenario.bodySize) * 1.3
                verdicts.append("\(Double(fkRSS) <= limit ? "✓" : "✗") \(scenario.title): peak RSS \(Memory.format(bytes: fkRSS)) for a \(Memory.format(bytes: scenario.bodySize)) body held in memory (target ≤ 1.3×, \(Memory.format(bytes: Int(limit))))")
            }
            if scenario.destination == .disk {
                verdicts.append("\(fkRSS < 64 << 20 ? "✓" : "✗") \(scenario.title): peak RSS \(Memory.format(bytes: fkRSS)) (target < 64 MiB)")
            }
        }
        print("")
        for verdict in verdicts { print(verdict) }
    }

    /// One client, one workload, in this (child) process.
    static func child(client: String, scenario name: String, base: String, count: Int? = nil) throws {
        guard var scenario = Scenario.named(name), let base = URL(string: base) else {
            throw BenchError("bad child arguments")
        }
        if let count { scenario.count = count }   // --quick runs fewer requests under the same name
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-\(ProcessInfo.processInfo.processIdentifier)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var measurement: RunMeasurement
        switch client {
        case "raw": measurement = RawClient(scenario: scenario, base: base, directory: directory).run()
        case "raw-all": measurement = RawClient(scenario: scenario, base: base, directory: directory, allAtOnce: true).run()
        case "fetchkit": measurement = FetchKitClient(scenario: scenario, base: base, directory: directory).run()
        case "fetchkit-sha256", "fetchkit-sha256-swift":
            guard let hex = ProcessInfo.processInfo.environment["FETCHKIT_BENCH_SHA256"],
                  let digest = FileDigest(.sha256, hex: hex) else { throw BenchError("FETCHKIT_BENCH_SHA256 is not a SHA-256") }
            // Read when each hasher is made.
            if client == "fetchkit-sha256-swift" { ComparisonSwitches.usesSystemDigests = false }
            measurement = FetchKitClient(scenario: scenario, base: base, directory: directory, digest: digest).run()
        case "fetchkit-unfixed":
            // Read when each FetchSession is made: before the first.
            ComparisonSwitches.quietsWaitingSockets = false
            measurement = FetchKitClient(scenario: scenario, base: base, directory: directory).run()
        case "operations-floor":
            // Its peak is read while the operations are queued (they are freed before it returns).
            print(OperationsFloor.run(scenario: scenario, base: base).line)
            fflush(nil)
            return
        case "requests-floor", "held-operations-floor":
            print(OperationsFloor.held(scenario: scenario, base: base, asOperations: client == "held-operations-floor").line)
            fflush(nil)
            return
        default: throw BenchError("unknown client \(client)")
        }
        measurement.peakRSS = Memory.peakResidentBytes()
        print(measurement.line)
        fflush(nil)
    }
}
