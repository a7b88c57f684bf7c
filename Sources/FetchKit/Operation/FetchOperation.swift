import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An asynchronous `Operation` that fetches one HTTP request and hands the body to your parser.
///
/// Subclass it once per API endpoint and override ``parseResponseBody(_:)``:
///
/// ```swift
/// final class GetUser: FetchOperation, @unchecked Sendable {
///     private(set) var user: User?
///     override func parseResponseBody(_ body: Data) throws {
///         user = try JSONDecoder().decode(User.self, from: body)
///     }
/// }
///
/// let getUser = GetUser(request: URLRequest(url: userURL))
/// getUser.onCompletion(on: .main) { op in
///     if let error = op.error { print(error) } else { show(op.user!) }
/// }
/// queue.addOperation(getUser)
/// ```
///
/// The operation runs Foundation's asynchronous lifecycle itself — ready, executing, finished,
/// cancelled — and sends the `isExecuting` / `isFinished` change notifications that
/// `OperationQueue` relies on, on Linux and Apple platforms alike. It finishes exactly once,
/// and every completion handler runs exactly once, whatever races: cancel, transport error,
/// timeout, parse failure.
///
/// Settings (``request``, ``session``, timeouts, limits, queues) may be changed until the
/// operation starts; after that they are frozen and changes are ignored. Results
/// (``response``, ``responseBody``, ``error``) are set when it finishes.
open class FetchOperation: Operation, @unchecked Sendable {
    struct Settings {
        var request: URLRequest?
        var session: FetchSession = .shared
        /// Shared by every operation until one changes it (copy-on-write), not one set each.
        var acceptableStatusCodes: Set<Int> = FetchOperation.defaultAcceptableStatusCodes
        var maximumResponseSize: Int64 = FetchOperation.defaultMaximumResponseSize
        var idleTimeout: TimeInterval?
        var totalTimeout: TimeInterval?
        var parseQueue: CallbackQueue = .global
        var completionQueue: CallbackQueue = .global
        var requiresSuccessfulDependencies = true
        var retryPolicy: RetryPolicy = .default
        var redirectPolicy: RedirectPolicy = .default
        var credentials: CredentialProvider?
        var validatorStore: ValidatorStore?
        var parsesStoredBodyWhenNotModified = false
    }

    let core: Protected<Core>

    /// The default ``maximumResponseSize``: 512 MiB.
    public static let defaultMaximumResponseSize: Int64 = 512 << 20

    /// The default ``acceptableStatusCodes``: 200–299.
    public static let defaultAcceptableStatusCodes: Set<Int> = Set(200..<300)

    /// Creates an operation for `request`.
    ///
    /// - Parameter request: The request to send. It may be `nil` now and set later, or built
    ///   just before sending by overriding ``makeRequest()``.
    public init(request: URLRequest? = nil) {
        core = Protected(Core(settings: Settings(request: request)))
        super.init()
    }

    /// Bytes received of bytes expected, updated as the body arrives.
    ///
    /// `totalUnitCount` is the `Content-Length` (or -1 while unknown); `completedUnitCount`
    /// the bytes received. Calling `cancel()` on it cancels the operation. It has no parent:
    /// to compose it, `addChild(_:withPendingUnitCount:)` it to yours. Created on first use,
    /// so that queued operations nobody watches carry none. On Linux a `Progress` cannot be
    /// observed with KVO: poll it, or use ``onProgress(on:_:)``.
    public var progress: Progress {
        core.withLock { core in
            if let progress = core.progress { return progress }
            let progress = Progress(parent: nil, userInfo: nil)
            progress.totalUnitCount = core.bytesExpected ?? -1
            progress.completedUnitCount = core.bytesReceived
            progress.cancellationHandler = { [weak self] in self?.cancel() }
            core.progress = progress
            return progress
        }
    }

    /// Creates an operation that GETs `url`.
    public convenience init(url: URL) {
        self.init(request: URLRequest(url: url))
    }

    // MARK: Settings (frozen once started)

    /// The request to send. Settable until the operation starts.
    public var request: URLRequest? {
        get { setting(\.request) }
        set { set(\.request, newValue) }
    }

