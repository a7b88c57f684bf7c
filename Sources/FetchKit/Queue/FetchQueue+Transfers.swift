import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// MARK: - Transfers: slots, flights, members

extension FetchQueue: TransferCoordinator {
    func operation(_ operation: AnyFetchOperation, didProgress progress: FetchProgress) {
        let batch = state.withLock { state -> (FetchBatch, Int)? in
            guard let id = state.idsByOperation[ObjectIdentifier(operation)], let entry = state.registry[id] else { return nil }
            state.registry[id]?.bytesReceived = progress.bytesReceived
            return entry.batch
        }
        if let (batch, index) = batch {
            batch.member(index, received: progress.bytesReceived, expected: progress.bytesExpected)
        }
    }

    func operationDidComplete(_ operation: AnyFetchOperation) {
        let released = state.withLock { state -> FetchQueue? in
            guard let id = state.idsByOperation.removeValue(forKey: ObjectIdentifier(operation)),
                  let entry = state.registry[id] else { return nil }
            emit(.metrics(Self.metrics(of: entry, now: DispatchTime.now().uptimeNanoseconds)), id, operation, &state)
            emit(.finished(operation.error), id, operation, &state)
            state.registry[id] = nil
            return updateKeepAlive(&state)
        }
        withExtendedLifetime(released) {}
    }

    func makeTransfer(for operation: AnyFetchOperation, request: URLRequest, limits: TransferLimits,
                      sink: any ResponseBodySink, owner: any TransferOwner) -> any TransferHandle {
        let session = operation.session
        let key = coalescesIdenticalRequests ? FlightKey(request: request, limits: limits, session: session, sink: sink) : nil
        return FlightMember(operation: operation, owner: owner, request: request, limits: limits, session: session,
                            sink: sink, key: key, queue: self)
    }

    func operation(_ operation: AnyFetchOperation, willRetry event: RetryEvent) {
        state.withLock { state in
            guard let id = state.idsByOperation[ObjectIdentifier(operation)] else { return }
            state.registry[id]?.retries += 1
            emit(.retry(event), id, operation, &state)
        }
    }

    func operation(_ operation: AnyFetchOperation, didReceive response: HTTPURLResponse) {
        state.withLock { state in
            guard let id = state.idsByOperation[ObjectIdentifier(operation)] else { return }
            if state.registry[id]?.firstResponseAt == nil {
                state.registry[id]?.firstResponseAt = DispatchTime.now().uptimeNanoseconds
            }
            emit(.response(response), id, operation, &state)
        }
    }

    func operation(_ operation: AnyFetchOperation, didRedirect response: HTTPURLResponse, to request: URLRequest) {
        state.withLock { state in
            guard let id = state.idsByOperation[ObjectIdentifier(operation)] else { return }
            emit(.redirected(response, request), id, operation, &state)
        }
    }

    /// A member's operation wants its transfer: join an identical flight, or start a new one.
    func join(_ member: FlightMember) {
        var grants: [Flight] = []
        var replayFrom: Flight?
        state.withLock { state in
            guard case .new = member.state else { return }   // stopped before it started
            // A `cancelAll` chose it and is about to cancel it: no slot, no shared transfer. The
            // member stays new; the cancel stops it.
            guard !isSwept(member.operation, state) else { return }
            if let key = member.key, let flight = state.sharedFlights[key] {
                flight.members.append(member)
                member.state = .joined(flight)
                state.statistics.requestsCoalesced += 1
                switch flight.phase {
                case .running:
                    markBegan(member.operation, request: flight.request, &state)
                    replayFrom = flight
                case .waiting:
                    // A more urgent caller moves the shared transfer up the line (never down).
                    state.scheduler.raise(flight.ticket, to: member.priority)
                case .ended:
                    break
                }
                return
            }
            let flight = Flight(first: member, queue: self)
            member.state = .joined(flight)
            if let key = member.key { state.sharedFlights[key] = flight }
            state.waitingFlights[flight.ticket] = flight
            state.scheduler.enqueue(flight.ticket, host: flight.host, priority: member.priority)
            grants = takeGrants(&state)
            announceCounts(state)
        }
        start(grants)
        if let flight = replayFrom {
            // On the router queue, in order with the flight's own events: the latest head and
            // progress, so a late joiner starts where the transfer is.
            flight.session.router.queue.async { [self] in
                let (response, received) = state.withLock { _ in (flight.response, flight.received) }
                member.owner.transferDidStart()
                if let (head, expected) = response {
                    member.owner.transferDidReceive(response: head, expectedLength: expected)
                }
                if let received {
                    member.owner.transferDidReceive(bytes: received.bytes, of: received.expected)
                }
            }
        }
    }

