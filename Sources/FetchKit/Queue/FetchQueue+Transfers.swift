import Foundation

// MARK: - Transfers: slots, flights, members

extension FetchQueue: TransferCoordinator {
    func operationDidComplete(_ operation: AnyFetchOperation, id: FetchID) {
        transition { $0.unregister(id) }
    }

    func enqueue(_ attempt: QueuedAttempt, attach: (any TransferHandle) -> Bool) {
        let host = FlightMember.hostKey(of: attempt.request.url)
        let (member, actions, dropped) = transitionDeferringActions { state in
            let (interned, place) = state.reservePlace(host: host, priority: attempt.priority)
            let key = state.coalesces ? FlightKey(request: attempt.request, limits: attempt.limits,
                                                  session: attempt.session, sink: attempt.sink) : nil
            let member = FlightMember(attempt, key: key, queue: self, host: interned, place: place)
            state.join(member)
            return member
        }
        // The owner holds its handle before a grant's flight can report to it.
        let kept = attach(member)
        for action in actions { perform(action) }
        if !kept { member.stop() }
        withExtendedLifetime(dropped) {}
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
        let (result, later, dropped) = transitionDeferringActions(body)
        for action in later {
            perform(action)
        }
        withExtendedLifetime(dropped) {}
        return result
    }

    /// Applies one transition as ``transition(_:)`` does, and returns the actions to run after
    /// unlocking instead of running them, and the queue's keep-alive it let go, to be released
    /// after them (it may free the queue).
    private func transitionDeferringActions<Result>(
        _ body: (inout State) -> Result
    ) -> (Result, [QueueAction<Flight>], AnyObject?) {
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
        return (result, later, dropped)
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
