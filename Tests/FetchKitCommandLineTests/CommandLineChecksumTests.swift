import FetchKitTesting
import Foundation
import Testing
@testable import FetchKit
@testable import fetchkit

/// The hex digest of `data` from the coreutils tool of `tool` (`md5sum`, `sha1sum`, `sha512sum`).
private func coreutils(_ tool: String, _ data: Data) async throws -> String {
    let result = try await runTool("/usr/bin/\(tool)", ["-"], input: data)
    return String(result.stdout.prefix { $0 != " " })
}

@Suite("The fetchkit command: --checksum and the list's digests", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineChecksumTests {
    static let body = TestResponse.patternBytes(count: 70_001)

    private func server() throws -> TestServer {
        let server = try TestServer()
        server.route("GET", "/file") { _ in .bytes(Self.body) }
        return server
    }

    /// aria2's `--checksum=TYPE=HEX`, each algorithm: the right digest saves the file and the
    /// JSON line names it; SHA-256's own field stays `null` for the others.
    @Test(arguments: [("sha-512", "sha512sum"), ("sha-1", "sha1sum"), ("md5", "md5sum"), ("SHA-256", "sha256sum")])
    func theRightChecksumSavesTheFile(_ type: String, _ tool: String) async throws {
        let server = try server()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let hex = try await coreutils(tool, Self.body)
        let result = try await runTool("fetchkit", [server.url("/file").absoluteString, "-d", directory.url.path, "--json", "-q",
                                                    "--checksum=\(type)=\(hex.uppercased())"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: directory.file("file").path) == Self.body)
        let line = try #require(result.stdout.split(separator: "\n").first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let algorithm = try #require(FileDigest.Algorithm(named: type))
        #expect(object["checksum"] as? String == "\(algorithm.name):\(hex)", "\(line)")
        if algorithm == .sha256 {
            #expect(object["sha256"] as? String == hex)
        } else {
            #expect(object["sha256"] is NSNull, "\(line)")
        }
    }

    /// A wrong MD5: exit 9, one line naming the algorithm and both digests, no file, not retried.
    @Test func aWrongChecksumIsOneLineExitNineAndNoFile() async throws {
        let server = try server()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let actual = try await coreutils("md5sum", Self.body)
        let wrong = String(repeating: "0", count: 32)
        let result = try await runTool("fetchkit", [server.url("/file").absoluteString, "-d", directory.url.path, "--checksum", "md5=\(wrong)"])
        #expect(result.status == 9, "ExitStatus.checksum: \(result.stdout)\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").filter { $0.contains("✗ file") }
        #expect(lines.count == 1, "\(result.stdout)")
        #expect(lines.first?.contains("MD5 mismatch: expected \(wrong), got \(actual)") == true, "\(result.stdout)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty)
        #expect(server.requests("/file").count == 1, "not retried")
    }

    /// An `-i` list with a digest of each kind on its lines (any case, with or without the
    /// hyphen): the right ones pass, the wrong one fails that file alone.
    @Test func aListCarriesADigestOfAnyKindPerLine() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("GET", "/files/:name") { _ in .bytes(Self.body) }
        let sha1 = try await coreutils("sha1sum", Self.body)
        let sha512 = try await coreutils("sha512sum", Self.body)
        let list = directory.file("urls")
        try Data("""
            \(server.url("/files/a").absoluteString) sha1:\(sha1)
            \(server.url("/files/b").absoluteString)\tSHA-512:\(sha512.uppercased())
            \(server.url("/files/c").absoluteString) md5:\(String(repeating: "f", count: 32))
            """.utf8).write(to: list)
        let output = directory.file("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let result = try await runTool("fetchkit", ["-i", list.path, "-d", output.path, "-q"])
        #expect(result.status == ExitStatus.someFailed.rawValue || result.status == 9, "\(result.stdout)\(result.stderr)")
        #expect(FileManager.default.contents(atPath: output.appendingPathComponent("a").path) == Self.body)
        #expect(FileManager.default.contents(atPath: output.appendingPathComponent("b").path) == Self.body)
        #expect(!FileManager.default.fileExists(atPath: output.appendingPathComponent("c").path))
        #expect(result.stderr.contains("MD5 mismatch") || result.stdout.contains("MD5 mismatch"), "\(result.stdout)\(result.stderr)")
    }

    /// A file already there is checked with the digest given, and said to match by its name.
    @Test func aFileAlreadyThereIsCheckedWithTheAlgorithmGiven() async throws {
        let server = try server()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        try Self.body.write(to: directory.file("file"))
        let sha1 = try await coreutils("sha1sum", Self.body)
        let result = try await runTool("fetchkit", [server.url("/file").absoluteString, "-d", directory.url.path, "--checksum=sha-1=\(sha1)"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("already there, SHA-1 matches"), "\(result.stdout)")
        #expect(server.requests("/file").isEmpty, "the file was checked, not downloaded")
    }

    @Test(arguments: [
        (["--checksum=crc32=abcd", "http://127.0.0.1:9/a"], "'crc32' is not a digest FetchKit checks"),
        (["--checksum=sha-1=abc", "http://127.0.0.1:9/a"], "--checksum sha-1= needs 40 hexadecimal digits, not 'abc'"),
        (["--checksum", "md5", "http://127.0.0.1:9/a"], "--checksum needs TYPE=HEX"),
        (["--checksum=md5=\(String(repeating: "a", count: 32))", "--sha256", String(repeating: "b", count: 64), "http://127.0.0.1:9/a"],
         "--checksum and --sha256 give the download two different digests"),
        (["--checksum=md5=\(String(repeating: "a", count: 32))", "http://127.0.0.1:9/a", "http://127.0.0.1:9/b"],
         "--checksum checks one download: give exactly one URL, not 2"),
    ])
    func badChecksumsAreUsageErrors(_ arguments: [String], _ message: String) async throws {
        let result = try await runTool("fetchkit", arguments)
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    /// A list's line with a digest of the wrong length names the algorithm and the count.
    @Test func aListDigestOfTheWrongLengthIsRefusedWithItsAlgorithm() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let list = directory.file("urls")
        try Data("http://127.0.0.1:9/a sha512:\(String(repeating: "a", count: 64))\n".utf8).write(to: list)
        let result = try await runTool("fetchkit", ["-i", list.path, "-d", directory.url.path])
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("urls:1: sha512: needs 128 hexadecimal digits"), "\(result.stderr)")
    }
}
