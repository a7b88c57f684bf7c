import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FoundationNetworkingShims
import Testing
@testable import FetchKit

/// ``FetchSession/workarounds``: what is in effect for a session, and why not where it is not.
@Suite("A session's report of its workarounds", .timeLimit(.minutes(3)))
struct FetchSessionReportTests {
    #if canImport(FoundationNetworking)
    @Test func aDefaultSessionHasEveryWorkaroundThatApplies() {
        let session = FetchSession()
        defer { session.invalidate() }
        let report = session.workarounds
        for id in ["socket-wakeups", "connection-pool", "task-options", "response-heads", "bandwidth-wire",
                   "redirects-in-new-tasks", "timeouts", "cookies-sent", "cookies-stored"] {
            #expect(report[id]?.status == .active, "\(id): \(report)")
        }
        // By the toolchain's version (``ToolchainFixes``): fixed upstream, not needed.
        #if compiler(>=6.3.2)
        #expect(report["challenge-decline"]?.status.isActive == false, "\(report)")
        #else
        #expect(report["challenge-decline"]?.status == .active, "\(report)")
        #endif
        #if compiler(>=6.4)
        #expect(report["openssl-exit"]?.status.isActive == false, "\(report)")
        #else
        #expect(report["openssl-exit"]?.status == .active, "\(report)")
        #endif
        #expect(report["trust-settings"]?.status == .notNeeded("this session has no trust settings"))
        #expect(report.summary.hasPrefix("active: socket-wakeups, connection-pool, task-options, response-heads, "), "\(report.summary)")
        #expect(report.description.split(separator: "\n").count == report.entries.count)
        #expect(Set(report.entries.map(\.id)).count == report.entries.count, "names are unique")
        for entry in report.entries {
            #expect(entry.dependsOn.allSatisfy { id in report[id] != nil }, "\(entry.id) depends on what the report has")
        }
    }

    @Test func aConfigurationWithItsOwnCacheSaysWhatItLosesAndWhy() {
        let configuration = FetchSession.defaultConfiguration()
        configuration.urlCache = URLCache(memoryCapacity: 0, diskCapacity: 0, diskPath: nil)
        let session = FetchSession(configuration: configuration)
        defer { session.invalidate() }
        let report = session.workarounds
        guard case .unavailable(let reason)? = report["task-options"]?.status else {
            Issue.record("\(report)")
            return
        }
        #expect(reason.contains("urlCache"))
        #expect(report["response-heads"]?.status == .unavailable("needs task-options, which is not active"))
        #expect(report["bandwidth-wire"]?.status == .unavailable("needs task-options, which is not active"))
        #expect(report["socket-wakeups"]?.status == .active, "a fix that does not need the slot stays")
        #expect(!session.guardsResponseHeads && !session.enforcesConnectTimeouts)
        // FoundationNetworking keeps storing cookies itself; FetchKit still sends them right.
        guard case .unavailable(let cookies)? = report["cookies-stored"]?.status else {
            Issue.record("\(report)")
            return
        }
        #expect(cookies.contains("urlCache"))
        #expect(report["cookies-sent"]?.status == .active)
    }

    /// A configuration that neither sends nor accepts cookies: nothing to fix.
    @Test func aSessionWithoutCookiesNeedsNoCookieFix() {
        let configuration = FetchSession.defaultConfiguration()
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        let session = FetchSession(configuration: configuration)
        defer { session.invalidate() }
        let report = session.workarounds
        #expect(report["cookies-sent"]?.status == .notNeeded("the configuration sends no cookies"), "\(report)")
        #expect(report["cookies-stored"]?.status == .notNeeded("the configuration accepts no cookies"), "\(report)")
    }

    /// A session where the socket fix could not be installed (as in a stripped library): the
    /// report says so, and the bandwidth meter that needs it says which fix it lacks.
    @Test func aFixThatCouldNotBeInstalledIsReportedWithItsDependents() async throws {
        let session = FetchSession(configuration: FetchSession.defaultConfiguration(), monitors: [], quietsWaitingSockets: false)
        defer { session.invalidate() }
        let report = session.workarounds
        guard case .unavailable(let reason)? = report["socket-wakeups"]?.status else {
            Issue.record("\(report)")
            return
        }
        #expect(reason.contains("not found"), "\(reason)")
        #expect(report["bandwidth-wire"]?.status == .unavailable("needs socket-wakeups, which is not active"))
        #expect(report.summary.contains("socket-wakeups (unavailable: "), "\(report.summary)")
    }
    #endif

    @Test func aDependentOfAMissingFixIsUnavailableNamingIt() {
        let report = FetchSessionReport([
            .init(id: "a", summary: "", upstream: "", dependsOn: [], status: .unavailable("gone")),
            .init(id: "b", summary: "", upstream: "", dependsOn: ["a"], status: .active),
            .init(id: "c", summary: "", upstream: "", dependsOn: ["b"], status: .active),
            .init(id: "d", summary: "", upstream: "", dependsOn: [], status: .notNeeded("no")),
        ])
        #expect(report["b"]?.status == .unavailable("needs a, which is not active"))
        #expect(report["c"]?.status == .unavailable("needs b, which is not active"))
        #expect(report["d"]?.status == .notNeeded("no"))
        #expect(report.summary == "active: none; a (unavailable: gone); b (unavailable: needs a, which is not active); "
                + "c (unavailable: needs b, which is not active); d (not needed: no)")
    }
}
