import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension AnyFetchOperation {
    /// Everything mutable about an operation, guarded by one lock (`AnyFetchOperation.core`).
    ///
    /// Kept small, because tens of thousands of operations may wait in a queue: what every
    /// operation uses is stored inline; what only a transfer in progress needs (the response,
    /// the body, progress counts) lives in a ``Record`` made at its first use, and what only
    /// some callers ask for (progress handlers and sequences, retry handlers, state observers,
    /// the observed record, adoption, run-loop waiters) in an ``Extras`` box made at its first
    /// use. Both are values in boxes (``LazyFields``) reached only under the lock. The properties below keep their
    /// names and defaults whether or not their box exists; setting one to its default does not
    /// make the box.
    @dynamicMemberLookup
    struct Core {
        // The fields are ordered to pack: words first, then the odd-sized ones, each followed
        // by one-byte flags that fill its tail.

        // The current attempt's transfer (`nil` between attempts), and the coordinator (a
        // FetchQueue) that provides it, if any.
        // Weak: the queue holds its operations, not the other way round, so that a queue its
        // owner drops is freed (and cancels what it holds). `claimed` tells an operation whose
        // queue is gone from one that never had one.
        var transfer: (any TransferHandle)?
        weak var coordinator: (any TransferCoordinator)?

        // Completion delivery. The first handler is stored inline (most operations have one
        // at most: a queue's completion, or an `await`); later ones in an array.
        private var firstCompletion: CompletionEntry?
        /// Completion handlers dispatched and not yet returned (in the first entry's tail).
        private var storedOutstandingDeliveries: Int32 = 0
        private var laterCompletions: [CompletionEntry] = []

        // Ordered delivery of state changes (see AnyFetchOperation+Observation.swift).
        var pendingEvents: [Event] = []

        private var record = LazyFields<Record>()
        private var extras = LazyFields<Extras>()

        var machine = LifecycleStateMachine()
        var isDeliveringEvents = false
        var lastReportedReady = true
        /// How many attempts were made (in the machine's tail).
        private var storedAttempts: Int32 = 0
        var settings: Settings
        var claimed = false
        /// Someone asked `isReady` — as an `OperationQueue` does when it takes an operation. A
        /// pending operation that no FetchQueue holds and no one asked is run by nothing.
        var readinessAsked = false
        /// Set once the finished event has released the handlers; later ones run at once.
        var completionsReleased = false
        var sentConditionalRequest = false
        var isNotModified = false
        /// Progress was reported while transferring: a progress sequence made later starts
        /// with the current value (it is what the last report yielded).
        var progressReported = false
        // Last: its odd ninth byte ends the value, so that the core and its lock fit the
        // allocation OperationFootprintTests.theCoreAndItsLockAreOneAllocationOf248Bytes asserts.
        var sentRequest: URLRequest?

        init(settings: Settings) {
            self.settings = settings
        }

        var outstandingDeliveries: Int {
            get { Int(storedOutstandingDeliveries) }
            set { storedOutstandingDeliveries = Int32(newValue) }
        }
        /// How many attempts were made (results).
        var attempts: Int {
            get { Int(storedAttempts) }
            set { storedAttempts = Int32(clamping: newValue) }
        }

        /// Whether waiters may return: finished, and every completion handler has run.
        var isSettled: Bool {
            machine.isFinished && completionsReleased && outstandingDeliveries == 0
        }

        /// Keeps a completion handler until the operation finishes.
        mutating func appendCompletion(_ entry: CompletionEntry) {
            if firstCompletion == nil && laterCompletions.isEmpty {
                firstCompletion = entry
            } else {
                laterCompletions.append(entry)
            }
        }

        /// Takes the completion handlers, in the order they were added.
        mutating func takeCompletions() -> (first: CompletionEntry?, later: [CompletionEntry]) {
            defer {
                firstCompletion = nil
                laterCompletions = []
            }
            return (firstCompletion, laterCompletions)
        }

        /// Appends state changes for ordered delivery.
        ///
        /// - Returns: `true` if the caller must deliver them (``AnyFetchOperation/deliverEvents()``)
        ///   after unlocking; `false` if another thread is delivering and will pick them up.
        mutating func post(_ events: Event...) -> Bool {
            pendingEvents.append(contentsOf: events)
            guard !isDeliveringEvents else { return false }
            isDeliveringEvents = true
            return true
        }

        /// The request every attempt starts from, made and checked once before the first (see
        /// AnyFetchOperation+Attempts.swift): the sent one, unless the last attempt added to it.
        var preparedRequest: URLRequest? {
            record[\.attemptBase] ?? sentRequest
        }

        /// Which boxes exist (tests: a waiting operation nobody watches has made neither).
        var madeBoxes: (record: Bool, extras: Bool) {
            (record.isMade, extras.isMade)
        }

        /// A field of the transfer's ``Record`` (`core.response`, `core.bytesReceived`, …),
        /// which is made at the first write of a value other than the default.
        subscript<T>(dynamicMember field: WritableKeyPath<Record, T>) -> T {
            get { record[field] }
            set { record[field] = newValue }
        }

        /// A field of the rarely used ``Extras`` (`core.progress`, `core.observers`, …), made
        /// at the first write of a value other than the default.
        subscript<T>(dynamicMember field: WritableKeyPath<Extras, T>) -> T {
            get { extras[field] }
            set { extras[field] = newValue }
        }

        /// Takes the fetch's observed record out, if it has one, without making a box.
        func takeObserved() -> ObservedFetch? {
            extras.ifMade { extras in
                defer { extras.observed = nil }
                return extras.observed
            } ?? nil
        }

        /// Changes the fetch's observed record, if it has one. (`core.observed?.mutate()` would
        /// write the value back, and a write of `nil` asks whether it is the default, which
        /// allocates: twice per request for nothing.)
        func updateObserved(_ change: (inout ObservedFetch) -> Void) {
            extras.ifMade { extras in
                guard var observed = extras.observed else { return }
                change(&observed)
                extras.observed = observed
            }
        }

        /// Drops the progress relays and retry handlers, and the observers too if asked (the
        /// operation finished), without making a box.
        func dropHandlers(observers dropObservers: Bool) {
            extras.ifMade { extras in
                extras.progressRelays = []
                extras.retryHandlers = []
                if dropObservers { extras.observers = HandlerList() }
            }
        }

        /// The progress sequences' consumers (tests read their count).
        var progressStreams: LatestValueStreams<FetchProgress> {
            extras[\.progressStreams] ?? LatestValueStreams(latest: progressReported ? currentProgress : nil, finished: machine.isFinished)
        }

        /// Registers a progress sequence's consumer that is given a value at most every
        /// `minimumInterval` nanoseconds (see ``LatestValueStreams/add(_:minimumInterval:at:)``).
        mutating func addProgressStream(_ continuation: AsyncStream<FetchProgress>.Continuation, minimumInterval: UInt64) -> Int? {
            let initial = progressReported ? currentProgress : nil
            let ended = machine.isFinished
            return extras.withMade { extras in
                if extras.progressStreams == nil {
                    extras.progressStreams = LatestValueStreams(latest: initial, finished: ended)
                }
                return extras.progressStreams?.add(continuation, minimumInterval: minimumInterval)
            }
        }

        mutating func removeProgressStream(_ id: Int) {
            extras.ifMade { $0.progressStreams?.remove(id) }
        }

        /// Records a progress report and yields it to the sequences, if any.
        ///
        /// - Returns: When to call ``flushProgressStreams(due:at:)``, if a sequence's consumer waits
        ///   for its interval (``AnyFetchOperation/armProgressFlush(at:)`` arms it after unlocking).
        mutating func yieldProgress(_ value: FetchProgress) -> UInt64? {
            progressReported = true
            return extras.ifMade { $0.progressStreams?.yield(value) } ?? nil
        }

        /// Gives the latest value to the sequences' consumers that waited for their interval
        /// (the timer armed for `due` fired).
        ///
        /// - Returns: When to call it again, if some still wait.
        mutating func flushProgressStreams(due: UInt64, at now: UInt64) -> UInt64? {
            extras.ifMade { $0.progressStreams?.flush(due: due, at: now) } ?? nil
        }

        /// Ends the sequences, after yielding `final` (if any) to them: in the terminal transition
        /// (a sequence made later ends at once: the machine is finished).
        mutating func finishProgressStreams(with final: FetchProgress?) -> [AsyncStream<FetchProgress>.Continuation] {
            extras.ifMade { $0.progressStreams?.finish(with: final) ?? [] } ?? []
        }
    }

    /// A retry handler and the queue it runs on.
    typealias RetryHandler = (queue: CallbackQueue, handler: @Sendable (RetryEvent) -> Void)

    /// What a transfer brought, boxed when the first response, progress or result arrives (see
    /// ``Core``). Reached only under the operation's lock.
    struct Record: DefaultConstructible {
        var response: HTTPURLResponse?
        var trailers: [String: String] = [:]
        var body: ResponseBody?
        var output: (any Sendable)?
        /// How many times its output was made from a body (``AnyFetchOperation/parseCount``).
        var parses = 0
        var bytesReceived: Int64 = 0
        var bytesExpected: Int64?
        var bytesSent: Int64 = 0
        var bytesToSend: Int64?
        /// The receive rate, over this attempt's body (``RateWindow``).
        var rate = RateWindow()
        /// Body bytes of this attempt counted in ``rate``.
        var attemptBytesCounted: Int64 = 0
        /// The prepared request, when the last attempt's request added to it (the validators
        /// of a conditional GET, a download's `Range`); otherwise the sent request is it (see
        /// ``Core/preparedRequest``), and a fetch holds one request, not two.
        var attemptBase: URLRequest?
        /// The budget of ``FetchConfiguration/bandwidthLimit``, once an attempt needed it.
        var ownBudget: ReceiveBudget?
        /// Its attempts: the current one, and what they share (``AttemptState``).
        var attempt = AttemptState()
    }

    /// State that only some callers ask for, boxed at first use (see ``Core``). Reached only
    /// under the operation's lock.
    struct Extras: DefaultConstructible {
        weak var adopter: (any TransferCoordinator)?
        var adoptionID: FetchID?
        /// What its monitors and batch hear of (``ObservedFetch``), if anybody observes it.
        var observed: ObservedFetch?
        var progress: Progress?
        /// Orders the writes to ``progress`` (corelibs' `Progress` has no lock of its own); made
        /// with it.
        var progressWrites: ProgressWrites?
        var progressRelays: [ProgressRelay] = []
        /// Made when the first sequence is: its registry ends the sequences if the operation
        /// is freed unfinished.
        var progressStreams: LatestValueStreams<FetchProgress>?
        var retryHandlers: [RetryHandler] = []
        var observers = HandlerList<@Sendable (StateChange) -> Void>()
        var mainThreadWaiters = 0
        /// The operation itself while it waits for a dependency (see AnyFetchOperation+Dependents.swift).
        var keepAlive: AnyFetchOperation?
        /// The dependencies it had when it left them (cancelled, or finished before them).
        var detachedDependencies: [Operation]?
        /// The priority its queue gives its attempts, set after it was enqueued
        /// (``FetchQueue/setPriority(_:of:)``); `nil`: its `queuePriority`.
        var priorityOverride: Operation.QueuePriority?
    }

    /// An entry in the ordered delivery list.
    enum Event {
        /// A state key changed; sent to Foundation (for executing / finished) and to observers.
        case change(StateChange)
        /// The operation finished: run the completion handlers.
        case releaseCompletions
    }

    /// A completion handler and the queue it runs on.
    struct CompletionEntry {
        /// A value, not a closure wrapping one: a typed handler's closure fits in the
        /// existential's inline buffer, so that keeping it allocates nothing more.
        let handler: any CompletionHandler
        // After the handler, so that its odd size ends the entry and the core's next count
        // fills the tail.
        let queue: CallbackQueue

        init(queue: CallbackQueue, handler: any CompletionHandler) {
            self.handler = handler
            self.queue = queue
        }
    }
}

