import Foundation

/// Keeps an observation alive: a state observer (``AnyFetchOperation/observeState(_:)``) or a
/// network-activity handler (``FetchQueue/onNetworkActivityChange(on:_:)``).
///
/// The observation ends when you call ``invalidate()`` or release the token.
public final class FetchObservation: @unchecked Sendable {
    private let cancellation = Protected<(@Sendable () -> Void)?>(nil)

    init(_ cancel: @escaping @Sendable () -> Void) {
        cancellation.withLock { $0 = cancel }
    }

    /// Stops the observation. No new callback starts after this returns (one already under
    /// way on another thread may still complete). Idempotent.
    public func invalidate() {
        let cancel = cancellation.withLock { value -> (@Sendable () -> Void)? in
            defer { value = nil }
            return value
        }
        cancel?()
    }

    deinit {
        invalidate()
    }
}
