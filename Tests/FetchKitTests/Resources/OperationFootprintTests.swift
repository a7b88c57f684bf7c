import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// What one operation costs while it waits: tens of thousands may sit in a queue.
@Suite("Operation footprint", .timeLimit(.minutes(3)))
struct OperationFootprintTests {
    @Test func theCoreIsAFewWordsNotAPage() {
        // Everything rarely used lives in boxes made at first use.
        #expect(MemoryLayout<AnyFetchOperation.Core>.size <= 192)
        // The machine: the boxed cancellation (a word), then the state (a word and its tag
        // byte), whose odd last byte leaves the core's next fields its tail; the other order
        // would pad it to 24 bytes.
        #expect(MemoryLayout<LifecycleStateMachine>.size <= 17)
    }

    @Test func theCoreAndItsLockAreOneAllocationOf248Bytes() {
        // Object header, the core and the lock's condition pointer, then the mutex: at most
        // 248 bytes, which the allocator rounds up to 256 (a byte more would round to 272).
        let header = MemoryLayout<ProtectedHeader<AnyFetchOperation.Core>>.size
        let mutexOffset = (16 + header + 7) / 8 * 8
        #expect(mutexOffset + MemoryLayout<pthread_mutex_t>.size <= 248)
    }

    @Test func aWaitingOperationNobodyWatchesMakesNoBoxes() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (queue, blocker, waiting, done) = await fetchWaitingBehindABlocker(on: server, path: "/json")
        let boxes = waiting.core.withLock { $0.madeBoxes }
        #expect(!boxes.record && !boxes.extras, "no transfer record, no handlers, observers or sequences")