    /// The session whose `URLSession` carries the transfer. Defaults to ``FetchSession/shared``.
    public var session: FetchSession {
        get { setting(\.session) }
        set { set(\.session, newValue) }
    }

    /// The status codes that count as success. Defaults to 200–299. Any other status finishes
    /// the operation with ``FetchError/unacceptableStatus(_:)``, and the parse hook is not called.
    public var acceptableStatusCodes: Set<Int> {
        get { setting(\.acceptableStatusCodes) }
        set { set(\.acceptableStatusCodes, newValue) }
    }

    /// The largest response body accepted, in bytes, counted after decoding (a gzip body is
    /// counted as it inflates). Defaults to ``defaultMaximumResponseSize``; for a
    /// ``DownloadOperation``, to ``DownloadOperation/defaultMaximumDownloadSize``, counting the
    /// whole file. A larger body stops the transfer as soon as it is known — from
    /// `Content-Length`, or when the bytes received pass the limit — with
    /// ``FetchError/responseTooLarge(_:)``.
    public var maximumResponseSize: Int64 {
        get { setting(\.maximumResponseSize) }
        set { set(\.maximumResponseSize, max(0, newValue)) }
    }

    /// The longest one attempt may go without hearing from the server, in seconds, at
    /// sub-second precision: until the response head, then between bytes of the body. `nil`
    /// (the default) uses the request's `timeoutInterval` (60 s unless set). When it passes,
    /// the attempt fails with ``FetchError/timedOut(_:)`` of kind
    /// ``FetchError/Timeout/Kind/idle``, naming this interval.
    ///
    /// It is what a request's `timeoutInterval` means to URLSession, and it holds for the whole
    /// fetch when the server never answers: an attempt that got no response head within it is
    /// **not retried**, so `timeoutInterval = 1` against a silent server fails after about
    /// 1 s, with the server asked once. An attempt whose server answered and then stalled
    /// mid-body may be retried by the ``retryPolicy`` (it often succeeds, and a
    /// ``DownloadOperation`` resumes where it stopped); each retry has the full interval again.
    /// To bound the whole fetch, retries and their waits included, set ``totalTimeout``.
    ///
    /// FetchKit enforces it itself: URLSession on Linux truncates timeouts to whole seconds.
    /// The clock starts when the transfer starts, never while the operation waits in a queue.
    public var idleTimeout: TimeInterval? {
        get { setting(\.idleTimeout) }
        set { set(\.idleTimeout, newValue) }
    }

    /// A deadline for the whole fetch, in seconds, at sub-second precision, or `nil` (the
    /// default) for none.
    ///
    /// The clock starts when the first attempt's transfer starts (never while the operation
    /// waits in a queue for a slot) and runs through every attempt and every wait between
    /// them: an attempt still running at the deadline is stopped, and a retry is not begun
    /// once the deadline has passed or when its wait would pass it (the last failure then
    /// stands). A fetch stopped at the deadline fails with ``FetchError/timedOut(_:)`` of kind
    /// ``FetchError/Timeout/Kind/total``, naming this interval. Enforced by FetchKit
    /// (URLSession on Linux ignores its resource timeout).
    public var totalTimeout: TimeInterval? {
        get { setting(\.totalTimeout) }
        set { set(\.totalTimeout, newValue) }
    }

    /// Where ``parseResponseBody(_:)`` runs. Defaults to ``CallbackQueue/global``.
    ///
    /// Name a serial queue to serialise every parse that touches a shared store (the
    /// "one managed-object context" case): parses then never run at the same time.
    public var parseQueue: CallbackQueue {
        get { setting(\.parseQueue) }
        set { set(\.parseQueue, newValue) }
    }

    /// Where completion handlers run unless ``onCompletion(on:_:)`` names another queue.
    /// Defaults to ``CallbackQueue/global``.
    public var completionQueue: CallbackQueue {
        get { setting(\.completionQueue) }
        set { set(\.completionQueue, newValue) }
    }

