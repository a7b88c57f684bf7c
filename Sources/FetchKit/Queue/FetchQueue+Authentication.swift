import Foundation

// The refresh of a queue's credential (see ``FetchAuthentication``): an operation of the
// app's, run here ahead of the fetches it unblocks, without the credential, and heard by the
// queue's monitors.
extension FetchQueue {
    func runRefresh(_ operation: FetchOperation<FetchCredential>, generation: UInt64, for authentication: FetchAuthentication) {
        // An operation handed over twice cannot run again, and its configuration is frozen.
        // A credential set meanwhile made it moot: nothing is sent.
        guard authentication.isRefreshing(generation) else { return }
        let pending = operation.core.withLock { !$0.claimed && $0.machine.phase == .pending }
        guard pending else {
            authentication.refreshEnded(generation: generation, .failure(Self.alreadyEnqueued(operation)))
            return
        }
        operation.configuration.authenticates = false
        // A hung refresh must not hold every fetch of the API until their own deadlines.
        if operation.configuration.totalTimeout.map({ $0 > authentication.refreshTimeout }) ?? true {
            operation.configuration.totalTimeout = authentication.refreshTimeout
        }
        operation.queuePriority = .veryHigh
        let (id, accepted) = reserve(operation)
        guard accepted else {
            authentication.refreshEnded(generation: generation, .failure(Self.alreadyEnqueued(operation)))
            return
        }
        let fetch = MonitoredFetch(id: id, operation: operation)
        monitorChannel?.send(.credentialRefresh(.started(generation: generation)), for: fetch)
        if case .enqueue(let orphans) = Self.checkDependencies(of: operation) { adopt(orphans) }
        activate(operation, id: id) {
            operation.addCompletion(Callback(on: .global) { [monitorChannel] result in
                let event = authentication.refreshEnded(generation: generation, result)
                monitorChannel?.send(.credentialRefresh(event), for: fetch)
            })
        }
    }
}
