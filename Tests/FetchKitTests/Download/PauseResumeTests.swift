import Dispatch
import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

extension TestServer {
    /// Serves `length` pattern bytes at `path` with `ETag: "<tag>"` and ranges. A full answer
    /// sends its first `held` bytes, then waits for `gate` before the rest; a `Range` answer
    /// (`206`, validated with `If-Range`) is sent at once.
    func heldResumableRoute(_ path: String, length: Int, held: Int, tag: String = "\"p1\"", gate: TestGate) {
        route(path) { request in
            if let range = request.header("Range"), request.header("If-Range") == tag,
               range.hasPrefix("bytes="), let start = Int(range.dropFirst(6).prefix { $0 != "-" }), start < length {
                let head = TestResponse.Step.head(status: 206, headers: [
                    "ETag": tag, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                    "Content-Range": "bytes \(start)-\(length - 1)/\(length)", "Content-Length": String(length - start),
                ])
                return ResumeFixtures.patternAnswer(head, offset: start, count: length - start, for: request)
            }
            return .steps([.head(status: 200, headers: ["ETag": tag, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                                                        "Content-Length": String(length)]),
                           .patternBytes(offset: 0, count: held), .wait(for: gate),
                           .patternBytes(offset: held, count: length - held)])
        }
    }

    /// Answers `path` with its own path, and records the order in which such requests came.
    func orderRoute(_ path: String, _ order: Locked<[String]>) {
        route(path) { request in
            order.withLock { $0.append(request.path) }
            return .text(request.path)
        }
    }
}

/// Signals once, the first time `condition` holds.
func signalOnce(_ countdown: Countdown) -> @Sendable (Bool) -> Void {
    let fired = Locked(false)
    return { condition in
        if condition, fired.withLock({ done in defer { done = true }; return !done }) { countdown.signal() }
    }
}

/// A one-slot queue whose slot a request holds until ``gate`` opens, and routes that record
/// the order in which the server gets `names` (on a server with the standard routes too): to
/// see the order of a line of waiting fetches.
struct HeldSlotLine {
    let server: TestServer
    let gate = TestGate()
    let order = Locked<[String]>([])
    let queue = makeFetchQueue(total: 1)

    /// Starts the server and the held request; returns once the server has it.
    init(names: [String]) async throws {
        server = try TestServer.standard()
        server.gatedRoute("/held", gate)
        for name in names { server.orderRoute("/\(name)", order) }
        queue.enqueue(server.operation("/held"))
        // The held request takes the slot before the others are enqueued: an `OperationQueue`
        // starts operations in no set order, and the first to ask takes the slot.
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
    }

    /// Enqueues a fetch of each of `names`, one at a time, each in line before the next is
    /// enqueued; each signals `done` when it completes.
    func enqueue(_ names: [String], signalling done: Countdown) async throws -> [String: FetchID] {
        var ids: [String: FetchID] = [:]
        for (index, name) in names.enumerated() {
            ids[name] = queue.enqueue(server.operation("/\(name)"), on: .global) { _ in done.signal() }
            #expect(await counts(of: queue) { $0.waiting == index + 1 })
        }
        return ids
    }

    func stop() {
        gate.open()
        server.shutDown()
    }
}

/// Puts a bearer token the test sets on each request; never refreshes (no request is refused).
private struct BearerToken: FetchAuthenticator {
    let refreshURL: URL
    func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential> {
        FetchOperation<FetchCredential>(url: refreshURL)
    }
}

