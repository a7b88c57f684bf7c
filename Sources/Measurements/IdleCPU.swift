import Dispatch
import FetchKit
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `fetchkit-bench idle-cpu`: the CPU a process uses while its transfers wait on the network —
/// FetchKit, raw URLSession, and FetchKit with its fix for FoundationNetworking's socket
/// wake-ups turned off (`ComparisonSwitches.quietsWaitingSockets`).
///
/// Each measurement is a child process with its own loopback server (so that the process's
/// CPU time is the client's and that server's, nothing else): it starts N transfers, waits
/// until the server has every request (silent: the server never answers) or the first bytes
/// of every body (trickle: 4 KiB every 40 ms, about 100 KB/s each), then reads `getrusage`
/// before and after `seconds`.
package enum IdleCPUBenchmark {
    package static let clients = ["fetchkit", "raw", "fetchkit-unfixed"]
    package static let waits = ["silent", "trickle"]

    package static func run(transfers: Int, seconds: Int, runs: Int) throws {
        print("CPU used while \(transfers) transfers wait, \(seconds) s, \(runs) interleaved runs, medians;")
        print("each a fresh process with its own loopback server (silent: never answers; trickle: ~100 KB/s each)\n")
        var samples: [String: [Double]] = [:]
        for run in 0..<runs {
            for wait in waits {
                for client in run.isMultiple(of: 2) ? clients : clients.reversed() {
                    let output = try runSelf(["idle-cpu-child", client, wait, String(transfers), String(seconds)])
                    guard let cpu = field("cpu", in: output) else { throw BenchError("no measurement from \(client) \(wait): \(output)") }
                    samples["\(wait) \(client)", default: []].append(cpu)
                }
            }
            FileHandle.standardError.write(Data("run \(run + 1) of \(runs) done\n".utf8))
        }
        let columns = [34, 16, 16]
        print(zip(["client", "silent server", "trickled bodies"], columns).map { pad($0, $1) }.joined())
        let titles = ["fetchkit": "FetchKit", "raw": "raw URLSession", "fetchkit-unfixed": "FetchKit, fix off"]
        for client in clients {
            let cells = waits.map { wait -> String in
                let cpu = median(samples["\(wait) \(client)"] ?? [0])
                return String(format: "%.2f s (%.0f %%)", cpu, cpu / Double(seconds) * 100)
            }
            print(zip([titles[client] ?? client] + cells, columns).map { pad($0, $1) }.joined())
        }
        print("\n(% of one core; the trickle rows include the server's own sending)")
    }

    /// One client waiting, in this (child) process: prints `cpu=<seconds> transfers=<N>`.
    package static func child(client: String, wait: String, transfers: Int, seconds: Int) throws {
        if client == "fetchkit-unfixed" {
            // Read when each FetchSession is made: before the first.
            ComparisonSwitches.quietsWaitingSockets = false
        }
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        let path = wait == "trickle" ? "/trickle/1000000000/4096/40" : "/never"
        let received = ArrivalCount(transfers)
        var keep: [AnyObject] = []
        switch client {
        case "fetchkit", "fetchkit-unfixed":
            let queue = FetchQueue(name: "idle", maximumConcurrentTransfers: transfers, maximumTransfersPerHost: transfers)
            for index in 0..<transfers {
                let operation = FetchOperation<Data>(url: server.url("\(path)?n=\(index)"))
                operation.configuration.idleTimeout = 3600
                let first = FirstTime()
                operation.onProgress(on: .global) { progress in
                    if progress.bytesReceived > 0, first.take() { received.arrive() }
                }
                queue.enqueue(operation)
            }
            keep.append(queue)
        case "raw":
            let configuration = URLSessionConfiguration.default
            configuration.urlCache = nil
            configuration.httpMaximumConnectionsPerHost = transfers
            configuration.timeoutIntervalForRequest = 3600
            let delegate = RawStreamDelegate(received)
            let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
            for index in 0..<transfers {
                session.dataTask(with: server.url("\(path)?n=\(index)")).resume()
            }
            keep.append(session)
        default:
            throw BenchError("unknown client \(client)")
        }
        // Every transfer is waiting: the server has every request, and (trickle) every body has begun.
        guard server.blockingWait(timeout: 60, until: { $0.requestsInFlight == transfers }),
              wait != "trickle" || received.wait(timeout: 60)
        else { throw BenchError("the transfers did not all start") }
        let before = Memory.cpuSeconds()
        let started = Date()
        Thread.sleep(forTimeInterval: Double(seconds))   // the measurement window itself
        let cpu = Memory.cpuSeconds() - before
        print("cpu=\(cpu) seconds=\(Date().timeIntervalSince(started)) transfers=\(transfers)")
        fflush(nil)
        withExtendedLifetime(keep) {}
        exit(0)   // the transfers never end: no teardown to wait for
    }

    private static func field(_ name: String, in output: String) -> Double? {
        for pair in output.split(whereSeparator: \.isWhitespace) {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0] == name { return Double(parts[1]) }
        }
        return nil
    }
}

/// True the first time only, from any thread.
private final class FirstTime: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false

    package func take() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        defer { done = true }
        return !done
    }
}

private final class RawStreamDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let received: ArrivalCount
    private var seen: Set<Int> = []

    package init(_ received: ArrivalCount) { self.received = received }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        if seen.insert(dataTask.taskIdentifier).inserted { received.arrive() }
    }
}

/// Counts arrivals from any thread; a waiter wakes when all have arrived.
package final class ArrivalCount: @unchecked Sendable {
    private let condition = NSCondition()
    private var remaining: Int

    package init(_ count: Int) { remaining = count }

    package func arrive() {
        condition.lock()
        remaining -= 1
        if remaining <= 0 { condition.broadcast() }
        condition.unlock()
    }

    /// Whether all arrived within `timeout` seconds.
    package func wait(timeout: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while remaining > 0 {
            if !condition.wait(until: deadline) { return remaining <= 0 }
        }
        return true
    }
}
