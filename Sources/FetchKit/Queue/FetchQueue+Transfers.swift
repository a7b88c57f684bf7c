import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// MARK: - Transfers: slots, flights, members

extension FetchQueue: TransferCoordinator {
    func operationDidComplete(_ operation: AnyFetchOperation) {
        let error = operation.error
        transition { $0.completed(operation, error: error, now: DispatchTime.now().uptimeNanoseconds) }
    }

    func makeTransfer(for operation: AnyFetchOperation, request: URLRequest, limits: TransferLimits,
                      sink: (any ResponseBodySink)?, resumedFrom: Int64) -> any TransferHandle {
        let session = operation.session
        let key = coalescesIdenticalRequests ? FlightKey(request: request, limits: limits, session: session, sink: sink) : nil
        return FlightMember(operation: operation, request: request, limits: limits, sink: sink, key: key,
                            resumedFrom: resumedFrom, queue: self)
    }

    func operation(_ operation: AnyFetchOperation, willRetry event: RetryEvent) {
        transition { $0.willRetry(operation, event) }
    }

    /// Applies one transition under the lock; appends its ordered actions (monitor events,
    /// announcements) to their queues before unlocking, so that they keep the order of the
    /// changes; runs the others after unlocking. See ``QueueState``.
    @discardableResult
    func transition<Result>(_ body: (inout QueueState) -> Result) -> Result {
        var later: [QueueAction] = []
        var dropped: FetchQueue?
        let result = state.withLock { state -> Result in
            let result = body(&state)
            for action in state.takeActions() {
                if action.isOrdered {
                    performOrdered(action)
                } else {
                    later.append(action)
                }
            }
            if state.wantsKeepAlive {
                if state.keepAlive == nil { state.keepAlive = self }
            } else {
                dropped = state.keepAlive       // dropped after unlocking: it may free the queue
                state.keepAlive = nil
            }
            return result
        }
        for action in later {
            perform(action)
        }
        withExtendedLifetime(dropped) {}
        return result
    }

    /// Under the lock: appends to FetchKit's own ordered queues, nothing else.
    private func performOrdered(_ action: QueueAction) {
        switch action {
        case .monitor(let event, let fetch, let sessionMonitors):
            monitorChannel?.send(event, for: fetch)
            sessionMonitors?.send(event, for: fetch)
        case .announceCounts(let counts, let handlers):
            eventQueue.async { handlers.deliver(counts) }
        case .announceActivity(let active, let handlers):
            eventQueue.async { handlers.deliver(active) }
        default:
            preconditionFailure("FetchKit bug: \(action) is not an ordered action")
        }
    }

    /// After unlocking.
    private func perform(_ action: QueueAction) {
        switch action {
        case .startTransfer(let flight):
            let transfer = Transfer(request: flight.request, session: flight.session, limits: flight.limits,
                                    sink: flight.makeSink(), owner: flight)
            if transition({ $0.transferCreated(transfer, for: flight) }) {
                transfer.start()
            } else {
                // Every caller left before it existed.
                transition { $0.flightEnded(flight, result: .failure(.cancelled(.init(url: flight.request.url)), nil)) }   // no member left to tell
            }
        case .stopTransfer(let transfer):
            transfer.stop()
        case .batchProgress(let batch, let index, let received, let expected):
            batch.member(index, received: received, expected: expected)
        case .confirmCancel(let member):
            member.report(.failure(.cancelled(.init(url: member.request.url)), nil))
        case .replay(let member, let flight):
            // On the router queue, in order with the flight's own events: the latest head and
            // progress, read now (not when it joined: events queued before this one reached it
            // already), so a late joiner starts where the transfer is and never goes back.
            member.session.router.queue.async { [weak self] in
                let now = DispatchTime.now().uptimeNanoseconds
                // `nil` if it left, or its flight ended and replayed to it first.
                guard let latest = self?.transition({ $0.replay(to: member, of: flight, now: now) }) ?? nil else { return }
                member.catchUp(with: latest)
            }
        case .hideActivityLater(let generation):
            activityTimer(networkActivityHideDelay) { [weak self] in
                self?.transition { $0.hideActivity(generation: generation) }
            }
        case .wake(let at, let token):
            DispatchQueue.global().asyncAfter(deadline: DispatchTime(uptimeNanoseconds: at)) { [weak self] in
                self?.transition { state in
                    if state.wakeFired(token) { state.changeScheduler { _ in } }
                }
            }
        case .monitor, .announceCounts, .announceActivity:
            preconditionFailure("FetchKit bug: \(action) is an ordered action")
        }
    }

    /// The longest a host's `Retry-After` holds its transfers: 10 minutes.
    public static let maximumHostBackOff: TimeInterval = 600

    /// When transfers to `url`'s host may start again after it asked for a pause (a 429 or 503
    /// with `Retry-After`), or `nil` if it is not paused.
    public func backOffDeadline(for url: URL) -> Date? {
        let host = FlightMember.hostKey(of: url)
        let now = DispatchTime.now().uptimeNanoseconds
        return state.withLock { state in
            guard let until = state.scheduler.blockedUntil[host], until > now else { return nil }
            return Date(timeIntervalSinceNow: Double(until - now) / 1e9)
        }
    }

    /// Ends the pause of `url`'s host at once (a user asked to refresh now): its waiting
    /// transfers start as the limits allow.
    public func clearBackOff(for url: URL) {
        let host = FlightMember.hostKey(of: url)
        changeScheduler { $0.unblock(host) }
    }
}
