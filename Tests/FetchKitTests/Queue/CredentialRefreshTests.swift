import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An API on a TestServer that accepts one token at a time, counts `/refresh` and
/// records each request's `Authorization` (the server records every request's headers).
private final class TokenAPI: @unchecked Sendable {
    let server: TestServer
    /// The token `/api/...` accepts (nil: none).
    let valid: Locked<String?>
    /// What `/refresh` answers: the new token, or a status.
    let refreshAnswer: Locked<Result<String, HTTPStatusAnswer>>
    /// Held until open, if set: `/refresh` waits for it before answering.
    let refreshGate: Locked<TestGate?> = Locked(nil)
    /// Counts the refused requests, so that a refresh can wait for all of them.
    let refusals: Locked<Int> = Locked(0)
    /// Counts the refresh requests as they arrive (before they are answered).
    let refreshArrivals: Locked<Int> = Locked(0)
    /// Counts the requests with the old token that arrived after the refresh request had.
    let oldTokenAfterRefresh: Locked<Int> = Locked(0)
    /// When set, a refused request is answered only once this many were refused: every fetch of
    /// a test was sent before the first `401` starts the refresh. (A fetch whose attempt begins
    /// while a refresh runs waits for it unsent, as it should; on a loaded machine one could
    /// otherwise begin after the first answer, and never be refused.)
    let refusalsHeldUntil: Locked<(count: Int, gate: TestGate)?> = Locked(nil)

    struct HTTPStatusAnswer: Error { let status: Int }

    init(valid: String?, refreshTo newToken: String) throws {
        server = try TestServer()
        self.valid = Locked(valid)
        refreshAnswer = Locked(.success(newToken))
        let api = self
        for path in (0..<60).map({ "/api/item/\($0)" }) + ["/api/upload", "/api/slow", "/api/redirect"] {
            server.route(path) { request in api.answer(request).response }
        }
        server.route("/public") { _ in .text("public") }
        server.route("/refresh") { request in
            api.refreshArrivals.withLock { $0 += 1 }
            api.server.wakeWaiters()
            api.refreshGate.withLock { $0 }?.wait(timeout: 60)
            switch api.refreshAnswer.withLock({ $0 }) {
            case .success(let token): return .text(token)
            case .failure(let answer): return .text("no", status: answer.status)
            }
        }
    }

    /// The answer to a request of `/api/...`, and its status.
    func answer(_ request: TestRequest) -> (status: Int, response: TestResponse) {
        let expected = valid.withLock { $0 }.map { "Bearer \($0)" }
        if let expected, request.header("Authorization") == expected {
            return (200, .text("ok \(request.path)"))
        }
        if request.header("Authorization") == "Bearer old", refreshArrivals.withLock({ $0 }) > 0 {
            oldTokenAfterRefresh.withLock { $0 += 1 }
        }
        let refused = refusals.withLock { count -> Int in
            count += 1
            return count
        }
        server.wakeWaiters()
        if let held = refusalsHeldUntil.withLock({ $0 }) {
            if refused >= held.count { held.gate.open() } else { held.gate.wait(timeout: 60) }
        }
        // A challenge, as real APIs send: on Linux it must not hang the fetch.
        return (401, TestResponse.text("unauthorised", status: 401).with(header: "WWW-Authenticate", "Bearer realm=\"api\""))
    }

    var refreshCount: Int { server.requests("/refresh").count }

    func authorizations(_ path: String) -> [String?] {
        server.requests(path).map { $0.header("Authorization") }
    }

    func url(_ path: String) -> URL { server.url(path) }
}

/// The app's refresh: POST /refresh with the refresh token; the body is the new access token.
private final class RefreshToken: FetchOperation<FetchCredential>, @unchecked Sendable {
    init(url: URL, refreshToken: String) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(refreshToken.utf8)
        super.init(request: request)
    }

    override func parseResponseBody(_ body: Data) throws -> FetchCredential {
        FetchCredential(token: String(decoding: body, as: UTF8.self), refreshToken: "r2")
    }
}

private struct TestAuthenticator: FetchAuthenticator {
    let refreshURL: URL
    func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential> {
        RefreshToken(url: refreshURL, refreshToken: credential.refreshToken ?? "")
    }
}