@Suite("Pause and resume", .timeLimit(.minutes(3)))
struct PauseResumeTests {
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }

    /// A download that has received `bytes`: a countdown signalled once its progress reaches them.
    private func reached(_ bytes: Int64, _ download: DownloadOperation) -> Countdown {
        let countdown = Countdown(1)
        let signal = signalOnce(countdown)
        download.onProgress(on: .global) { progress in signal(progress.bytesReceived >= bytes) }
        return countdown
    }

    @Test func pausingARunningDownloadKeepsItsBytesFreesItsSlotAndResumesWithRange() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let length = 200_000, held = 80_000
        server.heldResumableRoute("/big", length: length, held: held, gate: gate)
        let queue = makeFetchQueue(total: 1)
        let destination = directory.file("big.bin")
        let download = DownloadOperation(url: server.url("/big"), destination: destination)
        let halfway = reached(Int64(held), download)
        let completions = Locked(0)
        let done = Countdown(1)
        let id = queue.enqueue(download, on: .global) { _ in completions.withLock { $0 += 1 }; done.signal() }
        let awaited = Task { try await download.value }
        #expect(await halfway.wait())
        // A fetch waits behind it for the only slot.
        let behind = server.operation("/json")
        let behindDone = Countdown(1)
        queue.enqueue(behind, on: .global) { _ in behindDone.signal() }
        #expect(await counts(of: queue) { $0.inFlight == 1 && $0.waiting == 1 })

        // When paused mid-transfer …
        #expect(queue.pause(id))
        #expect(download.isPaused && queue.isPaused(id))
        #expect(!queue.pause(id), "pausing twice does nothing")
        // … its slot goes to the fetch waiting behind it, …
        #expect(await behindDone.wait(), "the only slot was freed")
        // … it keeps its bytes, its identifier and its operation, and has not completed.
        #expect(DownloadOperation.fileSize(download.partialFileURL) == Int64(held))
        #expect(queue.operation(for: id) === download && queue.id(of: download) == id)
        #expect(!download.isFinished && completions.current == 0)
        #expect(queue.transferCounts == .init(inFlight: 0, waiting: 0))

        // Resumed, it continues from the bytes on disk.
        #expect(queue.resume(id))
        #expect(!download.isPaused)
        #expect(!queue.resume(id), "resuming twice does nothing")
        #expect(await done.wait())
        let value = try await awaited.value
        #expect(value == destination)
        #expect(completions.current == 1)
        #expect(download.error == nil)
        #expect(contents(destination) == TestResponse.patternBytes(count: length), "the file is whole and correct")
        let requests = server.requests("/big")
        #expect(requests.count == 2)
        #expect(requests.last?.header("Range") == "bytes=\(held)-", "the server saw a Range from the kept offset")
        #expect(requests.last?.header("If-Range") == "\"p1\"")
        #expect(download.resumedBytes == Int64(held))
        #expect(download.attempts == 1, "a resume is not a retry")
        #expect(await queue.recorder?.waitUntil { events in
            events.filter { $0.id == id }.map(\.kind) == [.enqueue, .start, .response, .pause, .resume, .response, .metrics, .finish]
        } == true, "\(queue.recorder?.kinds(for: id) ?? [])")
    }

    @Test func aDownloadOnItsOwnPausesAndResumesWithRangeToo() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        server.heldResumableRoute("/own", length: 50_000, held: 20_000, gate: gate)
        let download = DownloadOperation(url: server.url("/own"), destination: directory.file("own.bin"))
        let halfway = reached(20_000, download)
        let completions = Locked(0)
        let done = Countdown(1)
        download.onCompletion(on: .global) { _ in completions.withLock { $0 += 1 }; done.signal() }
        download.start()
        #expect(await halfway.wait())
        #expect(download.pause())
        #expect(download.resume())          // at once: before or after the stop took, it continues
        #expect(await done.wait())
        #expect(completions.current == 1 && download.error == nil)
        #expect(contents(download.destination) == TestResponse.patternBytes(count: 50_000))
        #expect(server.requests("/own").map { $0.header("Range") } == [nil, "bytes=20000-"])
    }

    @Test func pausingAWaitingDownloadTakesItOutOfLineUntilItIsResumed() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        server.route("/held") { _ in TestResponse.text("open").held(by: gate) }
        let queue = makeFetchQueue(total: 1)
        let blocker = server.operation("/held")
        let blockerDone = Countdown(1)
        queue.enqueue(blocker, on: .global) { _ in blockerDone.signal() }
        // The blocker holds the only slot before the others are enqueued: an `OperationQueue`
        // starts operations in no set order, and the first to ask takes the slot.
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        let destination = directory.file("small.bin")
        let download = DownloadOperation(url: server.url("/bytes/5000"), destination: destination)
        let completions = Locked(0)
        let done = Countdown(1)
        let id = queue.enqueue(download, on: .global) { _ in completions.withLock { $0 += 1 }; done.signal() }
        #expect(await counts(of: queue) { $0.inFlight == 1 && $0.waiting == 1 })

        #expect(queue.pause(id))
        #expect(await counts(of: queue) { $0.inFlight == 1 && $0.waiting == 0 }, "out of line")
        gate.open()
        #expect(await blockerDone.wait())
        #expect(await counts(of: queue) { $0.inFlight == 0 && $0.waiting == 0 })
        #expect(server.requests("/bytes/5000").count == 0, "a paused download sends nothing")
        #expect(!download.isFinished && completions.current == 0 && download.isPaused)

        #expect(download.resume())
        #expect(await done.wait())
        #expect(completions.current == 1)
        #expect(contents(destination) == TestResponse.patternBytes(count: 5000))
        #expect(server.requests("/bytes/5000").count == 1)
    }

    @Test func aFetchPausedBeforeItStartsSendsNothingUntilResumed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let queue = makeFetchQueue()
        let operation = server.operation("/json")
        #expect(operation.pause(), "a pending operation can be paused")
        let done = Countdown(1)
        let id = queue.enqueue(operation, on: .global) { _ in done.signal() }
        // It starts, prepares its request and parks: the queue holds it, nothing is sent.
        #expect(await queue.recorder?.waitUntil { $0.contains { $0.id == id && $0.kind == .enqueue } } == true)
        #expect(queue.count == 1 && operation.isPaused)
        #expect(server.requests("/json").count == 0)
        #expect(operation.resume())
        #expect(await done.wait())
        #expect(operation.responseBody?.isEmpty == false)
        #expect(server.requests("/json").count == 1)
    }

    @Test func cancellingAPausedDownloadCompletesOnceAsCancelledAndKeepsItsPartialFile() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        server.heldResumableRoute("/big", length: 100_000, held: 40_000, gate: gate)
        let queue = makeFetchQueue(total: 1)
        let download = DownloadOperation(url: server.url("/big"), destination: directory.file("big.bin"))
        let halfway = reached(40_000, download)
        let completions = Locked<[Result<URL, FetchError>]>([])
        let done = Countdown(1)
        let id = queue.enqueue(download, on: .global) { result in completions.withLock { $0.append(result) }; done.signal() }
        #expect(await halfway.wait())
        #expect(download.pause())
        #expect(await counts(of: queue) { $0.inFlight == 0 })
        download.cancel()
        #expect(await done.wait())
        #expect(!download.isPaused && download.isFinished)
        #expect(download.error?.isCancellation == true)
        #expect(!download.resume(), "a cancelled download does not resume")
        #expect(completions.current.count == 1)
        #expect(DownloadOperation.fileSize(download.partialFileURL) == 40_000, "kept for a later download, as a cancel keeps it")
        #expect(server.requests("/big").count == 1)
        #expect(queue.operation(for: id) == nil)
    }

    @Test func aSuspendedQueueFreedWhileItsFetchIsPausedCancelsItOnce() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let done = Countdown(1)
        let results = Locked<[Result<Data, FetchError>]>([])
        let operation = server.operation("/json")
        do {
            let queue = makeFetchQueue()
            queue.isSuspended = true
            queue.enqueue(operation, on: .global) { result in results.withLock { $0.append(result) }; done.signal() }
            #expect(operation.pause())
        }
        #expect(await done.wait(), "the freed queue cancelled its paused fetch")
        #expect(results.current.count == 1)
        #expect(operation.error?.isCancellation == true)
        #expect(server.requests("/json").count == 0)
    }

    @Test func pauseAllStopsEveryTransferAndStartsNoneResumeAllFinishesThem() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let gate = TestGate()
        defer { gate.open(); server.shutDown(); directory.remove() }
        let length = 60_000, held = 20_000
        for index in 0..<3 { server.heldResumableRoute("/f\(index)", length: length, held: held, gate: gate) }
        let queue = makeFetchQueue(total: 2)
        let downloads = (0..<3).map { DownloadOperation(url: server.url("/f\($0)"), destination: directory.file("f\($0)")) }
        let running = downloads.prefix(2).map { reached(Int64(held), $0) }
        let done = Countdown(3)
        let completions = Locked(0)
        for download in downloads.prefix(2) {
            queue.enqueue(download, on: .global) { _ in completions.withLock { $0 += 1 }; done.signal() }
        }
        for countdown in running { #expect(await countdown.wait()) }
        // The third waits behind the two in flight.
        queue.enqueue(downloads[2], on: .global) { _ in completions.withLock { $0 += 1 }; done.signal() }
        #expect(await counts(of: queue) { $0.inFlight == 2 && $0.waiting == 1 })
        #expect(queue.pauseAll() == 3)
        #expect(await counts(of: queue) { $0.inFlight == 0 && $0.waiting == 0 })
        #expect(server.requests("/f2").count == 0, "no slot went to the third while the others were paused")
        #expect(downloads.allSatisfy { $0.isPaused })
        #expect(completions.current == 0)

        gate.open()         // the third's first request is answered whole
        #expect(queue.resumeAll() == 3)
        #expect(await done.wait())
        #expect(completions.current == 3)
        for (index, download) in downloads.enumerated() {
            #expect(contents(download.destination) == TestResponse.patternBytes(count: length))
            let requests = server.requests("/f\(index)")
            if index < 2 {
                #expect(requests.map { $0.header("Range") } == [nil, "bytes=\(held)-"])
            } else {
                #expect(requests.count == 1)
            }
        }
    }

    @Test func pausingOneMemberOfASharedFlightLeavesTheOthersTransfer() async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.route("/shared") { _ in
            .steps([.head(status: 200, headers: ["Content-Length": "30000"]),
                    .patternBytes(offset: 0, count: 10_000), .wait(for: gate), .patternBytes(offset: 10_000, count: 20_000)])
        }
        let queue = makeFetchQueue(coalesces: true)
        let paused = server.operation("/shared")
        let other = server.operation("/shared")
        let pausedDone = Countdown(1), otherDone = Countdown(1)
        let pausedCompletions = Locked(0)
        queue.enqueue(paused, on: .global) { _ in pausedCompletions.withLock { $0 += 1 }; pausedDone.signal() }
        queue.enqueue(other, on: .global) { _ in otherDone.signal() }
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        #expect(queue.statistics.requestsCoalesced == 1)
        #expect(paused.pause())
        gate.open()
        #expect(await otherDone.wait())
        #expect(other.responseBody == TestResponse.patternBytes(count: 30_000), "the shared transfer went on for the other")
        #expect(server.requests("/shared").count == 1)
        #expect(!paused.isFinished && pausedCompletions.current == 0)
        #expect(paused.resume())
        #expect(await pausedDone.wait())
        #expect(paused.responseBody == TestResponse.patternBytes(count: 30_000), "asked again from the start")
        #expect(pausedCompletions.current == 1)
        #expect(server.requests("/shared").count == 2)
    }
}

