import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
    /// 4 KiB. (A chunk larger than what is left, up to 16 KiB, is taken all the same and leaves
    /// a debt; a floor of 16 KiB let a first 5-second window reach 1.16–1.21× at 25 kB/s.)
    let burst: Double
    /// How the transfers it covers are held to it.
    let mechanism: BandwidthMechanism
    private let state: Protected<(tokens: Double, updated: UInt64, unenforced: Bool, readers: Int)>

    init(bytesPerSecond: Int, mechanism: BandwidthMechanism = .bucket, now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        self.bytesPerSecond = max(1, bytesPerSecond)
        self.mechanism = mechanism
        burst = max(Double(4 << 10), Double(self.bytesPerSecond) / 10)
        state = Protected((burst, now, false, 0))
    }

    /// A transfer it covers started (``join()``) or ended (``leave()``).
    func join() { state.withLock { $0.readers += 1 } }
    func leave() { state.withLock { $0.readers = max(0, $0.readers - 1) } }

    /// Each running transfer's even share of the limit, in bytes per second.
    var share: Int {
        let readers = state.withLock { $0.readers }
        return max(1, bytesPerSecond / max(1, readers))
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

/// How a bandwidth limit holds a transfer's reading.
enum BandwidthMechanism: Sendable, Equatable {
    /// FetchKit's token bucket: a chunk that overdraws it pauses the reading
    /// (`curl_easy_pause`) until the refill pays.
    case bucket
    /// libcurl's own receive limit (`CURLOPT_MAX_RECV_SPEED_LARGE`), set on each transfer's
    /// handle to its even share of the limit, and set again as transfers come and go.
    case curl
    /// Both: libcurl's limit paces each handle at its share, and the bucket catches what
    /// libcurl lets through above the shared limit.
    case both

    /// The environment variable that picks the mechanism for the queues created after it is
    /// set: `bucket`, `curl` or `both` (for `fetchkit-bench limit-rate`'s comparison).
    static let environmentVariable = "FETCHKIT_BANDWIDTH_MECHANISM"

    /// The mechanism named by ``environmentVariable``, read now, or the default.
    static var current: BandwidthMechanism {
        switch getenv(environmentVariable).map({ String(cString: $0) }) {
        case "curl": .curl
        case "both": .both
        case "bucket": .bucket
        default: .standard
        }
    }

    /// What queues use unless told otherwise.
    static let standard = BandwidthMechanism.bucket

    var usesBucket: Bool { self != .curl }
    var usesCurlLimit: Bool { self != .bucket }
}

/// A queue's bandwidth limits: one budget overall, and one per host (made as hosts are met).
final class BandwidthBudgets: Sendable {
    let overall: ReceiveBudget?
    let perHostRate: Int?
    let mechanism: BandwidthMechanism
    private let hosts = Protected([String: ReceiveBudget]())

    /// `nil` when neither limit is set.
    init?(overall: Int?, perHost: Int?, mechanism: BandwidthMechanism = .current) {
        guard overall != nil || perHost != nil else { return nil }
        self.mechanism = mechanism
        self.overall = overall.map { ReceiveBudget(bytesPerSecond: $0, mechanism: mechanism) }
        perHostRate = perHost
    }

    /// The budgets a transfer to `host` draws from.
    func budgets(forHost host: String) -> [ReceiveBudget] {
        var budgets = overall.map { [$0] } ?? []
        if let perHostRate {
            budgets.append(hosts.withLock { hosts in
                if let budget = hosts[host] { return budget }
                let budget = ReceiveBudget(bytesPerSecond: perHostRate, mechanism: mechanism)
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

    /// The mechanism that holds them (the same for all of one queue's).
    var mechanism: BandwidthMechanism { first?.mechanism ?? .standard }

    /// The most a transfer under these budgets may read per second while the others read too:
    /// the smallest of its even shares.
    var share: Int { map(\.share).min() ?? Int.max }
}

/// Counts a limited transfer's bytes where they cross the wire, for its budgets.
///
/// libcurl hands the body over as it reads it, but the connection's socket takes in more than
/// that: what its receive window lets the server send, which on loopback is some 190 KB per
/// connection before the first pause, and grows with the kernel's tuning. Charging the budgets
/// for the chunks read let the server send that much more: measured at the server (bytes
/// acknowledged) with default buffers, two transfers to one host under a 150 kB/s limit sent
/// 1.27× the limit over the first 5 seconds. So a transfer whose connection carries only it
/// (HTTP/1) is charged for the larger of what it has read and what its socket has received
/// since its first chunk (``ReceivePause/connection(of:)``; what the socket holds unread
/// at the first chunk is the transfer's, a reused connection's earlier bytes are not):
/// 1.03–1.15× in the same runs. Where the socket cannot be read it is charged for the chunks
/// (a limited transfer is kept to HTTP/1.1 where the session can: ``FetchQueue/bandwidthLimit``).
///
/// (Narrowing the socket's receive buffer instead, `SO_RCVBUF` once the first pause comes,
/// made the server wait for TCP's persist timer on loopback, whose segments are larger than
/// such a buffer: 0.59× the limit at 150 kB/s.)
final class WireMeter: Sendable {
    /// The bytes read (the chunks), the socket's received count before the transfer's first
    /// byte, and the bytes charged so far.
    private let state = Protected<(read: Int, baseline: Int?, charged: Int)>((0, nil, 0))

    /// The bytes to charge for a chunk of `count` bytes whose connection's socket reports
    /// `receipt` now.
    func charge(forChunkOf count: Int, receipt: (received: Int, unread: Int)?) -> Int {
        state.withLock { state in
            state.read += count
            var target = state.read
            if let receipt {
                if state.baseline == nil || receipt.received < state.baseline! + state.read - count {
                    // Its first chunk (or a new connection, after a redirect): what the socket
                    // received before this chunk and what it holds unread are the transfer's,
                    // anything before them (a reused connection's) is not.
                    state.baseline = receipt.received - receipt.unread - state.read
                }
                target = max(target, receipt.received - (state.baseline ?? 0))
            }
            let charge = max(0, target - state.charged)
            state.charged += charge
            return charge
        }
    }
}