    /// Whether a failed or cancelled dependency stops this operation. Defaults to `true`.
    ///
    /// When `true` and a dependency that is a ``FetchOperation`` finished with an error, or any
    /// dependency was cancelled, this operation sends no request and finishes with
    /// ``FetchError/dependencyFailed(_:)``. Set `false` to run regardless, as plain
    /// `Operation`s do.
    public var requiresSuccessfulDependencies: Bool {
        get { setting(\.requiresSuccessfulDependencies) }
        set { set(\.requiresSuccessfulDependencies, newValue) }
    }

    /// When and how soon a failed attempt is tried again. Defaults to ``RetryPolicy/default``:
    /// two retries with backoff, for idempotent requests and transient failures only.
    public var retryPolicy: RetryPolicy {
        get { setting(\.retryPolicy) }
        set { set(\.retryPolicy, newValue) }
    }

    /// What to do with redirects. Defaults to following up to 10.
    public var redirectPolicy: RedirectPolicy {
        get { setting(\.redirectPolicy) }
        set { set(\.redirectPolicy, newValue) }
    }

    /// Who answers authentication challenges. `nil` (the default) declines them: the operation
    /// fails with the 401 at once.
    public var credentials: CredentialProvider? {
        get { setting(\.credentials) }
        set { set(\.credentials, newValue) }
    }

    /// Where the validators for conditional GETs live; `nil` (the default) sends none. See
    /// ``ValidatorStore``.
    public var validatorStore: ValidatorStore? {
        get { setting(\.validatorStore) }
        set { set(\.validatorStore, newValue) }
    }

    /// Whether a `304 Not Modified` runs the parse hook on the body the store kept (it must keep
    /// bodies). Default `false`: on a 304 the parse hook is not called — nothing changed.
    public var parsesStoredBodyWhenNotModified: Bool {
        get { setting(\.parsesStoredBodyWhenNotModified) }
        set { set(\.parsesStoredBodyWhenNotModified, newValue) }
    }

    // MARK: Results (set when finished)

    /// How many attempts were made (more than 1 when retried); 0 if nothing was sent.
    public var attempts: Int {
        core.withLock { $0.attempts }
    }

    /// Whether the server answered `304 Not Modified` to a conditional GET (see
    /// ``validatorStore``). The operation then succeeded; ``responseBody`` is the stored body
    /// if the store keeps bodies.
    public var isNotModified: Bool {
        core.withLock { $0.isNotModified }
    }

    /// The HTTP response, once it arrived. Also set for an unacceptable status.
    public var response: HTTPURLResponse? {
        core.withLock { $0.response }
    }

    /// The response body, after a successful transfer.
    public var responseBody: Data? {
        core.withLock { $0.body?.data }
    }

    /// Why the operation failed; `nil` while it runs and after success.
    public var error: FetchError? {
        core.withLock { $0.machine.outcome.flatMap { outcome in
            if case .failure(let error) = outcome { return error }
            return nil
        } }
    }

    /// The request as it was sent (after ``makeRequest()``), once the operation started sending.
    public var sentRequest: URLRequest? {
        core.withLock { $0.sentRequest }
    }

    // MARK: Hooks for subclasses

    /// Parses the body of a successful, validated response. Override it; the default does nothing.
    ///
    /// Called exactly once per successful transfer, on ``parseQueue`` — never on URLSession's
    /// delegate queue. The operation finishes only when this returns. A thrown error becomes
    /// ``FetchError/parseFailed(_:)``. Long parses may check `isCancelled` and stop early: a
    /// cancel that arrives while parsing finishes the operation as ``FetchError/cancelled``.
    ///
    /// - Parameter body: The complete body (empty when the response had none).
    open func parseResponseBody(_ body: Data) throws {}