/// An API key in a header of its own, never refreshed.
private struct KeyAuthenticator: FetchAuthenticator {
    func apply(_ credential: FetchCredential, to request: inout URLRequest) {
        request.setValue(credential.token, forHTTPHeaderField: "X-Api-Key")
    }
    func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential> {
        FetchOperation<FetchCredential>(url: URL(fileURLWithPath: "/unused"))
    }
}

/// Records the refresh events the queue's monitors hear.
private final class RefreshEvents: FetchEventMonitor, @unchecked Sendable {
    let events = Locked<[CredentialRefreshEvent]>([])
    let ended: Countdown
    init(expectedEnds: Int = 1) { ended = Countdown(expectedEnds) }
    func fetch(_ fetch: MonitoredFetch, didRefreshCredential event: CredentialRefreshEvent) {
        events.withLock { $0.append(event) }
        if case .started = event { return }
        ended.signal()
    }
}

@Suite("Authenticated APIs: one refresh for any number of 401s", .timeLimit(.minutes(3)))
struct CredentialRefreshTests {
    private func setUp(valid: String? = "new", credential: FetchCredential? = FetchCredential(token: "old", refreshToken: "r1"),
                       perHost: Int = FetchQueue.defaultMaximumTransfersPerHost, total: Int = FetchQueue.defaultMaximumConcurrentTransfers,
                       name: String = #function) throws -> (TokenAPI, FetchAuthentication, FetchQueue, RefreshEvents) {
        let api = try TokenAPI(valid: valid, refreshTo: "new")
        // A refresh timeout far from any wait here: a loaded machine resumes this test's tasks
        // late (seconds, in a full run on two cores), and a refresh held for the test must not
        // end at the default 30 s meanwhile. (The timeout's own tests set theirs.)
        let authentication = FetchAuthentication(authenticator: TestAuthenticator(refreshURL: api.url("/refresh")),
                                                 credential: credential, origins: [api.server.baseURL],
                                                 refreshTimeout: 120)
        let events = RefreshEvents()
        let queue = FetchQueue(name: name, maximumConcurrentTransfers: total, maximumTransfersPerHost: perHost,
                               monitors: [events], authentication: authentication)
        return (api, authentication, queue, events)
    }

    /// Enqueues a GET of each path; returns the operations and a countdown of their completions,
    /// whose `overSignals` shows a completion delivered twice.
    private func fetchAll(_ paths: [String], _ api: TokenAPI, on queue: FetchQueue) -> ([FetchOperation<Data>], Countdown) {
        let done = Countdown(paths.count)
        let operations = paths.map { FetchOperation<Data>(url: api.url($0)) }
        for operation in operations { queue.enqueue(operation, on: .global) { _ in done.signal() } }
        return (operations, done)
    }

    private func items(_ count: Int) -> [String] { (0..<count).map { "/api/item/\($0)" } }

    /// A queue with room for `count` fetches to one host at once (and the refresh beside them),
    /// whose server answers no `401` until all `count` were refused (``TokenAPI/refusalsHeldUntil``).
    private func setUpAllRefused(_ count: Int = 10, valid: String? = "new",
                                 name: String = #function) throws -> (TokenAPI, FetchAuthentication, FetchQueue, RefreshEvents) {
        let setup = try setUp(valid: valid, perHost: count + 2, total: count + 4, name: name)
        setup.0.refusalsHeldUntil.withLock { $0 = (count, TestGate()) }
        return setup
    }

    /// Holds `/refresh` until `count` requests were refused, so that every fetch is a waiter.
    private func holdRefreshUntilRefused(_ count: Int, _ api: TokenAPI) -> TestGate {
        let gate = TestGate()
        api.refreshGate.withLock { $0 = gate }
        // Opened from a thread of its own as the count is reached: a task resumed after the wait
        // could come after the refresh's timeout on a loaded machine.
        Thread {
            api.server.blockingWait(timeout: 60) { _ in api.refusals.withLock { $0 } >= count }
            gate.open()
        }.start()
        return gate
    }

