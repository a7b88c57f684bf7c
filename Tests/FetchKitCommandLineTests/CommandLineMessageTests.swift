import FetchKit
import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// What the command says: in the units the user typed, each URL once, every path escaped, and
/// a usage error for options without a URL.
@Suite("fetchkit's messages in real use", .timeLimit(.minutes(3)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the command runs in a process of its own, whose sanitizer reports the test does not read; CI's time"))
struct CommandLineRealUseMessageTests {
    private func occurrences(of needle: String, in text: String) -> Int {
        text.components(separatedBy: needle).count - 1
    }

    /// A gzip body of 32 KiB that inflates to 32 MiB, under `--max-size 1M`: the message gives
    /// the cap as the user wrote it, says it counts decoded bytes, and does not quote the
    /// compressed length (below the cap, so beside the point). The URL appears once, in the
    /// summary.
    @Test func aGzipBodyOverTheCapIsReportedInDecodedBytesAndHumanUnits() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let bomb = Gzip.zeros(count: 32 << 20)
        try #require(bomb.count < 1 << 20)
        server.route("/logs.tar") { _ in TestResponse(status: 200, headers: ["Content-Encoding": "gzip"], body: bomb) }
        let url = server.url("/logs.tar").absoluteString

        let result = try await runTool("fetchkit", [url, "-d", directory.url.path, "--max-size", "1M", "--retry", "0"])

        #expect(result.status == 10, "ExitStatus.sizeLimit")
        #expect(result.stdout.contains("✗ logs.tar  larger than the 1 MiB limit (--max-size, counted after decompression)"), "\(result.stdout)")
        #expect(!result.stdout.contains("announced"), "\(result.stdout)")
        #expect(!result.stdout.contains("1048576"), "\(result.stdout)")
        #expect(occurrences(of: url, in: result.stdout) == 1, "\(result.stdout)")
    }

    /// A plain body whose announced length is itself over the cap says so, in human units.
    @Test func anAnnouncedLengthOverTheCapIsQuoted() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let url = server.url("/bytes/3145728").absoluteString
        let result = try await runTool("fetchkit", [url, "-d", directory.url.path, "--max-size", "2M", "--retry", "0"])
        #expect(result.status == 10, "ExitStatus.sizeLimit")
        #expect(result.stdout.contains("larger than the 2 MiB limit (--max-size, counted after decompression); the server announced 3.0 MiB"), "\(result.stdout)")
        #expect(occurrences(of: url, in: result.stdout) == 1, "\(result.stdout)")
    }

    /// Every failure's reason leaves the URL to the summary line, which names it once.
    @Test func aFailedDownloadNamesItsURLOnce() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let urls = [server.url("/lie/5000/100").absoluteString, server.url("/garbage").absoluteString]
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path, "--retry", "0"])
        #expect(result.status == 4, "ExitStatus.network: a body cut short and garbage are both what a connection delivered")
        #expect(result.stdout.contains("the server announced 5000 bytes but 100 arrived"), "\(result.stdout)")
        for url in urls {
            #expect(occurrences(of: url, in: result.stdout) == 1, "\(url) in:\n\(result.stdout)")
        }
    }

    /// `fetchkit -d dir`, as `xargs fetchkit -d dir` runs it on empty input: a usage error,
    /// not the offline demo.
    @Test(arguments: [["-d", "somewhere"], ["--parallel", "3"], ["--"], ["--max-size", "1M", "--timeout", "5"]])
    func optionsWithoutAURLAreAUsageError(_ arguments: [String]) async throws {
        let result = try await runTool("fetchkit", arguments)
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("no URL to download"), "\(result.stderr)")
        #expect(result.stderr.contains("usage: fetchkit"))
        #expect(result.stdout.isEmpty, "\(result.stdout)")
    }

    /// The output directory, as given, may hold anything: the header and the summary show it
    /// escaped like every other string.
    @Test func theOutputDirectoryIsPrintedEscaped() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let output = directory.file("red\u{1B}]0;owned\u{07}\u{1B}[31mdir")
        let result = try await runTool("fetchkit", [server.url("/bytes/100").absoluteString, "-d", output.path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(!result.stdout.contains("\u{1B}") && !result.stdout.contains("\u{07}"), "\(result.stdout.debugDescription)")
        let header = try #require(result.stdout.split(separator: "\n").first)
        #expect(header.contains(#"red\e]0;owned\x07\e[31mdir"#), "\(header.debugDescription)")
    }

    @Test func sizesAreWrittenAsTheUserWritesThem() {
        #expect(Format.size(1 << 20) == "1 MiB")
        #expect(Format.size(16 << 30) == "16 GiB")
        #expect(Format.size(1024) == "1 KiB")
        #expect(Format.size(1500) == "1500 B")
        #expect(Format.size(3 << 39) == "1.5 TiB" || Format.size(3 << 39) == "1536 GiB")
        #expect(Format.size((1 << 20) + 1) == "1.0 MiB")
    }
}

