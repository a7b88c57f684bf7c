import Foundation

// swift-corelibs-foundation keeps an operation's dependents without retaining them
// (`Operation.__downDependencies` holds unretained pointers) and forgets a dependent only when the
// dependency finishes. A dependent freed before that — cancelled, finished, or dropped unrun —
// left a dangling pointer that the dependency's finish then used: the README's dependency pattern,
// cancelled while its login was in flight, crashed the process once `GetUser` was freed.
//
// A fetch operation therefore never leaves a dependency holding it:
// - while it waits for an unfinished dependency, it keeps itself alive (``Extras/keepAlive``),
//   until its dependencies have finished (Foundation then asks `isReady`), it is cancelled, or it
//   finishes;
// - when it is cancelled, or finishes while a dependency has not, it leaves its dependencies
//   (`removeDependency`, the one call that unlinks it from theirs) before anyone can free it, and
//   keeps reporting them in ``AnyFetchOperation/dependencies``.
// Apple's Foundation retains what it needs: nothing of this runs there.
extension AnyFetchOperation {
    /// After a dependency was added: keeps the operation alive while the dependency runs.
    func holdWhileWaiting(for dependency: Operation, isReadyNow: () -> Bool) {
        #if canImport(FoundationNetworking)
        guard !dependency.isFinished else { return }
        let held = core.withLock { core -> Bool in
            guard !core.machine.isFinished, !core.machine.isCancelled, core.detachedDependencies == nil else { return false }
            core.keepAlive = self
            return true
        }
        // The dependency may have finished since it was checked, and told nobody held.
        if held && isReadyNow() { releaseIfDependenciesFinished(ready: true) }
        #endif
    }

    /// Called with Foundation's readiness: ready and not cancelled means every dependency
    /// finished, and nothing holds this operation any more.
    func releaseIfDependenciesFinished(ready: Bool) {
        guard ready else { return }
        let released = core.withLock { $0.releasingHoldOnDependencies() }
        // Released here, not under the lock; whoever asked holds the operation until it returns.
        withExtendedLifetime(released) {}
    }

    /// Leaves every dependency, so that none keeps a pointer to this operation: on cancel (before
    /// Foundation's own cancel, which then makes it ready however many dependencies are left), and
    /// on finishing while one is unfinished. Releases the operation's hold on itself.
    ///
    /// - Parameters:
    ///   - current: The dependencies as Foundation has them.
    ///   - remove: Foundation's `removeDependency`.
    func leaveDependencies(_ current: [Operation], onlyIfUnfinished: Bool, remove: (Operation) -> Void) {
        #if canImport(FoundationNetworking)
        let leaving = !current.isEmpty && (!onlyIfUnfinished || current.contains { !$0.isFinished })
        let released = core.withLock { core -> AnyFetchOperation? in
            if leaving && core.detachedDependencies == nil { core.detachedDependencies = current }
            defer { core.keepAlive = nil }
            return core.keepAlive
        }
        if leaving {
            for dependency in current { remove(dependency) }
        }
        withExtendedLifetime(released) {}
        #endif
    }

    /// The dependencies it left, if it left them (``leaveDependencies(_:onlyIfUnfinished:remove:)``).
    var detachedDependencies: [Operation]? {
        core.withLock { $0.detachedDependencies }
    }

    /// A dependency removed by hand after the operation left them is no longer reported.
    func forgetDetached(_ dependency: Operation) {
        core.withLock { core in core.detachedDependencies?.removeAll { $0 === dependency } }
    }
}

extension AnyFetchOperation.Core {
    /// Takes the operation's hold on itself, once Foundation says it is ready: unless it was
    /// cancelled (the cancel releases it, after leaving its dependencies), every dependency
    /// finished. Call it under the lock; release what it returns after unlocking.
    mutating func releasingHoldOnDependencies() -> AnyFetchOperation? {
        #if canImport(FoundationNetworking)
        guard !machine.isCancelled, let held = self.keepAlive else { return nil }
        self.keepAlive = nil
        return held
        #else
        return nil
        #endif
    }
}
