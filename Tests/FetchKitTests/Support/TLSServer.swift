import FetchKitTesting
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The programs the TLS tests run, and why they cannot run here if they cannot.
enum TLSTools {
    static let openssl = find("openssl")
    static let nginx = find("nginx")
    static let unshare = find("unshare")
    static let shell = find("sh")

    /// Why the TLS tests are skipped on this machine, or `nil` when they run.
    ///
    /// They need Linux (libcurl's one trust store is the system bundle), root (for
    /// `unshare --mount` and the bind mount of a bundle with the test CA over it), `openssl`,
    /// `nginx` (the TLS and HTTP/2 server in front of the TestServer) and `unshare`.
    static let unavailable: String? = {
        #if os(Linux)
        if geteuid() != 0 { return "the TLS tests need root, to trust their CA in a private mount namespace (unshare --mount)" }
        let missing = [("openssl", openssl), ("nginx", nginx), ("unshare", unshare), ("sh", shell)].filter { $0.1 == nil }.map(\.0)
        if !missing.isEmpty { return "the TLS tests need \(missing.joined(separator: ", ")) (apt-get install nginx openssl util-linux)" }
        if !FileManager.default.fileExists(atPath: TestPKI.systemBundle) { return "the TLS tests need the system CA bundle \(TestPKI.systemBundle) (apt-get install ca-certificates)" }
        return nil
        #else
        return "the TLS tests run on Linux only, where libcurl trusts the system bundle and nothing else"
        #endif
    }()

    /// `name`'s path on the `PATH` or in the `sbin` directories (where nginx lives), if any.
    private static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        return directories.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}

/// nginx on 127.0.0.1 in front of a ``TestServer``: one TLS port per certificate of a
/// ``TestPKI``, each offering HTTP/2 and HTTP/1.1 (ALPN), proxying every request to the
/// TestServer over HTTP/1.1 without buffering (streamed and stalled bodies pass as they are).
/// Each HTTP/2 stream reaches the backend as a request of its own, so its request log and
/// counters count streams; nginx's access log (``stop()``) counts TLS connections.
///
/// Its configuration, logs and temporary files live in a directory of its own. ``stop()`` ends
/// it and waits for every one of its processes.
final class TLSServer: Sendable {
    /// The server behind nginx, for routes, its request log and counters (nginx needs only
    /// its port).
    let backend: TestServer
    /// The TLS port of each certificate.
    let ports: [TestPKI.Kind: UInt16]
    private let nginx: ChildProcess
    private let directory: TemporaryDirectory

    /// The line nginx writes to its standard error once it listens (at the `notice` level).
    private static let readyMarker = "start worker processes"

    /// Starts nginx with `pki`'s certificates in front of `backend`, and waits until it listens.
    ///
    /// - Throws: When nginx does not start (its messages are in the error).
    init(pki: TestPKI, backend: TestServer) async throws {
        guard let nginxPath = TLSTools.nginx else { throw ParseTestError(reason: "nginx is not installed") }
        self.backend = backend
        directory = try TemporaryDirectory()
        // A port another test takes between the moment it is freed here and nginx's bind makes
        // nginx fail at once: then it starts again on other ports.
        var attempt = 0
        while true {
            attempt += 1
            // Held together, so that the ports differ; freed just before nginx binds them.
            var reserved: [(TestPKI.Kind, ClosedPort)]? = try TestPKI.Kind.allCases.map { ($0, try ClosedPort()) }
            let ports = Dictionary(uniqueKeysWithValues: (reserved ?? []).map { ($0.0, $0.1.port) })
            let configuration = directory.file("nginx.conf")
            try Data(Self.configuration(pki: pki, ports: ports, backend: backend.port, directory: directory.url.path).utf8)
                .write(to: configuration)
            reserved = nil
            let child = try ChildProcess(nginxPath, ["-p", directory.url.path, "-c", configuration.path, "-e", "stderr",
                                                     "-g", "daemon off;"], errorMarker: Self.readyMarker)
            _ = await child.errorMarkerSeen.wait(timeout: 60)
            if child.errorMarkerFound {
                self.ports = ports
                nginx = child
                return
            }
            child.send(SIGTERM)
            let (ending, stdout, stderr) = try await child.finish(timeout: 30)
            if attempt == 3 || !stderr.contains("Address already in use") {
                directory.remove()
                throw ParseTestError(reason: "nginx did not start (\(ending)): \(stdout)\(stderr.suffix(2000))")
            }
        }
    }

