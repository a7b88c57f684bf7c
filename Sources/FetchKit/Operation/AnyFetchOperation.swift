import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What every fetch has in common, whatever its output: the request, the settings, the
/// lifecycle, the response and the error.
///
/// Subclass ``FetchOperation`` (an endpoint with a parsed output) or ``DownloadOperation`` (a
/// file), not this class. ``FetchQueue`` and dependencies work with any `AnyFetchOperation`,
/// so that a queue holds fetches of different outputs.
///
/// It is `open` because Swift requires the superclass of an open class to be open, not to be
/// subclassed itself: its initializer is internal to FetchKit, so a class of yours derived
/// from it directly has no initializer and cannot be made. Its `open` members —
/// ``makeRequest()``, ``addDependency(_:)``, ``removeDependency(_:)``, ``dependencies`` and
/// `description` — are hooks for your subclasses of ``FetchOperation`` and
/// ``DownloadOperation``; its lifecycle (``start()``, ``cancel()``, ``isExecuting``,
/// ``isFinished``, ``isCancelled``, ``isReady``, ``isAsynchronous``) is `final`.
///
/// The operation runs Foundation's asynchronous lifecycle itself — ready, executing, finished,
/// cancelled — and sends the `isExecuting` / `isFinished` change notifications that
/// `OperationQueue` relies on, on Linux and Apple platforms alike. It finishes exactly once,
/// and every completion handler runs exactly once, whatever races: cancel, transport error,
/// timeout, parse failure.
///
/// What it sends (``request``) and how (``configuration``: session, timeouts, limits, policies,
/// parse queue) are set before the operation starts, and fixed from then on: setting them later
/// traps. Results (``response``, ``responseBody``, ``error``, and the typed output of
/// ``OutputProducing/result``) are set when it finishes.
open class AnyFetchOperation: Operation, @unchecked Sendable {
    struct Settings {
        /// Shared with every operation that keeps the default configuration (most of them):
        /// an operation stores a reference, not the whole value.
        private var storedConfiguration = ConfigurationBox.default
        var request: URLRequest?
        var configuration: FetchConfiguration {
            get { storedConfiguration.value }
            set { storedConfiguration = ConfigurationBox.interned(newValue) }
        }

        /// Which box holds the configuration (tests).
        var configurationIdentity: ObjectIdentifier { ObjectIdentifier(storedConfiguration) }
        /// The box itself: what each attempt reads instead of copies of its values.
        var configurationBox: ConfigurationBox { storedConfiguration }

        init(request: URLRequest?) {
            self.request = request
        }
    }

    /// An immutable configuration behind one reference.
    final class ConfigurationBox: Sendable {
        let value: FetchConfiguration
        /// What it sets for every transfer, made once for all the attempts of the operations
        /// that share this box.
        let transferSettings: TransferLimits.Settings
        static let `default` = ConfigurationBox(FetchConfiguration())
        /// The box last made: operations configured alike one after another (the usual
        /// loop: make, configure, enqueue) share it.
        private static let recent = Protected<ConfigurationBox?>(nil)

        init(_ value: FetchConfiguration) {
            self.value = value
            transferSettings = TransferLimits.Settings(configuration: value)
        }

        /// A box holding `value`: the default one or the last one made, if either holds the
        /// same settings; otherwise a new one.
        static func interned(_ value: FetchConfiguration) -> ConfigurationBox {
            if value.isIdentical(to: Self.default.value) { return .default }
            return recent.withLock { recent in
                if let recent, recent.value.isIdentical(to: value) { return recent }
                let made = ConfigurationBox(value)
                recent = made
                return made
            }
        }
    }

    let core: Protected<Core>

    /// The identifier the ``FetchQueue`` that claimed it gave it (0 for none). Guarded by
    /// ``core``'s lock, like the claim itself (``claim(by:id:)``): a queue asks it whether an
    /// operation is its own, without reading an entry that another queue writes under its lock.
    /// Here rather than in the core, whose allocation has no room left.
    final var claimedID: UInt64 = 0

