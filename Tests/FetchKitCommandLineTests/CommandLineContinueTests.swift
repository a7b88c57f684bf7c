import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(Glibc)
import Glibc
#endif

/// Serves `count` files of `length` pattern bytes at `/file/0`…, each with an `ETag` and
/// ranges, in 32 KiB pieces 10 ms apart: a download lasts long enough to be killed in the middle.
/// With a gate in `hold`, a body that starts at 0 waits for it half-way.
private func serveSlowFiles(_ server: TestServer, count: Int, length: Int, hold: Locked<TestGate?>? = nil) {
    for index in 0..<count {
        server.route("/file/\(index)") { request in
            var start = 0
            if let range = request.header("Range"), range.hasPrefix("bytes="), request.header("If-Range") == "\"v\(index)\"",
               let first = Int(range.dropFirst(6).prefix { $0 != "-" }), first < length {
                start = first
            }
            let contentRange = start > 0 ? "bytes \(start)-\(length - 1)/\(length)" : nil
            let head: TestResponse.Step
            if let contentRange {
                head = .head(status: 206, headers: ["ETag": "\"v\(index)\"", "Accept-Ranges": "bytes", "Content-Length": String(length - start),
                                                    "Content-Range": contentRange])
            } else {
                head = .head(status: 200, headers: ["ETag": "\"v\(index)\"", "Accept-Ranges": "bytes", "Content-Length": String(length - start)])
            }
            var steps: [TestResponse.Step] = [head]
            // A HEAD (fetchkit asks whether a file already there changed) gets no body: one would
            // be read as the next response on the connection.
            guard request.method != "HEAD" else { return .steps(steps) }
            let gate = start == 0 ? hold?.current : nil
            var offset = start
            while offset < length {
                if let gate, offset == length / 2 { steps.append(.wait(for: gate)) }
                let piece = min(32 << 10, length - offset)
                steps.append(.patternBytes(offset: offset + index, count: piece))
                steps.append(.pause(milliseconds: 10))
                offset += piece
            }
            return .steps(steps)
        }
    }
}

@Suite("The fetchkit command: -c continues a killed run", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineContinueTests {
    private let count = 4
    private let length = 1 << 20

    private func whole(_ directory: TemporaryDirectory, _ index: Int) -> Bool {
        FileManager.default.contents(atPath: directory.file("\(index)").path) == TestResponse.patternBytes(count: index + length).dropFirst(index)
    }

    /// The file names the journal lists, read as another program would (nil: no journal).
    private func listed(in directory: TemporaryDirectory) -> [String]? {
        guard let data = FileManager.default.contents(atPath: directory.file(".fetchkit-journal.json").path) else { return nil }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let entries = object["entries"] as? [[String: Any]] else {
            Issue.record("the journal is torn: \(String(decoding: data.prefix(200), as: UTF8.self))")
            return []
        }
        return entries.compactMap { $0["identifier"] as? String }
    }

    @Test func aRunKilledAtRandomMomentsIsContinuedWithEveryFileWhole() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        let hold = Locked<TestGate?>(nil)
        serveSlowFiles(server, count: count, length: length, hold: hold)
        let urls = (0..<count).map { server.url("/file/\($0)").absoluteString }
        var random = SplitMix64(seed: 24)
        var interrupted = 0
        for run in 0..<8 {
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let arguments = urls + ["-d", directory.url.path, "--parallel", "4", "--per-host", "4"]
            let requestsBefore = server.counters.requestsReceived
            // On odd runs each body waits half-way until the kill: those kills land mid-download
            // however late this test hears of the first request (a loaded machine's cooperative
            // pool resumed it after the downloads had ended).
            let gate = run % 2 == 1 ? TestGate() : nil
            hold.withLock { $0 = gate }
            let child = try ChildProcess("fetchkit", arguments)
            // A random moment: on even runs, up to the whole run's length (about 0.4 s) from the
            // start, at any point of it, the journal's first write included (on a loaded machine
            // that is often before anything is listed); on odd runs, up to 0.15 s after the first
            // request reached the server (the journal lists every download before any starts).
            // The wait is for the server's event; the sleep only picks the moment.
            if run % 2 == 1 {
                let started = await server.waitUntil(timeout: 60) { $0.requestsReceived > requestsBefore }
                #expect(started, "run \(run): no request reached the server")
                usleep(UInt32(random.next() % 150_000))
            } else {
                usleep(UInt32(random.next() % 450_000))
            }
            child.send(SIGKILL)
            hold.withLock { $0 = nil }
            gate?.open()
            let (ending, _, _) = try await child.finish()
            let killed = ending == .signal(SIGKILL)
            let listedAtKill = listed(in: directory) ?? []
            if killed && !listedAtKill.isEmpty { interrupted += 1 }

            // What the journal lists comes back whole with -c alone.
            let continued = try await runTool("fetchkit", ["-c", "-d", directory.url.path])
            #expect(continued.status == 0, "run \(run): \(continued.stdout)\(continued.stderr)")
            for name in listedAtKill {
                let index = try #require(Int(name), "run \(run): a name fetchkit did not give: \(name)")
                #expect(whole(directory, index), "run \(run): \(name) listed at the kill is not whole after -c")
            }
            // The same command again with -c: every file whole, nothing left behind.
            let again = try await runTool("fetchkit", ["-c"] + arguments)
            #expect(again.status == 0, "run \(run): \(again.stdout)\(again.stderr)")
            for index in 0..<count {
                #expect(whole(directory, index), "run \(run) (killed: \(killed)): file \(index)")
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted()
            #expect(left == (0..<count).map(String.init).sorted(), "run \(run): no journal, partial file or lock left: \(left)")
        }
        // The odd runs' kills land while downloads are listed unfinished and held.
        #expect(interrupted >= 4, "only \(interrupted) of 8 kills left anything to continue")
    }

    @Test func continueWithNothingToContinueIsNotADemo() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let result = try await runTool("fetchkit", ["-c", "-d", directory.url.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("Nothing to continue"), "\(result.stdout)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty)
    }

    @Test func aSecretURLIsNotKeptAndSaysSo() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // A download that fails for now (503) stays listed; its URL holds a token.
        let url = server.url("/status/503?token=s3cr3tvalue").absoluteString
        let first = try await runTool("fetchkit", [url, "-d", directory.url.path, "--retry", "0"])
        #expect(first.status == 8, "\(first.stdout)\(first.stderr)")
        let journal = try #require(FileManager.default.contents(atPath: directory.file(".fetchkit-journal.json").path))
        #expect(!String(decoding: journal, as: UTF8.self).contains("s3cr3tvalue"))
        let continued = try await runTool("fetchkit", ["-c", "-d", directory.url.path])
        #expect(continued.stderr.contains("give it again"), "\(continued.stderr)")
        #expect(!continued.stderr.contains("s3cr3tvalue") && !continued.stdout.contains("s3cr3tvalue"))
    }
}