    @Test func fiftyFetchesWithAnExpiredTokenShareOneRefresh() async throws {
        let (api, authentication, queue, events) = try setUp()
        let paths = items(50)
        let (operations, done) = fetchAll(paths, api, on: queue)
        #expect(await done.wait(timeout: 60))
        #expect(done.overSignals == 0)
        #expect(operations.allSatisfy { $0.error == nil }, "\(operations.compactMap(\.error).prefix(3))")
        #expect(api.refreshCount == 1)
        for path in paths {
            let sent = api.authorizations(path)
            #expect(sent.count <= 2 && sent.last == "Bearer new", "\(path): \(sent)")
        }
        #expect(api.authorizations("/refresh") == [nil], "the refresh carries no credential")
        #expect(authentication.credential?.token == "new")
        #expect(authentication.credential?.generation == 2)
        #expect(await events.ended.wait())
        #expect(events.events.withLock { $0 } == [.started(generation: 1), .succeeded(generation: 1, newGeneration: 2)])
    }

    @Test func aLate401ForTheOldTokenIsSentAgainWithoutASecondRefresh() async throws {
        let (api, _, queue, _) = try setUp()
        let straggle = TestGate()
        api.server.route("/api/slow") { request in
            let refused = api.answer(request)
            guard refused.status == 401 else { return refused.response }
            straggle.wait(timeout: 60)
            return refused.response.delayed(milliseconds: 300)
        }
        let slow = FetchOperation<Data>(url: api.url("/api/slow"))
        let slowDone = Countdown(1)
        queue.enqueue(slow, on: .global) { _ in slowDone.signal() }
        #expect(await api.server.waitUntil(timeout: 30) { _ in api.refusals.withLock { $0 } == 1 })
        // Another fetch is refused, refreshes, and succeeds while the slow one is held.
        let (fast, fastDone) = fetchAll(["/api/item/0"], api, on: queue)
        #expect(await fastDone.wait())
        #expect(fast[0].error == nil)
        straggle.open()
        #expect(await slowDone.wait())
        #expect(slow.error == nil, "\(String(describing: slow.error))")
        #expect(api.authorizations("/api/slow") == ["Bearer old", "Bearer new"])
        #expect(api.refreshCount == 1)
    }

    @Test(arguments: [400, 401])
    func aFailedRefreshFailsEveryWaiterOnceAndLaterFetchesAtOnce(status: Int) async throws {
        let (api, authentication, queue, events) = try setUpAllRefused()
        api.refreshAnswer.withLock { $0 = .failure(.init(status: status)) }
        _ = holdRefreshUntilRefused(10, api)
        let paths = items(10)
        let (operations, done) = fetchAll(paths, api, on: queue)
        #expect(await done.wait(timeout: 60))
        #expect(done.overSignals == 0)
        for operation in operations {
            guard case .authenticationFailed(let failure)? = operation.error,
                  case .refreshFailed(let refreshError) = failure.reason else {
                Issue.record("\(String(describing: operation.error))")
                continue
            }
            #expect(refreshError.statusCode == status)
            #expect(failure.generation == 1)
            #expect(failure.url == operation.request?.url)
        }
        #expect(paths.allSatisfy { api.authorizations($0) == ["Bearer old"] }, "nothing was sent again")
        #expect(api.refreshCount == 1)
        #expect(operations[0].error?.description.contains("refreshing credential 1 failed") == true)
        // A later fetch of the same credential fails at once: no request, no refresh.
        let later = FetchOperation<Data>(url: api.url("/api/item/20"))
        guard case .authenticationFailed(let failure)? = await outcome(of: queue, later),
              case .refreshFailed = failure.reason else {
            Issue.record("\(String(describing: later.error))")
            return
        }
        #expect(api.server.requests("/api/item/20").count == 0)
        #expect(api.refreshCount == 1)
        #expect(await events.ended.wait())
        #expect(events.events.withLock { $0 }.count == 2)
        // A new credential re-arms it.
        authentication.setCredential(FetchCredential(token: "new"))
        let again = FetchOperation<Data>(url: api.url("/api/item/21"))
        #expect(await outcome(of: queue, again) == nil)
        #expect(api.authorizations("/api/item/21") == ["Bearer new"])
    }

    @Test func aServerThatRefusesTheNewTokenEndsEachFetchAfterTwoRequests() async throws {
        let (api, _, queue, _) = try setUpAllRefused(valid: nil)
        _ = holdRefreshUntilRefused(10, api)
        let paths = items(10)
        let (operations, done) = fetchAll(paths, api, on: queue)
        #expect(await done.wait(timeout: 60))
        #expect(done.overSignals == 0)
        for operation in operations {
            guard case .authenticationFailed(let failure)? = operation.error else {
                Issue.record("\(String(describing: operation.error))")
                continue
            }
            #expect(failure.reason == .refused(statusCode: 401))
        }
        #expect(paths.allSatisfy { api.authorizations($0) == ["Bearer old", "Bearer new"] })
        #expect(api.refreshCount == 1)
    }

