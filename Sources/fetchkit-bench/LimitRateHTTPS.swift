import FetchKit
import Foundation
import Measurements
import LoopbackServer
#if canImport(Glibc)
import Glibc
#endif

/// `fetchkit-bench limit-rate --https`: the bandwidth limit over HTTPS, measured at the server
/// that faces the client — nginx's TLS sockets — on the port that offers HTTP/2.
///
/// nginx (set up as for `fetchkit-bench https`: a CA made with `openssl` for the run, trusted
/// by the client in a private mount namespace) proxies to the loopback server without
/// buffering the response. The loopback server behind it cannot tell the client's rate (nginx
/// reads ahead of its client), so the kernel is asked about nginx's own sockets: every 50 ms
/// `ss -tin` (iproute2, sock_diag) lists the connections whose local port is nginx's, and the
/// bytes each client acknowledged (`bytes_acked`, TLS records and headers included) are summed
/// over every connection seen in the run. Every 5-second window, from the client's first
/// request to the server's last byte, is divided by the limit, as in the plain mode (where the
/// server sent everything in less than 5 s, the one window from the first request). The
/// client — a `FetchQueue` with the limit, `transfers` bodies of `seconds` × limit bytes in
/// all — runs as a child process (`limit-rate-child`) in the namespace; nginx's access log
/// says which protocol each request used. The rows are interleaved: each round runs every row
/// and mechanism once; the figures are the medians over the rounds.
enum LimitRateHTTPSBenchmark {
    struct Row: CustomStringConvertible {
        let rate: Int
        let transfers: Int
        var description: String { "\(rate) B/s, \(transfers) transfer(s)" }
    }

    static let defaultRows = [Row(rate: 1_000_000, transfers: 1), Row(rate: 1_000_000, transfers: 3),
                              Row(rate: 250_000, transfers: 2)]

    /// One run's figures, as ratios to the limit.
    struct Run {
        var wireFirst: Double
        var wireMin: Double
        var wireMax: Double
        var overall: Double
        var seconds: Double
        var failed: Int
        var enforced: Bool
        /// Requests per protocol (`HTTP/1.1`, `HTTP/2.0`) in nginx's access log.
        var protocols: [String: Int]
        /// The client connections to nginx's port that `ss` saw.
        var connections: Int
        /// The protocol of the control fetch, without a limit, in nginx's access log.
        var control: String
        /// The median time between two samples, in seconds.
        var samplePeriod: Double
        /// When the server's last byte was acknowledged, in seconds from the first request.
        var lastByte: Double
    }

