// Runs one measurement of the Measurements module in this fresh process and prints its
// `key=value` line, for the FetchKitTests suites that bound memory, CPU and a stream's pace
// (the same code fetchkit-bench's rows run in their own children):
//
//   MeasurementProbe endless-body-child SCENARIO LIMIT_MIB [CHUNK]
//   MeasurementProbe idle-cpu-child CLIENT WAIT TRANSFERS SECONDS
//   MeasurementProbe stream-child CLIENT MEBIBYTES DELAY_MS
//   MeasurementProbe disk-memory-child CLIENT SIZE BASE_URL PATH
import Foundation
import Measurements

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch arguments.first ?? "" {
    case "endless-body-child":
        guard arguments.count == 3 || arguments.count == 4, let limit = Int(arguments[2]) else { throw BenchError("bad arguments") }
        try EndlessBodyBenchmark.child(scenario: arguments[1], limitMiB: limit,
                                       chunkSize: arguments.count == 4 ? Int(arguments[3]) ?? (16 << 10) : 16 << 10)
    case "idle-cpu-child":
        guard arguments.count == 5, let transfers = Int(arguments[3]), let seconds = Int(arguments[4]) else {
            throw BenchError("bad arguments")
        }
        try IdleCPUBenchmark.child(client: arguments[1], wait: arguments[2], transfers: transfers, seconds: seconds)
    case "stream-child":
        guard arguments.count == 4, let mebibytes = Int(arguments[2]), let delay = Int(arguments[3]) else { throw BenchError("bad arguments") }
        try StreamChild.run(client: arguments[1], mebibytes: mebibytes, delayMilliseconds: delay)
    case "disk-memory-child":
        guard arguments.count == 5, let size = Int(arguments[2]) else { throw BenchError("bad arguments") }
        try DiskMemoryBenchmark.child(client: arguments[1], size: size, base: arguments[3], path: arguments[4])
    default:
        throw BenchError("usage: MeasurementProbe endless-body-child|idle-cpu-child|stream-child|disk-memory-child …")
    }
} catch {
    FileHandle.standardError.write(Data("MeasurementProbe: \(error)\n".utf8))
    exit(1)
}