@Suite("Re-prioritising waiting fetches", .timeLimit(.minutes(3)))
struct ReprioritizeTests {
    @Test func theServerSeesTheNewOrderWithOneSlot() async throws {
        let line = try await HeldSlotLine(names: ["a", "b", "c", "d"])
        defer { line.stop() }
        let (queue, gate, order) = (line.queue, line.gate, line.order)
        let done = Countdown(4)
        let ids = try await line.enqueue(["a", "b", "c", "d"], signalling: done)
        let (a, c, d) = (try #require(ids["a"]), try #require(ids["c"]), try #require(ids["d"]))
        #expect(queue.setPriority(.veryHigh, of: d))     // last → first
        #expect(queue.setPriority(.low, of: a))          // first → last
        #expect(queue.setPriority(.high, of: c))         // third → second
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/d", "/c", "/b", "/a"])
        #expect(!queue.setPriority(.high, of: a), "finished: not in the queue")
    }

    @Test func aPausedFetchResumesAtItsNewPriority() async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.route("/held") { _ in TestResponse.text("open").held(by: gate) }
        let order = Locked<[String]>([])
        for name in ["a", "b"] { server.orderRoute("/\(name)", order) }
        let queue = makeFetchQueue(total: 1)
        queue.enqueue(server.operation("/held"))
        // The blocker holds the only slot before the others are enqueued: an `OperationQueue`
        // starts operations in no set order, and the first to ask takes the slot.
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        let done = Countdown(2)
        let a = queue.enqueue(server.operation("/a"), on: .global) { _ in done.signal() }
        queue.enqueue(server.operation("/b"), on: .global) { _ in done.signal() }
        #expect(await counts(of: queue) { $0.waiting == 2 })
        #expect(queue.pause(a))
        #expect(queue.setPriority(.veryHigh, of: a))
        #expect(queue.resume(a))
        #expect(await counts(of: queue) { $0.waiting == 2 })
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/a", "/b"], "resumed at .veryHigh, ahead of /b")
    }

