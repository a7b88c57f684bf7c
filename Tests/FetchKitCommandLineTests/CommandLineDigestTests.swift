import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("The fetchkit command: --sha256", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineDigestTests {
    /// The SHA-256 of `data`, from `sha256sum`.
    private func sha256sum(of data: Data, in directory: TemporaryDirectory) async throws -> String {
        let file = directory.file("reference")
        try data.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try await runTool("/usr/bin/sha256sum", [file.path])
        return String(result.stdout.prefix { $0 != " " })
    }

    @Test func theRightDigestSavesTheFile() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let hex = try await sha256sum(of: TestResponse.patternBytes(count: 100_003), in: directory)
        let result = try await runTool("fetchkit", [server.url("/bytes/100003").absoluteString, "-d", directory.url.path,
                                                    "--sha256", hex.uppercased()])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("100003").path) == TestResponse.patternBytes(count: 100_003))
    }

    @Test func aMismatchIsOneLineANonzeroExitAndNoFile() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let actual = try await sha256sum(of: TestResponse.patternBytes(count: 100_003), in: directory)
        let wrong = String(repeating: "0", count: 64)
        let result = try await runTool("fetchkit", [server.url("/bytes/100003").absoluteString, "-d", directory.url.path,
                                                    "--sha256", wrong])
        #expect(result.status == 9, "ExitStatus.checksum")
        // The file's line, as every failure has one (the summary repeats it with the URL).
        let lines = result.stdout.split(separator: "\n").filter { $0.contains("✗ 100003") }
        #expect(lines.count == 1, "\(result.stdout)")
        #expect(lines.first?.contains("SHA-256 mismatch: expected \(wrong), got \(actual)") == true, "\(result.stdout)")
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        #expect(left.isEmpty, "neither the file nor its partial file: \(left)")
        #expect(server.requests("/bytes/100003").count == 1, "not retried")
    }

    @Test(arguments: [
        ["--sha256", String(repeating: "a", count: 63), "http://127.0.0.1:9/a"],
        ["--sha256", String(repeating: "g", count: 64), "http://127.0.0.1:9/a"],
        ["http://127.0.0.1:9/a", "--sha256"],
        ["--sha256", String(repeating: "a", count: 64), "http://127.0.0.1:9/a", "http://127.0.0.1:9/b"],
    ])
    func badDigestsAndMoreThanOneURLAreUsageErrors(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", arguments)
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("usage: fetchkit"))
        #expect(result.stdout.isEmpty)
    }
}