extension AnyFetchOperation {
    /// Claims a pending operation for a coordinator (a ``FetchQueue``).
    ///
    /// - Parameters:
    ///   - monitors: The coordinator's monitors, which hear of the fetch from now on (with
    ///     those of its session).
    /// - Returns: `false` if it already belongs to one, or has started.
    func claim(by coordinator: any TransferCoordinator, id: FetchID, monitors: MonitorChannel?) -> Bool {
        core.withLock { core in
            guard !core.claimed, core.machine.phase == .pending else { return false }
            core.claimed = true
            core.coordinator = coordinator
            claimedID = id.rawValue
            core.observed = ObservedFetch.make(id: id, queueMonitors: monitors,
                                               sessionMonitors: core.settings.configuration.session.monitorChannel)
            return true
        }
    }

    /// The identifier `coordinator` gave this operation when it claimed it, or `nil` if it
    /// does not hold it.
    func id(claimedBy coordinator: any TransferCoordinator) -> FetchID? {
        core.withLock { core in
            guard core.claimed, core.coordinator === coordinator, claimedID != 0 else { return nil }
            return FetchID(rawValue: claimedID)
        }
    }

    /// Gives back a claim that was refused before the operation was enqueued.
    func unclaim(by coordinator: any TransferCoordinator) {
        core.withLock { core in
            guard core.claimed, core.coordinator === coordinator, core.machine.phase == .pending else { return }
            core.claimed = false
            core.coordinator = nil
            claimedID = 0
            core.observed = nil
        }
    }

