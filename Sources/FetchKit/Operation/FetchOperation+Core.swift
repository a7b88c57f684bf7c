import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension FetchOperation {
    /// Everything mutable about an operation, guarded by one lock (`FetchOperation.core`).
    struct Core {
        var machine = LifecycleStateMachine()
        var settings: Settings

        // Results.
        var sentRequest: URLRequest?
        var response: HTTPURLResponse?
        var responseBody: Data?

        // The transfer in flight, and the slot it holds in a FetchQueue, if any.
        var transfer: Transfer?
        var admission: (any TransferAdmission)?
        var holdsAdmissionSlot = false

        // Completion delivery.
        var completionHandlers: [CompletionEntry] = []
        /// Set once the finished event has released the handlers; later ones run at once.
        var completionsReleased = false
        var outstandingDeliveries = 0

        // Progress.
        var progressRelays: [ProgressRelay] = []

        // Ordered delivery of state changes (see FetchOperation+Observation.swift).
        var pendingEvents: [Event] = []
        var isDeliveringEvents = false
        var observers: [(id: Int, handler: @Sendable (StateChange) -> Void)] = []
        var nextObserverID = 0
        var lastReportedReady = true

        // Run-loop waiters on the main thread, which need a nudge to wake.
        var mainThreadWaiters = 0

        init(settings: Settings) {
            self.settings = settings
        }

        /// Whether waiters may return: finished, and every completion handler has run.
        var isSettled: Bool {
            machine.isFinished && completionsReleased && outstandingDeliveries == 0
        }

        /// Appends state changes for ordered delivery.
        ///
        /// - Returns: `true` if the caller must deliver them (``FetchOperation/deliverEvents()``)
        ///   after unlocking; `false` if another thread is delivering and will pick them up.
        mutating func post(_ events: Event...) -> Bool {
            pendingEvents.append(contentsOf: events)
            guard !isDeliveringEvents else { return false }
            isDeliveringEvents = true
            return true
        }
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
        /// `nil`: the operation's ``FetchOperation/completionQueue``, read when it runs.
        let queue: CallbackQueue?
        let handler: @Sendable (FetchOperation) -> Void
    }
}

/// A coordinator that hands out transfer slots (a ``FetchQueue``'s overall and per-host limits).
///
/// An operation that has one asks it for a slot after preparing its request and before creating
/// any URLSession task, so an operation waiting for a slot runs no clock.
protocol TransferAdmission: AnyObject, Sendable {
    /// Asks for a slot for `operation`; calls `grant` (on any thread) once one is free.
    func requestSlot(for operation: FetchOperation, request: URLRequest, grant: @escaping @Sendable () -> Void)
    /// The operation stopped before its slot was granted (a grant already under way still comes).
    func withdraw(_ operation: FetchOperation)
    /// The operation's transfer is over: its slot is free.
    func releaseSlot(of operation: FetchOperation)
}