    /// Creates an operation for `request`.
    ///
    /// - Parameter request: The request to send. It may be `nil` now and set later, or built
    ///   just before sending by overriding ``makeRequest()``.
    init(request: URLRequest?) {
        core = Protected(Core(settings: Settings(request: request)))
        super.init()
    }

    /// Bytes received of bytes expected, updated as the body arrives.
    ///
    /// `totalUnitCount` is the `Content-Length` (or -1 while unknown); `completedUnitCount`
    /// the bytes received. Calling `cancel()` on it cancels the operation. It has no parent:
    /// to compose it, `addChild(_:withPendingUnitCount:)` it to yours. Created on first use,
    /// so that queued operations nobody watches carry none. On Linux a `Progress` cannot be
    /// observed with KVO: poll it, or use ``onProgress(on:minimumInterval:_:)``.
    public var progress: Progress {
        core.withLock { core in
            if let progress = core.progress { return progress }
            let progress = Progress(parent: nil, userInfo: nil)
            progress.totalUnitCount = core.bytesExpected ?? -1
            progress.completedUnitCount = core.bytesReceived
            progress.cancellationHandler = { [weak self] in self?.cancel() }
            core.progress = progress
            core.progressWrites = ProgressWrites()
            return progress
        }
    }

    // MARK: Settings (frozen once enqueued or started)

    /// The request to send. Set it before you enqueue the operation (see ``configuration``); or
    /// build it just before sending by overriding ``makeRequest()``.
    public var request: URLRequest? {
        get { setting(\.request) }
        set { set(\.request, newValue, "request") }
    }

    /// How the operation fetches: session, limits, timeouts, policies, parse queue.
    ///
    /// Change it before you enqueue the operation: `operation.configuration.retryPolicy = .none`.
    /// It is frozen — readable, no longer settable — from the moment a ``FetchQueue`` accepts
    /// the operation (``FetchQueue/enqueue(_:completion:)``, ``FetchQueue/fetch(_:)``, or as
    /// another fetch's dependency), or from `start()` for an operation run another way. Setting
    /// it (or ``request``) after that traps, naming the operation, every time — whether or not
    /// the queue has started the operation yet: a change that might or might not take effect is
    /// a bug to find, not to ignore. (An `OperationQueue` of your own does not tell the
    /// operation it was added: there it is frozen at `start()`; set it before adding it.)
    public var configuration: FetchConfiguration {
        get { setting(\.configuration) }
        set { set(\.configuration, newValue, "configuration") }
    }

    // Read by FetchKit itself, and by subclasses (on the frozen value once started). Each reads
    // its one field in the shared box, under the lock: not a copy of the whole configuration
    // through a key path, as ``configuration`` returns it (a queue asks a fetch's session three
    // times).
    var session: FetchSession { core.withLock { $0.settings.configurationBox.value.session } }
    var maximumResponseSize: Int64 { core.withLock { $0.settings.configurationBox.value.maximumResponseSize } }
    var validatorStore: ValidatorStore? { core.withLock { $0.settings.configurationBox.value.validatorStore } }
    var retryPolicy: RetryPolicy { core.withLock { $0.settings.configurationBox.value.retryPolicy } }

    // MARK: Results (set when finished)

    /// How many attempts were made (more than 1 when retried); 0 if nothing was sent.
    ///
    /// An attempt counts once its request went to the network: a fetch paused or cancelled
    /// while it waited for its queue's slot, or for a dependency, counts none for that wait.
    public var attempts: Int {
        core.withLock { $0.attempt.sentCount }
    }

    /// Whether the server answered `304 Not Modified` to a conditional GET (see
    /// ``FetchConfiguration/validatorStore``). The operation then succeeded, its output made from
    /// the body the store kept; ``responseBody`` is that body.
    public var isNotModified: Bool {
        core.withLock { $0.isNotModified }
    }

    /// The HTTP response, once it arrived. Also set for an unacceptable status.
    public var response: HTTPURLResponse? {
        core.withLock { $0.response }
    }