    /// Pending, held by no FetchQueue, and never taken by an `OperationQueue`: nothing will run
    /// it (see FetchQueue+Dependencies.swift).
    var isUnrunnable: Bool {
        core.withLock { !$0.claimed && $0.machine.phase == .pending && !$0.readinessAsked }
    }

    /// Records that `coordinator` enqueued this operation as another fetch's dependency.
    func markAdopted(by coordinator: any TransferCoordinator, id: FetchID) {
        core.withLock { core in
            core.adopter = coordinator
            core.adoptionID = id
        }
    }

    /// The identifier `coordinator` gave this operation when it enqueued it as a dependency,
    /// once: an explicit enqueue there takes it over (finished or not).
    func takeAdoption(by coordinator: any TransferCoordinator) -> FetchID? {
        core.withLock { core in
            guard let adopter = core.adopter, adopter === coordinator, let id = core.adoptionID else { return nil }
            core.adopter = nil
            core.adoptionID = nil
            return id
        }
    }
}

/// One attempt's request, and whether it carried the validators of a conditional GET.
struct AttemptSetup {
    var request: URLRequest
    var acceptsNotModified: Bool
    /// Where a download's attempt resumes its partial file (its `Range`), 0 otherwise.
    var resumedFrom: Int64 = 0
}

