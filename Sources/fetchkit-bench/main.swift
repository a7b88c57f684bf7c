// fetchkit-bench: FetchKit's benchmarks. Programs, not tests: each compares FetchKit with a
// baseline measured in the same run and prints the table.
//
//   swift run -c release fetchkit-bench                 the throughput table (alias: throughput)
//   swift run -c release fetchkit-bench report [--runs R] [--count N]   everything issue 11 asks, in one run
//   swift run -c release fetchkit-bench queue-memory [--count N] [--runs R]
//   swift run -c release fetchkit-bench endless-body [--limit MiB] [--chunks B,...] [--runs R] [--no-raw]
//   swift run -c release fetchkit-bench stream [--runs R] [--size MiB] [--slow-size MiB] [--delay MS]
//   swift run -c release fetchkit-bench disk-memory [--size MiB] [--runs R] [--no-ranges]
//   swift run -c release fetchkit-bench tools [--runs R] [--count N] [--size MiB] [--only small,big]
//   swift run -c release fetchkit-bench idle-cpu [--transfers N] [--seconds S] [--runs R]
//   swift run -c release fetchkit-bench https [--runs R] [--quick]   (as root: nginx, openssl, unshare)
//   swift run -c release fetchkit-bench limit-rate [--rate B] [--seconds S] [--transfers N,...] [--per-host]
//       [--rounds R] [--mechanisms bucket,bucket-nowindow] [--send-buffer BYTES]
//   swift run -c release fetchkit-bench limit-rate --https [--rate B --transfers N,...] [--seconds S] [--per-host]
//       [--rounds R] [--mechanisms ...] [--baseline-client BIN]   (as root: nginx, openssl, unshare, ss)
import FetchKit
import Foundation
import Measurements
import LoopbackServer