    /// The trailer fields that followed the response body, after a successful transfer: names
    /// lowercased, a repeated field's values joined with `", "`; empty when there were none.
    ///
    /// Trailers come after a chunked HTTP/1.1 body or an HTTP/2 stream (RFC 9110 §6.5): a
    /// checksum, a `Server-Timing`, a gRPC status. They are never taken for header fields — a
    /// trailer does not set a cookie or change how the body is read. On Linux FetchKit keeps
    /// them where ``FetchSession/guardsResponseHeads`` is `true`, up to 64 KiB (more fail the
    /// fetch with ``FetchError/InvalidResponse/Reason/trailersTooLarge(limit:)``); URLSession on
    /// Apple platforms does not hand them over, so there they are always empty.
    public var responseTrailers: [String: String] {
        core.withLock { $0.trailers }
    }

    /// The response body, after a successful transfer.
    public var responseBody: Data? {
        core.withLock { $0.body?.data }
    }

    /// How many times the operation made its output from a body — ran its parse hook
    /// (``FetchOperation/parseResponseBody(_:)``): FetchKitTesting's endpoint check reports it.
    package var parseCount: Int {
        core.withLock { $0.parses }
    }

    /// Why the operation failed; `nil` while it runs and after success.
    public var error: FetchError? {
        core.withLock { $0.machine.outcome.flatMap { outcome in
            if case .failure(let error) = outcome { return error }
            return nil
        } }
    }

    /// The request as it was sent (after ``makeRequest()``), once the operation started sending:
    /// `nil` until an attempt's request went to the network (not while it waits for a slot).
    public var sentRequest: URLRequest? {
        core.withLock { $0.attempt.lastSentRequest }
    }

    // MARK: Hooks for subclasses

    /// Builds the request just before it is sent. Override it to use a dependency's result.
    ///
    /// Called once, after every dependency has finished and before any transfer starts, on the
    /// thread that started the operation. The default returns ``request``. Return the request
    /// you built; do not assign ``request`` (or ``configuration``) here: the operation has
    /// started, so they are fixed, and setting them traps.
    ///
    /// ```swift
    /// nonisolated final class GetProfile: FetchOperation<Data>, @unchecked Sendable {
    ///     let login: FetchOperation<String>        // a dependency that returns the token
    ///
    ///     init(after login: FetchOperation<String>) {
    ///         self.login = login
    ///         super.init()
    ///         addDependency(login)
    ///     }
    ///
    ///     override func makeRequest() throws -> URLRequest? {
    ///         var request = URLRequest(url: api.appendingPathComponent("profile"))
    ///         request.setValue("Bearer \(try login.result?.get() ?? "")", forHTTPHeaderField: "Authorization")
    ///         return request
    ///     }
    /// }
    /// ```
    ///
    /// - Returns: The request to send; `nil` finishes the operation with an invalid-request error.
    /// - Throws: Any error; the operation then finishes with
    ///   ``FetchError/InvalidRequest/Reason/preparationFailed(_:)``.
    open func makeRequest() throws -> URLRequest? {
        request
    }

    // MARK: Foundation's lifecycle (final: a subclass cannot break it)

    /// Always `true`: the operation finishes when its transfer and parse are done, not when
    /// `start()` returns.
    public final override var isAsynchronous: Bool { true }

    /// Whether the operation has started and not yet finished.
    public final override var isExecuting: Bool {
        core.withLock { $0.machine.isExecuting }
    }

    /// Whether the operation has finished, successfully or not.
    public final override var isFinished: Bool {
        core.withLock { $0.machine.isFinished }
    }

    /// Whether ``cancel()`` was called before the operation finished.
    public final override var isCancelled: Bool {
        core.withLock { $0.machine.isCancelled }
    }

    /// Foundation's readiness: every dependency finished, or the operation was cancelled.
    public final override var isReady: Bool {
        observedReadiness(super.isReady)
    }