    @Test func twoSlotsPerHostAndTenRefusalsDoNotDeadlock() async throws {
        let (api, _, queue, _) = try setUp(perHost: 2)
        let (operations, done) = fetchAll(items(10), api, on: queue)
        // A deadlock (waiters holding the two slots the refresh needs) lasts until the fetches'
        // 60 s idle timeout and fails them: every fetch must succeed, with one refresh.
        #expect(await done.wait(timeout: 120))
        #expect(operations.allSatisfy { $0.error == nil })
        #expect(api.refreshCount == 1)
        #expect(api.authorizations("/refresh") == [nil])
    }

    @Test func aCredentialAboutToExpireIsRefreshedBeforeItIsSent() async throws {
        let expired = FetchCredential(token: "old", refreshToken: "r1", expiresAt: Date(timeIntervalSinceNow: 5))
        let (api, _, queue, _) = try setUp(credential: expired)
        let paths = items(10)
        let (operations, done) = fetchAll(paths, api, on: queue)
        #expect(await done.wait(timeout: 60))
        #expect(operations.allSatisfy { $0.error == nil })
        #expect(api.refusals.withLock { $0 } == 0, "the server saw no 401")
        #expect(paths.allSatisfy { api.authorizations($0) == ["Bearer new"] })
        #expect(api.refreshCount == 1)
    }

    @Test func aRedirectToAnotherOriginDropsTheCredential() async throws {
        let (api, _, queue, _) = try setUp(credential: FetchCredential(token: "new"))
        let other = try TestServer()
        defer { other.shutDown() }
        other.route("/landing") { _ in .text("landed") }
        api.server.route("/api/redirect") { _ in
            .redirect(to: other.url("/landing").absoluteString, status: 302)
        }
        let redirected = FetchOperation<Data>(url: api.url("/api/redirect"))
        #expect(await outcome(of: queue, redirected) == nil)
        #expect(api.authorizations("/api/redirect") == ["Bearer new"])
        #expect(other.requests("/landing").map { $0.header("Authorization") } == [nil])
        // And a fetch to the other origin on the same queue carries none.
        #expect(await outcome(of: queue, FetchOperation<Data>(url: other.url("/landing"))) == nil)
        #expect(other.requests("/landing").allSatisfy { $0.header("Authorization") == nil })
    }

    @Test func cancellingOneWaiterLeavesTheRefreshAndTheOthers() async throws {
        let (api, _, queue, _) = try setUpAllRefused()
        let gate = TestGate()
        api.refreshGate.withLock { $0 = gate }
        let (operations, done) = fetchAll(items(10), api, on: queue)
        #expect(await waitForWaiters(10, api, queue))
        // An unauthenticated fetch is not held up by the refresh.
        let open = FetchOperation<Data>(url: api.url("/public"))
        open.configuration.authenticates = false
        #expect(await outcome(of: queue, open) == nil)
        #expect(api.server.requests("/public").map { $0.header("Authorization") } == [nil])
        operations[3].cancel()
        gate.open()
        #expect(await done.wait(timeout: 60))
        #expect(done.overSignals == 0)
        #expect(operations[3].error?.isCancellation == true)
        #expect(operations.enumerated().allSatisfy { $0.offset == 3 || $0.element.error == nil })
        #expect(api.refreshCount == 1)
        #expect(api.authorizations("/api/item/3") == ["Bearer old"])
    }

    @Test func cancelAllDuringTheRefreshCancelsItAndFinishesEachWaiterOnce() async throws {
        let (api, authentication, queue, events) = try setUpAllRefused()
        let gate = TestGate()
        api.refreshGate.withLock { $0 = gate }
        let paths = items(10)
        let (operations, done) = fetchAll(paths, api, on: queue)
        #expect(await waitForWaiters(10, api, queue))
        queue.cancelAll()
        #expect(await done.wait(timeout: 60))
        gate.open()
        #expect(operations.allSatisfy { $0.error?.isCancellation == true })
        #expect(await events.ended.wait())
        guard case .failed(1, let error)? = events.events.withLock({ $0.last }) else {
            Issue.record("\(events.events.withLock { $0 })")
            return
        }
        #expect(error.isCancellation)
        #expect(done.overSignals == 0)
        #expect(paths.allSatisfy { api.authorizations($0) == ["Bearer old"] })
        #expect(authentication.credential?.generation == 1)
    }