let usage = """
usage: fetchkit-bench <benchmark> [options]

benchmarks:
  throughput [--runs R] [--quick] [--url BASE] [--only NAME,...] [--fix-off] [--digest]
      FetchKit vs raw URLSession on the loopback server (or BASE, a server that serves
      /bytes/{n}): 1 KiB × 5000 at C=1, 1 KiB × 20000 at C=16, 64 KiB × 5000 at C=8,
      16 MiB × 64 at C=4, 256 MiB × 1 into memory and to disk (default R = 5; names:
      1k-serial 1k 64k 16m 256m-memory 256m-disk), with the TCP connections the loopback
      server accepted per run (median, max in brackets; n/a with --url); --fix-off adds
      FetchKit with its fix for FoundationNetworking's socket wake-ups off, side by side;
      --digest adds, to the rows to disk, FetchKit checking the file's SHA-256
      (DownloadOperation.expectedDigest, taken from sha256sum beforehand) with libcrypto's and
      with its own Swift SHA-256 (ComparisonSwitches.usesSystemDigests off), and a table of both
      against FetchKit without a digest
  report [--runs R] [--quick] [--count N]
      in one run: the throughput table (default R = 3), peak RSS with 20000 fetches queued
      beside raw URLSession, and bytes per waiting operation beside a BlockOperation
      (queue-memory with N operations, default 100000)
  queue-memory [--count N] [--runs R]
      memory per queued operation (default N = 100000, R = 3)
  endless-body [--limit MiB] [--chunks B,...] [--runs R] [--no-raw]
      peak memory growth of a fetch of an endless chunked body at its limit (default 64 MiB),
      in chunks of B bytes (default 256,65536), into memory and to a file, against raw
      URLSession (not with --no-raw: it may grow by gigabytes) and appending to a Data up to
      the limit (default R = 3)
  stream [--runs R] [--size MiB] [--slow-size MiB] [--delay MS]
      a body read as it arrives, FetchKit's DataStreamOperation beside raw URLSession's
      delegate streaming, each run a process of its own: a chunked body of MiB (default
      256) read as fast as it comes (reads/s, MiB/s, CPU per MiB), and one of --slow-size
      (default 64) whose reader waits MS after each read (default 50): RSS growth and how far
      the server's acknowledged bytes (TCP_INFO) ran ahead of the reader (default R = 3)
  disk-memory [--size MiB] [--runs R] [--no-ranges]
      peak RSS growth while one body streams to disk, FetchKit vs raw URLSession
      (default 1024 MiB, R = 3; --no-ranges: a server that refuses ranges)
  tools [--runs R] [--count N] [--size MiB] [--only small,big]
      the fetchkit command beside curl and wget (those on PATH), whole processes in one
      run against the loopback server: N small files of 4 KiB (default 200; fetchkit -i
      LIST -d DIR, plain URLSession as the floor, curl --remote-name-all, wget -i) and one
      body of MiB to disk (default
      1024; -o FILE, -o, -O): wall time and peak RSS (/usr/bin/time), medians of R interleaved
      runs (default 5), each against curl's time
  idle-cpu [--transfers N] [--seconds S] [--runs R]
      CPU used while N transfers wait S seconds on a silent server and on trickled bodies:
      FetchKit, raw URLSession, and FetchKit with its socket fix off
      (default N = 8, S = 5, R = 3)
  https [--runs R] [--quick]
      FetchKit vs raw URLSession over HTTPS through nginx (a CA made with openssl for the run),
      HTTP/1.1 and HTTP/2: 1 KiB × 4000 at C=16 and 16 MiB × 32 at C=4 (--quick: 1000 and 8;
      default R = 5), with the TLS connections nginx logged per run. The clients run in a
      private mount namespace that trusts the CA (unshare --mount: root); where that cannot be
      done, or nginx, openssl or unshare is missing, the rows are skipped and it says why
  limit-rate [--rate B] [--seconds S] [--transfers N,...] [--per-host] [--rounds R]
             [--mechanisms bucket,bucket-nowindow] [--send-buffer BYTES]
      a FetchQueue bandwidth limit of B bytes per second (default 1000000) measured on the
      wire at the loopback server (bytes the client acknowledged, TCP_INFO, sampled every
      50 ms; every 5-second window against the limit), with the kernel's default socket
      buffers (--send-buffer: the server's SO_SNDBUF): N transfers to it sharing the queue's
      limit (--per-host: the per-host limit; default 1,3), S seconds' worth in all (default
      20), each mechanism in turn per round (FetchKit's bucket; -nowindow: without the small
      receive window of a new connection up to 1 MB/s per transfer; default bucket), medians
      over R rounds (default 3)
  limit-rate --https [--rate B --transfers N,...] [--seconds S] [--per-host] [--rounds R]
             [--mechanisms ...] [--baseline-client BIN]
      the same over HTTPS, measured at the server facing the client: nginx with TLS (set up
      as for https: root, nginx, openssl, unshare) on its port offering HTTP/2, the bytes each
      client connection acknowledged to nginx's sockets read with ss (iproute2) every 50 ms,
      summed, every 5-second window against the limit; the requests' protocols from nginx's
      access log. Rows (default): 1000000 B/s with 1 and 3 transfers, 250000 B/s with 2
      (--rate/--transfers: B with each N); mechanisms default bucket (FetchKit's); rows and
      mechanisms interleaved in each round, medians over R rounds (default 3); each client
      also fetches 1000 bytes without a limit (the control: HTTP/2 where it is offered);
      --baseline-client: BIN, a fetchkit-bench built from another commit, runs each row too,
      right after this one's; skipped, saying why, without ss or what https needs
  digests [--size MiB] [--runs R]
      hashing a file of MiB in the page cache (default 256) with each digest FetchKit checks
      (SHA-256, SHA-512, SHA-1, MD5): libcrypto's, FetchKit's own Swift fallback
      (ComparisonSwitches.usesSystemDigests off), and the coreutils tool as a process; MB/s,
      medians of R interleaved runs (default 5)
  serve
      runs the loopback server until interrupted and prints its URL, for other clients

profiling one client alone (the server in another process, so that perf counts only the client):
  fetchkit-bench serve &                                   prints BASE
  perf stat -e task-clock,context-switches,cpu-migrations \
      fetchkit-bench throughput-child fetchkit|raw 1k-serial BASE 5000
  perf record -g … the same child; perf probe -x …/libdispatch.so dispatch_async counts the hops
"""