    /// A fetch that made a shared transfer and was paused before its slot came leaves the
    /// transfer to the fetch that joined it; resumed with another token, it cannot join that
    /// transfer again and runs one of its own beside it. Each transfer frees its own slot (the
    /// queue once knew a transfer by its first fetch: the second took the first's entry, and
    /// one slot stayed taken for good).
    @Test func aFetchResumedBesideTheSharedTransferItMadeFreesOnlyItsOwnSlot() async throws {
        let server = try TestServer.standard()
        let gates = (first: TestGate(), second: TestGate(), shared: TestGate())
        defer { gates.first.open(); gates.second.open(); gates.shared.open(); server.shutDown() }
        server.route("/held/1") { _ in TestResponse.text("open").held(by: gates.first) }
        server.route("/held/2") { _ in TestResponse.text("open").held(by: gates.second) }
        // The tokens the shared path was asked with, in order; each arrival signals its countdown.
        let tokens = Locked<[String?]>([])
        let arrivals = [Countdown(1), Countdown(1)]
        server.route("/shared") { request in
            let count = tokens.withLock { $0.append(request.header("Authorization")); return $0.count }
            if count <= arrivals.count { arrivals[count - 1].signal() }
            gates.shared.wait(timeout: 120)
            return .text("open")
        }
        let authentication = FetchAuthentication(authenticator: BearerToken(refreshURL: server.url("/refresh")),
                                                 credential: FetchCredential(token: "old"), origins: [server.baseURL])
        let queue = FetchQueue(name: #function, maximumConcurrentTransfers: 2, maximumTransfersPerHost: 2,
                               monitors: [EventRecorder()], coalescesIdenticalRequests: true, authentication: authentication)
        let recorder = try #require(queue.recorder)
        // Both slots are taken.
        let held = Countdown(2)
        queue.enqueue(server.operation("/held/1"), on: .global) { _ in held.signal() }
        queue.enqueue(server.operation("/held/2"), on: .global) { _ in held.signal() }
        #expect(await server.waitUntil { $0.requestsReceived == 2 })
        // The creator waits; a caller joins its transfer; the creator is paused.
        let creator = server.operation("/shared")
        let creatorDone = Countdown(1)
        let creatorID = queue.enqueue(creator, on: .global) { _ in creatorDone.signal() }
        #expect(await counts(of: queue) { $0.waiting == 1 })
        let joiner = server.operation("/shared")
        let joinerDone = Countdown(1)
        let joinerID = queue.enqueue(joiner, on: .global) { _ in joinerDone.signal() }
        #expect(await recorder.waitUntil { $0.contains { $0 == (.join, joinerID) } })
        #expect(queue.pause(creatorID))
        // A slot frees: the shared transfer goes out, for the joiner.
        gates.first.open()
        #expect(await arrivals[0].wait())
        // Resumed with a new token, the creator waits for a transfer of its own, and gets the other slot.
        authentication.setCredential(FetchCredential(token: "new"))
        #expect(queue.resume(creatorID))
        #expect(await counts(of: queue) { $0.waiting == 1 })
        gates.second.open()
        #expect(await held.wait())
        #expect(await arrivals[1].wait())
        #expect(tokens.current == ["Bearer old", "Bearer new"])
        #expect(queue.transferCounts == .init(inFlight: 2, waiting: 0))
        // Both end: both slots are free again.
        gates.shared.open()
        #expect(await joinerDone.wait())
        #expect(await creatorDone.wait())
        #expect(creator.responseBody == Data("open".utf8) && joiner.responseBody == Data("open".utf8))
        #expect(await counts(of: queue) { $0 == .init(inFlight: 0, waiting: 0) })
        let after = [server.operation("/json"), server.operation("/json")]
        let afterDone = Countdown(2)
        for operation in after { queue.enqueue(operation, on: .global) { _ in afterDone.signal() } }
        #expect(await afterDone.wait())
    }