    /// Builds the request just before it is sent. Override it to use a dependency's result.
    ///
    /// Called once, after every dependency has finished and before any transfer starts, on the
    /// thread that started the operation. The default returns ``request``.
    ///
    /// ```swift
    /// override func makeRequest() throws -> URLRequest? {
    ///     var request = URLRequest(url: api.appendingPathComponent("user"))
    ///     request.setValue("Bearer \(login.token!)", forHTTPHeaderField: "Authorization")
    ///     return request
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
    /// - Parameter operation: The operation to wait for.
    open override func addDependency(_ operation: Operation) {
        // Foundation asks this operation's readiness here; that is not a queue taking it.
        let asked = core.withLock { $0.readinessAsked }
        super.addDependency(operation)
        if !asked { core.withLock { $0.readinessAsked = false } }
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
    /// it finishes at once with ``FetchError/cancelled``, sending nothing. While it waits for a
    /// slot or transfers, the transfer is stopped and it finishes with ``FetchError/cancelled``.
    /// While it parses, the parse runs to its end (check `isCancelled` to stop early) and it
    /// finishes as cancelled. After it finished, this does nothing.
    public final override func cancel() {
        lifecycleCancel { super.cancel() }
    }

    open override var description: String {
        let (phase, cancelled, url) = core.withLock { ($0.machine.phase, $0.machine.isCancelled, ($0.sentRequest ?? $0.settings.request)?.url) }
        let target = url.map(Redaction.redacted) ?? "no request"
        return "<\(type(of: self)) \(name.map { "'\($0)' " } ?? "")\(target) \(phase)\(cancelled ? ", cancelled" : "")>"
    }

    // MARK: Internal hooks (a download overrides them)

    /// Where the body goes: memory here; a download writes a file. Called once per transfer.
    func makeBodySink() -> any ResponseBodySink {
        MemoryBodySink(limit: maximumResponseSize)
    }

    /// Last checks of a prepared, valid request, once, before the first attempt (a download
    /// checks and claims its destination).
    func prepareTransferRequest(_ request: URLRequest) throws(FetchError) -> URLRequest {
        request
    }

    /// The request of one attempt: the prepared one, plus the validators of a conditional GET.
    /// Called before every attempt (a download adds `Range` to continue its partial file).
    func prepareAttempt(_ request: URLRequest, attempt: Int) -> AttemptSetup {
        var request = request
        var conditional = false
        if let store = validatorStore, request.isGET, let url = request.url,
           request.value(forHTTPHeaderField: "If-None-Match") == nil,
           request.value(forHTTPHeaderField: "If-Modified-Since") == nil,
           let validators = store.validators(for: url) {
            if let tag = validators.entityTag { request.setValue(tag, forHTTPHeaderField: "If-None-Match") }
            if let date = validators.lastModified { request.setValue(date, forHTTPHeaderField: "If-Modified-Since") }
            conditional = true
        }
        recordAttempt(attempt, request: request, conditional: conditional)
        return AttemptSetup(request: request, acceptsNotModified: conditional)
    }

    func recordAttempt(_ attempt: Int, request: URLRequest, conditional: Bool) {
        core.withLock { core in
            core.attempts = attempt
            core.sentRequest = request
            core.sentConditionalRequest = conditional
        }
    }

    /// Hands a complete body to the subclass: here, ``parseResponseBody(_:)``. On the parse queue.
    func process(_ body: ResponseBody) throws(FetchError) {
        let (notModified, parsesStored) = core.withLock { ($0.isNotModified, $0.settings.parsesStoredBodyWhenNotModified) }
        // A 304: nothing changed. Parse only a stored body, and only if asked to.
        if notModified && !(parsesStored && body.data.map { !$0.isEmpty } == true) { return }
        do {
            try parseResponseBody(body.data ?? Data())
        } catch {
            throw parseFailure(error)
        }
        // Validators are recorded only once the body parsed: a body that failed is fetched
        // whole next time.
        if !notModified, let store = validatorStore, let response, response.statusCode == 200,
           let sent = sentRequest, sent.isGET, let url = sent.url {
            store.record(response, body: body.data, for: url)
        }
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

    private func set<Value>(_ keyPath: WritableKeyPath<Settings, Value>, _ value: Value) {
        core.withLock { core in
            // Frozen once started: the transfer uses the values read at start.
            guard core.machine.phase == .pending else { return }
            core.settings[keyPath: keyPath] = value
        }
    }
}
