@testable import FetchKit
import Foundation
import FetchKitTesting
import Testing

// Responses whose bytes reach a trap in FoundationNetworking 6.3.x (a fatalError, a failed
// conversion, an index past the end), and status lines it misreads. FramingProbe fetches each in
// a process of its own, so that a crash fails one test instead of ending the run: through a plain
// URLSession first (which must still crash, or the test proves nothing but a changed toolchain),
// then through FetchKit (which must not).

#if os(Linux)
// Serialized: each test starts two processes, and a burst of them slows the timing-sensitive
// tests that run beside it.
@Suite("Hostile framing: what crashes URLSession on Linux does not crash FetchKit", .serialized, .timeLimit(.minutes(5)),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: each case starts two processes of their own, whose reports the test does not read; CI's time (the filter runs in-process there: ResponseHeadFilterTests)"))
struct ResponseFramingTrapTests {
    /// A case, and what FetchKit's probe line must start with.
    struct Trap: CustomTestStringConvertible, Sendable {
        let name: String
        let fetchKit: String
        /// What the plain URLSession's process dies of (a line of its standard error).
        let crash: String
        var testDescription: String { name }
    }

    static let noResponse = "Transfer completed, but there's no response."
    static let cookieIndex = "String index is out of bounds"
    static let wholeBody = "ok status=200 body=11 md5ish=d58b3fa7"

    static let traps: [Trap] = [
        Trap(name: "trailers", fetchKit: wholeBody + " trailers=server-timing=db;dur=53;set-cookie=trailer=1;x-checksum=abc, def guards=true",
             crash: noResponse),
        Trap(name: "trailers-empty-body", fetchKit: "ok status=200 body=0 md5ish=811c9dc5 trailers=x-status=done guards=true", crash: noResponse),
        Trap(name: "trailers-status-like", fetchKit: wholeBody + " trailers=http/1.1 200 ok=x guards=true", crash: noResponse),
        Trap(name: "trailers-folded", fetchKit: wholeBody + " trailers=x-a=1 guards=true", crash: noResponse),
        Trap(name: "trailers-cookie", fetchKit: wholeBody + " trailers=set-cookie=😀😀😀= guards=true", crash: cookieIndex),
        Trap(name: "trailers-endless", fetchKit: "error kind=invalidResponse description=http://127.0.0.1:PORT/t sent more than 65536 bytes of trailer fields",
             crash: noResponse),
        Trap(name: "redirect-then-trailers", fetchKit: wholeBody + " trailers=x-after=redirect guards=true", crash: noResponse),
        Trap(name: "redirect-with-trailers", fetchKit: wholeBody + " trailers= guards=true", crash: noResponse),
        Trap(name: "huge-content-length",
             fetchKit: "error kind=invalidResponse description=http://127.0.0.1:PORT/s sent a Content-Length (9223372036854775807) larger than any body can be.",
             crash: "Illegal instruction"),
        Trap(name: "redirect-ipv6-scheme-relative", fetchKit: "error kind=transport description=http://[::1]:9/final failed (URLError -1000)",
             crash: "Invalid URL"),
        Trap(name: "redirect-space-scheme-relative", fetchKit: "error kind=transport description=http://a%20b/final failed (URLError -1000)",
             crash: "Invalid URL"),
        Trap(name: "cookie-name-emoji", fetchKit: wholeBody + " trailers= guards=true", crash: cookieIndex),
        Trap(name: "cookie-attribute-emoji", fetchKit: wholeBody + " trailers= guards=true", crash: cookieIndex),
    ]

    @Test(arguments: traps)
    func fetchKitSurvivesWhatEndsAPlainURLSession(_ trap: Trap) async throws {
        let plain = try ChildProcess("FramingProbe", [trap.name, "urlsession"], environment: Self.noBacktrace)
        let (plainEnding, plainOut, plainErr) = try await plain.finish()
        // SIGILL from the trap (SIGSEGV under ThreadSanitizer, whose handler takes it first).
        #expect(Self.crashed(plainEnding), "a plain URLSession no longer crashes on \(trap.name) (\(plainEnding)): \(plainOut)")
        if trap.crash != "Illegal instruction" {
            #expect(plainErr.contains(trap.crash), "\(plainErr.suffix(1500))")
        }

        let fetchKit = try ChildProcess("FramingProbe", [trap.name, "fetchkit"], environment: Self.noBacktrace)
        let (ending, stdout, stderr) = try await fetchKit.finish()
        #expect(ending == .exit(0), "FetchKit's process ended by \(ending): \(stdout)\(stderr.suffix(2000))")
        #expect(Self.portless(stdout).hasPrefix(trap.fetchKit), "\(stdout)")
    }

    /// Valid and invalid status lines and field lines that FoundationNetworking misreads or
    /// refuses with "Failed writing header": what a plain URLSession says, and what FetchKit says.
    struct Misread: CustomTestStringConvertible, Sendable {
        let name: String
        let plain: String
        let fetchKit: String
        var testDescription: String { name }
    }

    static let misreads: [Misread] = [
        // RFC 9112 §4: the reason phrase may be empty, and so may the space before it be missing.
        Misread(name: "no-reason-phrase", plain: "error kind=-1 description=Failed writing header", fetchKit: wholeBody),
        Misread(name: "empty-reason-phrase", plain: wholeBody, fetchKit: wholeBody),
        // §2.3: the protocol name is case-sensitive; a plain URLSession took it for a 200.
        Misread(name: "wrong-case", plain: wholeBody,
                fetchKit: "error kind=invalidResponse description=http://127.0.0.1:PORT/s sent a response that is not HTTP: "
                    + "the status line \"Http/1.1 200 OK\" does not start with HTTP/ in capitals"),
        // §4: a client ignores the reason phrase; one with a control character is dropped.
        Misread(name: "control-in-reason", plain: wholeBody, fetchKit: wholeBody),
        // §2.2: a recipient may take a bare LF for a line's end; §5: no whitespace is needed after the colon.
        Misread(name: "bare-lf", plain: "error kind=-1 description=Failed writing header", fetchKit: wholeBody),
        Misread(name: "no-space-after-colon", plain: "error kind=-1 description=Failed writing header", fetchKit: wholeBody),
        Misread(name: "empty-field-name", plain: "error kind=-1 description=Failed writing header",
                fetchKit: "error kind=invalidResponse description=http://127.0.0.1:PORT/s sent a response head that cannot be read: a field has no name."),
        Misread(name: "non-utf8-field", plain: "error kind=-1 description=Failed writing header",
                fetchKit: "error kind=invalidResponse description=http://127.0.0.1:PORT/s sent a response head that cannot be read: the field \"X-Name\" is not UTF-8."),
        // Interim heads are not the response.
        Misread(name: "interim", plain: wholeBody, fetchKit: wholeBody + " trailers= guards=true"),
    ]

    @Test(arguments: misreads)
    func statusAndFieldLinesReadAsRFC9112Says(_ misread: Misread) async throws {
        let (plainStatus, plainOut, _) = try await runTool("FramingProbe", [misread.name, "urlsession"])
        #expect(plainStatus == 0)
        #expect(plainOut.hasPrefix(misread.plain), "a plain URLSession now says: \(plainOut)")
        let (status, stdout, stderr) = try await runTool("FramingProbe", [misread.name, "fetchkit"])
        #expect(status == 0, "\(stderr.suffix(2000))")
        #expect(Self.portless(stdout).hasPrefix(misread.fetchKit), "\(stdout)")
    }

    /// Where the filter cannot be installed the session says so, and it is true: trailers still
    /// end the process there.
    @Test func aSessionWithItsOwnURLCacheSaysItDoesNotGuardAndDoesNot() async throws {
        let (status, stdout, _) = try await runTool("FramingProbe", ["plain", "own-url-cache"])
        #expect(status == 0)
        #expect(stdout.hasPrefix(Self.wholeBody + " trailers= guards=false"), "\(stdout)")
        let unguarded = try ChildProcess("FramingProbe", ["trailers", "own-url-cache"], environment: Self.noBacktrace)
        let (ending, _, stderr) = try await unguarded.finish()
        #expect(Self.crashed(ending), "\(stderr.suffix(1500))")
    }

    /// A crashing child prints its fatal error and dies at once: the Swift runtime's backtracer
    /// would symbolicate each crash for seconds of CPU, starving the timing-sensitive tests
    /// that run beside this suite.
    static let noBacktrace = ["SWIFT_BACKTRACE": "enable=no"]

    /// Whether a process ended by a signal (a crash), not by exiting.
    static func crashed(_ ending: ChildProcess.Ending) -> Bool {
        if case .signal = ending { return true }
        return false
    }

    /// The probe's output with the server's port replaced by `PORT`.
    static func portless(_ line: String) -> String {
        line.replacingOccurrences(of: #"127\.0\.0\.1:[0-9]+"#, with: "127.0.0.1:PORT", options: .regularExpression)
    }
}
#endif

@Suite("Response head filter", .timeLimit(.minutes(3)))
struct ResponseHeadFilterTests {
    /// Feeds `lines` as libcurl would (counting the head bytes it handed over), and returns each
    /// verdict.
    static func feed(_ lines: [String], into filter: inout ResponseHeadFilter, headerSize: inout Int,
                     contentLength: Double = -1, scheme: String? = "http") -> [ResponseHeadFilter.Verdict] {
        var verdicts: [ResponseHeadFilter.Verdict] = []
        for line in lines {
            let bytes = Array(line.utf8)
            let verdict = bytes.withUnsafeBytes { filter.take($0, headerSize: headerSize, contentLength: contentLength) { scheme } }
            verdicts.append(verdict)
            // libcurl counts every head line it hands over, never a trailer.
            if filter.phase != .trailers || line == "\r\n" { headerSize += bytes.count }
        }
        return verdicts
    }

    static func verdicts(_ lines: [String], contentLength: Double = -1) -> ([ResponseHeadFilter.Verdict], ResponseHeadFilter) {
        var filter = ResponseHeadFilter()
        var size = 0
        let verdicts = feed(lines, into: &filter, headerSize: &size, contentLength: contentLength)
        return (verdicts, filter)
    }

    @Test func theFinalHeadPassesAndTrailersAreKeptAside() {
        let (verdicts, filter) = Self.verdicts(["HTTP/1.1 200 OK\r\n", "Transfer-Encoding: chunked\r\n", "\r\n",
                                                "X-Sum: 1\r\n", "x-sum: 2\r\n", "Grpc-Status: 0\r\n"])
        #expect(verdicts == [.pass, .pass, .pass, .drop, .drop, .drop])
        #expect(filter.trailers == ["x-sum": "1, 2", "grpc-status": "0"])
        #expect(filter.failure == nil)
    }

    @Test func interimHeadsNeverPass() {
        let (verdicts, _) = Self.verdicts(["HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 103 Early Hints\r\n", "Link: </a>\r\n", "\r\n",
                                           "HTTP/1.1 204 No Content\r\n", "\r\n"])
        #expect(verdicts == [.drop, .drop, .drop, .drop, .drop, .pass, .pass])
    }

    @Test func aSwitchingProtocolsNobodyAskedForIsFinalAsForLibcurl() {
        let (verdicts, filter) = Self.verdicts(["HTTP/1.1 101 Switching Protocols\r\n", "\r\n"])
        #expect(verdicts == [.pass, .pass])
        #expect(filter.phase == .trailers)
    }

    @Test func aNewTransferOnTheSameHandleStartsAgain() {
        var filter = ResponseHeadFilter()
        var size = 0
        _ = Self.feed(["HTTP/1.1 302 Found\r\n", "Location: /b\r\n", "\r\n", "X-T: 1\r\n"], into: &filter, headerSize: &size)
        #expect(filter.trailers == ["x-t": "1"])
        // libcurl starts counting again for the redirect's transfer.
        size = 0
        let verdicts = Self.feed(["HTTP/1.1 200 OK\r\n", "\r\n"], into: &filter, headerSize: &size)
        #expect(verdicts == [.pass, .pass])
        #expect(filter.trailers == [:])
    }

    @Test func aLineAfterTheHeadWithTheCountOfAnotherTransferIsAStatusLine() {
        // A proxy's CONNECT answer is counted by libcurl but not handed over (suppressed): the
        // response's first line arrives with a count this transfer did not expect.
        var filter = ResponseHeadFilter()
        var size = 0
        _ = Self.feed(["HTTP/1.1 301 Moved\r\n", "\r\n"], into: &filter, headerSize: &size)
        size = 39
        #expect(Self.feed(["HTTP/1.1 200 OK\r\n"], into: &filter, headerSize: &size) == [.pass])
    }

    @Test(arguments: [
        ("HTTP/1.1 200 OK", true), ("HTTP/1.0 404 Not Found", true), ("HTTP/2 200 ", true), ("HTTP/1.1 999 Whatever", true),
        ("HTTP/1.1 200", true), ("HTTP/1.1 200 \u{80}\u{FF}", true),
        ("Http/1.1 200 OK", false), ("HTTP/1.1 20 OK", false), ("HTTP/1.1 2000 OK", false), ("HTTP/1.1 abc OK", false),
        ("HTTP/1.1  200 OK", false), ("HTTP/1.1 099 Low", false), ("HTTP/x 200 OK", false), ("HTTP/1. 200 OK", false),
        ("HTTP/1.1 200 O\u{0}K", true), ("ICY 200 OK", false), ("", false),
    ])
    func statusLinesAreCheckedAsRFC9112Says(line: String, valid: Bool) {
        let bytes = Array(line.utf8)
        let result = bytes.withUnsafeBytes { StatusLine.check($0[...]) }
        if case .success = result { #expect(valid, "\(line) was accepted") } else { #expect(!valid, "\(line) was refused: \(result)") }
    }

    @Test func aValidStatusLineWithoutItsReasonPhrasePassesWithTheSpaceFoundationNeeds() {
        let (verdicts, _) = Self.verdicts(["HTTP/1.1 200\r\n"])
        #expect(verdicts == [.passRewritten(Array("HTTP/1.1 200 \r\n".utf8))])
    }

    @Test func aReasonPhraseWithControlCharactersGoesNoFurther() {
        let (verdicts, _) = Self.verdicts(["HTTP/1.1 503 \u{1B}[31mDown\r\n"])
        #expect(verdicts == [.passRewritten(Array("HTTP/1.1 503 \r\n".utf8))])
    }

    @Test func aMalformedStatusLineRefusesTheTransferAndSaysWhy() {
        let (verdicts, filter) = Self.verdicts(["HTTP/1.1 2O0 OK\r\n", "Content-Length: 0\r\n"])
        #expect(verdicts == [.refuse, .refuse])
        #expect(filter.failure == .malformedStatusLine(#"the status line "HTTP/1.1 2O0 OK" has no three-digit status code"#))
    }

    @Test func trailersPastTheLimitRefuseTheTransfer() {
        let big = "X-Pad: " + String(repeating: "p", count: 4000) + "\r\n"
        let (verdicts, filter) = Self.verdicts(["HTTP/1.1 200 OK\r\n", "\r\n"] + Array(repeating: big, count: 17))
        #expect(verdicts.prefix(2) == [.pass, .pass])
        #expect(verdicts.last == .refuse)
        #expect(filter.failure == .trailersTooLarge(ResponseHeadFilter.maximumTrailerBytes))
        #expect(filter.trailers.isEmpty)
    }

    @Test func aSchemeRelativeLocationIsMadeAbsolute() {
        let (verdicts, _) = Self.verdicts(["HTTP/1.1 302 Found\r\n", "location:  //[::1]:8080/x\r\n", "Location: /relative\r\n"])
        #expect(verdicts == [.pass, .passRewritten(Array("location: http://[::1]:8080/x\r\n".utf8)), .pass])
    }

    @Test func aCookieWithANonASCIINameIsIgnoredAndOthersPass() {
        let (verdicts, _) = Self.verdicts(["HTTP/1.1 200 OK\r\n", "Set-Cookie: 😀=1\r\n", "set-cookie: a=b; Päth=/\r\n",
                                           "Set-Cookie: a=😀; Path=/\r\n"])
        #expect(verdicts == [.pass, .drop, .drop, .pass])
    }

    @Test func fieldLinesAreHandedOverAsFoundationCanParseThem() {
        let (verdicts, _) = Self.verdicts(["HTTP/1.1 200 OK\n", "A:b\r\n", "C: d\n", " folded\n", "  \r\n", "\n"])
        #expect(verdicts == [.passRewritten(Array("HTTP/1.1 200 OK\r\n".utf8)), .passRewritten(Array("A: b\r\n".utf8)),
                             .passRewritten(Array("C: d\r\n".utf8)), .passRewritten(Array(" folded\r\n".utf8)), .drop,
                             .passRewritten(Array("\r\n".utf8))])
    }

    @Test func aContentLengthFoundationCannotConvertRefusesTheTransfer() {
        let (verdicts, filter) = Self.verdicts(["HTTP/1.1 200 OK\r\n", "Content-Length: 9223372036854775807\r\n"],
                                               contentLength: Double(Int64.max))
        #expect(verdicts == [.refuse, .refuse])
        #expect(filter.failure == .contentLengthTooLarge("9223372036854775807") || filter.failure == .contentLengthTooLarge("9223372036854775808"))
        // The largest length that converts passes.
        let (fits, _) = Self.verdicts(["HTTP/1.1 200 OK\r\n"], contentLength: 9_223_372_036_854_774_784)
        #expect(fits == [.pass])
    }

    #if os(Linux)
    /// Every task of a session gets a filter, and gives it back when it completes: none is left
    /// after many fetches.
    @Test func filtersAreForgottenWhenTheirTasksComplete() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let session = FetchSession()
        #expect(session.guardsResponseHeads)
        let queue = FetchQueue(maximumConcurrentTransfers: 8)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<64 {
                group.addTask {
                    let operation = FetchOperation<Data>(url: server.url("/bytes/\(index)"))
                    operation.configuration.session = session
                    _ = try await queue.fetch(operation)
                }
            }
            try await group.waitForAll()
        }
        #expect(session.taskOptions?.headFilterCount == 0)
    }
    #endif
}
