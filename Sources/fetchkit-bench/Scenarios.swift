import Foundation

/// The throughput workloads.
struct Scenario: Sendable {
    enum Destination: String, Sendable { case memory, disk }

    let name: String
    let bodySize: Int
    var count: Int
    let concurrency: Int
    let destination: Destination
    /// The server's route: `bytes` (with ranges and an `ETag`) or `bytes-norange`.
    var path = "bytes"

    /// How the row is reported: requests per second for small bodies, bytes per second else.
    var reportsRequests: Bool { bodySize <= 64 << 10 }

    var title: String {
        let size = bodySize >= 1 << 20 ? "\(bodySize >> 20) MiB" : "\(bodySize >> 10) KiB"
        return "\(size) × \(count), C=\(concurrency)\(destination == .disk ? ", to disk" : "")"
    }

    static let all: [Scenario] = [
        Scenario(name: "1k-serial", bodySize: 1 << 10, count: 5_000, concurrency: 1, destination: .memory),
        Scenario(name: "1k", bodySize: 1 << 10, count: 20_000, concurrency: 16, destination: .memory),
        Scenario(name: "64k", bodySize: 64 << 10, count: 5_000, concurrency: 8, destination: .memory),
        Scenario(name: "16m", bodySize: 16 << 20, count: 64, concurrency: 4, destination: .memory),
        Scenario(name: "256m-memory", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .memory),
        Scenario(name: "256m-disk", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .disk),
    ]

    /// A smaller set for a quick look (`--quick`).
    static let quick: [Scenario] = [
        Scenario(name: "1k-serial", bodySize: 1 << 10, count: 1_000, concurrency: 1, destination: .memory),
        Scenario(name: "1k", bodySize: 1 << 10, count: 4_000, concurrency: 16, destination: .memory),
        Scenario(name: "64k", bodySize: 64 << 10, count: 1_000, concurrency: 8, destination: .memory),
        Scenario(name: "16m", bodySize: 16 << 20, count: 16, concurrency: 4, destination: .memory),
        Scenario(name: "256m-memory", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .memory),
        Scenario(name: "256m-disk", bodySize: 256 << 20, count: 1, concurrency: 1, destination: .disk),
    ]

    static func named(_ name: String) -> Scenario? {
        (all + quick).first { $0.name == name }
    }

    /// The URL of request `index`: distinct per request, so that nothing can be shared.
    func url(base: URL, index: Int) -> URL {
        URL(string: "\(base.absoluteString)/\(path)/\(bodySize)?n=\(index)")!
    }
}

/// What one child measured.
struct Measurement: Sendable {
    var seconds: Double = 0
    var bytes: Int64 = 0
    var requests = 0
    var errors = 0
    var peakRSS = 0

    var line: String {
        "seconds=\(seconds) bytes=\(bytes) requests=\(requests) errors=\(errors) peak_rss=\(peakRSS)"
    }

    init() {}

    init?(parsing output: String) {
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