    /// A paused fetch keeps its place in line (as aria2 keeps a paused download's): resumed, it
    /// goes before the fetches enqueued after it.
    @Test func aResumedFetchKeepsItsPlaceInLine() async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.route("/held") { _ in TestResponse.text("open").held(by: gate) }
        let order = Locked<[String]>([])
        for name in ["a", "b", "c"] { server.orderRoute("/\(name)", order) }
        let queue = makeFetchQueue(total: 1)
        queue.enqueue(server.operation("/held"))
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        // One at a time: an `OperationQueue` starts operations in no set order.
        let done = Countdown(3)
        var ids: [FetchID] = []
        for (index, name) in ["a", "b", "c"].enumerated() {
            ids.append(queue.enqueue(server.operation("/\(name)"), on: .global) { _ in done.signal() })
            #expect(await counts(of: queue) { $0.waiting == index + 1 })
        }
        #expect(queue.pause(ids[0]))
        #expect(await counts(of: queue) { $0.waiting == 2 })
        #expect(queue.resume(ids[0]))
        #expect(await counts(of: queue) { $0.waiting == 3 })
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/a", "/b", "/c"], "resumed in its place, ahead of /b and /c")
    }

    /// A shared flight raised by an urgent member falls back when that member leaves. Which of
    /// the two `/shared` fetches made the flight is the `OperationQueue`'s choice: either way.
    @Test(arguments: ["cancel", "pause"])
    func aSharedFlightFallsBackWhenItsUrgentMemberLeaves(_ how: String) async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.route("/held") { _ in TestResponse.text("open").held(by: gate) }
        let order = Locked<[String]>([])
        for name in ["shared", "normal"] { server.orderRoute("/\(name)", order) }
        let queue = makeFetchQueue(total: 1, coalesces: true)
        let recorder = try #require(queue.recorder)
        queue.enqueue(server.operation("/held"))
        // The blocker holds the only slot before the others are enqueued: an `OperationQueue`
        // starts operations in no set order, and the first to ask takes the slot.
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        let done = Countdown(2)
        let low = server.operation("/shared")
        low.queuePriority = .low
        queue.enqueue(low, on: .global) { _ in done.signal() }
        queue.enqueue(server.operation("/normal"), on: .global) { _ in done.signal() }
        let urgent = server.operation("/shared")
        urgent.queuePriority = .veryHigh
        let urgentID = queue.enqueue(urgent)
        #expect(await counts(of: queue) { $0.waiting == 2 })
        #expect(await recorder.waitUntil { events in events.contains { $0.kind == .join } })
        #expect(queue.statistics.requestsCoalesced == 1)
        if how == "cancel" { queue.cancel(urgentID) } else { #expect(queue.pause(urgentID)) }
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/normal", "/shared"], "the flight went back to .low")
        queue.cancel(urgentID)
    }

    /// The urgent fetch made the shared flight (it waited in line first), and the fetches that
    /// joined it wait at `.normal`, behind a `.normal` fetch that was in line before them: when
    /// the urgent one leaves, or is lowered, the flight goes back behind that fetch.
    @Test(arguments: ["cancel", "pause", "lower"])
    func aSharedFlightFallsBackWhenTheUrgentFetchThatMadeItLeaves(_ how: String) async throws {
        let server = try TestServer()
        let gate = TestGate()
        defer { gate.open(); server.shutDown() }
        server.route("/held") { _ in TestResponse.text("open").held(by: gate) }
        let order = Locked<[String]>([])
        for name in ["shared", "normal"] { server.orderRoute("/\(name)", order) }
        let queue = makeFetchQueue(total: 1, coalesces: true)
        let recorder = try #require(queue.recorder)
        queue.enqueue(server.operation("/held"))
        #expect(await server.waitUntil { $0.requestsReceived == 1 })
        let urgent = server.operation("/shared")
        urgent.queuePriority = .veryHigh
        let urgentID = queue.enqueue(urgent)
        #expect(await counts(of: queue) { $0.waiting == 1 }, "it waits in line: it made the flight")
        let done = Countdown(3)
        queue.enqueue(server.operation("/normal"), on: .global) { _ in done.signal() }
        #expect(await counts(of: queue) { $0.waiting == 2 })
        let joiners = [server.operation("/shared"), server.operation("/shared")]
        let joinerIDs = joiners.map { queue.enqueue($0, on: .global) { _ in done.signal() } }
        #expect(await recorder.waitUntil { events in
            joinerIDs.allSatisfy { id in events.contains { $0.kind == .join && $0.id == id } }
        })
        #expect(recorder.kinds(for: urgentID).contains(.join) == false, "it made the flight")
        #expect(queue.statistics.requestsCoalesced == 2)
        switch how {
        case "cancel": #expect(queue.cancel(urgentID))
        case "pause": #expect(queue.pause(urgentID))
        default: #expect(queue.setPriority(.low, of: urgentID))
        }
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/normal", "/shared"], "the flight went back to .normal, behind /normal")
        #expect(server.requests("/shared").count == 1, "one transfer for the joiners")
        for joiner in joiners { #expect(joiner.responseBody == Data("/shared".utf8)) }
        queue.cancel(urgentID)
    }
}