    /// - Parameter baseline: another `fetchkit-bench` (built from another commit) whose
    ///   `limit-rate-child` runs each row too, right after this build's, for a comparison.
    static func run(rows: [Row], seconds: Int, perHost: Bool, rounds: Int, mechanisms: [String], baseline: String?) throws {
        guard let ss = HTTPSBenchmark.find("ss") else {
            print("HTTPS limit-rate rows skipped: they need ss, from iproute2 (apt-get install iproute2), to read nginx's sockets.")
            return
        }
        let tools = ["openssl": HTTPSBenchmark.find("openssl"), "nginx": HTTPSBenchmark.find("nginx"),
                     "unshare": HTTPSBenchmark.find("unshare"), "sh": HTTPSBenchmark.find("sh")]
        if let reason = HTTPSBenchmark.unavailable(tools) {
            print("HTTPS limit-rate rows skipped: \(reason).")
            return
        }
        guard let openssl = tools["openssl"] ?? nil, let nginx = tools["nginx"] ?? nil,
              let unshare = tools["unshare"] ?? nil, let shell = tools["sh"] ?? nil else { return }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-limit-https-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bundle = try HTTPSBenchmark.makeCertificates(openssl: openssl, in: directory)
        if let reason = try HTTPSBenchmark.namespaceUnavailable(unshare: unshare, shell: shell, bundle: bundle) {
            print("HTTPS limit-rate rows skipped: \(reason).")
            return
        }
        let backend = try LoopbackServer(recordRequests: false)
        defer { backend.stop() }
        let server = try TLSBenchServer(nginx: nginx, directory: directory, backend: backend.port)
        defer { server.stop() }
        let ssVersion = (try? HTTPSBenchmark.command(ss, ["-V"]).output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? "ss"
        #if DEBUG
        let build = "debug build"
        #else
        let build = "release build"
        #endif
        print("bandwidth limit over HTTPS \(perHost ? "per host" : "per queue"), nginx \(server.version) (TLS, port offering HTTP/2 and HTTP/1.1),")
        print("\(seconds) s' worth per run, \(build), \(rounds) interleaved round(s); ratios to the limit, medians over the rounds")
        print("wire = bytes the client acknowledged to nginx's TLS sockets (bytes_acked, \(ssVersion)), sampled every 50 ms;")
        print("control = one 1000-byte fetch without a limit, by the same client after the limited ones, on a session of its own")
        let self_ = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let clients = [("", self_)] + (baseline.map { [("@baseline", $0)] } ?? [])
        if let baseline { print("@baseline = the client of \(baseline), run right after this build's in each round") }
        var results: [String: [Run]] = [:]
        func key(_ row: Row, _ mechanism: String) -> String { "\(row.rate) \(row.transfers) \(mechanism)" }
        for round in 1...rounds {
            for row in rows {
                for mechanism in mechanisms {
                    for (suffix, client) in clients {
                        let result = try once(row: row, seconds: seconds, perHost: perHost, mechanism: mechanism, ss: ss, server: server,
                                              command: { HTTPSBenchmark.inNamespace(shell: shell, bundle: bundle, [client] + $0) },
                                              unshare: unshare)
                        results[key(row, mechanism + suffix), default: []].append(result)
                        print(String(format: "  round %d, %d B/s, %d transfer(s), %@: wire 5-s windows min %.3f max %.3f (first %.3f), overall %.3f, %.1f s, server's last byte at %.2f s, %d failed, nginx log: %@ on %d connection(s), control %@, sampled every %.0f ms%@",
                                     round, row.rate, row.transfers, mechanism + suffix, result.wireMin, result.wireMax, result.wireFirst,
                                     result.overall, result.seconds, result.lastByte, result.failed, describe(result.protocols), result.connections,
                                     result.control, result.samplePeriod * 1000, result.enforced ? "" : ", NOT ENFORCED"))
                    }
                }
            }
        }
        print("medians of \(rounds) round(s)")
        print("  limit B/s | transfers | mechanism       | wire windows min | max   | first window | last byte s | overall | in ±15 % | limited, all rounds (nginx log) | control | connections per run")
        for row in rows {
            for mechanism in mechanisms.flatMap({ mechanism in clients.map { mechanism + $0.0 } }) {
                let runs = results[key(row, mechanism)] ?? []
                let inside = runs.filter { $0.wireMin >= 0.85 && $0.wireMax <= 1.15 }.count
                let protocols = runs.reduce(into: [String: Int]()) { total, run in total.merge(run.protocols, uniquingKeysWith: +) }
                let controls = runs.reduce(into: [String: Int]()) { total, run in total[run.control, default: 0] += 1 }
                print(String(format: "  %9d | %9d | %@ | %16.3f | %.3f | %12.3f | %11.2f | %7.3f | %d of %d   | %@ | %@ | %@",
                             row.rate, row.transfers, mechanism.padding(toLength: 15, withPad: " ", startingAt: 0), LimitRateBenchmark.median(runs.map(\.wireMin)),
                             LimitRateBenchmark.median(runs.map(\.wireMax)), LimitRateBenchmark.median(runs.map(\.wireFirst)),
                             LimitRateBenchmark.median(runs.map(\.lastByte)), LimitRateBenchmark.median(runs.map(\.overall)), inside, runs.count, describe(protocols), describe(controls),
                             runs.map { String($0.connections) }.joined(separator: ", ")))
            }
        }
    }

    private static func describe(_ protocols: [String: Int]) -> String {
        protocols.isEmpty ? "no requests" : protocols.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }.joined(separator: ", ")
    }

