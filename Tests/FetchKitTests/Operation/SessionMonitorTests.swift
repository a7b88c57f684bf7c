import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Monitors given to a ``FetchSession`` hear every fetch that uses it: one started on its own or
/// by a plain `OperationQueue` (which no ``FetchQueue`` reports), and one in a queue alike.
@Suite("Event monitors of a session", .timeLimit(.minutes(3)))
struct SessionMonitorTests {
    /// An operation that uses a new session with `monitors`; the session is invalidated by the
    /// caller.
    private func operation(_ server: TestServer, _ path: String, session: FetchSession) -> FetchOperation<Data> {
        let operation = FetchOperation<Data>(url: server.url(path))
        operation.configuration.session = session
        return operation
    }

    @Test func aCancelWhileAnAttemptIsSetUpIsReportedAfterTheSetup() async throws {
        // The attempt's record and its monitors' "started" come before the finish: nothing of
        // the attempt happens after the operation finished.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let detail = DetailRecorder()
        let session = FetchSession(monitors: [detail])
        defer { session.invalidate() }
        let fetch = CancelledWhileItsAttemptIsSetUp(request: URLRequest(url: server.url("/json")))
        fetch.configuration.session = session
        let attemptsAtFinish = Locked(-1)
        fetch.addCompletionHandler(on: .immediate) { finished in attemptsAtFinish.withLock { $0 = finished.attempts } }
        fetch.start()
        await #expect(throws: FetchError.self) { try await fetch.finished() }
        #expect(await eventsDrain(session))
        #expect(fetch.finishedDuringSetup.current == false, "it finished while its attempt was set up")
        #expect(detail.lines.current == ["enqueued", "started /json", "metrics", "failed 0"])
        // Nothing reached the network: no attempt counts (``AnyFetchOperation/attempts``).
        #expect(attemptsAtFinish.current == 0)
        #expect(fetch.attempts == 0)
        #expect(server.requests("/json").count == 0, "nothing was sent")
    }