@Suite("Re-prioritising paused fetches", .timeLimit(.minutes(3)))
struct ReprioritizePausedTests {
    /// Re-prioritising a paused fetch to the priority it has already is nothing: it keeps its
    /// place in line, as a waiting fetch does (it once went to the back of its line).
    @Test func anUnchangedPriorityKeepsAPausedFetchsPlace() async throws {
        let line = try await HeldSlotLine(names: ["a", "b", "c"])
        defer { line.stop() }
        let (queue, gate, order) = (line.queue, line.gate, line.order)
        // One at a time: an `OperationQueue` starts operations in no set order.
        let done = Countdown(3)
        let ids = try await line.enqueue(["a", "b", "c"], signalling: done)
        let (a, b) = (try #require(ids["a"]), try #require(ids["b"]))
        #expect(queue.setPriority(.normal, of: a), "waiting, unchanged")
        #expect(queue.pause(b))
        #expect(queue.setPriority(.normal, of: b), "paused, unchanged")
        #expect(queue.resume(b))
        #expect(await counts(of: queue) { $0.waiting == 3 })
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/a", "/b", "/c"], "both kept their places")
    }

    /// A changed priority re-places a paused fetch as it does a waiting one: at the back of its
    /// new priority; set again to the same, it stays there.
    @Test func aChangedPriorityMovesAPausedFetchToTheBackOfItsNewLevel() async throws {
        let line = try await HeldSlotLine(names: ["a", "b", "c", "d"])
        defer { line.stop() }
        let (queue, gate, order) = (line.queue, line.gate, line.order)
        let done = Countdown(4)
        let ids = try await line.enqueue(["a", "b", "c", "d"], signalling: done)
        let (a, c, d) = (try #require(ids["a"]), try #require(ids["c"]), try #require(ids["d"]))
        #expect(queue.setPriority(.high, of: c))        // waiting: c goes first
        #expect(queue.pause(d))
        #expect(queue.setPriority(.high, of: d))        // paused: d goes behind c
        #expect(queue.setPriority(.high, of: d), "again: unchanged")
        #expect(queue.pause(a))
        #expect(queue.setPriority(.low, of: a))         // paused: a goes last
        #expect(queue.resume(a) && queue.resume(d))
        #expect(await counts(of: queue) { $0.waiting == 4 })
        gate.open()
        #expect(await done.wait())
        #expect(order.current == ["/c", "/d", "/b", "/a"])
    }
}
