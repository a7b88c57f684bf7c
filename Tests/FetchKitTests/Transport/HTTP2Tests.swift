import Foundation
import FetchKit
import FetchKitTesting
import Testing

// HTTP/2 over TLS end to end (issue 22, point 2): nginx negotiates h2 with libcurl (ALPN) and
// proxies each stream to the TestServer as a request of its own, so the backend's
// counters count streams and nginx's access log (`$connection`) counts TLS connections.

/// The access log's lines for `port`, split into words:
/// `<port> <connection> <request on it> <protocol> <status> <method> <uri> <body bytes>`.
private func served(_ log: [String], port: UInt16?) -> [[String]] {
    log.filter { $0.hasPrefix("\(port ?? 0) ") }.map { $0.split(separator: " ").map(String.init) }
}

@Suite("HTTP/2 over TLS", .timeLimit(.minutes(3)),
       .disabled(if: TLSTools.unavailable != nil, Comment(rawValue: TLSTools.unavailable ?? "")),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the fetches run in TLSProbe, a process of their own, and CI's time goes to openssl and nginx"))
struct HTTP2Tests {
    /// A bandwidth limit keeps its transfers to HTTP/1.1, where it holds on the wire: an HTTP/2
    /// stream's window (32 MB in libcurl 7.88) let the server send a whole body at once,
    /// whatever the pause, and one of two limited 1.5 MB bodies at 1 MB/s arrived in 68 ms in
    /// 4 runs of 20 (the other then paid the debt). Now both go over HTTP/1.1, a connection
    /// each, and neither ends sooner than the limit allows. (Lower bounds only: a loaded
    /// machine is slower, never faster; the rate at the server is `fetchkit-bench`'s.)
    @Test func aBandwidthLimitKeepsToHTTP1AndHoldsOverTLS() async throws {
        let size = 1_500_000, limit = 1_000_000
        let ((results, port), log) = try await withTLSServer { server, pki in
            let results = try await runTLSProbe([server.url(.valid, "/bytes/\(size)?a"), server.url(.valid, "/bytes/\(size)?b")],
                                                options: ["--limit-rate", "\(limit)"], trusting: pki.trustBundle)
            return (results, server.ports[.valid])
        }
        for result in results {
            #expect(result.succeeded && result.fields["bytes"] == "\(size)" && result.fields["pattern"] == "match", "\(result)")
            #expect(result.fields["enforced"] == "true", "\(result)")
        }
        let lines = served(log, port: port).filter { $0.count == 8 && $0[6].hasPrefix("/bytes/") }
        #expect(lines.count == 2 && lines.allSatisfy { $0[3] == "HTTP/1.1" }, "both over HTTP/1.1: \(lines)")
        #expect(Set(lines.map { $0[1] }).count == 2, "a connection each: \(lines)")
        let elapsed = results.compactMap { $0.fields["elapsed_ms"].flatMap(Int.init) }.sorted()
        try #require(elapsed.count == 2)
        // 3 MB at 1 MB/s, less the bucket's burst (0.1 s): the last body no sooner than 2.5 s;
        // the first, even if it had the whole limit to itself, no sooner than 1.3 s.
        #expect(elapsed[1] >= 2_500 && elapsed[0] >= 1_300, "ended after \(elapsed) ms")
    }

    /// A stream over HTTP/2 and TLS (issue 34) behaves as over HTTP/1.1: a trickled body is
    /// read in many pieces as it arrives, the first long before the last, every byte in order;
    /// two streams share the one TLS connection, each a stream of its own.
    @Test func aStreamOverHTTP2AndTLSIsReadAsItArrives() async throws {
        let ((results, port), log) = try await withTLSServer { server, pki in
            let results = try await runTLSProbe([server.url(.valid, "/trickle/40000/2000/100?a"), server.url(.valid, "/trickle/40000/2000/100?b")],
                                                options: ["--stream"], trusting: pki.trustBundle)
            return (results, server.ports[.valid])
        }
        for result in results {
            #expect(result.succeeded && result.fields["bytes"] == "40000" && result.fields["pattern"] == "match", "\(result)")
            let reads = result.fields["reads"].flatMap(Int.init) ?? 0
            let first = result.fields["first_read_ms"].flatMap(Int.init) ?? .max
            let elapsed = result.fields["elapsed_ms"].flatMap(Int.init) ?? 0
            // 20 chunks 100 ms apart: read in several pieces, the first well before the end
            // (a read takes all that waited: a reader that a loaded machine starts late takes
            // the first chunks together, so the body lasts 2 s).
            #expect(reads >= 3, "\(result)")
            #expect(first < elapsed - 500, "\(result)")
        }
        let lines = served(log, port: port).filter { $0.count == 8 && $0[6].hasPrefix("/trickle/") }
        #expect(lines.count == 2 && lines.allSatisfy { $0[3] == "HTTP/2.0" }, "over HTTP/2: \(lines)")
    }

    /// Where the session cannot keep a limited transfer to HTTP/1.1 (its configuration has a
    /// URL cache of its own, the slot FetchKit sets each task's libcurl options from), the
    /// transfer runs over HTTP/2 and the queue says the limit is not enforced.
    @Test func aLimitedStreamTheSessionCannotKeepToHTTP1IsReportedUnenforced() async throws {
        let size = 600_000, limit = 1_000_000
        let ((results, port), log) = try await withTLSServer { server, pki in
            let results = try await runTLSProbe([server.url(.valid, "/bytes/\(size)")],
                                                options: ["--limit-rate", "\(limit)", "--own-url-cache"], trusting: pki.trustBundle)
            return (results, server.ports[.valid])
        }
        let result = try #require(results.first)
        #expect(result.succeeded && result.fields["pattern"] == "match", "\(result)")
        #expect(result.fields["enforced"] == "false", "\(result)")
        let lines = served(log, port: port).filter { $0.count == 8 && $0[6].hasPrefix("/bytes/") }
        #expect(lines.count == 1 && lines.allSatisfy { $0[3] == "HTTP/2.0" }, "\(lines)")
    }

    /// Large bodies side by side on one connection arrive whole; then, with a per-host limit,
    /// many small fetches never have more requests (streams) in flight at the server than the
    /// limit, and share few TLS connections.
    @Test func largeBodiesAndThePerHostLimitCountingStreams() async throws {
        let large = [48 << 20, 24 << 20]
        let small = 30, perHost = 3
        let measured = 20, measuredPerHost = 6
        let ((bodies, limited, measuredRun, peaks, port), log) = try await withTLSServer { server, pki in
            let bodies = try await runTLSProbe(large.map { server.url(.valid, "/bytes/\($0)") }, trusting: pki.trustBundle)
            // Each request waits 300 ms at the server, so that the limit is reached and held.
            server.backend.resetCounters()
            let limited = try await runTLSProbe((0..<small).map { server.url(.valid, "/bytes/\(2000 + $0)?delay=300") },
                                                options: ["--per-host", "\(perHost)"], trusting: pki.trustBundle)
            let limitedPeak = server.backend.counters.peakRequestsInFlight
            server.backend.resetCounters()
            let measuredRun = try await runTLSProbe((0..<measured).map { server.url(.valid, "/bytes/\(5000 + $0)?delay=300") },
                                                    options: ["--per-host", "\(measuredPerHost)"], trusting: pki.trustBundle)
            return (bodies, limited, measuredRun, (limitedPeak, server.backend.counters.peakRequestsInFlight), server.ports[.valid])
        }
        let lines = served(log, port: port)
        for (result, count) in zip(bodies, large) {
            #expect(result.succeeded && result.fields["bytes"] == "\(count)" && result.fields["pattern"] == "match", "\(result)")
        }
        let largeLines = lines.filter { $0.count == 8 && $0[6].hasPrefix("/bytes/") && !$0[6].contains("?") }
        #expect(largeLines.count == 2 && largeLines.allSatisfy { $0[3] == "HTTP/2.0" && $0[4] == "200" }, "\(largeLines)")
        #expect(Set(largeLines.map { $0[7] }) == Set(large.map(String.init)), "nginx sent every byte: \(largeLines)")

        for (index, result) in (limited + measuredRun).enumerated() {
            #expect(result.succeeded && result.fields["pattern"] == "match", "\(index): \(result)")
        }
        #expect(peaks.0 == perHost, "at most \(perHost) requests in flight at the server, and that many: \(peaks.0)")
        #expect(peaks.1 == measuredPerHost, "at most \(measuredPerHost) requests in flight at the server, and that many: \(peaks.1)")
        let limitedLines = lines.filter { $0.count == 8 && $0[6].hasPrefix("/bytes/2") && $0[6].contains("?") }
        let measuredLines = lines.filter { $0.count == 8 && $0[6].hasPrefix("/bytes/5") && $0[6].contains("?") }
        #expect(limitedLines.count == small && measuredLines.count == measured, "\(lines)")
        #expect((limitedLines + measuredLines).allSatisfy { $0[3] == "HTTP/2.0" && $0[4] == "200" }, "every request over HTTP/2: \(lines)")
        // Streams, not connections: each probe is a fresh process (a session of its own), and
        // libcurl multiplexes the requests in flight onto its TLS connections, never more of
        // them than the limit: one, or two or three when transfers start before the first
        // connection has negotiated HTTP/2 (FoundationNetworking does not set
        // CURLOPT_PIPEWAIT). 20 at 6 per host: one in 7 runs of 11. The numbers are printed.
        let limitedConnections = Set(limitedLines.map { $0[1] }), measuredConnections = Set(measuredLines.map { $0[1] })
        #expect((1...perHost).contains(limitedConnections.count), "TLS connections for \(small) fetches at \(perHost) per host: \(limitedConnections)")
        #expect((1...measuredPerHost).contains(measuredConnections.count), "TLS connections for \(measured) fetches at \(measuredPerHost) per host: \(measuredConnections)")
        print("HTTP/2 connections per host: \(small) fetches at \(perHost) per host: \(limitedConnections.count); \(measured) fetches at \(measuredPerHost) per host: \(measuredConnections.count)")
    }

    /// A download cancelled mid-body ends cancelled at once while the other streams of its
    /// connection carry on; a second download to the same file asks for the rest with `Range`.
    @Test func aCancelMidBodyLeavesTheOtherStreamsAndAResumeAsksForTheRest() async throws {
        let total = 4 << 20, sent = 1 << 20
        let path = "/stall-at/\(total)/\(sent)"
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let ((results, ranges, port), log) = try await withTLSServer { server, pki in
            // The whole body with an ETag, but only its first `sent` bytes before it stalls;
            // a `Range` request gets the rest at once.
            server.backend.route(path) { request in
                if let range = request.header("Range"), range.hasPrefix("bytes="), range.hasSuffix("-"),
                   let first = Int(range.dropFirst(6).dropLast()), first < total {
                    // The pattern from `first` on: a 206 with `Content-Range: bytes first-(total-1)/total`.
                    return .steps([.head(status: 206, headers: ["Content-Type": "application/octet-stream", "ETag": "\"stall-at\"",
                                                                "Accept-Ranges": "bytes", "Content-Range": "bytes \(first)-\(total - 1)/\(total)",
                                                                "Content-Length": "\(total - first)"]),
                                   .patternBytes(offset: first, count: total - first)])
                }
                return .steps([.head(status: 200, headers: ["Content-Type": "application/octet-stream", "ETag": "\"stall-at\"",
                                                            "Accept-Ranges": "bytes", "Content-Length": "\(total)"]),
                               .patternBytes(offset: 0, count: sent), .stall])
            }
            let others = (0..<3).map { server.url(.valid, "/trickle/\(48 << 10)/\(4 << 10)/\(60 + $0)") }
            let results = try await runTLSProbe(arguments: ["cancel-resume", directory.url.path, server.url(.valid, path).absoluteString]
                                                    + others.map(\.absoluteString),
                                                lines: 2 + others.count, trusting: pki.trustBundle)
            return (results, server.backend.requests(path).map { $0.header("Range") }, server.ports[.valid])
        }
        let cancel = results[0], others = results[1..<results.count - 1], resume = results[results.count - 1]
        #expect(cancel.fields["kind"] == "cancelled", "\(cancel)")
        #expect(Int(cancel.fields["received"] ?? "") == sent, "cancelled mid-body: \(cancel)")
        #expect((Int(cancel.fields["elapsed_ms"] ?? "") ?? .max) < 5_000, "ended promptly: \(cancel)")
        #expect(Int(cancel.fields["partial"] ?? "") == sent, "the partial file is kept: \(cancel)")
        for other in others {
            #expect(other.succeeded && other.fields["bytes"] == "\(48 << 10)" && other.fields["pattern"] == "match", "carried on: \(other)")
        }
        #expect(resume.succeeded && resume.fields["bytes"] == "\(total)" && resume.fields["pattern"] == "match", "\(resume)")
        #expect(resume.fields["resumed"] == "\(sent)" && resume.fields["status"] == "206", "\(resume)")
        #expect(ranges == [nil, "bytes=\(sent)-"], "the server saw the first request whole and the second with Range: \(ranges)")

        let lines = served(log, port: port)
        let stalled = lines.filter { $0.count == 8 && $0[6] == path }
        let trickles = lines.filter { $0.count == 8 && $0[6].hasPrefix("/trickle/") }
        #expect(stalled.map { $0[4] } .sorted() == ["200", "206"] || stalled.map { $0[4] }.sorted() == ["206", "499"], "\(stalled)")
        #expect(stalled.allSatisfy { $0[3] == "HTTP/2.0" } && trickles.allSatisfy { $0[3] == "HTTP/2.0" && $0[4] == "200" }, "\(lines)")
        // The cancelled stream and the ones that carried on shared one TLS connection.
        let cancelledConnection = stalled.first { $0[4] != "206" }?[1]
        #expect(trickles.count == 3 && trickles.allSatisfy { $0[1] == cancelledConnection }, "one connection: \(lines)")
        print("HTTP/2 cancel mid-body: ended \(cancel.fields["elapsed_ms"] ?? "?") ms after cancel(); nginx logged the streams: \(stalled.map { $0.joined(separator: " ") })")
    }

    /// An idle timeout ends a stream whose server stalled mid-body, on time; a fetch beside it
    /// on the same connection succeeds. (4.5 s: the fetch beside it, whose answer is held 200 ms,
    /// must not time out on a loaded two-core machine, TLS handshake included; at 1.5 s it
    /// did once, in a CI run beside four builds.)
    @Test func anIdleTimeoutEndsAStalledStream() async throws {
        let (results, _) = try await withTLSServer { server, pki in
            try await runTLSProbe([server.url(.valid, "/stall-mid-body/200000"), server.url(.valid, "/bytes/100?delay=200")],
                                  options: ["--idle-timeout", "4.5", "--no-retry"], trusting: pki.trustBundle)
        }
        let (stalled, beside) = (results[0], results[1])
        #expect(stalled.fields["kind"] == "timedOut", "\(stalled)")
        #expect(stalled.errorDescription.contains("no data for 4.5 s"), "names its interval: \(stalled)")
        let elapsed = Int(stalled.fields["elapsed_ms"] ?? "") ?? -1
        #expect(elapsed >= 4_400 && elapsed < 60_000, "after about 4.5 s: \(stalled)")
        #expect(beside.succeeded && beside.fields["bytes"] == "100", "\(beside)")
    }
}
