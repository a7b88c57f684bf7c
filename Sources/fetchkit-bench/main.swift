// fetchkit-bench: FetchKit's benchmarks. Programs, not tests: each compares FetchKit with a
// baseline measured in the same run and prints the table.
//
//   swift run -c release fetchkit-bench queue-memory [--count N] [--runs R]
import FetchKit
import Foundation

let usage = """
usage: fetchkit-bench <benchmark> [options]

benchmarks:
  queue-memory [--count N] [--runs R]   memory per queued operation (default N = 100000, R = 3)
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
    case "queue-memory":
        try QueueMemoryBenchmark.run(count: try option("--count", in: arguments, default: 100_000),
                                     runs: try option("--runs", in: arguments, default: 3))
    case "queue-memory-child":
        guard arguments.count == 3, let count = Int(arguments[2]) else { throw BenchError("bad child arguments") }
        try QueueMemoryBenchmark.child(scenario: arguments[1], count: count)
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
