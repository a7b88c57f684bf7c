import Foundation
import Testing
@testable import FetchKit

/// Issue 20, point 2: a fetch of an endless body in tiny chunks stays near its limit.
///
/// Each measurement runs in a process of its own (`MeasurementProbe endless-body-child`, which
/// serves the body from a loopback server in that process), so that its peak resident set is
/// the fetch's alone; the child prints the growth of the peak over its resident set just
/// before the fetch. The server writes 256-byte chunks as fast as the socket takes them. One
/// child at a time: each keeps two cores busy for a few seconds.
@Suite("An endless body in tiny chunks stays near its limit", .serialized, .timeLimit(.minutes(3)))
struct EndlessBodyMemoryTests {
    private func growth(_ scenario: String, limitMiB: Int, chunk: Int) async throws -> Int {
        let (status, output, errors) = try await runTool("MeasurementProbe", [
            "endless-body-child", scenario, String(limitMiB), String(chunk),
        ])
        #expect(status == 0, "\(errors)")
        let fields = Dictionary(output.split(whereSeparator: \.isWhitespace).compactMap { pair -> (String, Int)? in
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let value = Int(parts[1]) else { return nil }
            return (String(parts[0]), value)
        }, uniquingKeysWith: { _, last in last })
        return try #require(fields["growth"], "\(output)\(errors)")
    }

    /// Into memory, with a 64 MiB limit: the process grows by less than twice the limit (the
    /// body itself, and what waited on its way). Before the chunks were counted where they
    /// arrive, and libcurl stopped there: 180–400 MiB.
    @Test(.enabled(if: !runsUnderSanitizer, "a sanitizer's shadow memory is counted too"))
    func intoMemoryTheProcessGrowsByLessThanTwiceTheLimit() async throws {
        let limit = 64
        let grown = try await growth("fetchkit", limitMiB: limit, chunk: 256)
        #expect(grown < 2 * (limit << 20), "peak RSS grew by \(grown >> 20) MiB for a \(limit) MiB limit")
    }

    /// To a file, with a 64 MiB limit: nothing of the body is held, so the process grows by
    /// far less than the limit. Before: 100–560 MiB.
    @Test(.enabled(if: !runsUnderSanitizer, "a sanitizer's shadow memory is counted too"))
    func toAFileTheProcessGrowsByLessThanTheLimit() async throws {
        let limit = 64
        let grown = try await growth("download", limitMiB: limit, chunk: 256)
        #expect(grown < limit << 20, "peak RSS grew by \(grown >> 20) MiB for a \(limit) MiB limit")
    }
}
