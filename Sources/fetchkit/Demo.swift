import Dispatch
import FetchKit
import Foundation
import LoopbackServer

/// `fetchkit demo`: the classic RSS-reader refresh, entirely on this machine.
enum Demo {
    static func run() -> Int32 {
        let server: LoopbackServer
        do {
            server = try LoopbackServer(recordRequests: false)
        } catch {
            Terminal.error("fetchkit: cannot start the local demo server: \(error)")
            return 1
        }
        defer { server.stop() }
        let paths = routeFeeds(on: server)

        let bound = 4
        print("""
        FetchKit demo — runs offline. A local HTTP server on \(server.baseURL.absoluteString) serves \(paths.count) sample
        feeds; FetchKit refreshes them all at once, at most \(bound) at a time, and parses each with XMLParser.
        Nothing leaves this machine. (To download real URLs: fetchkit URL... — see fetchkit --help.)

        """)

        let display = DispatchQueue(label: "fetchkit.demo")
        let queue = FetchQueue(name: "demo", maximumConcurrentTransfers: bound, maximumTransfersPerHost: bound)
        let operations = paths.map { FeedOperation(url: server.url("/feeds/\($0)"), path: $0) }
        let started = Date()
        let totals = Totals()
        for operation in operations {
            let path = operation.path
            operation.onCompletion(on: .dispatch(display)) { result in
                let at = String(format: "+%.2f s", Date().timeIntervalSince(started))
                switch result {
                case .success(let feed):
                    totals.items += feed.itemCount
                    print("  ✓ \(pad(Terminal.sanitized(feed.title), 26)) \(pad("\(feed.itemCount) item\(feed.itemCount == 1 ? "" : "s")", 10)) \(pad(path, 24)) \(at)")
                case .failure(let error):
                    print("  ✗ \(pad(path, 26)) \(Terminal.sanitized(Self.reason(error)))   \(at)")
                }
            }
        }
        let done = DispatchSemaphore(value: 0)
        queue.enqueue(batch: operations, on: .dispatch(display), completion: { status in
            totals.status = status
            done.signal()
        })
        done.wait()
        let (status, items) = display.sync { (totals.status!, totals.items) }
        let elapsed = Date().timeIntervalSince(started)
        let counters = server.counters
        print("""

        \(status.total) feeds in \(String(format: "%.2f", elapsed)) s: \(status.succeeded) refreshed, \(status.failed) failed, \
        \(items) items in all.
        The server saw at most \(counters.peakRequestsInFlight) requests at once (the bound is \(bound)), over \
        \(counters.connectionsAccepted) connection\(counters.connectionsAccepted == 1 ? "" : "s").
        """)
        return 0
    }

    /// Serves the sample feeds, and a few that fail in the ways real ones do.
    private static func routeFeeds(on server: LoopbackServer) -> [String] {
        var paths: [String] = []
        for sample in SampleFeeds.feeds {
            let body = Data(SampleFeeds.document(for: sample).utf8)
            let type = sample.atom ? "application/atom+xml" : "application/rss+xml"
            let path = sample.path == "relocated.xml" ? "moved.xml" : sample.path
            var response = HTTPResponse(status: 200, headers: ["Content-Type": type], body: body)
            if sample.path == "slow.xml" { response = response.delayed(milliseconds: 400) }
            server.route("/feeds/\(sample.path)") { [response] _ in response }
            paths.append(path)
        }
        server.route("/feeds/moved.xml") { _ in
            HTTPResponse(status: 301, headers: ["Location": "/feeds/relocated.xml"])
        }
        server.route("/feeds/broken.xml") { _ in
            HTTPResponse(status: 200, headers: ["Content-Type": "application/rss+xml"], body: Data(SampleFeeds.broken.utf8))
        }
        server.route("/feeds/not-a-feed.xml") { _ in
            HTTPResponse(status: 200, headers: ["Content-Type": "text/html"], body: Data(SampleFeeds.notAFeed.utf8))
        }
        // /feeds/gone.xml is not routed: a 404.
        return paths + ["broken.xml", "not-a-feed.xml", "gone.xml"]
    }

    private static func reason(_ error: FetchError) -> String {
        switch error {
        case .parseFailed(let failure): return "parse failed: \(Downloader.clause(failure.underlying.description))"
        default: return Downloader.reason(error)
        }
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}

/// Counters kept on the demo's display queue.
private final class Totals: @unchecked Sendable {
    var items = 0
    var status: FetchBatch.Status?
}
