import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How an operation that no ``FetchQueue`` holds tells its session's monitors about its life.
///
/// A queue tells the monitors of the fetches it holds (FetchQueue+Events.swift). An operation
/// started on its own or by an `OperationQueue` has no queue, so it sends the same events
/// itself, each under its core lock at the state change it reports: the order of the sends is
/// the order of the changes, and ``MonitorChannel`` keeps it.
struct SessionMonitoring {
    let channel: MonitorChannel
    let id: FetchID
    /// When the operation started, sent its first request, and got its first response head
    /// (uptime ns).
    let startedAt: UInt64
    var firstRequestAt: UInt64?
    var firstResponseAt: UInt64?
    var bodyLength: Int64 = 0

    init(channel: MonitorChannel, id: FetchID, startedAt: UInt64 = DispatchTime.now().uptimeNanoseconds,
         firstRequestAt: UInt64? = nil, firstResponseAt: UInt64? = nil, bodyLength: Int64 = 0) {
        self.channel = channel
        self.id = id
        self.startedAt = startedAt
        self.firstRequestAt = firstRequestAt
        self.firstResponseAt = firstResponseAt
        self.bodyLength = bodyLength
    }

    /// Monitoring for an operation starting now, if it is on its own and its session has
    /// monitors.
    static func forStart(of core: AnyFetchOperation.Core) -> SessionMonitoring? {
        guard !core.claimed, let channel = core.settings.configuration.session.monitorChannel else { return nil }
        return SessionMonitoring(channel: channel, id: FetchID.next())
    }

    func send(_ event: MonitorEvent, _ operation: AnyFetchOperation) {
        channel.send(event, for: MonitoredFetch(id: id, operation: operation))
    }

    /// The first attempt's request goes out.
    mutating func began(_ request: URLRequest, _ operation: AnyFetchOperation) {
        guard firstRequestAt == nil else { return }
        firstRequestAt = DispatchTime.now().uptimeNanoseconds
        bodyLength = Int64(request.httpBody?.count ?? 0)
        send(.started(request), operation)
    }

    /// An accepted response head arrived.
    mutating func received(_ response: HTTPURLResponse, _ operation: AnyFetchOperation) {
        if firstResponseAt == nil { firstResponseAt = DispatchTime.now().uptimeNanoseconds }
        send(.response(response), operation)
    }

    /// The last two events: the metrics, then the outcome.
    func finished(_ error: FetchError?, attempts: Int, bytesReceived: Int64, _ operation: AnyFetchOperation) {
        send(.metrics(FetchMetrics(enqueuedAt: startedAt, startedAt: firstRequestAt, firstResponseAt: firstResponseAt,
                                   now: DispatchTime.now().uptimeNanoseconds, attempts: attempts,
                                   bytesReceived: bytesReceived, bodyLength: bodyLength)), operation)
        send(.finished(error), operation)
    }
}

extension AnyFetchOperation {
    /// Its queue is being freed while it has not finished: from now on it tells its session's
    /// monitors itself, as the fetch the queue announced (same identifier, same clocks), so that
    /// they still hear its end. Does nothing once it has finished.
    func takeOverSessionMonitoring(from entry: QueueState.Entry, id: FetchID) {
        guard let channel = entry.sessionMonitors else { return }
        core.withLock { core in
            guard !core.machine.isFinished else { return }
            core.monitoring = SessionMonitoring(channel: channel, id: id, startedAt: entry.enqueuedAt,
                                                firstRequestAt: entry.startedAt, firstResponseAt: entry.firstResponseAt,
                                                bodyLength: entry.bodyLength)
        }
    }
}
