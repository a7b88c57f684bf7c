import Foundation
import Measurements
import LoopbackServer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `fetchkit-bench https`: FetchKit against raw URLSession over HTTPS, HTTP/1.1 and HTTP/2,
/// small and large bodies, on one nginx in front of the loopback server.
///
/// nginx terminates TLS on 127.0.0.1 with a certificate from a CA that `openssl` makes for the
/// run, on two ports: one offering HTTP/2 and HTTP/1.1 (ALPN; libcurl takes h2), one HTTP/1.1
/// only. libcurl on Linux trusts only the system bundle, so every client runs as a child of
/// this process in a private mount namespace (`unshare --mount`, which needs root) where a
/// bundle holding that CA is mounted over `/etc/ssl/certs/ca-certificates.crt`; the machine's
/// own bundle is never modified. Where that cannot be done, the rows are skipped, saying why.
/// Runs are interleaved like the throughput table's; the TLS connections of a run are the
/// distinct `$connection`s in nginx's access log.
enum HTTPSBenchmark {
    static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"

    struct Row {
        let title: String
        let scenario: Scenario
        let http2: Bool
    }

    static func rows(quick: Bool) -> [Row] {
        guard var small = Scenario.named("1k"), var large = Scenario.named("16m") else { return [] }
        small.count = quick ? 1_000 : 4_000
        large.count = quick ? 8 : 32
        return [false, true].flatMap { http2 in
            [small, large].map { Row(title: "\(http2 ? "HTTP/2" : "HTTP/1.1") \($0.title)", scenario: $0, http2: http2) }
        }
    }

    /// Why the HTTPS rows cannot run here, or `nil`.
    static func unavailable(_ tools: [String: String?]) -> String? {
        #if os(Linux)
        if geteuid() != 0 { return "they need root, to trust their test CA in a private mount namespace (unshare --mount)" }
        let missing = tools.filter { $0.value == nil }.map(\.key).sorted()
        if !missing.isEmpty { return "they need \(missing.joined(separator: ", ")) (apt-get install nginx openssl util-linux)" }
        if !FileManager.default.fileExists(atPath: systemBundle) { return "they need the system CA bundle \(systemBundle)" }
        return nil
        #else
        return "they run on Linux only, where libcurl trusts the system bundle and nothing else"
        #endif
    }

