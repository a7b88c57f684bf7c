import Foundation

/// The throughput workloads.
package struct Scenario: Sendable {
    package enum Destination: String, Sendable { case memory, disk }

    package let name: String
    package let bodySize: Int
    package var count: Int
    package let concurrency: Int
    package let destination: Destination
    /// The server's route: `bytes` (with ranges and an `ETag`) or `bytes-norange`.
    package var path = "bytes"

    /// How the row is reported: requests per second for small bodies, bytes per second else.
    package var reportsRequests: Bool { bodySize <= 64 << 10 }

    package var title: String {
        let size = bodySize >= 1 << 20 ? "\(bodySize >> 20) MiB" : "\(bodySize >> 10) KiB"
        return "\(size) × \(count), C=\(concurrency)\(destination == .disk ? ", to disk" : "")"
    }

    package static let all: [Scenario] = [
        Scenario(name: "1k-serial", bodySize: 1 << 10, count: 5_000, concurrency: 1, destination: .memory),
        Scenario(name: "1k", bodySize: 1 << 10, count: 20_000, concurrency: 16, destination: .memory),
        Scenario(name: "64k", bodySize: 64 << 10, count: 5_000, concurrency: 8, destination: .memory),
        Scenario(name: "16m", bodySize: 16 << 20, count: 64, concurrency: 4, destination: .memory),
        Scenario(name: "256m-memory", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .memory),
        Scenario(name: "256m-disk", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .disk),
    ]

    /// A smaller set for a quick look (`--quick`).
    package static let quick: [Scenario] = [
        Scenario(name: "1k-serial", bodySize: 1 << 10, count: 1_000, concurrency: 1, destination: .memory),
        Scenario(name: "1k", bodySize: 1 << 10, count: 4_000, concurrency: 16, destination: .memory),
        Scenario(name: "64k", bodySize: 64 << 10, count: 1_000, concurrency: 8, destination: .memory),
        Scenario(name: "16m", bodySize: 16 << 20, count: 16, concurrency: 4, destination: .memory),
        Scenario(name: "256m-memory", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .memory),
        Scenario(name: "256m-disk", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .disk),
    ]

    package static func named(_ name: String) -> Scenario? {
        (all + quick).first { $0.name == name }
    }

    /// The URL of request `index`: distinct per request, so that nothing can be shared.
    package func url(base: URL, index: Int) -> URL {
        URL(string: "\(base.absoluteString)/\(path)/\(bodySize)?n=\(index)")!
    }
}

/// What one child measured.
package struct RunMeasurement: Sendable {
    package var seconds: Double = 0
    package var bytes: Int64 = 0
    package var requests = 0
    package var errors = 0
    package var peakRSS = 0

    package var line: String {
        "seconds=\(seconds) bytes=\(bytes) requests=\(requests) errors=\(errors) peak_rss=\(peakRSS)"
    }

    package init() {}

    package init?(parsing output: String) {
        var fields: [String: String] = [:]
        for pair in output.split(whereSeparator: { $0 == " " || $0 == "\n" }) {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        guard let seconds = fields["seconds"].flatMap(Double.init), let bytes = fields["bytes"].flatMap(Int64.init),
              let requests = fields["requests"].flatMap(Int.init), let errors = fields["errors"].flatMap(Int.init),
              let peak = fields["peak_rss"].flatMap(Int.init) else { return nil }
        self.seconds = seconds
        self.bytes = bytes
        self.requests = requests
        self.errors = errors
        peakRSS = peak
    }
}