    private static func once(row: Row, seconds: Int, perHost: Bool, mechanism: String, ss: String, server: TLSBenchServer,
                             command: ([String]) -> [String], unshare: String) throws -> Run {
        let size = row.rate * seconds / row.transfers
        let logStart = server.logSize()
        let counter = AcknowledgedBytes(ss: ss, port: server.http2Port)
        let clock = Date()
        let samples = Guarded<[(seconds: Double, bytes: Int, connections: Int)]>([])
        let stop = DispatchSemaphore(value: 0), stopped = DispatchSemaphore(value: 0)
        let sampler = Thread {
            // A program, not a test: sampling on a period is the point. Each sample is dated
            // halfway through its `ss`.
            while true {
                let before = Date().timeIntervalSince(clock)
                if let sample = counter.sample() {
                    let after = Date().timeIntervalSince(clock)
                    samples.withLock { $0.append(((before + after) / 2, sample.bytes, sample.connections)) }
                }
                let wait = max(0, 0.05 - (Date().timeIntervalSince(clock) - before))
                if stop.wait(timeout: .now() + wait) == .success { break }
            }
            stopped.signal()
        }
        sampler.start()
        var sampling = true
        func stopSampling() {
            guard sampling else { return }
            sampling = false
            stop.signal()
            stopped.wait()
        }
        defer { stopSampling() }

        let child = Process()
        child.executableURL = URL(fileURLWithPath: unshare)
        child.arguments = command(["limit-rate-child", mechanism, String(row.rate), String(row.transfers), String(size),
                                   "https://127.0.0.1:\(server.http2Port)", perHost ? "per-host" : "per-queue"])
        let pipe = Pipe(), input = Pipe()
        child.standardOutput = pipe
        child.standardError = pipe
        child.standardInput = input
        try child.run()
        // The child says "start" right before it enqueues: the windows begin there, as the
        // plain mode's begin at its first enqueue (the process's own start-up is not the limit's).
        // It says "result …" when its limited transfers are done, and waits for a line before
        // the control fetch: the sampling stops there, with one last sample, so that the
        // control's bytes do not count.
        var output = Data()
        var started: Double?
        var finished = false
        while case let chunk = pipe.fileHandleForReading.availableData, !chunk.isEmpty {
            output.append(chunk)
            let text = String(decoding: output, as: UTF8.self)
            if started == nil, text.contains("start\n") { started = Date().timeIntervalSince(clock) }
            if !finished, text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().contains(where: { $0.hasPrefix("result ") }) {
                finished = true
                stopSampling()
                let before = Date().timeIntervalSince(clock)
                if let sample = counter.sample() {
                    samples.withLock { $0.append(((before + Date().timeIntervalSince(clock)) / 2, sample.bytes, sample.connections)) }
                }
                try? input.fileHandleForWriting.write(contentsOf: Data("go\n".utf8))
                try? input.fileHandleForWriting.close()
            }
        }
        try? input.fileHandleForWriting.close()
        child.waitUntilExit()
        let text = String(decoding: output, as: UTF8.self)
        guard child.terminationStatus == 0, let start = started,
              let line = text.split(separator: "\n").last(where: { $0.hasPrefix("result ") }) else {
            throw BenchError("limit-rate-child failed (status \(child.terminationStatus)): \(text)")
        }
        let words = line.split(separator: " ")
        guard words.count == 4, let elapsed = Double(words[1]), let failed = Int(words[2]) else {
            throw BenchError("limit-rate-child: bad result line \(line)")
        }
        var log = samples.withLock { $0 }.filter { $0.seconds >= start }
        let periods = zip(log.dropFirst(), log).map { $0.seconds - $1.seconds }
        log = LimitRateBenchmark.upToLastByte(log, bytes: \.bytes)
        if ProcessInfo.processInfo.environment["FETCHKIT_BENCH_TRACE"] != nil {
            // Every half second: seconds since the child's start, kB acknowledged.
            print(log.enumerated().filter { $0.offset % 10 == 0 }.map {
                String(format: "%.1f:%d", $0.element.seconds - start, $0.element.bytes / 1000)
            }.joined(separator: " "))
        }
        var wire = LimitRateBenchmark.windows(log.map { ($0.seconds, $0.bytes) }, rate: row.rate)
        if wire.isEmpty, let first = log.first, let last = log.last {
            // The server sent everything in less than 5 s: the window from the first request
            // holds it all.
            wire = [Double(last.bytes - first.bytes) / 5 / Double(row.rate)]
        }
        let requests = server.log(from: logStart)
        let limited = requests.filter { $0.path != controlPath }
        return Run(wireFirst: wire.first ?? .nan, wireMin: wire.min() ?? .nan, wireMax: wire.max() ?? .nan,
                   overall: Double(size * row.transfers) / elapsed / Double(row.rate), seconds: elapsed, failed: failed,
                   enforced: words[3] == "true",
                   protocols: limited.reduce(into: [:]) { $0[$1.protocol, default: 0] += 1 },
                   connections: log.last?.connections ?? 0,
                   control: requests.last { $0.path == controlPath }?.protocol ?? "missing",
                   samplePeriod: periods.isEmpty ? .nan : LimitRateBenchmark.median(periods),
                   lastByte: (log.last?.seconds ?? start) - start)
    }

