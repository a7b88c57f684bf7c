import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// What `fetchkit` prints can neither be driven by a server (escape sequences, forged lines)
/// nor show a secret of the URLs it was given. The tool runs as a subprocess writing to pipes,
/// where it draws no colour of its own: any ESC in its output would have come from outside.
@Suite("Terminal safety", .timeLimit(.minutes(3)))
struct TerminalSafetyTests {
    static let evilPath = "/%1B%5B31mred%0Afake%20line.txt"
    static let secrets = ["hunter2secret", "tok3nsecret"]

    /// The output's problems: an ESC, a carriage return, a line the network started.
    private func expectClean(_ output: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(!output.utf8.contains(0x1B), "ESC in output:\n\(output.debugDescription)", sourceLocation: sourceLocation)
        #expect(!output.utf8.contains(0x0D), "CR in output:\n\(output.debugDescription)", sourceLocation: sourceLocation)
        #expect(!output.unicodeScalars.contains { (0x80...0x9F).contains($0.value) || $0.value == 0x202E },
                "C1 or bidi control in output:\n\(output.debugDescription)", sourceLocation: sourceLocation)
        for line in output.split(separator: "\n", omittingEmptySubsequences: false) {
            #expect(!line.hasPrefix("fake"), "a line forged by the network: \(line.debugDescription)", sourceLocation: sourceLocation)
        }
        for secret in Self.secrets {
            #expect(!output.contains(secret), "\(secret) printed:\n\(output)", sourceLocation: sourceLocation)
        }
    }

    @Test func aFileNameFromTheURLCanNeitherColourNorBreakLines() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route(Self.evilPath) { _ in TestResponse(status: 200, body: Data("ok".utf8)) }
        let result = try await runTool("fetchkit", [server.url(Self.evilPath).absoluteString, "-d", directory.url.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        expectClean(result.stdout)
        expectClean(result.stderr)
        let done = result.stdout.split(separator: "\n").first { $0.contains("✓") }
        #expect(done?.contains("red") == true && done?.contains("fake") == true,
                "the name is still shown, escaped, on its one line:\n\(result.stdout)")
    }

    @Test func failuresWithEscapesInStatusHeadersBodyAndRedirectsPrintClean() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let body = Data("\u{1B}[31m\nfake body line\u{1B}]0;pwned\u{7}\r\nfake again".utf8)
        server.route(Self.evilPath) { _ in
            .steps([
                .head(status: 503, headers: [
                    "X-Message": "\u{1B}[2J\u{1B}[H cleared", "Content-Length": "\(body.count)", "Connection": "close",
                ], reason: "\u{1B}[31mService\u{1B}[0m \u{9B}31m Unavailable"),
                .write(body),
                .close,
            ])
        }
        server.route("/escape-redirect") { _ in
            TestResponse(status: 302, headers: ["Location": "/landing%1B%5B31m%0Afake%20redirect"])
        }
        server.route("/landing%1B%5B31m%0Afake%20redirect") { _ in .status(404) }
        server.route("/escape-loop") { _ in
            TestResponse(status: 302, headers: ["Location": "/escape-loop?%1B%5B31m%0Afake=%1B"])
        }
        let urls = [Self.evilPath, "/escape-redirect", "/escape-loop"].map { server.url($0).absoluteString }
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path, "--retry", "0"])
        #expect(result.status == 11, "ExitStatus.someFailed")
        expectClean(result.stdout)
        expectClean(result.stderr)
        #expect(result.stdout.contains("HTTP 503"), "\(result.stdout)")
        #expect(result.stdout.contains("3 failed"), "\(result.stdout)")
    }

    @Test func secretsInTheURLsAreNeverPrinted() async throws {
        let server = try TestServer()
        let closed = try ClosedPort()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.route("/private/report") { request in
            TestResponse(status: 401, headers: ["Set-Cookie": "sid=tok3nsecret"], body: Data("token tok3nsecret refused".utf8))
        }
        server.route("/hop") { _ in TestResponse(status: 302, headers: ["Location": "/hop?token=tok3nsecret"]) }
        let port = server.baseURL.port ?? 0
        let urls = [
            "http://user:hunter2secret@127.0.0.1:\(port)/private/report?page=2&token=tok3nsecret",
            "http://127.0.0.1:\(port)/hop?access_token=tok3nsecret",
            "http://hunter2secret@127.0.0.1:\(closed.port)/down?X-Amz-Signature=tok3nsecret",
        ]
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path, "--retry", "0"])
        withExtendedLifetime(closed) {}
        #expect(result.status == 11, "ExitStatus.someFailed: failed for different reasons")
        expectClean(result.stdout)
        expectClean(result.stderr)
        #expect(result.stdout.contains("http://user:REDACTED@127.0.0.1:\(port)/private/report?page=2&token=REDACTED"), "\(result.stdout)")
        #expect(result.stdout.contains("/hop?access_token=REDACTED"), "\(result.stdout)")
        #expect(result.stdout.contains("3 failed"), "\(result.stdout)")
    }

    @Test func aRejectedArgumentIsEchoedRedactedAndEscaped() async throws {
        let result = try await runTool("fetchkit", ["ftp://user:hunter2secret@example.com/x?token=tok3nsecret\u{1B}[31m\nfake"])
        #expect(result.status == 2)
        expectClean(result.stderr)
        #expect(result.stderr.contains("ftp://user:REDACTED@example.com/x?token=REDACTED"), "\(result.stderr)")
    }

    @Test(arguments: [
        ("\u{1B}[31mred\nfake line.txt", #"\e[31mred\nfake line.txt"#),
        ("a\rb\tc\u{0}d\u{7F}e", #"a\rb\tc\x00d\x7Fe"#),
        ("\u{1B}]0;title\u{7}", #"\e]0;title\x07"#),
        ("csi \u{9B}2J nel \u{85}", #"csi \u{9B}2J nel \u{85}"#),
        ("abc\u{202E}txt.exe \u{2066}x\u{2069} \u{2028}", #"abc\u{202E}txt.exe \u{2066}x\u{2069} \u{2028}"#),
        ("plain ✓ café 👩‍💻 C:\\path", "plain ✓ café 👩‍💻 C:\\path"),
    ])
    func sanitizedShowsControlsAsEscapes(_ pair: (String, String)) {
        #expect(Terminal.sanitized(pair.0) == pair.1)
        #expect(Terminal.sanitized(pair.1) == pair.1, "escaping twice changes nothing")
    }
}
