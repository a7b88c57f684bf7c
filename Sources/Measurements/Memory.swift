import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Process memory readings.
package enum Memory {
    /// Resident set size now, in bytes (Linux: /proc/self/statm; elsewhere: peak from getrusage).
    package static func residentBytes() -> Int {
        #if os(Linux)
        if let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) {
            let fields = text.split(separator: " ")
            if fields.count > 1, let pages = Int(fields[1]) {
                return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
            }
        }
        #endif
        return peakResidentBytes()
    }

    /// The peak resident set size of this process, in bytes.
    ///
    /// On Linux, `VmHWM` of /proc/self/status: the peak of this program's own address space.
    /// Not `getrusage`'s `ru_maxrss`, which a process started with `posix_spawn` (as the test
    /// suite starts this benchmark's children) inherits from its parent: until `exec` the
    /// child shares the parent's address space, whose peak the kernel carries over — a child
    /// of a 250 MiB test process reported a peak of 250 MiB whatever it did.
    package static func peakResidentBytes() -> Int {
        var usage = rusage()
        #if os(Linux)
        if let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
           let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
           let kibibytes = Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") {
            return kibibytes * 1024
        }
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Int(usage.ru_maxrss) * 1024
        #else
        getrusage(RUSAGE_SELF, &usage)
        return Int(usage.ru_maxrss)
        #endif
    }

    /// The CPU time (user and system) this process has used, in seconds.
    package static func cpuSeconds() -> Double {
        var usage = rusage()
        #if os(Linux)
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        #else
        getrusage(RUSAGE_SELF, &usage)
        #endif
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// Returns freed memory to the system where the C library allows it, so that RSS readings
    /// reflect what is live.
    package static func trim() {
        #if os(Linux)
        // glibc's malloc_trim, looked up at run time (the Glibc module does not export it).
        typealias MallocTrim = @convention(c) (Int) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") {
            _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
        }
        #endif
    }

    package static func format(bytes: Int) -> String {
        let value = Double(bytes)
        if value.magnitude >= Double(1 << 30) { return String(format: "%.2f GiB", value / Double(1 << 30)) }
        if value.magnitude >= Double(1 << 20) { return String(format: "%.1f MiB", value / Double(1 << 20)) }
        if value.magnitude >= Double(1 << 10) { return String(format: "%.1f KiB", value / Double(1 << 10)) }
        return "\(bytes) B"
    }
}

/// Runs this executable again with other arguments and returns its standard output.
package func runSelf(_ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL.resolvingSymlinksInPath()
    if !FileManager.default.isExecutableFile(atPath: process.executableURL!.path) {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    }
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw BenchError("child \(arguments.joined(separator: " ")) exited with status \(process.terminationStatus)")
    }
    return String(decoding: data, as: UTF8.self)
}

package struct BenchError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

package func median<T: Comparable>(_ values: [T]) -> T {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

/// `text` padded with spaces to `width` (and one space past it when longer), for tables.
package func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
}
