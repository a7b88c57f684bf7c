import FetchKit
import Foundation
import LoopbackServer
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `fetchkit-bench stream`: a body read as it arrives (issue 34), FetchKit's
/// ``StreamingFetchOperation`` beside raw URLSession's delegate streaming, in one run.
///
/// Two rows per client, each the median of interleaved runs, each run a process of its own
/// (`stream-child`) that serves the body from a loopback server in that process:
/// - **fast reader**: a chunked body read as fast as it comes — reads per second, MiB/s, and
///   CPU seconds per MiB (the whole process: client and server);
/// - **slow reader**: a reader that waits `delay` ms after each read — the growth of the peak
///   RSS, and the most the server's acknowledged bytes (`TCP_INFO`) ran ahead of the reader.
///   Raw URLSession hands the delegate every chunk as it arrives, so its reader's queue holds
///   what it has not read: that is the body, less what was read.
package enum StreamBenchmark {
    package static func run(runs: Int, fastMiB: Int, slowMiB: Int, delayMilliseconds: Int) throws {
        print("Streaming a body (issue 34): \(runs) interleaved runs, medians (max in brackets)\n")
        print("Fast reader: a \(fastMiB) MiB chunked body read as it arrives")
        let columns = [32, 18, 16, 18]
        print(zip(["client", "reads/s", "MiB/s", "CPU s per MiB"], columns).map { pad($0, $1) }.joined())
        var fast: [String: [[String: String]]] = [:]
        for _ in 0..<runs {
            for client in ["fetchkit", "raw"] {
                fast[client, default: []].append(StreamChild.keyValues(try runSelf(["stream-child", client, String(fastMiB), "0"])))
            }
        }
        for client in ["fetchkit", "raw"] {
            let rows = fast[client] ?? []
            func values(_ key: String) -> [Double] { rows.compactMap { $0[key].flatMap(Double.init) } }
            let seconds = values("seconds"), reads = values("reads"), cpu = values("cpu")
            let perSecond = zip(reads, seconds).map { $0 / max($1, 1e-9) }
            let mibPerSecond = seconds.map { Double(fastMiB) / max($0, 1e-9) }
            let cpuPerMiB = cpu.map { $0 / Double(fastMiB) }
            print(zip([label(client), summary(perSecond, "%.0f"), summary(mibPerSecond, "%.0f"), summary(cpuPerMiB, "%.4f")], columns)
                .map { pad($0, $1) }.joined())
        }

        print("\nSlow reader: a \(slowMiB) MiB body, the reader waiting \(delayMilliseconds) ms after each read")
        print(zip(["client", "RSS growth", "ahead (TCP)", "reads"], columns).map { pad($0, $1) }.joined())
        var slow: [String: [[String: String]]] = [:]
        for _ in 0..<runs {
            for client in ["fetchkit", "raw"] {
                slow[client, default: []].append(StreamChild.keyValues(try runSelf(["stream-child", client, String(slowMiB), String(delayMilliseconds)])))
            }
        }
        for client in ["fetchkit", "raw"] {
            let rows = slow[client] ?? []
            func values(_ key: String) -> [Int] { rows.compactMap { $0[key].flatMap(Int.init) } }
            let growth = values("growth"), ahead = values("ahead"), reads = values("reads")
            print(zip([label(client), bytes(growth), bytes(ahead), reads.isEmpty ? "–" : String(median(reads))], columns)
                .map { pad($0, $1) }.joined())
        }
        print("\nTarget (issue 34): with a slow reader, FetchKit grows by less than 16 MiB and the server's acknowledged bytes plateau.")
    }

    private static func label(_ client: String) -> String {
        client == "raw" ? "raw URLSession (delegate)" : "FetchKit (DataStreamOperation)"
    }

    private static func summary(_ values: [Double], _ format: String) -> String {
        guard !values.isEmpty else { return "–" }
        return String(format: format, median(values)) + " (" + String(format: format, values.max() ?? 0) + ")"
    }

    private static func bytes(_ values: [Int]) -> String {
        guard !values.isEmpty else { return "–" }
        return Memory.format(bytes: median(values)) + " (" + Memory.format(bytes: values.max() ?? 0) + ")"
    }
}

