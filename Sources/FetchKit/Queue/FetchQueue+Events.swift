import Foundation

extension FetchQueue {
    // MARK: Network activity

    /// Whether any transfer is in flight — or ended less than ``networkActivityHideDelay`` ago,
    /// so that back-to-back requests do not make an activity indicator flicker.
    public var isNetworkActive: Bool {
        state.withLock { $0.isNetworkActive }
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
}
