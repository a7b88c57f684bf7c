import Foundation
import FetchKitTesting
@testable import FetchKit

/// An error for parse hooks to throw.
struct ParseTestError: Error, Equatable {
    let reason: String
}

/// Records how its parse hook was called.
final class RecordingOperation: FetchOperation<Data>, @unchecked Sendable {
    let parses = Locked<[Data]>([])
    let parseQueueLabels = Locked<[String]>([])
    var parseError: (any Error & Sendable)?
    /// Called inside the parse, before it returns (to hold a parse open, or observe concurrency).
    var onParse: (@Sendable (RecordingOperation) -> Void)?

    override init(request: URLRequest? = nil) {
        super.init(request: request)
        // Under a sanitizer the whole suite runs several times slower, and a request held at a
        // server gate can wait past the default 60 s idle timeout, which would retry it behind
        // the test's back. There only an explicit timeout ends a wait.
        if runsUnderSanitizer { configuration.idleTimeout = 600 }
    }

    override func parseResponseBody(_ body: Data) throws -> Data {
        parses.withLock { $0.append(body) }
        parseQueueLabels.withLock { $0.append(currentQueueLabel()) }
        onParse?(self)
        if let parseError { throw parseError }
        return body
    }
}

/// Calls `onDeinit` when released, to prove an operation is not leaked.
final class DeinitProbeOperation: FetchOperation<Data>, @unchecked Sendable {
    var onDeinit: (@Sendable () -> Void)?
    deinit { onDeinit?() }
}

/// Tags a dispatch queue so that code running on it can tell (see ``currentQueueLabel()``).
let queueTagKey = DispatchSpecificKey<String>()

func tagged(_ queue: DispatchQueue) -> DispatchQueue {
    queue.setSpecific(key: queueTagKey, value: queue.label)
    return queue
}

/// The label of the tagged queue the caller runs on, "untagged" elsewhere. The shared
/// session's router queue is tagged as "FetchKit.SessionRouter".
func currentQueueLabel() -> String {
    _ = routerTagged
    return DispatchQueue.getSpecific(key: queueTagKey) ?? "untagged"
}

private let routerTagged: Bool = {
    _ = tagged(FetchSession.shared.router.queue)
    return true
}()

extension OperationQueue {
    /// Adds operations without waiting (`addOperations(_:waitUntilFinished:)` is unavailable
    /// in async code).
    func enqueue(_ operations: [Operation]) {
        for operation in operations { addOperation(operation) }
    }
}

extension TestServer {
    /// A GET operation for a path on this server.
    func operation(_ path: String) -> RecordingOperation {
        RecordingOperation(request: URLRequest(url: url(path)))
    }
}

/// An operation queue with an explicit bound, as FetchKit recommends.
func makeQueue(_ maxConcurrent: Int, name: String = #function) -> OperationQueue {
    let queue = OperationQueue()
    queue.name = name
    queue.maxConcurrentOperationCount = maxConcurrent
    return queue
}

extension OutputProducing {
    /// Adds a completion that signals `countdown`, then awaits it.
    func awaitCompletion(timeout: TimeInterval = 30) async -> Bool {
        let done = Countdown(1)
        onCompletion(on: .global) { _ in done.signal() }
        return await done.wait(timeout: timeout)
    }
}

extension TestServer {
    /// Routes `path` to an answer, "open", held until `gate` opens. Requests held there count
    /// as in flight on the server.
    func gatedRoute(_ path: String, _ gate: TestGate) {
        route(path) { _ in .text("open").held(by: gate) }
    }
}

/// A timer that fires only when the test says so: time passes exactly when the test decides.
final class ManualTimer: @unchecked Sendable {
    private let pending = Locked<[@Sendable () -> Void]>([])

    var schedule: @Sendable (TimeInterval, @escaping @Sendable () -> Void) -> Void {
        { [pending] _, fire in pending.withLock { $0.append(fire) } }
    }

    var pendingCount: Int { pending.withLock { $0.count } }

    /// Fires every timer scheduled so far, in order.
    func fireAll() {
        let fires = pending.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
        for fire in fires { fire() }
    }
}

/// Lets at least `seconds` pass, measured by an event rather than a sleep: an operation with
/// that idle timeout against an endpoint that never answers (the standard `/stall-head`) times
/// out.
func letTimePass(_ seconds: TimeInterval, on server: TestServer) async -> Bool {
    let witness = FetchOperation<Data>(url: server.url("/stall-head?witness=\(UUID().uuidString)"))
    witness.configuration.idleTimeout = seconds
    _ = try? await witness.run()
    if case .timedOut? = witness.error { return true }
    return false
}

/// Runs `operation` to its end: its error, or `nil` when it succeeded.
func outcome(of operation: some OutputProducing) async -> FetchError? {
    do {
        try await operation.run()
        return nil
    } catch {
        return error
    }
}

extension FetchError {
    /// The details of a ``FetchError/responseTooLarge(_:)``, for `#require`.
    var sizeLimit: SizeLimit? {
        if case .responseTooLarge(let limit) = self { return limit }
        return nil
    }
}

extension DownloadOperation {
    /// The size of the file at `url` (following links), or `nil` if there is none.
    static func fileSize(_ url: URL) -> Int64? {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value
    }
}

extension OutputProducing {
    /// Starts an operation that no queue holds, and waits for it: `start()`, then ``value``.
    ///
    /// - Returns: The operation, for its results.
    @discardableResult
    func run() async throws(FetchError) -> Self {
        start()
        _ = try await value
        return self
    }

    /// Waits for the operation to finish (someone else starts it), through ``value``.
    ///
    /// - Returns: The operation, for its results.
    @discardableResult
    func finished() async throws(FetchError) -> Self {
        _ = try await value
        return self
    }
}