    /// `https://127.0.0.1:<port of kind><pathAndQuery>`.
    func url(_ kind: TestPKI.Kind, _ pathAndQuery: String) -> URL {
        URL(string: "https://127.0.0.1:\(ports[kind] ?? 0)\(pathAndQuery)")!
    }

    /// Stops nginx (a fast shutdown: SIGTERM) and waits for its master and workers to exit.
    ///
    /// - Returns: The access log, one line per request:
    ///   `<port> <connection> <request on it> <protocol> <status> <method> <uri> <body bytes>`
    ///   (`<connection>` is nginx's serial number of the client connection, TLS included, and
    ///   `<request on it>` counts from 1), complete once nginx exited.
    @discardableResult
    func stop() async throws -> [String] {
        nginx.send(SIGTERM)
        // The workers hold the standard error pipe too: its end means every process exited.
        let (ending, _, stderr) = try await nginx.finish(timeout: 60)
        let log = (try? String(contentsOf: directory.file("access.log"), encoding: .utf8)) ?? ""
        directory.remove()
        guard ending == .exit(0) else { throw ParseTestError(reason: "nginx ended by \(ending): \(stderr.suffix(2000))") }
        return log.split(separator: "\n").map(String.init)
    }

    private static func configuration(pki: TestPKI, ports: [TestPKI.Kind: UInt16], backend: UInt16, directory: String) -> String {
        let servers = TestPKI.Kind.allCases.map { kind in
            """
                server {
                    listen 127.0.0.1:\(ports[kind] ?? 0) ssl http2;
                    ssl_certificate \(pki.certificate(kind).path);
                    ssl_certificate_key \(pki.privateKey(kind).path);
                    location / { proxy_pass http://127.0.0.1:\(backend); }
                }
            """
        }
        // `user root`: the workers write their temporary files in a directory only root may
        // enter (the tests run as root; nginx's default user could not).
        return """
            user root;
            worker_processes 1;
            error_log stderr notice;
            pid \(directory)/nginx.pid;
            events { worker_connections 512; }
            http {
                log_format fetchkit '$server_port $connection $connection_requests $server_protocol $status $request_method $request_uri $body_bytes_sent';
                access_log \(directory)/access.log fetchkit;
                client_body_temp_path \(directory)/client-body;
                proxy_temp_path \(directory)/proxy;
                fastcgi_temp_path \(directory)/fastcgi;
                uwsgi_temp_path \(directory)/uwsgi;
                scgi_temp_path \(directory)/scgi;
                client_max_body_size 0;
                proxy_http_version 1.1;
                proxy_set_header Connection "";
                proxy_set_header Host $http_host;
                proxy_buffering off;
                proxy_request_buffering off;
                proxy_read_timeout 600s;
                ssl_protocols TLSv1.2 TLSv1.3;
            \(servers.joined(separator: "\n"))
            }

            """
    }
}

/// What ``TLSProbe`` printed for one URL.
struct ProbeResult: CustomStringConvertible {
    /// The whole line.
    let description: String
    /// Whether the fetch succeeded.
    let succeeded: Bool
    /// The `key=value` fields before the texts: `status`, `bytes`, `pattern`, `attempts`;
    /// `kind` and `urlerror` for a failure.
    let fields: [String: String]
    /// The underlying error's message (libcurl's), for a transport failure.
    let text: String
    /// The ``FetchError``'s description, for a failure.
    let errorDescription: String

