import Foundation

// MARK: - Dependencies that nothing runs

// An operation in a FetchQueue starts only once every dependency has finished. A dependency that
// nothing will ever run, or a cycle, would leave it — and an `await queue.fetch(_:)` — waiting
// forever. So when a FetchQueue is given an operation, it looks through its unfinished
// dependencies, and theirs:
// - A dependency that has started or finished, or that a FetchQueue holds, runs.
// - A `AnyFetchOperation` that an `OperationQueue` took runs there: an `OperationQueue` asks an
//   operation whether it is ready as it takes it, and a AnyFetchOperation remembers being asked.
// - A `AnyFetchOperation` that none of these holds would never run: the queue enqueues it too
//   (without a completion handler), before the operation that needs it. Enqueueing it there
//   yourself afterwards takes it over: your completion handler runs once, and you get the same
//   identifier. (Having asked its `isReady` yourself makes it look taken: the queue then waits
//   for it, as for any operation.)
// - Any other kind of `Operation` may run on a queue FetchKit cannot see: it is waited for.
// - Dependencies that lead back to an operation on the path (through any kind of operation)
//   form a cycle in which nothing can start: the operation is refused with
//   ``FetchError/InvalidRequest/Reason/dependencyCycle(_:)`` and left as it was.
extension FetchQueue {
    /// What the queue must do about an operation's dependencies.
    enum DependencyCheck {
        /// Enqueue these dependencies (none, often) that nothing else would run, then it.
        case enqueue([AnyFetchOperation])
        /// Refuse it: its dependencies form a cycle.
        case refuse(FetchError.InvalidRequest.Reason)
    }

    /// Looks through `operation`'s unfinished dependencies, and theirs.
    static func checkDependencies(of operation: Operation) -> DependencyCheck {
        // Iterative depth-first walk (a long chain must not exhaust the stack): `false` marks an
        // operation on the current path, `true` one fully explored.
        var explored: [ObjectIdentifier: Bool] = [ObjectIdentifier(operation): false]
        var path: [(dependencies: [Operation], next: Int, id: ObjectIdentifier)] =
            [(operation.dependencies, 0, ObjectIdentifier(operation))]
        var orphans: [AnyFetchOperation] = []
        while let top = path.last {
            guard top.next < top.dependencies.count else {
                explored[top.id] = true
                path.removeLast()
                continue
            }
            path[path.count - 1].next += 1
            let dependency = top.dependencies[top.next]
            let id = ObjectIdentifier(dependency)
            switch explored[id] {
            case false?:
                return .refuse(.dependencyCycle(displayName(of: dependency)))
            case true?:
                continue
            case nil:
                if dependency.isFinished { continue }
                if let fetch = dependency as? AnyFetchOperation, fetch.isUnrunnable {
                    orphans.append(fetch)
                }
                explored[id] = false
                path.append((dependency.dependencies, 0, id))
            }
        }
        // Deepest first, so each is enqueued before what needs it.
        return .enqueue(orphans.reversed())
    }

    /// How an error names an operation: its `name` in quotes, or its type.
    static func displayName(of operation: Operation) -> String {
        operation.name.map { "'\($0)'" } ?? String(describing: type(of: operation))
    }

    /// The error of an operation refused for its dependencies.
    static func dependencyError(_ reason: FetchError.InvalidRequest.Reason, _ operation: AnyFetchOperation) -> FetchError {
        .invalidRequest(.init(reason: reason, url: operation.request?.url))
    }

    /// Enqueues dependencies that nothing else would run, without completion handlers. One
    /// that something claimed meanwhile is left to it.
    func adopt(_ orphans: [AnyFetchOperation]) {
        for orphan in orphans {
            let (id, accepted) = reserve(orphan)
            guard accepted else { continue }
            orphan.markAdopted(by: self, id: id)
            activate(orphan, id: id)
        }
    }

    /// An explicit enqueue of an operation this queue enqueued as a dependency: attaches the
    /// completion handler and returns the identifier it has. `nil` if it is not such a one.
    func takeOver<Fetch: OutputProducing>(_ operation: Fetch,
                                          completion: Callback<Result<Fetch.Output, FetchError>>?) -> FetchID? {
        guard let id = operation.takeAdoption(by: self) else { return nil }
        if let completion {
            operation.addCompletion(completion)
        }
        return id
    }

    /// Takes a reserved operation back out: out of the registry, unclaimed. For a refusal before
    /// it was activated.
    func unreserve(_ operation: AnyFetchOperation, id: FetchID) {
        transition { $0.unregister(id) }
        operation.unclaim(by: self)
    }
}