    /// The path of the control fetch (without a limit) in the access log.
    static let controlPath = "/bytes/1000?control"

    /// The client's side, in the namespace: a queue with the limit fetches `transfers` bodies of
    /// `size` bytes from `base`; prints `start` before the first enqueue and
    /// `result SECONDS FAILED ENFORCED` when they are done; then, after a line on its standard
    /// input, makes the control fetch (``controlPath``) through a queue without a limit.
    static func child(mechanism: String, rate: Int, transfers: Int, size: Int, base: String, perHost: Bool) {
        // Read as each transfer starts.
        ComparisonSwitches.boundsReceiveWindow = !mechanism.hasSuffix(LimitRateBenchmark.withoutWindow)
        let queue = perHost ? FetchQueue(maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers, bandwidthLimitPerHost: rate)
                            : FetchQueue(maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers, bandwidthLimit: rate)
        let failures = Guarded(0)
        print("start")
        fflush(nil)
        let start = Date()
        let group = DispatchGroup()
        for index in 0..<transfers {
            guard let url = URL(string: "\(base)/bytes/\(size)?n=\(index)") else { continue }
            group.enter()
            queue.enqueue(FetchOperation<Data>(url: url), on: .global) { result in
                if case .failure(let error) = result {
                    FileHandle.standardError.write(Data("transfer \(index): \(error)\n".utf8))
                    failures.withLock { $0 += 1 }
                }
                group.leave()
            }
        }
        group.wait()
        print("result \(Date().timeIntervalSince(start)) \(failures.withLock { $0 }) \(queue.isBandwidthLimitEnforced)")
        fflush(nil)
        // The parent takes its last sample, then says go.
        _ = readLine()
        if let url = URL(string: base + controlPath) {
            group.enter()
            // A session of its own: the shared one would reuse a limited transfer's HTTP/1.1
            // connection, left in its pool.
            let control = FetchOperation<Data>(url: url)
            control.configuration = FetchConfiguration(session: FetchSession())
            FetchQueue().enqueue(control, on: .global) { result in
                if case .failure(let error) = result {
                    FileHandle.standardError.write(Data("control: \(error)\n".utf8))
                }
                group.leave()
            }
            group.wait()
        }
    }
}

/// The bytes that the clients of one local TCP port on this machine acknowledged, read from
/// the kernel with `ss -tinH '( sport = :PORT )'` (iproute2's sock_diag client): each
/// connection's `bytes_acked`, the latest seen, summed over every connection seen so far, so
/// that a connection that closes keeps its count.
final class AcknowledgedBytes: Sendable {
    private let ss: String
    private let port: UInt16
    private let latest = Guarded([String: Int]())

    init(ss: String, port: UInt16) {
        self.ss = ss
        self.port = port
    }

    /// The sum now and the connections seen so far, or `nil` when `ss` failed.
    func sample() -> (bytes: Int, connections: Int)? {
        guard let result = try? HTTPSBenchmark.command(ss, ["-tinH", "state", "connected", "( sport = :\(port) )"]),
              result.status == 0 else { return nil }
        // A connection's line (its addresses last), then its details on lines that start with
        // white space; listening sockets are not "connected".
        var connection: String?
        var seen: [String: Int] = [:]
        for line in result.output.split(separator: "\n") {
            if let first = line.first, !first.isWhitespace {
                connection = line.split(separator: " ").last.map(String.init)
            } else if let connection, let field = line.split(separator: " ").first(where: { $0.hasPrefix("bytes_acked:") }),
                      let bytes = Int(field.dropFirst("bytes_acked:".count)) {
                seen[connection] = bytes
            }
        }
        return latest.withLock { latest in
            latest.merge(seen) { max($0, $1) }
            return (latest.values.reduce(0, +), latest.count)
        }
    }
}