    @Test func anOperationInAPlainOperationQueueIsObservedInOrder() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let detail = DetailRecorder()
        let session = FetchSession(monitors: [detail])
        defer { session.invalidate() }
        let fetch = operation(server, "/redirect-to?url=/flaky/alone/1/503", session: session)
        fetch.configuration.retryPolicy = EventMonitorTests.quick
        OperationQueue().addOperation(fetch)
        let body = try await fetch.value
        #expect(await eventsDrain(session))
        #expect(detail.lines.current == [
            "enqueued",
            "started /redirect-to",
            "redirected 302 /redirect-to -> /flaky/alone/1/503",
            "retry 2 after 503",
            "redirected 302 /redirect-to -> /flaky/alone/1/503",
            "response 200",
            "metrics",
            "finished",
        ])
        let metrics = try #require(detail.metrics.current.first)
        #expect(metrics.attempts == 2)
        #expect(metrics.bytesReceived == Int64(body.count))
        #expect(metrics.bytesSent == 0)
        let firstByte = try #require(metrics.timeToFirstByte)
        #expect(firstByte >= 0.05, "the retry's wait comes before the first accepted head")
        #expect(metrics.queueWait + firstByte <= metrics.totalDuration)
    }

    @Test func anOperationCancelledBeforeItsStartIsHeardOfOnceAndNeverStarts() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let detail = DetailRecorder()
        let recorder = EventRecorder()
        let session = FetchSession(monitors: [recorder, detail])
        defer { session.invalidate() }
        let fetch = operation(server, "/json", session: session)
        fetch.cancel()
        fetch.start()
        #expect(fetch.isFinished)
        #expect(await eventsDrain(session))
        #expect(recorder.events.current.map(\.kind) == [.enqueue, .metrics, .finish])
        #expect(detail.lines.current.last == "failed 0")
        #expect(detail.metrics.current.first?.attempts == 0)
        #expect(detail.metrics.current.first?.timeToFirstByte == nil)
        #expect(server.requests("/json").count == 0)
    }

    @Test func aFetchWhoseDependencyFailedIsHeardOfWithoutAStart() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let session = FetchSession(monitors: [recorder])
        defer { session.invalidate() }
        let login = operation(server, "/status/401", session: session)
        let profile = operation(server, "/json", session: session)
        profile.addDependency(login)
        let runner = OperationQueue()
        runner.addOperation(login)
        runner.addOperation(profile)
        await #expect(throws: FetchError.self) { try await profile.value }
        // The profile may end before the login's last events are sent: an OperationQueue starts
        // a dependent as it hears isFinished, and a fetch tells its monitors after that.
        await #expect(throws: FetchError.self) { try await login.value }
        #expect(await eventsDrain(session))
        let byID = Dictionary(grouping: recorder.events.current, by: \.id).mapValues { $0.map(\.kind) }
        #expect(byID.values.sorted { $0.count > $1.count } == [
            [.enqueue, .start, .metrics, .finish],   // the login: a 401 head is not an accepted one
            [.enqueue, .metrics, .finish],                      // the profile, never sent
        ])
        #expect(server.requests("/json").count == 0)
    }

    @Test func aQueuedFetchIsHeardByItsQueueAndItsSessionAlike() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let sessionRecorder = EventRecorder()
        let session = FetchSession(monitors: [sessionRecorder])
        defer { session.invalidate() }
        let queue = makeFetchQueue()
        let queueRecorder = try #require(queue.recorder)
        let ids = ["/redirect/1", "/status/404", "/bytes/100"].map { path in
            queue.enqueue(operation(server, path, session: session))
        }
        #expect(await queueIsEmpty(queue))
        #expect(await eventsDrain(queue))
        #expect(await eventsDrain(session))
        for id in ids {
            #expect(sessionRecorder.kinds(for: id) == queueRecorder.kinds(for: id), "\(id)")
            #expect(sessionRecorder.kinds(for: id).first == .enqueue && sessionRecorder.kinds(for: id).last == .finish)
        }
        #expect(sessionRecorder.events.current.count == queueRecorder.events.current.count)
    }

    @Test func eachOperationsEventsStayInOrderUnderConcurrency() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let session = FetchSession(monitors: [recorder])
        defer { session.invalidate() }
        let runner = OperationQueue()
        runner.maxConcurrentOperationCount = 8
        let count = 120
        let operations = (0..<count).map { index in
            operation(server, index % 3 == 0 ? "/redirect/1?n=\(index)" : "/bytes/\(index * 10)?n=\(index)", session: session)
        }
        for fetch in operations { runner.addOperation(fetch) }
        for fetch in operations { _ = try await fetch.value }
        #expect(await eventsDrain(session))
        let byID = Dictionary(grouping: recorder.events.current, by: \.id).mapValues { $0.map(\.kind) }
        #expect(byID.count == count, "one identifier per operation")
        let redirected: [EventRecorder.Kind] = [.enqueue, .start, .redirect, .response, .metrics, .finish]
        let direct: [EventRecorder.Kind] = [.enqueue, .start, .response, .metrics, .finish]
        #expect(byID.values.filter { $0 == redirected }.count == count / 3)
        #expect(byID.values.filter { $0 == direct }.count == count - count / 3)
    }

    /// A suspended queue that its owner lets go of cancels what it holds without its own
    /// monitors (they go with it); the session's monitors, which do not, still hear the end.
    @Test func aSessionsMonitorsHearTheEndOfAFetchItsDroppedQueueCancelled() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let recorder = EventRecorder()
        let session = FetchSession(monitors: [recorder])
        defer { session.invalidate() }
        let fetch = operation(server, "/json", session: session)
        do {
            let queue = FetchQueue()
            queue.isSuspended = true
            queue.enqueue(fetch, on: .global) { _ in }
        }
        _ = try? await fetch.value
        #expect(fetch.isCancelled)
        #expect(await eventsDrain(session))
        #expect(recorder.events.current.map(\.kind) == [.enqueue, .metrics, .finish])
        #expect(recorder.metrics.current.values.first?.attempts == 0)
    }

    @Test func aSessionWithoutMonitorsQueuesNothing() {
        #expect(FetchSession().monitorChannel == nil)
        #expect(FetchSession.shared.monitors.isEmpty)
    }
}

/// Cancels itself while its attempt is set up, and records whether it had finished by then.
private final class CancelledWhileItsAttemptIsSetUp: FetchOperation<Data>, @unchecked Sendable {
    let finishedDuringSetup = Locked<Bool?>(nil)

    override func prepareAttempt(_ request: URLRequest, attempt: Int) -> AttemptSetup {
        cancel()
        finishedDuringSetup.withLock { $0 = isFinished }
        return super.prepareAttempt(request, attempt: attempt)
    }
}
