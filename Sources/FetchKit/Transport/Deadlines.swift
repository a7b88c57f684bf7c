import Dispatch

/// The timeouts of every transfer of a session, on one timer: a min-heap of deadlines on the
/// router queue, and one dispatch timer armed for the earliest.
///
/// A timer per transfer costs a dispatch source created, armed and cancelled for every
/// request; at thousands of requests a second that is measurable. Entries are removed lazily:
/// a transfer that ended is skipped when its deadline comes up, and the heap is compacted when
/// stale entries outnumber live ones. Confined to the router queue.
final class Deadlines {
    private struct Entry {
        let deadline: UInt64
        let transfer: ObjectIdentifier
    }

    private let queue: DispatchQueue
    private var heap: [Entry] = []
    private var armedFor: UInt64 = .max
    private var timer: DispatchSourceTimer?
    /// The transfers with a deadline, by identity: who to tell when it comes.
    private var live: [ObjectIdentifier: Transfer] = [:]

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// Asks for `transfer.deadlineReached()` at `deadline` (uptime nanoseconds) or soon after.
    func schedule(_ transfer: Transfer, at deadline: UInt64) {
        live[ObjectIdentifier(transfer)] = transfer
        push(Entry(deadline: deadline, transfer: ObjectIdentifier(transfer)))
        if deadline < armedFor { arm(deadline) }
    }

    /// The transfer ended: it needs no deadline any more.
    func cancel(_ transfer: Transfer) {
        live[ObjectIdentifier(transfer)] = nil
        if heap.count > 1024 && heap.count > 4 * live.count { compact() }
    }

    private func fire() {
        armedFor = .max
        let now = DispatchTime.now().uptimeNanoseconds
        while let first = heap.first, first.deadline <= now {
            pop()
            // The transfer may schedule itself again (its idle deadline moved on).
            live[first.transfer]?.deadlineReached()
        }
        if let first = heap.first { arm(first.deadline) }
    }

    private func arm(_ deadline: UInt64) {
        armedFor = deadline
        if timer == nil {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler { [weak self] in self?.fire() }
            timer.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), leeway: .milliseconds(1))
            timer.resume()
            self.timer = timer
        } else {
            timer!.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), leeway: .milliseconds(1))
        }
    }

    private func compact() {
        heap = heap.filter { live[$0.transfer] != nil }
        heap.sort { $0.deadline < $1.deadline }   // a sorted array is a valid min-heap
    }

    // MARK: Binary heap

    private func push(_ entry: Entry) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func pop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count && heap[right].deadline < heap[smallest].deadline { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }

    deinit {
        timer?.setEventHandler {}
        timer?.cancel()
    }
}
