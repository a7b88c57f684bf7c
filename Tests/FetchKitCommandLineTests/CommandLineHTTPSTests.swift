import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// The `fetchkit` command over HTTPS (issue 22, point 6), against nginx with a test CA: run in a
/// private mount namespace where that CA is in the system bundle, it downloads; run where the
/// CA is not trusted, it fails with one line naming the TLS failure.
@Suite("The fetchkit command over HTTPS", .timeLimit(.minutes(3)),
       .disabled(if: TLSTools.unavailable != nil, Comment(rawValue: TLSTools.unavailable ?? "")),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, and CI's time goes to openssl and nginx"))
struct CommandLineHTTPSTests {
    @Test func downloadsWhereTheCAIsTrustedAndSaysWhyNotWhereItIsNot() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let size = 3 << 20
        let ((trusted, untrusted, selfSigned), log) = try await withTLSServer { server, pki in
            func run(_ url: URL, trusting bundle: URL?, into name: String) async throws -> (status: Int32, stdout: String, stderr: String) {
                let output = directory.file(name)
                try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
                let child = try ChildProcess(trusting: bundle, "fetchkit", [url.absoluteString, "-d", output.path])
                let (ending, stdout, stderr) = try await child.finish(timeout: 120)
                guard case .exit(let status) = ending else { throw ParseTestError(reason: "fetchkit ended by \(ending)\n\(stdout)\(stderr)") }
                return (status, stdout, stderr)
            }
            let trusted = try await run(server.url(.valid, "/bytes/\(size)"), trusting: pki.trustBundle, into: "trusted")
            let untrusted = try await run(server.url(.valid, "/bytes/100"), trusting: nil, into: "untrusted")
            let selfSigned = try await run(server.url(.selfSigned, "/bytes/100"), trusting: pki.trustBundle, into: "self-signed")
            #expect(server.backend.requests("/bytes/100").count == 0, "no refused request reached the server")
            return (trusted, untrusted, selfSigned)
        }
        #expect(trusted.status == 0, "\(trusted)")
        #expect(FileManager.default.contents(atPath: directory.file("trusted/\(size)").path) == TestResponse.patternBytes(count: size))
        #expect(trusted.stdout.contains("Downloaded 1 of 1 file "), "\(trusted)")
        #expect(log.contains { $0.contains(" HTTP/2.0 200 GET /bytes/\(size) \(size)") }, "over HTTP/2: \(log)")

        for (run, words) in [(untrusted, "unable to get local issuer certificate"), (selfSigned, "self-signed certificate")] {
            #expect(run.status == 5, "ExitStatus.tls: \(run)")
            let failures = (run.stdout + run.stderr).split(separator: "\n").filter { $0.contains("✗") }
            #expect(failures.count == 1, "one line for the failure: \(run)")
            #expect(failures.first.map { $0.contains("TLS connection to the server refused: its certificate is not trusted") && $0.contains(words) } == true,
                    "names the TLS failure: \(run)")
            // The summary names the URL once, beside the reason (which does not repeat it).
            let summary = run.stdout.split(separator: "\n").first { $0.hasPrefix("  100: ") }.map(String.init) ?? ""
            #expect(summary.components(separatedBy: "https://127.0.0.1:").count == 2 && summary.contains("TLS connection to the server refused"),
                    "\(run)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("untrusted/100").path))
        #expect(!FileManager.default.fileExists(atPath: directory.file("self-signed/100").path))
    }

    /// `--cacert` and `--pinnedpubkey` (issue 32, point 6) are the library's TrustSettings: the
    /// test CA is trusted from the file alone (the system bundle is left as it is), the right
    /// pin downloads, a wrong one fails as TLS before the request is sent.
    @Test func cacertTrustsTheCAAndPinnedpubkeyRequiresTheKey() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (runs, _) = try await withTLSServer { server, pki in
            let right = try await opensslPin(of: pki.certificate(.valid))
            let wrong = try await opensslPin(of: pki.certificate(.otherKey))
            func run(_ arguments: [String], into name: String) async throws -> (status: Int32, stdout: String, stderr: String) {
                let child = try ChildProcess(trusting: nil, "fetchkit", [server.url(.valid, "/bytes/100").absoluteString,
                                                                          "-d", directory.file(name).path, "--cacert", pki.caCertificate.path] + arguments)
                let (ending, stdout, stderr) = try await child.finish(timeout: 120)
                guard case .exit(let status) = ending else { throw ParseTestError(reason: "fetchkit ended by \(ending)\n\(stdout)\(stderr)") }
                return (status, stdout, stderr)
            }
            let runs = [try await run([], into: "cacert"),
                        try await run(["--pinnedpubkey", "sha256//\(wrong);sha256//\(right)"], into: "pinned"),
                        try await run(["--pinnedpubkey", "sha256//\(wrong)"], into: "mismatch")]
            #expect(server.backend.requests("/bytes/100").count == 2, "the mismatch sent nothing")
            return runs
        }
        #expect(runs[0].status == 0, "\(runs[0])")
        #expect(runs[1].status == 0, "\(runs[1])")
        #expect(runs[2].status == 5, "ExitStatus.tls: \(runs[2])")
        for name in ["cacert", "pinned"] {
            #expect(FileManager.default.contents(atPath: directory.file("\(name)/100").path) == TestResponse.patternBytes(count: 100))
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("mismatch/100").path))
    }
}