    /// Makes this operation wait for `operation` to finish (Foundation's behaviour).
    ///
    /// While it waits, the operation is kept alive: you may drop your references to it, even if
    /// no queue holds it, and it is freed once its dependencies finished, or when it is cancelled
    /// or finishes. (On Linux, Foundation keeps an operation's dependents without retaining them,
    /// and a dependent freed before its dependency finished crashed the process when it did.)
    ///
    /// - Parameter operation: The operation to wait for.
    open override func addDependency(_ operation: Operation) {
        // Foundation asks this operation's readiness here; that is not a queue taking it.
        let asked = core.withLock { $0.readinessAsked }
        super.addDependency(operation)
        if !asked { core.withLock { $0.readinessAsked = false } }
        holdWhileWaiting(for: operation) { super.isReady }
    }

    /// Stops waiting for `operation` (Foundation's behaviour).
    ///
    /// - Parameter operation: The dependency to remove.
    open override func removeDependency(_ operation: Operation) {
        super.removeDependency(operation)
        forgetDetached(operation)
    }

    /// The operations this one waits for, or waited for.
    ///
    /// A cancelled operation, or one that finished before its dependencies did, still lists
    /// them here, although it no longer waits for them (see ``addDependency(_:)``).
    open override var dependencies: [Operation] {
        detachedDependencies ?? super.dependencies
    }

    /// Starts the operation: an `OperationQueue` calls it, or you may call it yourself.
    ///
    /// It returns at once; the operation finishes later. A cancelled operation finishes inside
    /// `start()`. Calling it again, or on a finished operation, does nothing. Called by hand
    /// before the dependencies finished, the operation fails with
    /// ``FetchError/InvalidRequest/Reason/startedBeforeReady`` rather than trapping.
    public final override func start() {
        lifecycleStart()
    }

    /// Cancels the operation.
    ///
    /// Before it starts, this only marks it cancelled (and ready): its queue then starts it and
    /// it finishes at once with ``FetchError/cancelled(_:)``, sending nothing. While it waits for a
    /// slot or transfers, the transfer is stopped and it finishes with ``FetchError/cancelled(_:)``.
    /// While it parses, the parse runs to its end (check `isCancelled` to stop early) and it
    /// finishes as cancelled. After it finished, this does nothing.
    public final override func cancel() {
        lifecycleCancel {
            // Before Foundation's cancel, which then makes it ready whatever it left.
            leaveDependencies(super.dependencies, onlyIfUnfinished: false) { super.removeDependency($0) }
            super.cancel()
        }
    }

    open override var description: String {
        let (phase, cancelled, url) = core.withLock { ($0.machine.phase, $0.machine.isCancelled, ($0.sentRequest ?? $0.settings.request)?.url) }
        let target = url.map(Redaction.redacted) ?? "no request"
        return "<\(type(of: self)) \(name.map { "'\($0)' " } ?? "")\(target) \(phase)\(cancelled ? ", cancelled" : "")>"
    }

    // MARK: Internal hooks (a download overrides them)

    /// Runs once, when the operation has finished, before any completion handler: a download
    /// lets go of its destination here, so that whoever a handler tells of the end finds it so.
    func finishedBeforeCompletions() {}

    /// Called once the operation is finished, right before Foundation hears `isFinished`: lets
    /// go of what a dependent may need. Does nothing here.
    func willAnnounceFinished() {}

    /// Where the body goes: memory here; a download writes a file. Called once per transfer.
    func makeBodySink() -> any ResponseBodySink {
        MemoryBodySink(limit: maximumResponseSize)
    }

    /// The body sink of an attempt that a ``FetchQueue`` runs, made before it waits for its
    /// slot; or `nil` for a body kept in memory, whose sink its flight makes when the queue
    /// grants the slot: a waiting fetch holds none. A download makes its sink now
    /// (it checks its destination, and the operation asks it whether the disk fell behind).
    func makeBodySinkBeforeGrant() -> (any ResponseBodySink)? {
        nil
    }

    /// The current attempt's body sink if it stopped the transfer for the disk to catch up
    /// (a download's may); the next attempt then continues from what is on disk. A body kept
    /// in memory never does.
    func sinkThatFellBehind() -> (any DownloadBodySink)? {
        nil
    }

    /// Whether a failed attempt may be followed by another (a retry, a refreshed credential's).
    /// `true` here; a stream says `false` once its reader got a byte of the body.
    var repeatsAttempts: Bool {
        true
    }