    @Test func aFetchThatWaitedForItsSlotIsSentWithTheCredentialOfItsGrant() async throws {
        let (api, authentication, queue, _) = try setUp(total: 1)
        let hold = TestGate()
        api.server.route("/hold") { _ in
            hold.wait(timeout: 60)
            return .text("held")
        }
        let holder = FetchOperation<Data>(url: api.url("/hold"))
        holder.configuration.authenticates = false
        queue.enqueue(holder, on: .global) { _ in }
        #expect(await api.server.waitUntil(timeout: 30) { $0.requestsInFlight == 1 })
        // Made with the old credential, then waiting for the one slot.
        let waiting = Countdown(1)
        let observation = queue.onTransferCountsChange(on: .global) { counts in
            if counts.waiting == 1 { waiting.signal() }
        }
        let (operations, done) = fetchAll(["/api/item/0"], api, on: queue)
        #expect(await waiting.wait())
        authentication.setCredential(FetchCredential(token: "new"))
        hold.open()
        #expect(await done.wait(timeout: 60))
        withExtendedLifetime(observation) {}
        #expect(operations[0].error == nil, "\(String(describing: operations[0].error))")
        #expect(api.authorizations("/api/item/0") == ["Bearer new"], "the credential of the grant, not of the setup")
        #expect(api.refreshCount == 0)
    }

    @Test func aFetchWaitingForARefreshEndsAtItsTotalTimeout() async throws {
        let (api, _, queue, _) = try setUp()
        let gate = TestGate()
        api.refreshGate.withLock { $0 = gate }
        defer { gate.open() }
        let fetch = FetchOperation<Data>(url: api.url("/api/item/0"))
        fetch.configuration.totalTimeout = 1.5
        let started = Date()
        guard case .timedOut(let timeout)? = await outcome(of: queue, fetch) else {
            Issue.record("\(String(describing: fetch.error))")
            return
        }
        #expect(timeout.kind == .total)
        #expect(timeout.url == api.url("/api/item/0"))
        #expect(Date().timeIntervalSince(started) < 60, "not held until the refresh ends (at its 120 s timeout)")
        #expect(api.authorizations("/api/item/0") == ["Bearer old"])
    }

    @Test func aPOSTBodyIsSentAgainByteForByte() async throws {
        let (api, _, queue, _) = try setUp()
        var request = URLRequest(url: api.url("/api/upload"))
        request.httpMethod = "POST"
        let body = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        request.httpBody = body
        let upload = FetchOperation<Data>(request: request)
        #expect(await outcome(of: queue, upload) == nil)
        let sent = api.server.requests("/api/upload")
        #expect(sent.map(\.body) == [body, body])
        #expect(sent.map { $0.header("Authorization") } == ["Bearer old", "Bearer new"])
        #expect(api.refreshCount == 1)
    }

    @Test func aStreamBodyIsNotSentAgain() async throws {
        let (api, _, queue, _) = try setUp()
        var request = URLRequest(url: api.url("/api/upload"))
        request.httpMethod = "POST"
        request.httpBodyStream = InputStream(data: Data("stream".utf8))
        let upload = FetchOperation<Data>(request: request)
        #expect(await outcome(of: queue, upload)?.statusCode == 401, "the refusal stands")
        #expect(api.server.requests("/api/upload").count == 1)
    }

    @Test func withoutACredentialNothingIsSent() async throws {
        let (api, authentication, queue, _) = try setUp(credential: nil)
        let fetch = FetchOperation<Data>(url: api.url("/api/item/0"))
        guard case .authenticationFailed(let failure)? = await outcome(of: queue, fetch) else {
            Issue.record("\(String(describing: fetch.error))")
            return
        }
        #expect(failure.reason == .noCredential)
        #expect(api.server.requests("/api/item/0").count == 0)
        authentication.setCredential(FetchCredential(token: "new"))
        #expect(await outcome(of: queue, FetchOperation<Data>(url: api.url("/api/item/1"))) == nil)
        authentication.logOut()
        #expect(await outcome(of: queue, FetchOperation<Data>(url: api.url("/api/item/2")))?.code == .authenticationFailed)
        #expect(api.server.requests("/api/item/2").count == 0)
    }