    init(_ line: String) {
        description = line
        let words = line.split(separator: " ", maxSplits: 2).map(String.init)
        succeeded = words.count > 1 && words[1] == "ok"
        let rest = words.count > 2 ? words[2] : ""
        let textStart = rest.range(of: " text=")
        let descriptionStart = rest.range(of: " description=")
        let head = textStart.map { String(rest[..<$0.lowerBound]) } ?? rest
        fields = Dictionary(head.split(separator: " ").compactMap { word -> (String, String)? in
            let parts = word.split(separator: "=", maxSplits: 1).map(String.init)
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }, uniquingKeysWith: { $1 })
        if let textStart, let descriptionStart {
            text = String(rest[textStart.upperBound..<descriptionStart.lowerBound])
            errorDescription = String(rest[descriptionStart.upperBound...])
        } else {
            (text, errorDescription) = ("", "")
        }
    }
}

/// Runs ``TLSProbe`` on `urls`: with `trustBundle`, in a private mount namespace where that
/// bundle is the system's (the machine's own is untouched); without, as it is.
///
/// - Parameter options: The probe's options, before the URLs (`--per-host 3`…).
/// - Returns: One result per URL, in order.
/// - Throws: When the probe fails to run or does not print a line per URL.
func runTLSProbe(_ urls: [URL], options: [String] = [], trusting trustBundle: URL?) async throws -> [ProbeResult] {
    try await runTLSProbe(arguments: options + urls.map(\.absoluteString), lines: urls.count, trusting: trustBundle)
}

/// Runs ``TLSProbe`` with `arguments` (a mode of its own, such as `cancel-resume`), trusting
/// `trustBundle` as ``runTLSProbe(_:options:trusting:)`` does.
///
/// - Returns: The `lines` lines it printed.
/// - Throws: When the probe fails to run or does not print `lines` lines.
func runTLSProbe(arguments: [String], lines expected: Int, trusting trustBundle: URL?) async throws -> [ProbeResult] {
    let probe = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("TLSProbe").path
    let child = try ChildProcess(trusting: trustBundle, probe, arguments)
    let (ending, stdout, stderr) = try await child.finish(timeout: 120)
    let lines = stdout.split(separator: "\n").map(String.init)
    guard ending == .exit(0), lines.count == expected else {
        throw ParseTestError(reason: "TLSProbe ended by \(ending)\n\(stdout)\(stderr.prefix(6000))")
    }
    return lines.map(ProbeResult.init)
}

extension ChildProcess {
    /// Starts `executable` (built beside the test bundle, or an absolute path) with
    /// `trustBundle` as the system's CA bundle, in a private mount namespace (the machine's own
    /// bundle is untouched); without one, as it is.
    ///
    /// - Throws: When `unshare` is missing or the process cannot start.
    convenience init(trusting trustBundle: URL?, _ executable: String, _ arguments: [String]) throws {
        guard let trustBundle else {
            try self.init(executable, arguments)
            return
        }
        guard let unshare = TLSTools.unshare, let shell = TLSTools.shell else { throw ParseTestError(reason: "unshare is not installed") }
        // unshare makes the new namespace's mounts private: the bind mount never reaches the
        // machine's namespace, and it ends with the process.
        let script = "mount --bind \"$1\" \(TestPKI.systemBundle) && shift && exec \"$@\""
        let path = executable.hasPrefix("/") ? executable
            : URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(executable).path
        try self.init(unshare, ["--mount", "--", shell, "-c", script, "sh", trustBundle.path, path] + arguments)
    }
}

/// Runs `body` with a fresh ``TestPKI`` and a ``TLSServer`` using it in front of a
/// ``TestServer/standard(sendBufferSize:)`` backend (a test adds its own routes to
/// `server.backend`), then stops nginx (waiting for its processes), shuts the backend down —
/// which records a test failure for any request no route matched — and removes every file,
/// whether `body` threw or not.
///
/// - Returns: What `body` returned, and nginx's access log.
func withTLSServer<Result>(_ body: (TLSServer, TestPKI) async throws -> Result) async throws -> (Result, accessLog: [String]) {
    let pki = try await TestPKI.make()
    defer { pki.remove() }
    let backend = try TestServer.standard()
    defer { backend.shutDown() }
    let server = try await TLSServer(pki: pki, backend: backend)
    let result: Result
    do {
        result = try await body(server, pki)
    } catch {
        _ = try? await server.stop()
        throw error
    }
    return (result, try await server.stop())
}
