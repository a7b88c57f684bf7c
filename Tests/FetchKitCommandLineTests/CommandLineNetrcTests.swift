import Foundation
import FetchKitTesting
import Testing
@testable import fetchkit

/// `--netrc`, `--netrc-file` (issue 32, point 6.3): the logins of a `.netrc`, by host, as curl
/// reads the file; never printed; a malformed file is a usage error that echoes nothing of it.
@Suite("fetchkit --netrc", .timeLimit(.minutes(2)))
struct CommandLineNetrcTests {
    /// `/private/report.csv` answers 200 to `login:password` in Basic, else a 401 challenge.
    private func protected(_ server: TestServer, login: String = "alice", password: String = "s3cr3t-pw") {
        let expected = "Basic " + Data("\(login):\(password)".utf8).base64EncodedString()
        server.route("/private/report.csv") { request in
            guard request.header("Authorization") == expected else {
                return TestResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="test""#], body: Data("no".utf8))
            }
            return TestResponse(status: 200, body: Data("a,b\n".utf8))
        }
    }

    private func write(_ text: String, to file: URL) throws {
        try Data(text.utf8).write(to: file)
    }

    @Test func aMachineEntryLogsInAndNothingOfItIsPrinted() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        protected(server)
        let netrc = directory.file("netrc")
        try write("""
            # logins for the API
            machine example.com login bob password other-pw
            machine 127.0.0.1
              login alice
              password s3cr3t-pw
            """, to: netrc)
        let good = try await runTool("fetchkit", [server.url("/private/report.csv").absoluteString, "--netrc-file", netrc.path,
                                                  "-v", "-d", directory.file("out").path])
        #expect(good.status == 0, "\(good)")
        #expect(FileManager.default.contents(atPath: directory.file("out/report.csv").path) == Data("a,b\n".utf8))
        #expect(!(good.stdout + good.stderr).contains("s3cr3t") && !(good.stdout + good.stderr).contains("alice"), "\(good)")
        #expect(server.requests("/private/report.csv").count == 2, "a challenge, then the answer")
    }

    @Test func quotedWordsMacrosAndTheDefaultEntry() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        protected(server, login: "carol", password: #"p a"ss\w"#)
        let netrc = directory.file("netrc")
        try write("""
            macdef init
            machine 127.0.0.1 login mallory password not-this-one
            echo a macro body is skipped up to the empty line

            machine example.com login bob password other-pw
            default login carol password "p a\\"ss\\\\w"
            """, to: netrc)
        let result = try await runTool("fetchkit", [server.url("/private/report.csv").absoluteString, "--netrc-file", netrc.path,
                                                    "-d", directory.url.path])
        #expect(result.status == 0, "\(result)")
        #expect(server.requests("/private/report.csv").compactMap { $0.header("Authorization") }
                == ["Basic " + Data(#"carol:p a"ss\w"#.utf8).base64EncodedString()])
    }

    @Test func dashNReadsTheHomeNetrcAndDashUWinsOverIt() async throws {
        let server = try TestServer()
        let home = try TemporaryDirectory()
        defer { server.shutDown(); home.remove() }
        protected(server)
        try write("machine 127.0.0.1 login alice password s3cr3t-pw\n", to: home.file(".netrc"))
        let url = server.url("/private/report.csv").absoluteString
        let child = try ChildProcess("fetchkit", [url, "-n", "-d", home.file("a").path], environment: ["HOME": home.url.path])
        let (ending, stdout, stderr) = try await child.finish(timeout: 60)
        #expect(ending == .exit(0), "\(stdout)\(stderr)")
        #expect(FileManager.default.contents(atPath: home.file("a/report.csv").path) == Data("a,b\n".utf8))
        // -u's wrong password wins over the file's right one.
        let override = try ChildProcess("fetchkit", [url, "--netrc", "-u", "alice:wr0ng-pw", "--retry", "0", "-d", home.file("b").path],
                                        environment: ["HOME": home.url.path])
        let overridden = try await override.finish(timeout: 60)
        #expect(overridden.0 == .exit(ExitStatus.httpStatus.rawValue), "\(overridden)")
        // No ~/.netrc: no logins, no error (the server's 401 is the answer).
        try FileManager.default.removeItem(at: home.file(".netrc"))
        let none = try ChildProcess("fetchkit", [url, "--netrc", "--retry", "0", "-d", home.file("c").path], environment: ["HOME": home.url.path])
        let missing = try await none.finish(timeout: 60)
        #expect(missing.0 == .exit(ExitStatus.httpStatus.rawValue), "\(missing)")
    }

    @Test(arguments: [
        ("machine", "'machine' without a host name"),
        ("machine h login", "'login' without a value"),
        ("login alice password s3cr3t-pw", "before any 'machine'"),
        ("default login a password b\nmachine h login c password d", "after 'default'"),
        ("machine h password \"s3cr3t-pw", "without its closing quote"),
        ("machine h password \"s3cr3t\\tpw\"", "control character"),
        ("machine h passwd s3cr3t-pw", "unknown word"),
    ])
    func aMalformedFileIsAUsageErrorThatEchoesNothingOfIt(_ text: String, _ reason: String) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let netrc = directory.file("netrc")
        try Data(text.utf8).write(to: netrc)
        let result = try await runTool("fetchkit", ["http://127.0.0.1:9/x", "--netrc-file", netrc.path])
        #expect(result.status == ExitStatus.usage.rawValue, "\(result)")
        #expect(result.stderr.contains(reason), "\(result.stderr)")
        #expect(!result.stderr.contains("s3cr3t") && !result.stderr.contains("alice"), "\(result.stderr)")
    }

    @Test func aMissingOrHugeNamedFileIsAUsageError() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let missing = try await runTool("fetchkit", ["http://127.0.0.1:9/x", "--netrc-file", directory.file("none").path])
        #expect(missing.status == ExitStatus.usage.rawValue && missing.stderr.contains("cannot read the netrc file"), "\(missing)")
        let huge = directory.file("huge")
        try Data(repeating: 0x20, count: Netrc.maximumSize + 1).write(to: huge)
        let large = try await runTool("fetchkit", ["http://127.0.0.1:9/x", "--netrc-file", huge.path])
        #expect(large.status == ExitStatus.usage.rawValue && large.stderr.contains("larger than"), "\(large)")
    }

    @Test func theFirstEntryForAHostWinsAndHostsCompareWithoutCase() throws {
        let netrc = try Netrc.parse(Data("machine API.Example.com login a password 1\nmachine api.example.com login b password 2\n".utf8))
        #expect(netrc.credentials(forHost: "api.example.COM")?.login == "a")
        #expect(netrc.credentials(forHost: "other.example.com") == nil)
        #expect(!String(describing: netrc.entries).contains("password"))
        #expect(!String(describing: netrc.entries).contains("1"))
    }
}