    @Test func theRefreshLimitIsABackstopWithItsOwnError() async throws {
        // Every refresh "succeeds" with a token the server refuses; each fetch is a new one.
        let api = try TokenAPI(valid: nil, refreshTo: "new")
        let authentication = FetchAuthentication(authenticator: TestAuthenticator(refreshURL: api.url("/refresh")),
                                                 credential: FetchCredential(token: "old"), origins: [api.server.baseURL],
                                                 maximumRefreshes: 2, refreshWindow: 600)
        let queue = FetchQueue(name: #function, authentication: authentication)
        var errors: [FetchError?] = []
        for index in 0..<4 {
            errors.append(await outcome(of: queue, FetchOperation<Data>(url: api.url("/api/item/\(index)"))))
        }
        #expect(api.refreshCount == 2)
        guard case .authenticationFailed(let failure)? = errors[2] else {
            Issue.record("\(errors)")
            return
        }
        #expect(failure.reason == .refreshLimitReached(maximum: 2, window: 600))
        #expect(api.server.requests("/api/item/2").allSatisfy { $0.header("Authorization") != nil },
                "nothing is sent without the credential")
    }

    @Test func fetchesWaitingForASlotWaitForTheRefreshInsteadOfSendingTheRefusedToken() async throws {
        // Given 50 fetches behind the default 4 slots per host, and a token the server refuses
        let (api, _, queue, _) = try setUp()
        let paths = items(50)
        // When they are all queued
        let (operations, done) = fetchAll(paths, api, on: queue)
        #expect(await done.wait(timeout: 60))
        // Then only the 4 in flight carried the refused token; the others waited for the refresh.
        #expect(operations.allSatisfy { $0.error == nil }, "\(operations.compactMap(\.error).prefix(3))")
        let refused = paths.flatMap { api.authorizations($0) }.filter { $0 == "Bearer old" }.count
        #expect(refused <= FetchQueue.defaultMaximumTransfersPerHost, "\(refused) requests carried the refused token")
        // (A request sent before the refresh may reach the server after it, so the server's own
        // order is no measure: the count above, at most the 4 in flight, is.)
        #expect(api.refreshCount == 1)
        #expect(paths.allSatisfy { api.authorizations($0).last == "Bearer new" })
    }

    @Test func a401FromAnotherOriginIsThatServersAnswerNotARefusal() async throws {
        // Given an API that redirects to a storage server (another origin) that answers 401
        let (api, authentication, queue, events) = try setUp(credential: FetchCredential(token: "new"))
        let storage = try TestServer()
        defer { storage.shutDown() }
        storage.route("/blob") { _ in
            TestResponse.text("link expired", status: 401).with(header: "X-Storage-Reason", "expired")
        }
        api.server.route("/api/redirect") { _ in
            .redirect(to: storage.url("/blob").absoluteString, status: 302)
        }
        // When the API is fetched
        let fetch = FetchOperation<Data>(url: api.url("/api/redirect"))
        let error = await outcome(of: queue, fetch)
        // Then the fetch fails with the storage server's own 401: no refresh, no resend.
        guard case .unacceptableStatus(let failure)? = error else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(failure.statusCode == 401)
        #expect(failure.url == storage.url("/blob"))
        #expect(failure.headers.first { $0.key.lowercased() == "x-storage-reason" }?.value == "expired")
        #expect(String(decoding: failure.bodyPrefix, as: UTF8.self) == "link expired")
        #expect(api.refreshCount == 0)
        #expect(api.authorizations("/api/redirect") == ["Bearer new"])
        #expect(storage.requests("/blob").map { $0.header("Authorization") } == [nil])
        #expect(authentication.credential?.generation == 1)
        #expect(events.events.withLock { $0 }.isEmpty)
    }

