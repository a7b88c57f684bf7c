import Dispatch
import FetchKit
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer

/// `fetchkit-bench endless-body`: how much memory a fetch of an endless chunked body takes
/// before it stops at its limit, for chunks of several sizes.
///
/// Each measurement runs in a child process of its own, so that the peak resident set size
/// (`ru_maxrss`) is that measurement's alone, and reports the growth of the peak over the
/// process's resident set just before the fetch. The server writes its chunks as fast as the
/// socket takes them, megabytes per `write(2)`, as nginx does. The baselines, in the same
/// run: raw URLSession (a delegate that appends each chunk to a `Data` and cancels the task
/// once the limit is passed), and appending the same bytes to a plain `Data` up to the limit:
/// what growing by doubling costs.
package enum EndlessBodyBenchmark {
    package static let scenarios = ["fetchkit", "download", "raw", "data-append"]

    package static func label(_ scenario: String) -> String {
        switch scenario {
        case "fetchkit": return "FetchKit into memory"
        case "download": return "FetchKit to a file (no body held)"
        case "raw": return "raw URLSession into memory"
        default: return "Data.append to the limit"
        }
    }

    /// - Parameters:
    ///   - limitMiB: The fetch's ``FetchConfiguration/maximumResponseSize``, in MiB.
    ///   - chunkSizes: The chunk sizes to measure, in bytes.
    ///   - runs: Runs per (scenario, chunk size); the table shows the median and the largest.
    ///   - raw: Whether to measure raw URLSession too (it may grow by gigabytes).
    package static func run(limitMiB: Int, chunkSizes: [Int], runs: Int, raw: Bool) throws {
        #if DEBUG
        let build = "debug"
        #else
        let build = "release"
        #endif
        print("Endless chunked body, limit \(limitMiB) MiB, \(build) build: growth of peak RSS over the process's RSS")
        print("before the fetch; \(runs) run(s) each, median (largest in brackets); each run in a fresh process\n")
        let columns = [36, 12, 26, 10, 12]
        print(zip(["case", "chunk", "peak growth", "× limit", "time"], columns).map { pad($0, $1) }.joined())
        for chunk in chunkSizes {
            for scenario in scenarios where raw || scenario != "raw" {
                if scenario == "data-append", chunk != chunkSizes.first { continue }
                var growths: [Int] = []
                var times: [Double] = []
                for _ in 0..<runs {
                    let output = try runSelf(["endless-body-child", scenario, String(limitMiB), String(chunk)])
                    let fields = keyValues(output)
                    guard let growth = fields["growth"].flatMap(Int.init), let seconds = fields["seconds"].flatMap(Double.init) else {
                        throw BenchError("unexpected child output: \(output)")
                    }
                    growths.append(growth)
                    times.append(seconds)
                }
                let middle = median(growths)
                let ratio = Double(middle) / Double(limitMiB << 20)
                print(zip([label(scenario), scenario == "data-append" ? "–" : Memory.format(bytes: chunk),
                           Memory.format(bytes: middle) + " (" + Memory.format(bytes: growths.max() ?? 0) + ")",
                           String(format: "%.2f", ratio), String(format: "%.2f s", median(times))],
                          columns).map { pad($0, $1) }.joined())
            }
        }
        print("\nTarget (issue 20): FetchKit into memory grows by less than twice the limit with 256-byte chunks.")
    }

    package static func keyValues(_ output: String) -> [String: String] {
        Dictionary(output.split(whereSeparator: \.isWhitespace).compactMap { pair -> (String, String)? in
            let parts = pair.split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        }, uniquingKeysWith: { _, last in last })
    }

    /// The response: a chunked head, then `total` bytes in chunks of `chunkSize`, written a
    /// block of about 1 MiB at a time, then the last chunk. "Endless" for a client with a
    /// limit far below `total`.
    package static func route(chunkSize: Int, total: Int) -> HTTPResponse {
        let chunkSize = max(1, chunkSize)
        let perBlock = max(1, (1 << 20) / chunkSize)
        var block = Data()
        let payload = BytePattern.data(offset: 0, count: chunkSize)
        for _ in 0..<perBlock {
            block.append(contentsOf: Array((String(chunkSize, radix: 16) + "\r\n").utf8))
            block.append(payload)
            block.append(contentsOf: [0x0D, 0x0A])
        }
        let blocks = max(1, total / (perBlock * chunkSize))
        let head = Data("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        var actions: [ScriptAction] = [.write(head)]
        actions.append(contentsOf: repeatElement(.write(block), count: blocks))
        actions.append(.write(Data("0\r\n\r\n".utf8)))
        actions.append(.close)
        return .script(actions)
    }

    /// One scenario in this (child) process: prints `growth=… seconds=…`, the growth of the
    /// peak RSS in bytes.
    package static func child(scenario: String, limitMiB: Int, chunkSize: Int) throws {
        let limit = limitMiB << 20
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        // 16 times the limit: endless for a client that stops at the limit, finite for one that
        // does not (raw URLSession holds whatever it has not handled yet).
        let response = route(chunkSize: chunkSize, total: 16 * limit)
        server.route("/endless") { _ in response }
        // Warm up: the session, the server's threads, the pattern buffer.
        let warmUp = FetchOperation<Data>(url: server.url("/json"))
        warmUp.start()
        guard warmUp.waitUntilFinished(timeout: 60) else { throw BenchError("warm-up fetch timed out") }
        Memory.trim()
        let before = Memory.residentBytes()
        let started = Date()
        switch scenario {
        case "fetchkit":
            let operation = FetchOperation<Data>(url: server.url("/endless"))
            operation.configuration.maximumResponseSize = Int64(limit)
            operation.start()
            guard operation.waitUntilFinished(timeout: 300) else { throw BenchError("fetch timed out") }
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
            guard operation.waitUntilFinished(timeout: 300) else { throw BenchError("download timed out") }
            guard case .responseTooLarge? = operation.error else {
                throw BenchError("expected too large, got \(String(describing: operation.error))")
            }
        case "raw":
            let client = RawEndlessClient(limit: limit)
            guard client.run(server.url("/endless"), timeout: 300) else { throw BenchError("raw fetch timed out") }
        case "data-append":
            let chunk = Data(count: 16 << 10)
            var body = Data()
            while body.count + chunk.count <= limit { body.append(chunk) }
            withExtendedLifetime(body) {}
        default:
            throw BenchError("unknown scenario \(scenario)")
        }
        let seconds = Date().timeIntervalSince(started)
        print("growth=\(max(0, Memory.peakResidentBytes() - before)) seconds=\(seconds)")
        fflush(nil)
    }
}

/// Raw URLSession as a careful user would write it: a serial delegate queue, each chunk
/// appended to a `Data`, and the task cancelled (off the delegate queue) once more than the
/// limit has arrived. Chunks already queued for the delegate then still arrive; they are
/// dropped.
private final class RawEndlessClient: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let limit: Int
    private let delegateQueue = OperationQueue()
    private let done = DispatchSemaphore(value: 0)
    // Delegate-queue state.
    private var body = Data()
    private var received = 0
    private var cancelled = false

    package init(limit: Int) {
        self.limit = limit
        super.init()
        delegateQueue.maxConcurrentOperationCount = 1
    }

    package func run(_ url: URL, timeout: TimeInterval) -> Bool {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration, delegate: self, delegateQueue: delegateQueue)
        session.dataTask(with: url).resume()
        defer { session.finishTasksAndInvalidate() }
        return done.wait(timeout: .now() + timeout) == .success
    }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        received += data.count
        guard !cancelled else { return }
        guard received <= limit else {
            cancelled = true
            body = Data()
            DispatchQueue.global().async { dataTask.cancel() }
            return
        }
        body.append(data)
    }

    package func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        done.signal()
    }
}