    static func run(runs: Int, quick: Bool) throws {
        let tools = ["openssl": find("openssl"), "nginx": find("nginx"), "unshare": find("unshare"), "sh": find("sh")]
        if let reason = unavailable(tools) {
            print("HTTPS rows skipped: \(reason).")
            return
        }
        guard let openssl = tools["openssl"] ?? nil, let nginx = tools["nginx"] ?? nil,
              let unshare = tools["unshare"] ?? nil, let shell = tools["sh"] ?? nil else { return }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fetchkit-bench-https-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bundle = try makeCertificates(openssl: openssl, in: directory)
        if let reason = try namespaceUnavailable(unshare: unshare, shell: shell, bundle: bundle) {
            print("HTTPS rows skipped: \(reason).")
            return
        }

        let backend = try LoopbackServer(recordRequests: false)
        defer { backend.stop() }
        let server = try TLSBenchServer(nginx: nginx, directory: directory, backend: backend.port)
        defer { server.stop() }
        let self_ = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let rows = rows(quick: quick)
        print("FetchKit vs raw URLSession over HTTPS — nginx \(server.version) with TLS (openssl-made CA) in front of the")
        #if DEBUG
        let build = "debug build (numbers for a release build: swift run -c release fetchkit-bench https)"
        #else
        let build = "release build"
        #endif
        print("loopback server, \(build), \(runs) interleaved runs, medians; every client × workload × run")
        print("in a fresh process (in a private mount namespace that trusts the CA)\n")
        var samples: [String: [String: [(RunMeasurement, Int)]]] = [:]
        for run in 0..<runs {
            for row in rows {
                for client in run.isMultiple(of: 2) ? ThroughputBenchmark.clients : ThroughputBenchmark.clients.reversed() {
                    let base = "https://127.0.0.1:\(row.http2 ? server.http2Port : server.http1Port)"
                    let logStart = server.logSize()
                    let result = try command(unshare, inNamespace(shell: shell, bundle: bundle,
                                                                  [self_, "throughput-child", client, row.scenario.name, base,
                                                                   String(row.scenario.count)]))
                    guard result.status == 0, let measurement = RunMeasurement(parsing: result.output) else {
                        throw BenchError("no measurement from \(client) \(row.title): \(result.output)")
                    }
                    // A line of the previous run's last request may come late: only this row's protocol counts.
                    let log = server.log(from: logStart).filter { $0.protocol == (row.http2 ? "HTTP/2.0" : "HTTP/1.1") }
                    guard log.count >= measurement.requests / 2 else {
                        throw BenchError("\(row.title): \(measurement.requests) requests, \(log.count) of them over \(row.http2 ? "HTTP/2" : "HTTP/1.1")")
                    }
                    samples[row.title, default: [:]][client, default: []].append((measurement, Set(log.map(\.connection)).count))
                }
            }
            FileHandle.standardError.write(Data("run \(run + 1) of \(runs) done\n".utf8))
        }
        let columns = [32, 14, 14, 7, 11, 11, 10, 10, 7]
        let header = ["workload", "raw", "FetchKit", "ratio", "raw RSS", "FK RSS", "raw TLS", "FK TLS", "errors"]
        print(zip(header, columns).map { pad($0, $1) }.joined())
        for row in rows {
            guard let raw = samples[row.title]?["raw"], let fetchKit = samples[row.title]?["fetchkit"] else { continue }
            func rate(_ sample: (RunMeasurement, Int)) -> Double {
                let m = sample.0
                return row.scenario.reportsRequests ? Double(m.requests) / m.seconds : Double(m.bytes) / m.seconds / 1e6
            }
            let unit = row.scenario.reportsRequests ? "req/s" : "MB/s"
            let (rawRate, fkRate) = (median(raw.map(rate)), median(fetchKit.map(rate)))
            func connections(_ samples: [(RunMeasurement, Int)]) -> String { "\(median(samples.map(\.1))) (\(samples.map(\.1).max() ?? 0))" }
            let errors = (raw + fetchKit).map(\.0.errors).reduce(0, +)
            let cells = [row.title, String(format: "%.0f %@", rawRate, unit), String(format: "%.0f %@", fkRate, unit),
                         String(format: "%.2f×", fkRate / rawRate), Memory.format(bytes: median(raw.map(\.0.peakRSS))),
                         Memory.format(bytes: median(fetchKit.map(\.0.peakRSS))), connections(raw), connections(fetchKit), String(errors)]
            print(zip(cells, columns).map { pad($0, $1) }.joined())
        }
        print("\nTLS: distinct TLS connections nginx logged per run (median, max in brackets).")
    }

    /// A CA, a certificate for 127.0.0.1 issued by it, and the system bundle with the CA added.
    ///
    /// - Returns: The bundle.
    /// Why a private mount namespace with `bundle` over the system bundle cannot be made here,
    /// or `nil`: the namespace and the mount, tried once (a container without `CAP_SYS_ADMIN`
    /// cannot).
    static func namespaceUnavailable(unshare: String, shell: String, bundle: URL) throws -> String? {
        let probe = try command(unshare, ["--mount", "--", shell, "-c", "mount --bind \"$1\" \(systemBundle)", "sh", bundle.path])
        guard probe.status != 0 else { return nil }
        return "unshare --mount and a bind mount failed here (\(probe.output.trimmingCharacters(in: .whitespacesAndNewlines)))"
    }

    /// `unshare`'s arguments that run `arguments` in a private mount namespace where `bundle` is
    /// mounted over the system bundle.
    static func inNamespace(shell: String, bundle: URL, _ arguments: [String]) -> [String] {
        ["--mount", "--", shell, "-c", "mount --bind \"$1\" \(systemBundle) && shift && exec \"$@\"", "sh", bundle.path] + arguments
    }

    /// Makes a CA and a certificate for 127.0.0.1 signed by it (for nginx) in `directory`, and
    /// a bundle of the system's CAs and that CA; returns the bundle.
    static func makeCertificates(openssl: String, in directory: URL) throws -> URL {
        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }
        try FileManager.default.createDirectory(atPath: file("nginx"), withIntermediateDirectories: true)
        try Data("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n".utf8)
            .write(to: URL(fileURLWithPath: file("server.ext")))
        for arguments in [
            ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", file("ca.key")],
            ["req", "-x509", "-new", "-key", file("ca.key"), "-subj", "/CN=fetchkit-bench CA", "-days", "2",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", file("ca.pem")],
            ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", file("server.key")],
            ["req", "-new", "-key", file("server.key"), "-subj", "/CN=127.0.0.1", "-out", file("server.csr")],
            ["x509", "-req", "-in", file("server.csr"), "-CA", file("ca.pem"), "-CAkey", file("ca.key"), "-set_serial", "2",
             "-days", "2", "-extfile", file("server.ext"), "-out", file("server.pem")],
        ] {
            let result = try command(openssl, arguments)
            guard result.status == 0 else { throw BenchError("openssl \(arguments.joined(separator: " ")): \(result.output)") }
        }
        var bundle = FileManager.default.contents(atPath: systemBundle) ?? Data()
        if !bundle.isEmpty, bundle.last != UInt8(ascii: "\n") { bundle.append(UInt8(ascii: "\n")) }
        bundle.append(try Data(contentsOf: URL(fileURLWithPath: file("ca.pem"))))
        let url = URL(fileURLWithPath: file("bundle.pem"))
        try bundle.write(to: url)
        return url
    }

