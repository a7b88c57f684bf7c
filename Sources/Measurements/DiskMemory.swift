import Dispatch
import FetchKit
import Foundation
import LoopbackServer

/// `fetchkit-bench disk-memory`: how much a process grows while one large body streams to
/// disk, FetchKit (a DownloadOperation on a FetchQueue) against raw URLSession (a data task
/// whose delegate writes each chunk with write(2) on its serial queue).
///
/// URLSession on Linux has no backpressure: libcurl reads the socket as fast as it can and
/// queues every chunk for the delegate, so whatever the consumer does not keep up with waits in
/// memory. Each (client, run) is a fresh child process: it warms up with a small download,
/// reads its resident set size, downloads the body, and reports its peak minus that baseline.
package enum DiskMemoryBenchmark {
    package static let clients = ["raw", "fetchkit"]

    #if DEBUG
    package static let build = "debug"
    package static let target = 64 << 20
    #else
    package static let build = "release"
    package static let target = 32 << 20
    #endif

    package struct Sample {
        package var growth = 0
        package var seconds = 0.0
        package var bytes: Int64 = 0
        package var errors = 0
        package var continuations = 0
    }

    package static func run(size: Int, runs: Int, ranges: Bool) throws {
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        print("Peak RSS growth while \(Memory.format(bytes: size)) streams to disk — loopback server\(ranges ? "" : " without ranges"),")
        print("\(build) build, \(runs) interleaved runs, medians; every client × run in a fresh process\n")
        var samples: [String: [Sample]] = [:]
        for run in 0..<runs {
            for client in run.isMultiple(of: 2) ? clients : clients.reversed() {
                let output = try runSelf(["disk-memory-child", client, String(size), server.baseURL.absoluteString, ranges ? "bytes" : "bytes-norange"])
                samples[client, default: []].append(try parse(output))
            }
            FileHandle.standardError.write(Data("run \(run + 1) of \(runs) done\n".utf8))
        }
        let columns = [12, 14, 14, 16, 8]
        print(zip(["client", "RSS growth", "throughput", "continuations", "errors"], columns).map { pad($0, $1) }.joined())
        for client in clients {
            guard let runs = samples[client] else { continue }
            let rate = median(runs.map { Double($0.bytes) / $0.seconds / 1e6 })
            let row = [client == "raw" ? "raw" : "FetchKit", Memory.format(bytes: median(runs.map(\.growth))),
                       String(format: "%.0f MB/s", rate), client == "raw" ? "–" : String(median(runs.map(\.continuations))),
                       String(runs.map(\.errors).reduce(0, +))]
            print(zip(row, columns).map { pad($0, $1) }.joined())
        }
        if let fetchKit = samples["fetchkit"] {
            let growth = median(fetchKit.map(\.growth))
            print("")
            print("\(growth < target ? "✓" : "✗") FetchKit: peak RSS growth \(Memory.format(bytes: growth)) for \(Memory.format(bytes: size)) to disk (target < \(Memory.format(bytes: target)) in a \(build) build)")
        }
    }

    package static func parse(_ output: String) throws -> Sample {
        let fields = Dictionary(output.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { pair -> (String, String)? in
            let parts = pair.split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        }, uniquingKeysWith: { _, last in last })
        guard let growth = fields["growth"].flatMap(Int.init), let seconds = fields["seconds"].flatMap(Double.init),
              let bytes = fields["bytes"].flatMap(Int64.init), let errors = fields["errors"].flatMap(Int.init),
              let continuations = fields["continuations"].flatMap(Int.init) else {
            throw BenchError("no reading from child: \(output)")
        }
        return Sample(growth: growth, seconds: seconds, bytes: bytes, errors: errors, continuations: continuations)
    }

    /// One client, one download, in this (child) process: prints `growth=… seconds=… bytes=…
    /// errors=… continuations=…`.
    package static func child(client: String, size: Int, base: String, path: String) throws {
        guard let base = URL(string: base) else { throw BenchError("bad child arguments") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-\(ProcessInfo.processInfo.processIdentifier)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // Warm up (libcurl, the session, the queue), then measure from here.
        _ = try download(client: client, size: 64 << 10, base: base, path: path, directory: directory, name: "warm-up")
        Memory.trim()
        let baseline = Memory.residentBytes()
        var sample = try download(client: client, size: size, base: base, path: path, directory: directory, name: "body")
        sample.growth = max(0, Memory.peakResidentBytes() - baseline)
        print("growth=\(sample.growth) seconds=\(sample.seconds) bytes=\(sample.bytes) errors=\(sample.errors) continuations=\(sample.continuations)")
        fflush(nil)
    }

    private static func download(client: String, size: Int, base: URL, path: String, directory: URL, name: String) throws -> Sample {
        let scenario = Scenario(name: name, bodySize: size, count: 1, concurrency: 1, destination: .disk, path: path)
        switch client {
        case "raw":
            let measurement = RawClient(scenario: scenario, base: base, directory: directory).run()
            return Sample(seconds: measurement.seconds, bytes: measurement.bytes, errors: measurement.errors)
        case "fetchkit":
            let queue = FetchQueue(name: "bench", maximumConcurrentTransfers: 1)
            let download = DownloadOperation(url: scenario.url(base: base, index: 0), destination: directory.appendingPathComponent(name))
            let done = DispatchSemaphore(value: 0)
            let started = Date()
            queue.enqueue(download, on: .global) { _ in done.signal() }
            done.wait()
            let seconds = Date().timeIntervalSince(started)
            let length = DownloadOperation.size(of: download.destination) ?? 0
            return Sample(seconds: seconds, bytes: Int64(length), errors: download.error == nil && length == size ? 0 : 1,
                          continuations: download.backpressureContinuations)
        default:
            throw BenchError("unknown client \(client)")
        }
    }
}
