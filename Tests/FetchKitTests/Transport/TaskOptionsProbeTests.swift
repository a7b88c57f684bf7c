import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import FetchKit

#if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
/// The probe a ``FetchSession`` runs before its first task proves that each task's libcurl handle
/// takes FetchKit's options. It must not rely on `URLSessionTask.cancel()` asking the URL cache
/// before it returns: from Swift 6.4 (swift-corelibs-foundation #5417) `cancel()` does its work
/// in a `workQueue.async`. These tests stand in for that toolchain by cancelling the probe's
/// task later, from another thread.
@Suite("The task-options probe", .timeLimit(.minutes(3)))
struct TaskOptionsProbeTests {
    private func session(with hook: CurlTaskOptions) -> URLSession {
        let configuration = FetchSession.defaultConfiguration()
        configuration.urlCache = hook
        return URLSession(configuration: configuration)
    }

    @Test func aCancelThatAsksTheCacheLaterStillProvesThePath() throws {
        let hook = try CurlTaskOptions(trust: TrustSettings())
        let urlSession = session(with: hook)
        defer { urlSession.invalidateAndCancel() }
        // As 6.4's cancel(): the protocol is made (and the cache asked) after cancel() returned.
        let failure = hook.probe(urlSession) { task in
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { task.cancel() }
        }
        #expect(failure == nil, "\(failure ?? "")")
        #expect(hook.probeFailure == nil)
        #expect(hook.guardsResponseHeads)
    }

    @Test func aTrustedSessionIsMadeWhenTheCancelIsLate() throws {
        var trust = TrustSettings()
        try trust.pinPublicKeys([Data(count: 32).base64EncodedString()], forHost: "pinned.invalid")
        let hook = try CurlTaskOptions(trust: trust)
        let urlSession = session(with: hook)
        defer { urlSession.invalidateAndCancel() }
        let failure = hook.probe(urlSession) { task in
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { task.cancel() }
        }
        #expect(failure == nil, "a pinned session must not be refused for a late cancel: \(failure ?? "")")
    }

    @Test func aCacheNeverAskedIsAFailureThatSaysSoAfterTheDeadline() throws {
        let hook = try CurlTaskOptions(trust: TrustSettings())
        let urlSession = session(with: hook)
        defer { urlSession.invalidateAndCancel() }
        let started = Date()
        // A layout that never asks the cache: the task is never cancelled, so nothing is made.
        let failure = hook.probe(urlSession, deadline: 0.5) { _ in }
        #expect(Date().timeIntervalSince(started) >= 0.45, "it waited for the answer")
        #expect(failure?.contains("did not ask the session's URL cache") == true, "\(failure ?? "nil")")
        #expect(hook.probeFailure == failure)
    }

    @Test func theSessionsOwnProbeProvesThePathOnThisToolchain() throws {
        #expect(FetchSession().enforcesConnectTimeouts)
        #expect(FetchSession().guardsResponseHeads)
    }
}
#endif