    @Test func aFetchWaitingForItsCredentialBeforeItsFirstRequestEndsAtItsTotalTimeout() async throws {
        // Given a credential about to expire, and a refresh that hangs
        let expiring = FetchCredential(token: "old", refreshToken: "r1", expiresAt: Date(timeIntervalSinceNow: 5))
        let (api, _, queue, _) = try setUp(credential: expiring)
        let gate = TestGate()
        api.refreshGate.withLock { $0 = gate }
        defer { gate.open() }
        let started = Date()
        // When one fetch waits for the proactive refresh, and another is enqueued while it runs
        let done = Countdown(2)
        let proactive = FetchOperation<Data>(url: api.url("/api/item/0"))
        proactive.configuration.totalTimeout = 2
        queue.enqueue(proactive, on: .global) { _ in done.signal() }
        #expect(await api.server.waitUntil(timeout: 30) { _ in api.refreshArrivals.withLock { $0 } == 1 })
        let joining = FetchOperation<Data>(url: api.url("/api/item/1"))
        joining.configuration.totalTimeout = 2
        queue.enqueue(joining, on: .global) { _ in done.signal() }
        // Then each ends at its total timeout, not when the refresh ends (held 60 s). Generous:
        // a loaded machine may stall the process for seconds.
        #expect(await done.wait(timeout: 55))
        #expect(Date().timeIntervalSince(started) < 50)
        for (operation, path) in [(proactive, "/api/item/0"), (joining, "/api/item/1")] {
            guard case .timedOut(let timeout)? = operation.error else {
                Issue.record("\(path): \(String(describing: operation.error))")
                continue
            }
            #expect(timeout.kind == .total)
            #expect(timeout.interval == 2)
            #expect(timeout.url == api.url(path))
            #expect(api.server.requests(path).count == 0)
        }
    }