/// One run of ``StreamBenchmark`` in this (child) process.
package enum StreamChild {
    package static func keyValues(_ output: String) -> [String: String] {
        EndlessBodyBenchmark.keyValues(output)
    }

    /// Reads `mebibytes` of a chunked body with `client` (`fetchkit`, `fetchkit-nopause`: the
    /// pause turned off, or `raw`), waiting `delay` ms after each read; prints
    /// `growth= ahead= reads= seconds= cpu= bytes= error=`.
    package static func run(client: String, mebibytes: Int, delayMilliseconds: Int) throws {
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        let length = mebibytes << 20
        server.route("/stream") { _ in
            HTTPResponse(status: 200, headers: ["Content-Type": "application/octet-stream"],
                         body: .chunkedPattern(count: length, chunkSize: 64 << 10, intervalMilliseconds: 0))
        }
        let warmUp = FetchOperation<Data>(url: server.url("/json"))
        warmUp.start()
        guard warmUp.waitUntilFinished(timeout: 60) else { throw BenchError("warm-up fetch timed out") }
        Memory.trim()
        let before = Memory.residentBytes()
        let cpuBefore = Memory.cpuSeconds()
        let started = Date()
        let reader = SlowReader(server: server, delayMilliseconds: delayMilliseconds)
        let url = server.url("/stream")
        let done = DispatchSemaphore(value: 0)
        let failure = FailureNote()
        switch client {
        case "fetchkit", "fetchkit-nopause":
            let operation = DataStreamOperation(url: url)
            if client == "fetchkit-nopause" { operation.pausesReadingForComparison = false }
            operation.configuration.retryPolicy = .none
            operation.configuration.maximumResponseSize = .max
            Task {
                do throws(FetchError) {
                    for try await chunk in FetchQueue(maximumConcurrentTransfers: 1).stream(operation) { reader.read(chunk.count) }
                } catch {
                    failure.set("\(error.code)")
                }
                done.signal()
            }
        case "raw":
            let client = RawStreamClient(reader: reader)
            client.start(url) { error in
                if let error { failure.set(error) }
            }
            DispatchQueue.global().async {
                client.readUntilEnd()
                done.signal()
            }
        default:
            throw BenchError("unknown client \(client)")
        }
        guard done.wait(timeout: .now() + 900) == .success else { throw BenchError("stream timed out") }
        let seconds = Date().timeIntervalSince(started)
        let error = failure.text.map { $0.replacingOccurrences(of: " ", with: "_") } ?? "none"
        print("growth=\(max(0, Memory.peakResidentBytes() - before)) ahead=\(reader.ahead) reads=\(reader.reads) "
            + "bytes=\(reader.bytes) seconds=\(seconds) cpu=\(Memory.cpuSeconds() - cpuBefore) error=\(error)")
        fflush(nil)
    }
}

/// The reader's side of a run: counts what it read, waits after each read, and samples how
/// far the server's acknowledged bytes are ahead of it.
package final class SlowReader: @unchecked Sendable {
    private struct Counts {
        package var reads = 0
        package var bytes = 0
        package var ahead = 0
    }

    private let server: LoopbackServer
    private let delay: Int
    private let lock = NSLock()
    private var _counts = Counts()   // guarded by `lock`

    package init(server: LoopbackServer, delayMilliseconds: Int) {
        self.server = server
        delay = delayMilliseconds
    }

    package func read(_ count: Int) {
        let acknowledged = delay > 0 ? server.bytesAcknowledged ?? 0 : 0
        lock.withLock {
            _counts.reads += 1
            _counts.bytes += count
            _counts.ahead = max(_counts.ahead, acknowledged - _counts.bytes)
        }
        if delay > 0 { usleep(useconds_t(delay * 1000)) }
    }

    package var reads: Int { lock.withLock { _counts.reads } }
    package var bytes: Int { lock.withLock { _counts.bytes } }
    package var ahead: Int { lock.withLock { _counts.ahead } }
}

/// The first error a run met, in words.
private final class FailureNote: @unchecked Sendable {
    private let lock = NSLock()
    private var _text: String?   // guarded by `lock`

    package func set(_ text: String) {
        lock.withLock { if _text == nil { _text = text } }
    }

    package var text: String? { lock.withLock { _text } }
}

/// Raw URLSession streaming as its documentation has it: a delegate that hands each chunk to a
/// reader (here a queue the reader drains, every chunk that waits at once, as FetchKit's reads
/// do). Nothing stops URLSession reading while the reader is behind.
private final class RawStreamClient: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let reader: SlowReader
    private let delegateQueue = OperationQueue()
    private let waiting = NSCondition()
    // Guarded by `waiting`.
    private var chunks: [Data] = []
    private var ended = false
    private var session: URLSession?
    private var completion: ((String?) -> Void)?

    package init(reader: SlowReader) {
        self.reader = reader
        super.init()
        delegateQueue.maxConcurrentOperationCount = 1
    }

    package func start(_ url: URL, completion: @escaping (String?) -> Void) {
        self.completion = completion
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration, delegate: self, delegateQueue: delegateQueue)
        self.session = session
        session.dataTask(with: url).resume()
    }

    package func readUntilEnd() {
        while true {
            waiting.lock()
            while chunks.isEmpty && !ended { waiting.wait() }
            let taken = chunks
            chunks = []
            let over = ended && taken.isEmpty
            waiting.unlock()
            if over { break }
            var joined = Data(capacity: taken.reduce(0) { $0 + $1.count })
            for chunk in taken { joined.append(chunk) }
            reader.read(joined.count)
        }
        session?.finishTasksAndInvalidate()
    }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        waiting.lock()
        chunks.append(data)
        waiting.signal()
        waiting.unlock()
    }

    package func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        completion?(error.map { "\($0)" })
        waiting.lock()
        ended = true
        waiting.signal()
        waiting.unlock()
    }
}