    /// Runs `executable` and returns its exit status and its standard output and error.
    static func command(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// `name`'s path on the `PATH` or in the `sbin` directories (where nginx lives), if any.
    static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        return directories.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}

/// nginx on 127.0.0.1 with the bench's certificate: one port with HTTP/2 (and HTTP/1.1) by
/// ALPN, one with HTTP/1.1 only, both proxying to the loopback server without buffering.
final class TLSBenchServer {
    let http2Port: UInt16
    let http1Port: UInt16
    let version: String
    private let process: Process
    private let logPath: String

    init(nginx: String, directory: URL, backend: UInt16) throws {
        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }
        http2Port = try freePort()
        var other = try freePort()
        while other == http2Port { other = try freePort() }
        http1Port = other
        logPath = file("nginx/access.log")
        let server = { (port: UInt16, http2: Bool) in
            """
                server {
                    listen 127.0.0.1:\(port) ssl\(http2 ? " http2" : "");
                    ssl_certificate \(file("server.pem"));
                    ssl_certificate_key \(file("server.key"));
                    location / { proxy_pass http://127.0.0.1:\(backend); }
                }
            """
        }
        let configuration = """
            user root;
            worker_processes 1;
            error_log stderr warn;
            pid \(file("nginx/nginx.pid"));
            events { worker_connections 1024; }
            http {
                log_format bench '$server_protocol $connection $request_uri';
                access_log \(logPath) bench;
                client_body_temp_path \(file("nginx/client-body"));
                proxy_temp_path \(file("nginx/proxy"));
                fastcgi_temp_path \(file("nginx/fastcgi"));
                uwsgi_temp_path \(file("nginx/uwsgi"));
                scgi_temp_path \(file("nginx/scgi"));
                keepalive_requests 100000;
                proxy_http_version 1.1;
                proxy_set_header Connection "";
                proxy_buffering off;
                proxy_request_buffering off;
                ssl_protocols TLSv1.2 TLSv1.3;
            \(server(http2Port, true))
            \(server(http1Port, false))
            }

            """
        try Data(configuration.utf8).write(to: URL(fileURLWithPath: file("nginx/nginx.conf")))
        version = (try? HTTPSBenchmark.command(nginx, ["-v"]).output)?
            .split(separator: "/").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? "?"
        process = Process()
        process.executableURL = URL(fileURLWithPath: nginx)
        process.arguments = ["-p", file("nginx"), "-c", file("nginx/nginx.conf"), "-e", "stderr", "-g", "daemon off;"]
        try process.run()
        // Ready once both ports accept a connection (a program, not a test: polling is fine).
        let deadline = Date().addingTimeInterval(20)
        while !(accepts(http2Port) && accepts(http1Port)) {
            guard process.isRunning, Date() < deadline else {
                stop()
                throw BenchError("nginx did not start (ports \(http2Port), \(http1Port) may have been taken; run again)")
            }
            usleep(50_000)
        }
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    func logSize() -> UInt64 {
        ((try? FileManager.default.attributesOfItem(atPath: logPath)[.size]) as? NSNumber)?.uint64Value ?? 0
    }

    /// The access log's lines from `offset` on: each request's protocol, connection number and
    /// path with query. nginx writes a line when a request ends, before the client sees its end.
    func log(from offset: UInt64) -> [(protocol: String, connection: String, path: String)] {
        guard let handle = FileHandle(forReadingAtPath: logPath) else { return [] }
        defer { try? handle.close() }
        try? handle.seek(toOffset: offset)
        let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        return text.split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ")
            return words.count == 3 ? (String(words[0]), String(words[1]), String(words[2])) : nil
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, closed).
private func freePort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw BenchError("socket: \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw BenchError("bind: \(errno)") }
    return UInt16(bigEndian: address.sin_port)
}

/// Whether a TCP connection to 127.0.0.1:`port` is accepted.
private func accepts(_ port: UInt16) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    return withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}
