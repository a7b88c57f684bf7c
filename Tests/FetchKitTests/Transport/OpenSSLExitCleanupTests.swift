import Foundation
import FoundationNetworkingShims
import Testing
@testable import FetchKit

/// OpenSSL's exit-time cleanup is off in any process that loads FetchKit (Linux, OpenSSL 1.1.1
/// or later): its `atexit` handler races with URLSession objects released at exit
/// (swift-corelibs-foundation #5469).
@Suite("OpenSSL's exit cleanup", .timeLimit(.minutes(3)))
struct OpenSSLExitCleanupTests {
    #if os(Linux)
    @Test func thisProcessHasItOff() throws {
        let version = try #require(OpenSSLExitCleanup.openSSLVersionNumber, "libcurl here uses OpenSSL")
        #expect(version >= 0x1010_1000)
        #expect(OpenSSLExitCleanup.current == .disabled)
        #expect(OpenSSLExitCleanup.openSSLWasCleanedUp == false)
    }

    /// Without FetchKit's step, OpenSSL registers its handler when the first URLSession
    /// initialises libcurl, after the probe's own: it then runs first, and the probe's handler
    /// finds OpenSSL cleaned up.
    @Test func noOpenSSLHandlerRunsAtExitAfterAFetch() async throws {
        let child = try ChildProcess("ExitCleanupProbe", [])
        let (ending, stdout, stderr) = try await child.finish(timeout: 40)
        #expect(ending == .exit(0), "\(stdout)\(stderr)")
        let lines = Set(stdout.split(separator: "\n").map(String.init))
        #expect(lines.contains("state=disabled"), "\(stdout)")
        #expect(lines.contains("fetched=100"), "\(stdout)")
        #expect(lines.contains("cleaned-before-exit-handler=false"), "\(stdout)")
    }
    #endif
}
