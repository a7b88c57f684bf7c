import Foundation
import Measurements
import LoopbackServer
#if canImport(Glibc)
import Glibc
#endif

/// `fetchkit-bench tools`: the `fetchkit` command beside curl and wget, each a whole process,
/// in one run, against the loopback server: 200 small files (4 KiB each, with an `ETag`, a `Last-Modified` and
/// ranges, as nginx serves a directory) into an empty directory, and one 1 GiB body to disk.
/// Each (job, run) gives every client a fresh directory, in turn, the order rotated run by
/// run; the table has medians of wall time and of peak RSS (`/usr/bin/time`'s `%M`), and each
/// client's time against curl's.
///
/// The commands (what a user types):
/// - `fetchkit -q -i LIST -d DIR`, `fetchkit-bench url-list-child LIST DIR 4` (plain URLSession:
///   the floor), `curl -s --remote-name-all --output-dir DIR URL…`,
///   `wget -q -i LIST -P DIR`;
/// - `fetchkit -q -o DIR/big.bin URL`, `curl -s -o DIR/big.bin URL`, `wget -q -O DIR/big.bin URL`.
enum CommandLineToolsBenchmark {
    struct Job {
        let name: String
        let title: String
        /// The files a run must leave, and their size.
        let files: Int
        let size: Int
        let commands: [String: (URL) -> [String]]
    }

    struct Sample {
        var seconds: Double
        var peakRSS: Int
        var ok: Bool
    }

    static func run(runs: Int, count: Int, bigSize: Int, only: Set<String>) throws {
        let server = try LoopbackServer(recordRequests: false)
        defer { server.stop() }
        let smallSize = 4 << 10
        // What nginx sends with a static file: a validator, its date, ranges.
        let headers: HTTPHeaders = ["ETag": "\"v1\"", "Last-Modified": "Wed, 21 Oct 2026 07:28:00 GMT", "Accept-Ranges": "bytes",
                                    "Content-Type": "application/octet-stream"]
        let smallURLs = (0..<count).map { server.url("/small/f\($0).bin") }
        for index in 0..<count {
            server.route("/small/f\(index).bin") { _ in HTTPResponse(status: 200, headers: headers, body: .pattern(offset: 0, count: smallSize)) }
        }
        let bigURL = server.url("/bytes/\(bigSize)")
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-tools-\(getpid())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let list = scratch.appendingPathComponent("urls.txt")
        try (smallURLs.map(\.absoluteString).joined(separator: "\n") + "\n").write(to: list, atomically: true, encoding: .utf8)

        let fetchkit = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("fetchkit").path
        guard FileManager.default.isExecutableFile(atPath: fetchkit) else {
            throw BenchError("no fetchkit beside this program (\(fetchkit)): swift build -c release first")
        }
        let bench = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let clients = ["fetchkit", "urlsession", "curl", "wget"].filter { ["fetchkit", "urlsession"].contains($0) || findOnPath($0) != nil }
        let jobs = [
            Job(name: "small", title: "\(count) × 4 KiB", files: count, size: smallSize, commands: [
                "fetchkit": { [fetchkit, "-q", "-i", list.path, "-d", $0.path] },
                "urlsession": { [bench, "url-list-child", list.path, $0.path, "4"] },
                "curl": { dir in ["curl", "-s", "--remote-name-all", "--output-dir", dir.path] + smallURLs.map(\.absoluteString) },
                "wget": { ["wget", "-q", "-i", list.path, "-P", $0.path] },
            ]),
            Job(name: "big", title: "\(Memory.format(bytes: bigSize)) to disk", files: 1, size: bigSize, commands: [
                "fetchkit": { [fetchkit, "-q", "-o", $0.appendingPathComponent("big.bin").path, bigURL.absoluteString] },
                "curl": { ["curl", "-s", "-o", $0.appendingPathComponent("big.bin").path, bigURL.absoluteString] },
                "wget": { ["wget", "-q", "-O", $0.appendingPathComponent("big.bin").path, bigURL.absoluteString] },
            ]),
        ].filter { only.isEmpty || only.contains($0.name) }

        print("fetchkit beside \(clients.dropFirst().joined(separator: ", ")) (urlsession: plain URLSession, the floor under any downloader on it; small files only), whole processes against the loopback server (in this process),")
        print("\(runs) interleaved runs, medians; every client × run into a fresh directory\n")
        var samples: [String: [String: [Sample]]] = [:]
        for run in 0..<runs {
            for job in jobs {
                let order = (0..<clients.count).map { clients[($0 + run) % clients.count] }
                for client in order {
                    guard let command = job.commands[client] else { continue }
                    let directory = scratch.appendingPathComponent("\(job.name)-\(client)-\(run)")
                    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                    var sample = try measure(command(directory))
                    sample.ok = sample.ok && leaves(directory, files: job.files, size: job.size)
                    try? FileManager.default.removeItem(at: directory)
                    samples[job.name, default: [:]][client, default: []].append(sample)
                }
            }
            FileHandle.standardError.write(Data("run \(run + 1) of \(runs) done\n".utf8))
        }
        let columns = [22, 10, 12, 14, 10]
        print(zip(["job", "client", "time", "× curl", "peak RSS"], columns).map { pad($0, $1) }.joined() + "failed runs")
        for job in jobs {
            guard let byClient = samples[job.name] else { continue }
            let curlTime = byClient["curl"].map { median($0.map(\.seconds)) }
            for client in clients {
                guard let runs = byClient[client] else { continue }
                let time = median(runs.map(\.seconds))
                let ratio = curlTime.map { String(format: "%.2f", time / $0) } ?? "–"
                let row = [job.title, client, String(format: "%.3f s", time), ratio, Memory.format(bytes: median(runs.map(\.peakRSS)))]
                print(zip(row, columns).map { pad($0, $1) }.joined() + String(runs.filter { !$0.ok }.count))
            }
        }
    }

