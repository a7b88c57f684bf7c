import Dispatch
import Foundation

extension FetchQueue {
    /// Queues an event for the queue's monitors and those of the fetch's session, in order.
    /// Under the lock: the order of the calls is the order of the deliveries.
    func emit(_ event: MonitorEvent, _ id: FetchID, _ operation: AnyFetchOperation, _ state: inout State) {
        let sessionMonitors = state.registry[id]?.sessionMonitors
        guard monitorChannel != nil || sessionMonitors != nil else { return }
        let fetch = MonitoredFetch(id: id, operation: operation)
        monitorChannel?.send(event, for: fetch)
        sessionMonitors?.send(event, for: fetch)
    }

    /// A fetch's metrics so far, as it finishes. Under the lock.
    static func metrics(of entry: Entry, now: UInt64) -> FetchMetrics {
        func seconds(_ from: UInt64, _ to: UInt64) -> TimeInterval { Double(to &- from) / 1e9 }
        let started = entry.startedAt ?? now
        return FetchMetrics(
            queueWait: seconds(entry.enqueuedAt, started),
            timeToFirstByte: entry.firstResponseAt.map { seconds(started, $0) },
            totalDuration: seconds(entry.enqueuedAt, now),
            attempts: entry.startedAt == nil ? 0 : entry.retries + 1,
            bytesReceived: entry.bytesReceived,
            bytesSent: entry.startedAt == nil ? 0 : entry.bodyLength * Int64(entry.retries + 1)
        )
    }

    // MARK: Network activity

    /// Whether any transfer is in flight — or ended less than ``networkActivityHideDelay`` ago,
    /// so that back-to-back requests do not make an activity indicator flicker.
    public var isNetworkActive: Bool {
        withState { $0.isNetworkActive }
    }

    /// Calls `handler` on the main actor with the new value each time ``isNetworkActive``
    /// changes, in order.
    ///
    /// - Parameter handler: Receives the new value.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onNetworkActivityChange(_ handler: @escaping @MainActor (Bool) -> Void) -> FetchObservation {
        observe(\.activityHandlers, Callback(mainActor: handler))
    }

    /// Calls `handler` on `queue` with the new value each time ``isNetworkActive`` changes.
    ///
    /// - Parameters:
    ///   - queue: Where it runs. On a serial queue the calls arrive in order.
    ///   - handler: Receives the new value.
    /// - Returns: A token; the handler is removed when you invalidate or release it.
    public func onNetworkActivityChange(on queue: CallbackQueue, _ handler: @escaping @Sendable (Bool) -> Void) -> FetchObservation {
        observe(\.activityHandlers, Callback(on: queue, handler))
    }

    /// A transfer started (the scheduler counts it running). Under the lock.
    func transferStarted(_ state: inout State) {
        state.activityGeneration += 1      // cancels a pending hide
        if !state.isNetworkActive {
            state.isNetworkActive = true
            announceActivity(true, state)
        }
    }

    /// A transfer ended. Under the lock. The flag goes off only after the hide delay, and only
    /// if nothing started meanwhile. Called after the scheduler released the transfer's slot.
    func transferEnded(_ state: inout State) {
        guard state.scheduler.running == 0 else { return }
        state.activityGeneration += 1
        let generation = state.activityGeneration
        activityTimer(networkActivityHideDelay) { [weak self] in
            self?.withState { state in
                guard state.activityGeneration == generation, state.scheduler.running == 0, state.isNetworkActive else { return }
                state.isNetworkActive = false
                self?.announceActivity(false, state)
            }
        }
    }

    private func announceActivity(_ active: Bool, _ state: State) {
        let handlers = state.activityHandlers.handlers
        eventQueue.async { handlers.deliver(active) }
    }
}