    /// Whether an attempt that failed with `error` is followed at once by one that starts
    /// over from nothing, whatever the retry policy says: a download whose source changed
    /// while it resumed (its partial file is gone; the next attempt asks for the whole file).
    func startsOver(after error: FetchError) -> Bool {
        false
    }

    /// Whether the operation can make its output from a `304 Not Modified` when its validator
    /// store kept no body for the URL. `true` here (a download keeps its file); a
    /// ``FetchOperation`` says.
    var revalidatesWithoutStoredBody: Bool {
        true
    }

    /// Last checks of a prepared, valid request, once, before the first attempt (a download
    /// checks and claims its destination).
    func prepareTransferRequest(_ request: URLRequest) throws(FetchError) -> URLRequest {
        request
    }

    /// The request of one attempt: the prepared one, plus the validators of a conditional GET.
    /// Called before every attempt (a download adds `Range` to continue its partial file).
    func prepareAttempt(_ request: URLRequest, attempt: Int) -> AttemptSetup {
        let setup = conditionalRequest(for: request)
        recordAttempt(attempt, request: setup.request, conditional: setup.acceptsNotModified,
                      prepared: setup.acceptsNotModified ? request : nil)
        return setup
    }

    /// Records an attempt about to be sent.
    ///
    /// - Parameter prepared: The request the attempt was made from, if its request adds to it
    ///   (later attempts start from it); `nil` if it is the request sent.
    func recordAttempt(_ attempt: Int, request: URLRequest, conditional: Bool, prepared: URLRequest?) {
        core.withLock { core in
            core.attempts = attempt
            core.attemptBase = prepared
            core.sentRequest = request
            core.sentConditionalRequest = conditional
            // On its own, the attempt is under way now (in a queue, when it gets its slot).
            if !core.claimed { core.attemptGranted(self) }
        }
    }

    /// Turns the complete body into the operation's output, on the parse queue: a
    /// ``FetchOperation`` parses it, a ``DownloadOperation`` moves its file into place.
    ///
    /// - Parameters:
    ///   - body: The body; after a `304 Not Modified`, the body the validator store kept, or
    ///     `nil` if it keeps none.
    ///   - notModified: Whether the server answered `304 Not Modified`.
    /// - Throws: A ``FetchError`` as it is; any other error becomes ``FetchError/parseFailed(_:)``.
    func makeOutput(from body: ResponseBody?, notModified: Bool) throws -> any Sendable {
        body?.data ?? Data()
    }

    /// Makes the output and keeps it, and records the validators of a conditional GET (see
    /// AnyFetchOperation+ConditionalGET.swift).
    func process(_ body: ResponseBody?) throws(FetchError) {
        let notModified = core.withLock { $0.isNotModified }
        let output: any Sendable
        do {
            output = try makeOutput(from: body, notModified: notModified)
        } catch let error as FetchError {
            throw error
        } catch {
            throw parseFailure(error)
        }
        core.withLock { $0.output = output }
        if !notModified { recordValidators(body: body) }
    }

    /// A parse hook's error, as the operation reports it.
    func parseFailure(_ error: any Error) -> FetchError {
        let url = core.withLock { $0.response?.url ?? $0.sentRequest?.url }
        return .parseFailed(.init(underlying: .init(error), url: url))
    }

    // MARK: Settings plumbing

    private func setting<Value>(_ keyPath: KeyPath<Settings, Value>) -> Value {
        core.withLock { $0.settings[keyPath: keyPath] }
    }

    private func set<Value>(_ keyPath: WritableKeyPath<Settings, Value>, _ value: Value, _ name: String) {
        let frozen = core.withLock { core -> Bool in
            // Frozen once a queue accepted it (not only once started, which depends on when the
            // queue gets to it): the transfer uses the values read at start.
            guard core.machine.phase == .pending, !core.claimed else { return true }
            core.settings[keyPath: keyPath] = value
            return false
        }
        if frozen {
            preconditionFailure("FetchKit: \(name) of \(self) set after it was enqueued or started; set it before enqueueing the operation, and in makeRequest() return the request instead of setting it")
        }
    }
}