/// Something that moves one operation's request: a ``Transfer`` of its own, or a place in a
/// ``FetchQueue`` (which waits for a slot and may share one transfer among identical requests).
///
/// The operation may call ``stop()`` at any time once it holds the handle. Either way the
/// handle reports exactly once, through ``TransferOwner/transferDidEnd(_:of:)`` — after a stop,
/// with ``FetchError/cancelled(_:)`` once it has cleaned up.
protocol TransferHandle: AnyObject, Sendable {
    func stop()
}

/// One attempt as its operation hands it to its queue, in one call
/// (``TransferCoordinator/enqueue(_:attach:)``): everything the queue needs to place it, share it
/// and start it, fixed when the attempt is made, so that the queue never asks the operation
/// anything (as async-http-client's schedulable request carries its pool key and deadline).
struct QueuedAttempt {
    /// Whose attempt it is: it hears of the transfer (its ``TransferOwner``), and makes the body
    /// sink at grant for a body kept in memory.
    let owner: AnyFetchOperation
    /// The identifier its queue gave the fetch when it claimed it.
    let id: FetchID
    /// The request as sent, with the credential it carries (replaced at grant if it changed).
    let request: URLRequest
    let limits: TransferLimits
    let session: FetchSession
    /// Where it waits among the others: the fetch's priority in its queue.
    let priority: Operation.QueuePriority
    /// A download's sink, made before the grant (it checked its destination); `nil` for a body
    /// kept in memory, whose sink the owner makes at grant.
    let sink: (any ResponseBodySink)?
    /// Where a download's attempt resumes its partial file (its `Range`), 0 otherwise: if the
    /// server answers `206`, progress counts from there.
    let resumedFrom: Int64
    /// The credential `request` carries, if any: the current one replaces it at grant.
    let credential: AttemptCredential?
    /// The budget of the fetch's own bandwidth limit, if it has one (``FetchConfiguration/bandwidthLimit``).
    let ownBudget: ReceiveBudget?
}

/// A coordinator that provides transfers for the operations it owns (a ``FetchQueue``).
///
/// An operation that has one hands it each attempt once its dependencies finished and its
/// request was built; nothing is created in URLSession and no clock runs until the coordinator
/// lets the transfer begin.
protocol TransferCoordinator: AnyObject, Sendable {
    /// Takes an attempt: in one transition of the coordinator's state it is given its place in
    /// line and joins (an identical flight, or the line for a slot).
    ///
    /// `attach` runs once, within the call and outside every lock of the coordinator, with the
    /// attempt's handle, before anything the attempt's grant starts can report to the owner;
    /// it returns whether the owner keeps the handle (it was cancelled or paused while setting
    /// the attempt up if not: the coordinator then stops it, and its report of the cancel comes
    /// from a handle the owner does not hold).
    func enqueue(_ attempt: QueuedAttempt, attach: (any TransferHandle) -> Bool)

    /// The operation finished: called once, in the terminal transition, before any completion
    /// handler runs.
    func operationDidComplete(_ operation: AnyFetchOperation, id: FetchID)

    /// The credential its operations carry, if any (see ``FetchAuthentication``).
    var authentication: FetchAuthentication? { get }

    /// Runs the refresh of `authentication`'s credential of `generation`, and tells it of the
    /// end once.
    func runRefresh(_ operation: FetchOperation<FetchCredential>, generation: UInt64, for authentication: FetchAuthentication)
}

/// What runs when an operation finishes (see ``AnyFetchOperation/CompletionEntry``).
protocol CompletionHandler: Sendable {
    func run(_ operation: AnyFetchOperation)
}

/// A handler of the operation itself.
struct OperationCompletion: CompletionHandler {
    let body: @Sendable (AnyFetchOperation) -> Void

    func run(_ operation: AnyFetchOperation) {
        body(operation)
    }
}

/// A handler of the typed outcome (``OutputProducing/onCompletion(on:_:)``).
struct TypedCompletion<Output: Sendable>: CompletionHandler {
    let body: @Sendable (Result<Output, FetchError>) -> Void

    func run(_ operation: AnyFetchOperation) {
        body(operation.outcome(as: Output.self) ?? .failure(.cancelled(.init(url: operation.request?.url))))
    }
}