    @Test func aHungRefreshEndsAtTheRefreshTimeoutAndTheNextFetchRefreshesAgain() async throws {
        // Given a refresh that hangs, and a refresh timeout of 1 s
        let api = try TokenAPI(valid: "new", refreshTo: "new")
        let gate = TestGate()
        api.refreshGate.withLock { $0 = gate }
        defer { gate.open() }
        let authentication = FetchAuthentication(authenticator: TestAuthenticator(refreshURL: api.url("/refresh")),
                                                 credential: FetchCredential(token: "old"), origins: [api.server.baseURL],
                                                 refreshTimeout: 1)
        let queue = FetchQueue(name: #function, authentication: authentication)
        #expect(authentication.refreshTimeout == 1)
        // When a fetch is refused and waits for it
        let started = Date()
        let error = await outcome(of: queue, FetchOperation<Data>(url: api.url("/api/item/0")))
        // Then it fails with the refresh's timeout, long before the refresh's server answers
        guard case .authenticationFailed(let failure)? = error, case .refreshFailed(let refreshError) = failure.reason,
              case .timedOut(let timeout) = refreshError else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(timeout.kind == .total)
        #expect(timeout.interval == 1)
        #expect(Date().timeIntervalSince(started) < 50, "not at the fetch's idle timeout (60 s)")
        // And a timed-out refresh does not stand for its credential: the next fetch refreshes.
        gate.open()
        #expect(await outcome(of: queue, FetchOperation<Data>(url: api.url("/api/item/1"))) == nil)
        #expect(api.refreshCount == 2)
        #expect(authentication.credential?.token == "new")
    }

    @Test func aCredentialShowsNoTokenWhenPrintedDumpedOrReflected() {
        let credential = FetchCredential(token: "secret-access", refreshToken: "secret-refresh")
        var dumped = ""
        dump(credential, to: &dumped)
        let shown = [String(describing: credential), String(reflecting: credential), dumped,
                     "\(Mirror(reflecting: credential).children.map { "\($0.label ?? ""): \($0.value)" })"]
        for text in shown {
            #expect(!text.contains("secret"), "\(text)")
            #expect(text.contains("REDACTED"), "\(text)")
        }
    }

    @Test func aCredentialInAHeaderOfItsOwnStaysWithItsOrigin() async throws {
        // Given an API whose authenticator sends the credential in `X-Api-Key`, not
        // `Authorization`, and that redirects once within its origin and once to another
        let api = try TestServer()
        let other = try TestServer()
        defer { api.shutDown(); other.shutDown() }
        api.route("/start") { _ in .redirect(to: api.url("/same").absoluteString, status: 302) }
        api.route("/same") { _ in .redirect(to: other.url("/landing").absoluteString, status: 302) }
        other.route("/landing") { _ in .text("landed") }
        let authentication = FetchAuthentication(authenticator: KeyAuthenticator(), credential: FetchCredential(token: "key-1"),
                                                 origins: [api.baseURL])
        let queue = FetchQueue(name: #function, authentication: authentication)
        // When the fetch follows both
        #expect(await outcome(of: queue, FetchOperation<Data>(url: api.url("/start"))) == nil)
        // Then its origin got the key on each request, and the other origin never did
        #expect(api.requests("/start").map { $0.header("X-Api-Key") } == ["key-1"])
        #expect(api.requests("/same").map { $0.header("X-Api-Key") } == ["key-1"])
        #expect(other.requests("/landing").map { $0.header("X-Api-Key") } == [nil])
    }

    @Test func theLoggerTellsTheRefusalAndTheRefreshAndTheFetchStartsOnce() async throws {
        // Given a queue logging with FetchEventLogger, whose credential the server refuses
        let api = try TokenAPI(valid: "new", refreshTo: "new")
        let lines = Locked<[String]>([])
        let heard = Countdown(2)
        let logger = FetchEventLogger { line in
            lines.withLock { $0.append(line) }
            // The refresh's end and the fetch's: each line comes once.
            if line.hasSuffix("is in use") || line.contains("/api/item/0 → 200") { heard.signal() }
        }
        let authentication = FetchAuthentication(authenticator: TestAuthenticator(refreshURL: api.url("/refresh")),
                                                 credential: FetchCredential(token: "old", refreshToken: "r1"),
                                                 origins: [api.server.baseURL], refreshTimeout: 120)
        let queue = FetchQueue(name: #function, monitors: [logger], authentication: authentication)
        let fetch = FetchOperation<Data>(url: api.url("/api/item/0"))
        // When the fetch is refused, the credential refreshed and the fetch sent again
        #expect(await outcome(of: queue, fetch) == nil)
        #expect(await heard.wait(timeout: 60))
        logger.queue.sync {}
        let log = lines.withLock { $0 }
        let enqueued = "enqueued GET " + api.url("/api/item/0").absoluteString
        let line: String? = log.first { $0.hasSuffix(enqueued) }
        let firstWord: Substring? = line?.split(separator: " ").first
        let id: String = try #require(firstWord.map { String($0) })
        // Then the log says each step, and the fetch started once
        #expect(log.filter { $0.hasPrefix("\(id) started") }.count == 1, "\(log)")
        #expect(log.contains("\(id) credential 1 refused (HTTP 401): it is sent again with the refreshed credential"), "\(log)")
        #expect(log.contains { $0.hasSuffix("refreshing credential 1") }, "\(log)")
        #expect(log.contains { $0.hasSuffix("credential 1 refreshed: credential 2 is in use") }, "\(log)")
        #expect(!log.joined().contains("Bearer"), "\(log)")
    }

    @Test func aCredentialEqualsTheOneItWasMadeAsWhateverItsGeneration() {
        let authentication = FetchAuthentication(authenticator: KeyAuthenticator(), origins: [])
        let made = FetchCredential(token: "a", refreshToken: "r", expiresAt: Date(timeIntervalSince1970: 1_000))
        authentication.setCredential(made)
        let stored = authentication.credential
        #expect(stored?.generation == 1)
        #expect(stored == made)
        #expect(stored != FetchCredential(token: "b", refreshToken: "r", expiresAt: Date(timeIntervalSince1970: 1_000)))
        #expect(stored != FetchCredential(token: "a", refreshToken: nil, expiresAt: Date(timeIntervalSince1970: 1_000)))
        #expect(stored != FetchCredential(token: "a", refreshToken: "r"))
    }

    /// Until `count` requests were refused and only the refresh is left in flight at the
    /// server (the refused fetches wait for it, holding no slot).
    private func waitForWaiters(_ count: Int, _ api: TokenAPI, _ queue: FetchQueue) async -> Bool {
        guard await api.server.waitUntil(timeout: 60, { _ in api.refusals.withLock { $0 } >= count }) else { return false }
        guard await api.server.waitUntil(timeout: 60, { _ in api.refreshArrivals.withLock { $0 } == 1 }) else { return false }
        return await api.server.waitUntil(timeout: 60) { $0.requestsInFlight == 1 }
    }

    private func outcome(of queue: FetchQueue, _ operation: FetchOperation<Data>) async -> FetchError? {
        do {
            _ = try await queue.fetch(operation)
            return nil
        } catch {
            return error
        }
    }
}
