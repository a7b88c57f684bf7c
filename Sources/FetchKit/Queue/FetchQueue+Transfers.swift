import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// MARK: - Transfers: slots, flights, members

extension FetchQueue: TransferCoordinator {
    func operationDidComplete(_ operation: AnyFetchOperation, id: FetchID) {
        transition { $0.unregister(id) }
    }

    func makeTransfer(for operation: AnyFetchOperation, id: FetchID, request: URLRequest, limits: TransferLimits,
                      sink: (any ResponseBodySink)?, resumedFrom: Int64, credential: AttemptCredential?) -> any TransferHandle {
        // Outside the queue's lock: the session is read under the operation's, and the
        // priority is Foundation's.
        let session = operation.session
        let priority = operation.slotPriority
        let (coalesces, host, place) = state.withLock { state in
            let (host, place) = state.reservePlace(host: FlightMember.hostKey(of: request.url), priority: priority)
            return (state.coalesces, host, place)
        }
        let key = coalesces ? FlightKey(request: request, limits: limits, session: session, sink: sink) : nil
        return FlightMember(operation: operation, id: id, request: request, limits: limits, session: session, sink: sink,
                            key: key, resumedFrom: resumedFrom, credential: credential, queue: self, host: host, place: place)
    }

    /// A flight's transfer ended: its slot is freed (a host that asked for a pause is held) and
    /// the next granted. Called once per flight, by the flight, before it tells its members.
    func flightEnded(_ flight: Flight, result: TransferResult) {
        var backOff: TimeInterval?
        if case .failure(.unacceptableStatus(let failure), _) = result, [429, 503].contains(failure.statusCode) {
            backOff = RetryAfter.seconds(in: failure)
        }
        let now = DispatchTime.now().uptimeNanoseconds
        transition { $0.flightEnded(flight, backOff: backOff, now: now) }
    }

    /// Applies one transition under the lock; appends its ordered actions (announcements) to
    /// the event queue before unlocking, so that they keep the order of the changes; runs the
    /// others after unlocking. See ``QueueState``.
    @discardableResult
    func transition<Result>(_ body: (inout State) -> Result) -> Result {
        var later: [QueueAction<Flight>] = []
        var dropped: AnyObject?
        let result = state.withLock { state -> Result in
            let result = body(&state)
            for action in state.takeActions() {
                switch action {
                case .announceCounts(let counts, let handlers):
                    eventQueue.async { handlers.deliver(counts) }
                case .announceActivity(let active, let handlers):
                    eventQueue.async { handlers.deliver(active) }
                case .announceJoin(let member):
                    // Under the lock, as a queue sends its events (``MonitorChannel``): before
                    // the grant that a later transition makes can start the flight for it.
                    let fetch = MonitoredFetch(id: member.id, operation: member.operation)
                    monitorChannel?.send(.joinedSharedTransfer, for: fetch)
                    member.session.monitorChannel?.send(.joinedSharedTransfer, for: fetch)
                default:
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

    /// After unlocking.
    private func perform(_ action: QueueAction<Flight>) {
        switch action {
        case .startFlight(let flight):
            flight.start()
        case .joinFlight(let flight, let member):
            flight.add(member)
        case .leaveFlight(let flight, let member):
            flight.remove(member)
        case .confirmCancel(let member):
            member.report(.failure(.cancelled(.init(url: member.request.url)), nil))
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
        case .announceCounts, .announceActivity, .announceJoin:
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
