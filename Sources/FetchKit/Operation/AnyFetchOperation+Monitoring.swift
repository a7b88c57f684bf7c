import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What is observed of one fetch — its identifier, its clocks, its request body — and who hears
/// of it: the monitors of the ``FetchQueue`` that holds it, those of its session, and its batch.
///
/// One record per fetch, kept by the operation under its core lock (in ``AnyFetchOperation/Extras``,
/// made only for a fetch somebody observes), whether a queue holds it or it runs on its own. Each
/// event is sent under that lock at the state change it reports, so the order of the sends is
/// the order of the changes, and each ``MonitorChannel`` keeps it. The metrics and the events
/// of every monitor come from here, and the progress a batch hears is the operation's own.
struct ObservedFetch {
    let id: FetchID
    /// The monitors of the queue that holds the fetch; dropped when that queue is freed (its
    /// monitors go with it).
    var queueMonitors: MonitorChannel?
    /// The monitors of the fetch's session.
    let sessionMonitors: MonitorChannel?
    /// The batch the fetch belongs to, and its index there.
    var batch: (FetchBatch, Int)?
    /// When it was enqueued (or started, on its own), got its transfer slot, and its first
    /// response head (uptime ns).
    let enqueuedAt: UInt64
    private(set) var startedAt: UInt64?
    private(set) var firstResponseAt: UInt64?
    private(set) var bodyLength: Int64 = 0
    /// When the monitors last heard of the fetch's progress (uptime ns; 0: not in this attempt).
    private var progressSentAt: UInt64 = 0

    /// The shortest time between two progress events of one fetch: 100 ms.
    static let progressInterval: UInt64 = 100_000_000

    init(id: FetchID, queueMonitors: MonitorChannel?, sessionMonitors: MonitorChannel?,
         enqueuedAt: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        self.id = id
        self.queueMonitors = queueMonitors
        self.sessionMonitors = sessionMonitors
        self.enqueuedAt = enqueuedAt
    }

    /// A record for a fetch, if anybody hears of it.
    static func make(id: FetchID, queueMonitors: MonitorChannel?, sessionMonitors: MonitorChannel?) -> ObservedFetch? {
        guard queueMonitors != nil || sessionMonitors != nil else { return nil }
        return ObservedFetch(id: id, queueMonitors: queueMonitors, sessionMonitors: sessionMonitors)
    }

    func send(_ event: MonitorEvent, _ operation: AnyFetchOperation) {
        guard queueMonitors != nil || sessionMonitors != nil else { return }
        let fetch = MonitoredFetch(id: id, operation: operation)
        queueMonitors?.send(event, for: fetch)
        sessionMonitors?.send(event, for: fetch)
    }

    /// Its first attempt got its transfer: once.
    mutating func began(_ request: URLRequest, _ operation: AnyFetchOperation) {
        guard startedAt == nil else { return }
        startedAt = DispatchTime.now().uptimeNanoseconds
        bodyLength = Int64(request.httpBody?.count ?? 0)
        send(.started(request), operation)
    }

    /// An accepted response head arrived: the attempt's first progress report follows at once.
    mutating func received(_ response: HTTPURLResponse, _ operation: AnyFetchOperation) {
        if firstResponseAt == nil { firstResponseAt = DispatchTime.now().uptimeNanoseconds }
        progressSentAt = 0
        send(.response(response), operation)
    }

    /// The transfer moved: the monitors hear of it, throttled (see
    /// ``FetchEventMonitor/fetch(_:didProgress:)``). A batch-only record sends nothing.
    mutating func progressed(_ progress: FetchProgress, _ operation: AnyFetchOperation) {
        guard queueMonitors != nil || sessionMonitors != nil else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        let completesBody = progress.bytesExpected.map { $0 > 0 && progress.bytesReceived == $0 } ?? false
        guard progressSentAt == 0 || now &- progressSentAt >= Self.progressInterval || completesBody else { return }
        progressSentAt = max(1, now)
        send(.progress(progress), operation)
    }

    /// The last two events: the metrics, then the outcome.
    func finished(_ error: FetchError?, attempts: Int, bytesReceived: Int64, _ operation: AnyFetchOperation) {
        send(.metrics(FetchMetrics(enqueuedAt: enqueuedAt, startedAt: startedAt, firstResponseAt: firstResponseAt,
                                   now: DispatchTime.now().uptimeNanoseconds, attempts: attempts,
                                   bytesReceived: bytesReceived, bodyLength: bodyLength)), operation)
        send(.finished(error), operation)
    }
}

extension AnyFetchOperation {
    /// Its queue put it into its `OperationQueue`: its monitors hear that it was enqueued.
    func announceEnqueued() {
        core.withLock { core in core.observed?.send(.enqueued, self) }
    }

    /// It is member `index` of `batch`, which hears of its progress from now on.
    func join(_ batch: FetchBatch, at index: Int) {
        core.withLock { core in
            if core.observed == nil {
                core.observed = ObservedFetch(id: FetchID(rawValue: claimedID), queueMonitors: nil, sessionMonitors: nil)
            }
            core.updateObserved { $0.batch = (batch, index) }
        }
    }

    /// The queue that holds it is being freed while it has not finished. Its queue's monitors
    /// go with the queue; its session's still hear its end, as the fetch the queue announced.
    ///
    /// - Returns: Whether to cancel it: it could never get a transfer slot now. One whose
    ///   transfer ended (it is parsing or completing) is left to finish with its result.
    func queueWasFreed() -> Bool {
        core.withLock { core in
            core.updateObserved { $0.queueMonitors = nil }
            return !core.machine.isFinished && core.machine.phase != .finishing
        }
    }
}