        // Watching it makes them, and it behaves as before.
        let stream = waiting.progressUpdates
        #expect(waiting.core.withLock { $0.madeBoxes.extras })
        blocker.cancel()
        #expect(await done.wait())
        var last: FetchProgress?
        for await progress in stream { last = progress }
        #expect(last?.bytesReceived == Int64(waiting.responseBody?.count ?? -1))
        #expect(waiting.core.withLock { $0.madeBoxes.record })
        queue.cancelAll()
    }

    @Test(.enabled(if: InstanceSize.isKnown))
    func aWaitingFetchsPlaceInItsQueueIsOneSmallAllocation() throws {
        // The member is immutable and knows where it waits in the scheduler (reserved when it
        // was made: no table of waiting tickets beside the lines), and fits a 128-byte
        // allocation: at most 120 bytes, with malloc's 8-byte header. Its limits are three words.
        #expect(MemoryLayout<TransferLimits>.size <= 24)
        #expect(try #require(InstanceSize.of(FlightMember.self)) <= 120)
    }

    @Test(.enabled(if: InstanceSize.isKnown))
    func anOperationCarriesNothingOfItsQueue() throws {
        // The queue keeps slots and identifiers (its registry maps identifiers to operations: 16
        // bytes a slot) and writes nothing into an operation: Foundation's `Operation` is 160
        // bytes, then the core and the claim's identifier, at most 176 (184 with malloc's header).
        #expect(try #require(InstanceSize.of(FetchOperation<Data>.self)) <= 176)
    }

    @Test func anAttemptsPackedStartAndNotModifiedFlagAreIndependent() {
        var limits = TransferLimits(idleTimeout: 5, maximumResponseSize: 1, acceptableStatusCodes: [200])
        #expect(limits.fetchStartedAt == nil && !limits.acceptsNotModified)
        limits.acceptsNotModified = true
        #expect(limits.fetchStartedAt == nil && limits.acceptsNotModified)
        limits.fetchStartedAt = 123_456_789
        #expect(limits.fetchStartedAt == 123_456_789 && limits.acceptsNotModified)
        limits.acceptsNotModified = false
        #expect(limits.fetchStartedAt == 123_456_789 && !limits.acceptsNotModified)
        limits.fetchStartedAt = nil
        #expect(limits.fetchStartedAt == nil && !limits.acceptsNotModified)
        #expect(!limits.accepts(304))
    }

    @Test func aWaitingFlightIsAFewWordsInItsQueuesTables() {
        // A queue keeps a record only for a shareable flight that waits (any other waiting
        // attempt is its entry in line), a few words; a key is boxed.
        #expect(MemoryLayout<FetchQueue.State.WaitingFlight>.stride <= 32)
        #expect(MemoryLayout<FlightKey?>.size == MemoryLayout<Int>.size, "a key is one reference")
        #expect(MemoryLayout<TransferLimits>.size <= 24, "packed")
    }

    @Test func anAttemptsLimitsAreAFewWords() {
        // What the configuration sets is shared through one box; an attempt adds its idle
        // timeout, its fetch's start and whether it accepts a 304.
        #expect(MemoryLayout<TransferLimits>.size <= 32)
    }

    @Test func aWaitingFetchsAttemptIsItsPlaceInTheQueueWithNothingBetween() async throws {
        // The operation runs its attempts itself (no attempt-loop object between it and its
        // place in the queue), and hears of the transfer directly.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (queue, blocker, waiting, done) = await fetchWaitingBehindABlocker(on: server, path: "/bytes/3000")
        let handle = try #require(waiting.core.withLock { $0.transfer })
        let member = try #require(handle as? FlightMember, "the operation holds its place in the queue")
        #expect(member.operation === waiting)
        blocker.cancel()
        #expect(await done.wait())
        #expect(waiting.responseBody?.count == 3000)
        #expect(waiting.core.withLock { $0.transfer } == nil, "nothing is held once the transfer ended")
        queue.cancelAll()
    }

    @Test func aFetchWaitingForASlotHoldsNoBodySinkUntilItIsGranted() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let (queue, blocker, waiting, done) = await fetchWaitingBehindABlocker(on: server, path: "/bytes/3000")

        let (member, blockerHost) = queue.state.withLock { state in
            let members = state.running.values.map(\.first) + state.scheduler.waitingTickets
            return (members.first { $0.operation === waiting }, members.first { $0.operation === blocker }?.host)
        }
        let waitingMember = try #require(member)
        #expect(waitingMember.sink == nil, "a body kept in memory gets its sink when the slot is granted")
        #expect(waitingMember.host == blockerHost)

        // Granted, it gets one and fetches as before.
        blocker.cancel()
        #expect(await done.wait())
        #expect(waiting.responseBody?.count == 3000)
        #expect(waiting.error == nil)
    }

    @Test func aCompletionOnTheGlobalQueueKeepsNoQueueObjectOfItsOwn() {
        // Each queued fetch keeps its completion's queue: `.global` is one shared object, not
        // one per fetch.
        func queue(_ callbackQueue: CallbackQueue) -> DispatchQueue? {
            if case .dispatch(let queue) = callbackQueue.target { return queue }
            return nil
        }
        let first = queue(.global)
        let second = queue(.global)
        #expect(first != nil)
        #expect(first === second)
    }

    @Test func aSequenceMadeAfterTheFetchFinishedStartsFromItsFinalValue() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = FetchOperation<Data>(url: server.url("/bytes/3000"))
        operation.start()
        _ = try await operation.value
        #expect(!operation.core.withLock { $0.madeBoxes.extras }, "nobody asked for progress")
        var seen: [FetchProgress] = []
        for await progress in operation.progressUpdates { seen.append(progress) }
        #expect(seen == [FetchProgress(bytesReceived: 3000, bytesExpected: 3000)])
    }

    @Test func operationsConfiguredAlikeShareOneStoredConfiguration() {
        let url = URL(string: "http://127.0.0.1:9/")!
        func identity(_ operation: AnyFetchOperation) -> ObjectIdentifier {
            operation.core.withLock { $0.settings.configurationIdentity }
        }
        let plain = [FetchOperation<Data>(url: url), FetchOperation<Data>(url: url)]
        #expect(identity(plain[0]) == identity(plain[1]), "the default is shared")

        let limited = (0..<3).map { _ in
            let operation = FetchOperation<Data>(url: url)
            operation.configuration.maximumResponseSize = 1234
            return operation
        }
        #expect(Set(limited.map(identity)).count == 1, "configured alike, one after another")
        #expect(identity(limited[0]) != identity(plain[0]))

        // Changing one changes that one only.
        limited[1].configuration.retryPolicy = .none
        #expect(identity(limited[1]) != identity(limited[0]))
        #expect(limited[0].configuration.retryPolicy == .default)
        #expect(limited[2].configuration.maximumResponseSize == 1234)
        #expect(limited[1].configuration.maximumResponseSize == 1234)
        #expect(limited[1].configuration.retryPolicy == .none)
        #expect(plain[0].configuration.maximumResponseSize == FetchConfiguration.defaultMaximumResponseSize)
    }

    @Test func configurationsHoldingClosuresAreNeverTakenForEachOther() {
        var asking = FetchConfiguration()
        asking.redirectPolicy = .ask { _ in nil }
        #expect(!asking.isIdentical(to: asking), "a closure cannot be compared")

        let base = FetchConfiguration(parseQueue: .immediate)
        #expect(base.isIdentical(to: base))
        var other = base
        other.parseQueue = .dispatch(DispatchQueue(label: "other"))
        #expect(!base.isIdentical(to: other))
        other = base
        other.redirectPolicy = .follow(maximum: 3)
        #expect(!base.isIdentical(to: other))
        other = base
        other.acceptableStatusCodes = [200]
        #expect(!base.isIdentical(to: other))
        other = base
        other.session = FetchSession(configuration: .ephemeral)
        #expect(!base.isIdentical(to: other))
        other.session.invalidate()
    }

    /// A queue of one slot, held by a fetch whose head never comes, and a fetch of `path`
    /// waiting for that slot (it completes once the blocker is cancelled).
    private func fetchWaitingBehindABlocker(on server: TestServer, path: String) async
        -> (queue: FetchQueue, blocker: FetchOperation<Data>, waiting: FetchOperation<Data>, done: Countdown) {
        let queue = makeFetchQueue(total: 1, perHost: 1, monitors: [])
        let blocker = server.operation("/stall-head")
        queue.enqueue(blocker)
        #expect(await counts(of: queue, reach: { $0.inFlight == 1 }))
        let waiting = server.operation(path)
        let done = Countdown(1)
        queue.enqueue(waiting) { _ in done.signal() }
        #expect(await counts(of: queue, reach: { $0.waiting == 1 }))
        return (queue, blocker, waiting, done)
    }
}
