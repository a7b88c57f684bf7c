import Foundation

/// Delivers monitor events to a set of monitors, in the order they were sent.
///
/// ``send(_:for:)`` only appends, under a lock of its own that nothing else is taken under: a
/// ``FetchQueue`` sends while holding its state lock and an operation while holding its core
/// lock, so that the order of the sends is the order of the state changes. One drain on a
/// serial queue then hands every pending event to each monitor's queue, many per wake-up under
/// load.
final class MonitorChannel: Sendable {
    let monitors: [any FetchEventMonitor]
    private let pending = Protected(Pending())
    /// Where the drains run (tests wait on it to know that what was sent is on its way).
    let drainQueue: DispatchQueue

    private struct Pending {
        var events: [(fetch: MonitoredFetch, event: MonitorEvent)] = []
        var drainScheduled = false
    }

    /// A channel to `monitors`, or `nil` if there are none (nothing is then queued at all).
    init?(_ monitors: [any FetchEventMonitor], label: String) {
        guard !monitors.isEmpty else { return nil }
        self.monitors = monitors
        drainQueue = DispatchQueue(label: label)
    }

    /// Queues `event` of `fetch` for every monitor.
    func send(_ event: MonitorEvent, for fetch: MonitoredFetch) {
        let schedule = pending.withLock { pending -> Bool in
            pending.events.append((fetch, event))
            defer { pending.drainScheduled = true }
            return !pending.drainScheduled
        }
        if schedule {
            drainQueue.async { [self] in drain() }
        }
    }

    /// On the drain queue, so that two drains never interleave.
    private func drain() {
        let events = pending.withLock { pending in
            pending.drainScheduled = false
            defer { pending.events.removeAll() }
            return pending.events
        }
        guard !events.isEmpty else { return }
        for monitor in monitors {
            monitor.queue.async {
                for (fetch, event) in events { event.deliver(fetch, to: monitor) }
            }
        }
    }
}
