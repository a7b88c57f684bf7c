import Foundation
import FoundationNetworkingShims
import FetchKitTesting
import Testing
@testable import FetchKit

/// A session keeps its connections through a lull: the transfers that follow a quiet spell
/// reuse the connections that an earlier burst opened, instead of opening new ones.
///
/// Under FoundationNetworking, libcurl's connection cache holds at most four connections per
/// transfer *in flight* unless told otherwise, so without a fixed bound a spell with one
/// transfer at a time closed all but four, and every later burst reconnected (see
/// ``FetchSession/defaultConfiguration()``).
@Suite("Connection pool of a session", .timeLimit(.minutes(3)))
struct ConnectionPoolTests {
    /// The server holds every `/held` response at a gate until `burst` requests are in, so each
    /// burst has `burst` connections open at once.
    private static let burst = 8

    @Test func connectionsOfABurstSurviveASpellOfOneTransferAtATime() throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let gate = Locked(TestGate())
        server.route("/held") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "2"]),
                     .wait(for: gate.current), .write(Data("ok".utf8))])
        }
        let session = FetchSession()
        defer { session.invalidate() }

        // Given a burst that opened `burst` connections,
        try heldBurst(server, session, gate)
        #expect(server.counters.connectionsAccepted == Self.burst)

        // when a dozen fetches then run one at a time (one transfer in flight),
        for index in 0..<12 {
            let fetch = FetchOperation<Data>(url: server.url("/bytes/16?n=\(index)"))
            fetch.configuration.session = session
            fetch.start()
            #expect(fetch.waitUntilFinished(timeout: 30))
            #expect(fetch.error == nil)
        }

        // then another burst reuses the connections of the first: none is opened.
        gate.withLock { $0 = TestGate() }
        try heldBurst(server, session, gate)
        #expect(server.counters.connectionsAccepted == Self.burst,
                "a burst after a quiet spell reconnected instead of reusing the pool")
    }

    /// The pool's size is set through FoundationNetworking's internals (it has no setting):
    /// a toolchain whose layout differs must fail here, not silently lose the bound.
    @Test func thePoolSizeReachesLibcurl() {
        #if os(Linux)
        let session = URLSession(configuration: .default)
        defer { session.invalidateAndCancel() }
        #expect(FetchSession.fixConnectionPoolSize(of: session, to: FetchSession.connectionPoolSize))
        #endif
    }

    /// Starts `burst` fetches of `/held`, opens the gate once all are at the server, and waits
    /// for them to finish.
    private func heldBurst(_ server: TestServer, _ session: FetchSession, _ gate: Locked<TestGate>) throws {
        let fetches = (0..<Self.burst).map { index in
            let fetch = FetchOperation<Data>(url: server.url("/held?n=\(index)"))
            fetch.configuration.session = session
            return fetch
        }
        for fetch in fetches { fetch.start() }
        let arrived = server.blockingWait(timeout: 30) { $0.requestsInFlight == Self.burst }
        gate.current.open()
        try #require(arrived, "the burst's requests did not all reach the server")
        for fetch in fetches {
            #expect(fetch.waitUntilFinished(timeout: 30))
            #expect(fetch.error == nil)
        }
    }
}
