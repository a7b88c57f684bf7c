import FetchKit
import Foundation
import LoopbackServer

/// How much memory a fetch of an endless chunked body takes before it stops at its limit.
///
/// Each measurement runs in a child process of its own, so that the peak resident set size
/// (`ru_maxrss`) is that measurement's alone. The baseline, in the same run, appends the same
/// 16 KiB chunks to a plain `Data` up to the limit: what growing by doubling costs.
enum EndlessBodyBenchmark {
    static func run(limitMiB: Int) throws {
        print("Endless chunked body, limit \(limitMiB) MiB: growth of peak RSS over the process's RSS before the fetch")
        print("case".padding(toLength: 34, withPad: " ", startingAt: 0) + "peak growth   × limit")
        for scenario in ["fetchkit", "download", "data-append"] {
            let output = try runSelf(["endless-body-child", scenario, String(limitMiB)])
            guard let growth = Int(output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw BenchError("unexpected child output: \(output)")
            }
            let label = ["fetchkit": "FetchKit into memory", "download": "FetchKit to a file (no body held)"][scenario]
                ?? "Data.append to the limit"
            let ratio = Double(growth) / Double(limitMiB << 20)
            print(label.padding(toLength: 34, withPad: " ", startingAt: 0)
                + Memory.format(bytes: growth).padding(toLength: 14, withPad: " ", startingAt: 0)
                + String(format: "%.2f", ratio))
        }
    }

    /// Prints the growth of the peak RSS, in bytes, for one scenario.
    static func child(scenario: String, limitMiB: Int) throws {
        let limit = limitMiB << 20
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        server.route("/endless") { _ in
            HTTPResponse(status: 200, body: .chunkedPattern(count: .max, chunkSize: 16 << 10, intervalMilliseconds: 0))
        }
        // Warm up: the session, the server's threads, the pattern buffer.
        let warmUp = FetchOperation<Data>(url: server.url("/json"))
        warmUp.start()
        guard warmUp.waitUntilFinished(timeout: 60) else { throw BenchError("warm-up fetch timed out") }
        Memory.trim()
        let before = Memory.residentBytes()
        switch scenario {
        case "fetchkit":
            let operation = FetchOperation<Data>(url: server.url("/endless"))
            operation.configuration.maximumResponseSize = Int64(limit)
            operation.start()
            guard operation.waitUntilFinished(timeout: 120) else { throw BenchError("fetch timed out") }
            guard case .responseTooLarge? = operation.error else {
                throw BenchError("expected too large, got \(String(describing: operation.error))")
            }
        case "download":
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let operation = DownloadOperation(url: server.url("/endless"), destination: directory.appendingPathComponent("body"))
            operation.configuration.maximumResponseSize = Int64(limit)
            operation.start()
            guard operation.waitUntilFinished(timeout: 120) else { throw BenchError("download timed out") }
            guard case .responseTooLarge? = operation.error else {
                throw BenchError("expected too large, got \(String(describing: operation.error))")
            }
        case "data-append":
            let chunk = Data(count: 16 << 10)
            var body = Data()
            while body.count + chunk.count <= limit { body.append(chunk) }
            withExtendedLifetime(body) {}
        default:
            throw BenchError("unknown scenario \(scenario)")
        }
        print(Memory.peakResidentBytes() - before)
    }
}
