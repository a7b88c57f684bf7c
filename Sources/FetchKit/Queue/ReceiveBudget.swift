import Dispatch
import Foundation

/// A token bucket of received bytes, shared by the transfers that one bandwidth limit covers
/// (a ``FetchQueue``'s, or one host's within it).
///
/// It fills at ``bytesPerSecond`` up to ``burst`` bytes. Each body chunk, as it arrives on
/// URLSession's work queue, is taken from it, and may leave it in debt; a transfer whose chunk
/// leaves it in debt stops reading (``ReceivePause``) for as long as the refill takes to pay
/// it. The debt is kept, so over any stretch of time the transfers together read no more than
/// the rate allows, plus one burst and one chunk per transfer.
final class ReceiveBudget: Sendable {
    /// The limit, in bytes per second.
    let bytesPerSecond: Int
    /// The most that can be read at once after a lull: a tenth of a second's worth, at least
    /// 16 KiB (one libcurl read).
    let burst: Double
    private let state: Protected<(tokens: Double, updated: UInt64, unenforced: Bool)>

    init(bytesPerSecond: Int, now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        self.bytesPerSecond = max(1, bytesPerSecond)
        burst = max(Double(16 << 10), Double(self.bytesPerSecond) / 10)
        state = Protected((burst, now, false))
    }

    /// Takes `bytes` that arrived at `now`; returns how long the reading must pause (0: none).
    func take(_ bytes: Int, at now: UInt64) -> TimeInterval {
        state.withLock { state in
            if now > state.updated {
                state.tokens = min(burst, state.tokens + Double(now - state.updated) / 1e9 * Double(bytesPerSecond))
                state.updated = now
            }
            state.tokens -= Double(bytes)
            return state.tokens < 0 ? -state.tokens / Double(bytesPerSecond) : 0
        }
    }

    /// A transfer it covers could not be paused: the limit is not enforced on it.
    func markUnenforced() {
        state.withLock { $0.unenforced = true }
    }

    /// Whether every transfer it covered could be paused when it had to.
    var isEnforced: Bool { !state.withLock { $0.unenforced } }
}

/// A queue's bandwidth limits: one budget overall, and one per host (made as hosts are met).
final class BandwidthBudgets: Sendable {
    let overall: ReceiveBudget?
    let perHostRate: Int?
    private let hosts = Protected([String: ReceiveBudget]())

    /// `nil` when neither limit is set.
    init?(overall: Int?, perHost: Int?) {
        guard overall != nil || perHost != nil else { return nil }
        self.overall = overall.map { ReceiveBudget(bytesPerSecond: $0) }
        perHostRate = perHost
    }

    /// The budgets a transfer to `host` draws from.
    func budgets(forHost host: String) -> [ReceiveBudget] {
        var budgets = overall.map { [$0] } ?? []
        if let perHostRate {
            budgets.append(hosts.withLock { hosts in
                if let budget = hosts[host] { return budget }
                let budget = ReceiveBudget(bytesPerSecond: perHostRate)
                hosts[host] = budget
                return budget
            })
        }
        return budgets
    }

    var isEnforced: Bool {
        (overall?.isEnforced ?? true) && hosts.withLock { $0.values.allSatisfy(\.isEnforced) }
    }
}

extension Array where Element == ReceiveBudget {
    /// Takes `bytes` from every budget; the longest pause any of them asks for.
    func take(_ bytes: Int) -> TimeInterval {
        let now = DispatchTime.now().uptimeNanoseconds
        return reduce(0) { Swift.max($0, $1.take(bytes, at: now)) }
    }

    func markUnenforced() {
        for budget in self { budget.markUnenforced() }
    }

    /// The socket receive buffer for a transfer under these budgets: an eighth of a second at
    /// the lowest rate, from 4 KiB to 64 KiB (the kernel doubles it for its bookkeeping).
    var receiveBufferSize: Int {
        let rate = map(\.bytesPerSecond).min() ?? Int.max
        return Swift.min(64 << 10, Swift.max(4 << 10, rate / 8))
    }
}
