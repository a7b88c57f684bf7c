import FetchKit
import Foundation
import Measurements

/// `fetchkit-bench digests`: how fast FetchKit hashes a file with each algorithm it checks —
/// libcrypto's implementation (found at run time) and FetchKit's own in Swift (the fallback) —
/// beside the coreutils tool for it (`sha256sum`, `sha512sum`, `sha1sum`, `md5sum`, a whole
/// process), on the same file in the page cache. Medians of interleaved runs, MB/s.
enum DigestsBenchmark {
    static func run(sizeMiB: Int, runs: Int) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-digests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("file")
        var generator = SystemRandomNumberGenerator()
        let chunk = Data((0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        guard FileManager.default.createFile(atPath: file.path, contents: nil) else { throw BenchError("cannot make \(file.path)") }
        let handle = try FileHandle(forWritingTo: file)
        for _ in 0..<sizeMiB { handle.write(chunk) }
        try handle.close()
        _ = FileDigest(.md5, of: file)   // into the page cache
        let bytes = Double(sizeMiB << 20)

        let implementations = ["libcrypto", "Swift", "coreutils"]
        var rates: [String: [String: [Double]]] = [:]
        for _ in 0..<runs {
            for algorithm in FileDigest.Algorithm.all {
                var reference: String?
                for implementation in implementations {
                    let start = DispatchTime.now().uptimeNanoseconds
                    let hex: String?
                    switch implementation {
                    case "coreutils":
                        hex = try tool(algorithm, file)
                    default:
                        ComparisonSwitches.usesSystemDigests = implementation == "libcrypto"
                        hex = FileDigest(algorithm, of: file)?.hex
                        ComparisonSwitches.usesSystemDigests = true
                    }
                    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
                    guard let hex, reference == nil || reference == hex else {
                        throw BenchError("\(algorithm) by \(implementation) disagrees: \(hex ?? "nil") vs \(reference ?? "")")
                    }
                    reference = hex
                    rates[algorithm.name, default: [:]][implementation, default: []].append(bytes / seconds / 1e6)
                }
            }
        }
        print("Hashing a \(sizeMiB) MiB file in the page cache, MB/s (median of \(runs) interleaved runs; the three agree):\n")
        print("| algorithm | libcrypto (FetchKit) | Swift (FetchKit's fallback) | coreutils tool (a process) | Swift/libcrypto |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for algorithm in FileDigest.Algorithm.all {
            let row = rates[algorithm.name] ?? [:]
            let system = median(row["libcrypto"] ?? [0]), swift = median(row["Swift"] ?? [0]), tool = median(row["coreutils"] ?? [0])
            print("| \(algorithm.name) | \(Int(system)) | \(Int(swift)) | \(Int(tool)) | \(String(format: "%.2f", swift / max(system, 1)))× |")
        }
    }

    /// The hex digest `<name>sum` (coreutils) prints for `file`; `nil` if it failed.
    static func tool(_ algorithm: FileDigest.Algorithm, _ file: URL) throws -> String? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/\(algorithm.name)sum")
        process.arguments = [file.path]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return String(decoding: data.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)
    }
}