/// The command's messages: a reason is a clause inside its line, never a sentence with its own
/// full stop, and a status code shows only a registered reason phrase.
@Suite("The fetchkit command's messages", .timeLimit(.minutes(3)))
struct CommandLineMessageTests {
    @Test func linesDoNotDoubleTheirPunctuation() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // Announces 100 bytes, sends 10, closes: a length mismatch, which is retried.
        server.route("/short") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "100"]), .patternBytes(offset: 0, count: 10), .close])
        }
        server.route("/teapot") { _ in .text("short and stout", status: 418) }
        let urls = [server.url("/short"), server.url("/teapot")].map(\.absoluteString)
        let result = try await runTool("fetchkit", urls + ["-d", directory.url.path, "--retry", "1"])
        #expect(result.status == 11, "ExitStatus.someFailed: failed for different reasons")
        let output = result.stdout
        #expect(output.contains("HTTP 418"), "\(output)")
        #expect(!output.contains("Client Error"), "\(output)")
        #expect(output.contains("; retrying"), "\(output)")
        for doubled in ["..", ".;", ". .", ". ("] {
            #expect(!output.contains(doubled), "'\(doubled)' in:\n\(output)")
        }
    }
}

@Suite("Matching a real server's errors", .timeLimit(.minutes(3)))
struct MatchingServerErrorsTests {
    /// The README's comparison of a status: by its code, against a server that sends headers
    /// and a body (a status failure built from a code alone equals none of them).
    @Test func aStatusMatchesByItsCode() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let url = server.url("/status/404")
        let operation = FetchOperation<Data>(url: url)
        operation.configuration.retryPolicy = .none
        let error = await #expect(throws: FetchError.self) { try await FetchQueue().fetch(operation) }
        #expect(error?.statusCode == 404)
        #expect(error != .unacceptableStatus(.init(statusCode: 404, url: url)),
                "== compares the server's headers too: this is why the README compares the code")
        var matched: [String] = []
        switch error {
        case .unacceptableStatus(404)?: matched.append("404")
        default: break
        }
        if case .unacceptableStatus(400..<500)? = error { matched.append("4xx") }
        if case .unacceptableStatus(500...)? = error { matched.append("5xx") }
        if case .unacceptableStatus(403)? = error { matched.append("403") }
        #expect(matched == ["404", "4xx"])
        #expect(operation.result.map { if case .failure(.unacceptableStatus(404)) = $0 { true } else { false } } == true)
    }

    @Test func aFailedDependencysOwnErrorIsTyped() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let login = FetchOperation<Data>(url: server.url("/status/401"))
        login.configuration.retryPolicy = .none
        login.name = "login"
        let getUser = FetchOperation<Data>(url: server.url("/json"))
        getUser.addDependency(login)
        let error = await #expect(throws: FetchError.self) { try await FetchQueue().fetch(getUser) }
        guard case .dependencyFailed(let failure)? = error else {
            Issue.record("expected dependencyFailed, got \(String(describing: error))")
            return
        }
        #expect(failure.dependencyFetchError?.statusCode == 401)
        #expect(failure.dependencyFetchError == login.error)
        #expect(!failure.dependencyWasCancelled)
        #expect(server.requests("/json").count == 0)

        let cancelled = FetchError.DependencyFailure(dependency: "'other'", dependencyError: nil)
        #expect(cancelled.dependencyFetchError == nil)
    }
}