    /// Runs `arguments` as a process, its output thrown away: its wall time, its peak RSS, and
    /// whether it exited 0.
    ///
    /// The peak RSS is `/usr/bin/time`'s `%M`, the `ru_maxrss` of a child that a small process
    /// forked: a process spawned from this one (`posix_spawn` is a `vfork`) would report this
    /// process's RSS at the `exec` as its own peak, whatever it used.
    static func measure(_ arguments: [String]) throws -> Sample {
        guard let executable = arguments.first.flatMap({ $0.hasPrefix("/") ? $0 : findOnPath($0) }) else {
            throw BenchError("cannot find \(arguments.first ?? "")")
        }
        let time = "/usr/bin/time"
        guard FileManager.default.isExecutableFile(atPath: time) else { throw BenchError("needs /usr/bin/time (apt-get install time)") }
        let report = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-time-\(getpid())")
        defer { try? FileManager.default.removeItem(at: report) }
        var sample = try spawn([time, "-f", "%M", "-o", report.path, executable] + arguments.dropFirst())
        let text = (try? String(contentsOf: report, encoding: .utf8)) ?? ""
        guard let kibibytes = text.split(separator: "\n").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) else {
            throw BenchError("no peak RSS from /usr/bin/time: \(text)")
        }
        sample.peakRSS = kibibytes * 1024
        return sample
    }

    /// Runs `arguments` (an absolute path first), its output thrown away: its wall time, and
    /// whether it exited 0.
    private static func spawn(_ arguments: [String]) throws -> Sample {
        let executable = arguments[0]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([executable] + arguments.dropFirst()).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let started = Date()
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else { throw BenchError("cannot start \(executable): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let seconds = Date().timeIntervalSince(started)
        let exited = (status & 0x7f) == 0 && ((status >> 8) & 0xff) == 0
        return Sample(seconds: seconds, peakRSS: 0, ok: exited)
    }

    /// Whether `directory` holds `files` regular files of `size` bytes and nothing else.
    static func leaves(_ directory: URL, files: Int, size: Int) -> Bool {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path), names.count == files else { return false }
        return names.allSatisfy { name in
            var info = stat()
            return lstat(directory.appendingPathComponent(name).path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
                && Int(info.st_size) == size
        }
    }

    static func findOnPath(_ name: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }
}
