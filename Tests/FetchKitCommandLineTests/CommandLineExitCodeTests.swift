import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// One exit code per failure class, as `--help` and the CommandLine article list them (``ExitStatus``).
@Suite("The fetchkit command: exit codes", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineExitCodeTests {
    /// What fetchkit exits with for `paths` on a loopback server, with `flags`.
    private func status(_ paths: [String], _ flags: [String] = [], closedPort: Bool = false) async throws -> (status: Int32, output: String) {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let port = try ClosedPort()
        defer { server.shutDown(); directory.remove(); _ = port }
        let urls = paths.map { $0.hasPrefix("closed:") ? "http://127.0.0.1:\(port.port)/\($0.dropFirst(7))" : server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path, "--retry", "0"] + flags)
        return (result.status, result.stdout + result.stderr)
    }

    @Test func successIsZero() async throws {
        #expect(try await status(["/bytes/10", "/bytes/20"]).status == 0)
    }

    @Test func aRefusedConnectionIsANetworkFailure() async throws {
        let result = try await status(["closed:file"])
        #expect(result.status == ExitStatus.network.rawValue, "\(result.output)")
        #expect(ExitStatus.network.rawValue == 4)
    }

    @Test func aStalledServerIsANetworkFailure() async throws {
        let result = try await status(["/stall-head"], ["--timeout", "0.3"])
        #expect(result.status == 4, "\(result.output)")
    }

    /// A host whose TCP handshake never completes: `--connect-timeout` ends it, not the 60 s
    /// `--timeout` (the message names which).
    @Test func aConnectionNotMadeInTimeIsANetworkFailure() async throws {
        let port = try SilentPort(.connectStalls)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let result = try await runTool("fetchkit", [port.url("/file").absoluteString, "-d", directory.url.path, "--retry", "0",
                                                    "--timeout", "60", "--connect-timeout", "0.3"])
        let output = result.stdout + result.stderr
        #expect(result.status == ExitStatus.network.rawValue, "\(output)")
        #expect(output.contains("no connection within 0.3 s (--connect-timeout)"), "\(output)")
        let usage = try await runTool("fetchkit", [port.url("/file").absoluteString, "--connect-timeout", "soon"])
        #expect(usage.status == ExitStatus.usage.rawValue, "\(usage.stderr)")
    }

    @Test func anErrorStatusIsAnHTTPFailure() async throws {
        let result = try await status(["/status/404", "/status/503"])
        #expect(result.status == ExitStatus.httpStatus.rawValue, "all failed, all for one class: \(result.output)")
        #expect(ExitStatus.httpStatus.rawValue == 8)
    }

    @Test func aRedirectLoopIsAProtocolFailure() async throws {
        let result = try await status(["/redirect-loop"])
        #expect(result.status == ExitStatus.protocol.rawValue, "\(result.output)")
        #expect(ExitStatus.protocol.rawValue == 7)
    }

    @Test func aWrongDigestIsAChecksumFailure() async throws {
        let result = try await status(["/bytes/100"], ["--sha256", String(repeating: "1", count: 64)])
        #expect(result.status == ExitStatus.checksum.rawValue, "\(result.output)")
        #expect(ExitStatus.checksum.rawValue == 9)
    }

    @Test func aFileOverTheCapIsASizeFailure() async throws {
        let result = try await status(["/bytes/5000"], ["--max-size", "1K"])
        #expect(result.status == ExitStatus.sizeLimit.rawValue, "\(result.output)")
        #expect(ExitStatus.sizeLimit.rawValue == 10)
    }

    @Test func someSucceededOrDifferentFailuresIsSomeFailed() async throws {
        let mixed = try await status(["/bytes/10", "/status/404"])
        #expect(mixed.status == ExitStatus.someFailed.rawValue, "\(mixed.output)")
        let different = try await status(["/status/404", "closed:file"])
        #expect(different.status == ExitStatus.someFailed.rawValue, "\(different.output)")
        #expect(ExitStatus.someFailed.rawValue == 11)
    }

    @Test func anOutputDirectoryThatCannotBeMadeIsAFileFailure() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Data("a file".utf8).write(to: directory.file("plain"))
        let result = try await runTool("fetchkit", ["http://127.0.0.1:9/a", "-d", directory.file("plain/sub").path])
        #expect(result.status == ExitStatus.fileSystem.rawValue, "\(result)")
        #expect(ExitStatus.fileSystem.rawValue == 3)
    }

    @Test func usageIsTwo() async throws {
        let result = try await runTool("fetchkit", ["--max-time", "-1", "http://127.0.0.1:9/a"])
        #expect(result.status == ExitStatus.usage.rawValue && ExitStatus.usage.rawValue == 2, "\(result)")
    }

    @Test func everyCodeIsInTheHelp() async throws {
        let result = try await runTool("fetchkit", ["--help"])
        #expect(result.status == 0)
        for code in ExitStatus.allCases {
            #expect(result.stdout.contains("\n  \(code.rawValue) ") || result.stdout.contains("\n  \(code.rawValue)  "), "\(code) in --help")
        }
        #expect(result.stdout.contains("130 interrupted by SIGINT"))
        for flag in ["--input-file", "--json", "--quiet", "--verbose", "--version", "--header", "--user-agent",
                     "--content-disposition", "--max-time", "--summary-interval", "--sha256"] {
            #expect(result.stdout.contains(flag), "\(flag) in --help")
        }
    }

    /// How the failures of a run combine, as a pure function.
    @Test func theRuleThatCombinesFailures() {
        #expect(ExitStatus.of(failures: [], succeeded: 3, signal: nil) == 0)
        #expect(ExitStatus.of(failures: [.network], succeeded: 0, signal: nil) == 4)
        #expect(ExitStatus.of(failures: [.network, .network], succeeded: 0, signal: nil) == 4)
        #expect(ExitStatus.of(failures: [.network], succeeded: 1, signal: nil) == 11)
        #expect(ExitStatus.of(failures: [.network, .checksum], succeeded: 0, signal: nil) == 11)
        #expect(ExitStatus.of(failures: [.network], succeeded: 0, signal: 2) == 130)
        #expect(ExitStatus.of(failures: [], succeeded: 0, signal: 15) == 143)
    }

    /// The classes the loopback server cannot provoke through the command, which checks
    /// its requests before FetchKit does.
    @Test func aRequestFetchKitRefusesIsAnotherFailureAndATotalTimeoutANetworkOne() {
        #expect(ExitStatus(.invalidRequest(.init(reason: .missing, url: nil))) == .failure)
        #expect(ExitStatus.failure.rawValue == 1)
        #expect(ExitStatus(.timedOut(.init(kind: .total, interval: 1, url: nil))) == .network)
    }
}
