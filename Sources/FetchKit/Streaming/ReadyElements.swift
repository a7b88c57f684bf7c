import Foundation

/// What an adapter over a sequence of `Data` chunks (its lines, its events) has cut and not
/// handed out yet, and whether the base sequence ended.
struct ReadyElements<Element> {
    private var elements: [Element] = []
    private var taken = 0
    /// Whether the base sequence ended (or the reading did, after a cancel).
    private(set) var baseEnded = false

    /// The next element cut, if one waits.
    mutating func next() -> Element? {
        guard taken < elements.count else { return nil }
        defer { taken += 1 }
        return elements[taken]
    }

    /// What the base's next chunk gave (`ended`: the base's end, and what it left).
    mutating func refill(_ elements: [Element], ended: Bool = false) {
        self.elements = elements
        taken = 0
        if ended { baseEnded = true }
    }

    /// A cancelled reader gets no more, even what waits: if the reader's task is cancelled and
    /// something is left to read, drops it and ends, and returns whether the base must read
    /// once more first (a FetchKit stream then cancels its fetch, and throws); the caller then
    /// throws ``FetchError/cancelled(_:)``. `nil` otherwise.
    mutating func endIfCancelled() -> Bool? {
        guard Task.isCancelled, !(baseEnded && taken >= elements.count) else { return nil }
        let baseReadsOnce = !baseEnded
        refill([], ended: true)
        return baseReadsOnce
    }
}