    /// A member's operation was cancelled: leave its flight, which stops only when empty.
    func leave(_ member: FlightMember) {
        var confirm = false
        var stopping: Transfer?
        state.withLock { state in
            switch member.state {
            case .ended:
                return
            case .new:
                member.state = .ended
                confirm = true
            case .joined(let flight):
                member.state = .ended
                confirm = true
                flight.members.removeAll { $0 === member }
                guard flight.members.isEmpty else { return }
                if let key = flight.key, state.sharedFlights[key] === flight {
                    state.sharedFlights[key] = nil
                }
                switch flight.phase {
                case .waiting:
                    state.scheduler.withdraw(flight.ticket)
                    state.waitingFlights[flight.ticket] = nil
                    flight.phase = .ended
                    announceCounts(state)
                case .running:
                    stopping = flight.transfer      // none yet: start(_:) finds no members
                case .ended:
                    break
                }
            }
        }
        stopping?.stop()
        if confirm {
            member.report(.failure(.cancelled(.init(url: member.request.url)), nil))
        }
    }

    /// A flight's transfer ended: free its slot, start the next, and tell every member.
    func flightDidEnd(_ flight: Flight, result: TransferResult) {
        var members: [FlightMember] = []
        var released: FetchQueue?
        defer { withExtendedLifetime(released) {} }     // dropped after unlocking
        let grants = state.withLock { state -> [Flight] in
            guard flight.phase != .ended else { return [] }
            flight.phase = .ended
            flight.transfer = nil
            released = flight.keepsQueue
            flight.keepsQueue = nil
            if let key = flight.key, state.sharedFlights[key] === flight {
                state.sharedFlights[key] = nil
            }
            state.scheduler.release(host: flight.host)
            backOffIfAsked(flight.host, result: result, &state)
            transferEnded(&state)
            members = flight.members
            flight.members = []
            for member in members { member.state = .ended }
            let grants = takeGrants(&state)
            announceCounts(state)
            return grants
        }
        start(grants)
        for member in members {
            member.report(result)
        }
    }

    /// A host answered 429 or 503 with `Retry-After`: hold its transfers until then. Under the lock.
    func backOffIfAsked(_ host: String, result: TransferResult, _ state: inout State) {
        guard case .failure(.unacceptableStatus(let failure), _) = result, [429, 503].contains(failure.statusCode),
              let seconds = RetryAfter.seconds(in: failure), seconds > 0
        else { return }
        let pause = min(seconds, Self.maximumHostBackOff)
        state.scheduler.block(host, until: DispatchTime.now().uptimeNanoseconds &+ UInt64(pause * 1e9))
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

    /// Moves granted flights to running. Under the lock.
    ///
    /// Nothing is granted while a `cancelAll(where:)` predicate runs; a flight whose callers a
    /// `cancelAll` has all chosen is not started: its slot goes back and the next is granted.
    func takeGrants(_ state: inout State) -> [Flight] {
        var flights: [Flight] = []
        defer { scheduleWake(&state) }
        guard state.sweepsUnderWay == 0 else { return [] }
        var declined = true
        while declined {
            declined = false
            for grant in state.scheduler.takeGrants() {
                guard let flight = state.waitingFlights.removeValue(forKey: grant.ticket) else { continue }
                if flight.members.allSatisfy({ isSwept($0.operation, state) }) {
                    state.scheduler.release(host: grant.host)
                    flight.phase = .ended
                    if let key = flight.key, state.sharedFlights[key] === flight {
                        state.sharedFlights[key] = nil
                    }
                    declined = true
                    continue
                }
                flight.phase = .running
                flight.keepsQueue = self
                state.statistics.transfersStarted += 1
                transferStarted(&state)
                for member in flight.members {
                    markBegan(member.operation, request: flight.request, &state)
                }
                flights.append(flight)
            }
        }
        return flights
    }

    /// Makes sure the queue looks again when the first paused host with waiting transfers opens.
    /// Under the lock.
    func scheduleWake(_ state: inout State) {
        guard let unblock = state.scheduler.nextUnblock else { return }
        if let wakeAt = state.wakeAt, wakeAt <= unblock { return }
        state.wakeAt = unblock
        state.wakeToken += 1
        let token = state.wakeToken
        DispatchQueue.global().asyncAfter(deadline: DispatchTime(uptimeNanoseconds: unblock)) { [weak self] in
            guard let self else { return }
            let current = self.state.withLock { state -> Bool in
                guard state.wakeToken == token else { return false }
                state.wakeAt = nil
                return true
            }
            if current { self.changeScheduler { _ in } }
        }
    }

    /// Creates and starts the transfers of granted flights. Outside the lock.
    func start(_ flights: [Flight]) {
        for flight in flights {
            let transfer = Transfer(request: flight.request, session: flight.session, limits: flight.limits, sink: flight.sink, owner: flight)
            let go = state.withLock { _ -> Bool in
                guard !flight.members.isEmpty else { return false }   // all left before it existed
                flight.transfer = transfer
                return true
            }
            if go {
                transfer.start()
            } else {
                flightDidEnd(flight, result: .failure(.cancelled(.init(url: flight.request.url)), nil))
            }
        }
    }
}