func option(_ name: String, in arguments: [String], default value: Int) throws -> Int {
    guard let index = arguments.firstIndex(of: name) else { return value }
    guard index + 1 < arguments.count, let parsed = Int(arguments[index + 1]), parsed > 0 else {
        throw BenchError("\(name) needs a positive number")
    }
    return parsed
}

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch arguments.first {
    case nil, "throughput":
        let base: URL?
        if let index = arguments.firstIndex(of: "--url") {
            guard index + 1 < arguments.count, let url = URL(string: arguments[index + 1]), url.scheme?.hasPrefix("http") == true else {
                throw BenchError("--url needs an http(s) base URL")
            }
            base = URL(string: url.absoluteString.hasSuffix("/") ? String(url.absoluteString.dropLast()) : url.absoluteString)
        } else {
            base = nil
        }
        let only = arguments.firstIndex(of: "--only").flatMap { index in
            index + 1 < arguments.count ? Set(arguments[index + 1].split(separator: ",").map(String.init)) : nil
        } ?? []
        try ThroughputBenchmark.run(runs: try option("--runs", in: arguments, default: 5),
                                    quick: arguments.contains("--quick"), base: base, only: only,
                                    fixOff: arguments.contains("--fix-off"), digest: arguments.contains("--digest"))
    case "report":
        try ReportBenchmark.run(runs: try option("--runs", in: arguments, default: 3),
                                quick: arguments.contains("--quick"),
                                queuedCount: try option("--count", in: arguments, default: 100_000))
    case "throughput-child":
        guard arguments.count == 4 || arguments.count == 5 else { throw BenchError("bad child arguments") }
        try ThroughputBenchmark.child(client: arguments[1], scenario: arguments[2], base: arguments[3],
                                      count: arguments.count == 5 ? Int(arguments[4]) : nil)
    case "url-list-child":
        try RawListDownloader.child(arguments: Array(arguments.dropFirst()))
    case "https":
        try HTTPSBenchmark.run(runs: try option("--runs", in: arguments, default: 5), quick: arguments.contains("--quick"))
    case "serve":
        let server = try LoopbackServer(recordRequests: false)
        print(server.baseURL.absoluteString)
        fflush(nil)
        while true { sleep(3600) }
    case "queue-memory":
        try QueueMemoryBenchmark.run(count: try option("--count", in: arguments, default: 100_000),
                                     runs: try option("--runs", in: arguments, default: 3))
    case "disk-memory":
        try DiskMemoryBenchmark.run(size: try option("--size", in: arguments, default: 1024) << 20,
                                    runs: try option("--runs", in: arguments, default: 3),
                                    ranges: !arguments.contains("--no-ranges"))
    case "disk-memory-child":
        guard arguments.count == 5, let size = Int(arguments[2]) else { throw BenchError("bad child arguments") }
        try DiskMemoryBenchmark.child(client: arguments[1], size: size, base: arguments[3], path: arguments[4])
    case "digests":
        try DigestsBenchmark.run(sizeMiB: try option("--size", in: arguments, default: 256),
                                 runs: try option("--runs", in: arguments, default: 5))
    case "queue-memory-child":
        guard arguments.count == 3, let count = Int(arguments[2]) else { throw BenchError("bad child arguments") }
        try QueueMemoryBenchmark.child(scenario: arguments[1], count: count)
    case "tools":
        let only = arguments.firstIndex(of: "--only").flatMap { index in
            index + 1 < arguments.count ? Set(arguments[index + 1].split(separator: ",").map(String.init)) : nil
        } ?? []
        try CommandLineToolsBenchmark.run(runs: try option("--runs", in: arguments, default: 5),
                                          count: try option("--count", in: arguments, default: 200),
                                          bigSize: try option("--size", in: arguments, default: 1024) << 20, only: only)
    case "idle-cpu":
        try IdleCPUBenchmark.run(transfers: try option("--transfers", in: arguments, default: 8),
                                 seconds: try option("--seconds", in: arguments, default: 5),
                                 runs: try option("--runs", in: arguments, default: 3))
    case "idle-cpu-child":
        guard arguments.count == 5, let transfers = Int(arguments[3]), let seconds = Int(arguments[4]) else {
            throw BenchError("bad child arguments")
        }
        try IdleCPUBenchmark.child(client: arguments[1], wait: arguments[2], transfers: transfers, seconds: seconds)
    case "endless-body":
        let chunks = arguments.firstIndex(of: "--chunks").flatMap { index in
            index + 1 < arguments.count ? arguments[index + 1].split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 } : nil
        } ?? [256, 64 << 10]
        try EndlessBodyBenchmark.run(limitMiB: try option("--limit", in: arguments, default: 64), chunkSizes: chunks,
                                     runs: try option("--runs", in: arguments, default: 3), raw: !arguments.contains("--no-raw"))
    case "stream":
        try StreamBenchmark.run(runs: try option("--runs", in: arguments, default: 3), fastMiB: try option("--size", in: arguments, default: 256),
                                slowMiB: try option("--slow-size", in: arguments, default: 64),
                                delayMilliseconds: try option("--delay", in: arguments, default: 50))
    case "stream-child":
        guard arguments.count == 4, let mebibytes = Int(arguments[2]), let delay = Int(arguments[3]) else { throw BenchError("bad child arguments") }
        try StreamChild.run(client: arguments[1], mebibytes: mebibytes, delayMilliseconds: delay)
    case "endless-body-child":
        guard arguments.count == 3 || arguments.count == 4, let limit = Int(arguments[2]) else { throw BenchError("bad child arguments") }
        try EndlessBodyBenchmark.child(scenario: arguments[1], limitMiB: limit,
                                       chunkSize: arguments.count == 4 ? Int(arguments[3]) ?? (16 << 10) : 16 << 10)
    case "limit-rate":
        func list(_ name: String, default value: String) throws -> [String] {
            guard let index = arguments.firstIndex(of: name) else { return value.split(separator: ",").map(String.init) }
            guard index + 1 < arguments.count else { throw BenchError("\(name) needs a value") }
            return arguments[index + 1].split(separator: ",").map(String.init)
        }
        func value(_ name: String) throws -> String? {
            guard let index = arguments.firstIndex(of: name) else { return nil }
            guard index + 1 < arguments.count else { throw BenchError("\(name) needs a value") }
            return arguments[index + 1]
        }
        let transfers = try list("--transfers", default: "1,3").map { text in
            guard let count = Int(text), count > 0 else { throw BenchError("--transfers needs positive numbers") }
            return count
        }
        let https = arguments.contains("--https")
        let mechanisms = try list("--mechanisms", default: https ? "bucket" : LimitRateBenchmark.mechanisms.joined(separator: ","))
        guard mechanisms.allSatisfy(LimitRateBenchmark.isMechanism) else {
            throw BenchError("--mechanisms takes \(LimitRateBenchmark.mechanisms.joined(separator: ", ")), each perhaps with -nowindow")
        }
        if https {
            guard !arguments.contains("--send-buffer") else { throw BenchError("--send-buffer is for the plain mode (the server is nginx)") }
            let rate = try option("--rate", in: arguments, default: 1_000_000)
            let rows = arguments.contains("--rate") || arguments.contains("--transfers")
                ? transfers.map { LimitRateHTTPSBenchmark.Row(rate: rate, transfers: $0) }
                : LimitRateHTTPSBenchmark.defaultRows
            try LimitRateHTTPSBenchmark.run(rows: rows, seconds: try option("--seconds", in: arguments, default: 20),
                                            perHost: arguments.contains("--per-host"),
                                            rounds: try option("--rounds", in: arguments, default: 3), mechanisms: mechanisms,
                                            baseline: try value("--baseline-client"))
            break
        }
        let sendBuffer = try option("--send-buffer", in: arguments, default: Int.max)
        try LimitRateBenchmark.run(rate: try option("--rate", in: arguments, default: 1_000_000),
                                   seconds: try option("--seconds", in: arguments, default: 20),
                                   transfers: transfers, perHost: arguments.contains("--per-host"),
                                   rounds: try option("--rounds", in: arguments, default: 3), mechanisms: mechanisms,
                                   sendBufferSize: sendBuffer == Int.max ? nil : sendBuffer)
    case "limit-rate-child":
        guard arguments.count == 7, let rate = Int(arguments[2]), let transfers = Int(arguments[3]), let size = Int(arguments[4]) else {
            throw BenchError("bad child arguments")
        }
        LimitRateHTTPSBenchmark.child(mechanism: arguments[1], rate: rate, transfers: transfers, size: size, base: arguments[5],
                                      perHost: arguments[6] == "per-host")
    case "-h", "--help":
        print(usage)
    default:
        FileHandle.standardError.write(Data((usage + "\n").utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("fetchkit-bench: \(error)\n".utf8))
    exit(1)
}
