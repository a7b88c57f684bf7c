import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// The command line downloads through `DownloadOperation`: a resume answered with a range of a
/// new version starts over there too, and the file is never half of each.
@Suite("The fetchkit command: a resume never splices two files", .timeLimit(.minutes(2)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own; CI's time"))
struct CommandLineResumeIntegrityTests {
    @Test func aRunResumedAgainstAChangedFileEndsWithTheNewFileWhole() async throws {
        let lying = try ResumeFixtures.LyingServer()
        let directory = try TemporaryDirectory()
        defer { lying.server.shutDown(); directory.remove() }
        let url = lying.server.url("/object").absoluteString
        // The first run is cut off halfway and keeps its partial file.
        let first = try await runTool("fetchkit", [url, "-d", directory.url.path, "--retry", "0"])
        #expect(first.status != 0, "\(first)")
        lying.version.withLock { $0 = 2 }
        let second = try await runTool("fetchkit", [url, "-d", directory.url.path, "-c"])
        #expect(second.status == 0, "\(second)")
        #expect((second.stdout + second.stderr).contains("the file changed on the server"), "it says why it started over: \(second)")
        #expect(FileManager.default.contents(atPath: directory.file("object").path)
                    == ResumeFixtures.content(version: 2, length: 200_000), "version 2, whole")
        let requests = lying.server.requests("/object").filter { $0.method == "GET" }
        #expect(requests.contains { $0.header("If-Range") == "\"v1\"" }, "it resumed with the old validator")
        #expect(requests.last?.header("Range") == nil, "then started over")
    }
}
