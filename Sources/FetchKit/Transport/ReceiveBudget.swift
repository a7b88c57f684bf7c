import Foundation

/// A token bucket of received bytes, shared by the transfers that one bandwidth limit covers
/// (a ``FetchQueue``'s, or one host's within it, or one fetch's own).
///
/// It fills at ``rate`` up to ``burst`` bytes. Each body chunk, as it arrives on URLSession's
/// work queue, is taken from it, and may leave it in debt; a transfer whose chunk leaves it in
/// debt stops reading (``ReceivePause``) for as long as the refill takes to pay it. The debt is
/// kept, so over any stretch of time the transfers together read no more than the rate allows,
/// plus one burst and one chunk per transfer.
///
/// **Even shares.** The shared bucket alone says how much the transfers read together, not
/// who reads it: whoever's chunk finds tokens takes them, and a transfer whose connection has
/// the larger receive window (sized for its share when it started: ``ReceiveWindow``) brings
/// more in each time it resumes. Two transfers under 100 kB/s went 75:25 in every run. So each
/// transfer that joined (``join(_:at:wake:)``) also has an account of its own, filled at an
/// even share of the rate among the transfers that contend for it, and pauses for whichever of
/// the two debts is longer. A transfer contends from when it joins, and for ``contention``
/// after each pause this bucket gave it: one that reads below its share on its own (a slow
/// server, a lower limit elsewhere) stops counting, and the others share what it leaves. A
/// share follows the transfers as they come and go, at each one's next chunk.
///
/// **Changes.** ``setRate(_:at:)`` changes the rate (or lifts it) for the transfers reading
/// under it; the debt is kept up to a chunk and a burst at the new rate, and every paused
/// transfer is woken to pay what is left at the new rate.
final class ReceiveBudget: Sendable {
    private let state: Protected<Ledger>

    /// How long a transfer counts toward the shares after a pause this bucket gave it (or
    /// after it joined): longer than a pause lasts at a share worth limiting, so that a
    /// transfer held at its share never stops counting.
    static let contention: TimeInterval = 1

    /// The most a libcurl read hands over at once (`CURL_MAX_WRITE_SIZE`): the debt a chunk
    /// may leave beyond an empty bucket.
    static let chunk = Double(16 << 10)

    init(bytesPerSecond: Int?, now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        state = Protected(Ledger(rate: bytesPerSecond.map { max(1, $0) }, now: now))
    }

    /// The limit, in bytes per second; `nil` for none.
    var rate: Int? { state.withLock { $0.rate } }

    /// The limit, and how many times it changed (for ``WireMeter``).
    var status: (rate: Int?, changes: Int) { state.withLock { ($0.rate, $0.changes) } }

    /// The most that can be read at once after a lull: a tenth of a second's worth, at least
    /// 4 KiB. (A chunk larger than what is left, up to 16 KiB, is taken all the same and leaves
    /// a debt; a floor of 16 KiB let a first 5-second window reach 1.16–1.21× at 25 kB/s.)
    static func burst(forRate rate: Double) -> Double { max(Double(4 << 10), rate / 10) }

    /// The transfer `reader` started reading under it: it contends from now, and `wake`
    /// resumes its reading if it is paused when the rate changes.
    func join(_ reader: ObjectIdentifier, at now: UInt64 = DispatchTime.now().uptimeNanoseconds,
              wake: @escaping @Sendable () -> Void = {}) {
        state.withLock { $0.join(reader, at: now, wake: wake) }
    }

    /// The transfer `reader` ended: the others share what it leaves.
    func leave(_ reader: ObjectIdentifier) {
        state.withLock { _ = $0.readers.removeValue(forKey: reader) }
    }

    /// Changes the rate (`nil`: no limit) and wakes the transfers reading under it, so that a
    /// pause sized for the old rate ends now and the next chunk is held to the new one.
    func setRate(_ bytesPerSecond: Int?, at now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        let wakes = state.withLock { $0.setRate(bytesPerSecond.map { max(1, $0) }, at: now) }
        for wake in wakes { wake() }
    }

    /// Each running transfer's even share of the limit, in bytes per second; `Int.max`
    /// without a limit.
    var share: Int {
        state.withLock { ledger in ledger.rate.map { max(1, $0 / max(1, ledger.readers.count)) } ?? Int.max }
    }

    /// Takes `bytes` that `reader` (or a transfer that did not join) received at `now`;
    /// returns how long the reading must pause (0: none).
    func take(_ bytes: Int, by reader: ObjectIdentifier? = nil, at now: UInt64) -> TimeInterval {
        state.withLock { $0.take(bytes, by: reader, at: now) }
    }

    /// A transfer it covers could not be held to the limit on the wire, for `reason`: the
    /// limit is not enforced on it. The first reason is kept.
    func markUnenforced(_ reason: BandwidthLimitShortfall) {
        state.withLock { if $0.unenforced == nil { $0.unenforced = reason } }
    }

    /// Whether every transfer it covered could be paused when it had to.
    var isEnforced: Bool { state.withLock { $0.unenforced == nil } }

    /// Why a transfer it covered was not held to the limit, the first time one was not.
    var shortfall: BandwidthLimitShortfall? { state.withLock { $0.unenforced } }

    /// The bucket's state: the shared tokens, and each joined transfer's own account.
    struct Ledger {
        var rate: Int?
        /// How many times ``rate`` changed.
        var changes = 0
        var tokens: Double
        var updated: UInt64
        var unenforced: BandwidthLimitShortfall?
        var readers: [ObjectIdentifier: Reader] = [:]

        /// A transfer reading under the limit.
        struct Reader {
            /// Its own account, filled at its share.
            var tokens: Double
            var updated: UInt64
            /// It counts toward the shares until then.
            var contendsUntil: UInt64
            /// Resumes its reading (a pause sized for an old rate).
            var wake: @Sendable () -> Void
            /// The bytes it took, each fading with time (by e every ``ReceiveBudget/contention``),
            /// as of `recentAt`: its recent rate times that time.
            var recent = 0.0
            var recentAt: UInt64 = 0

            func recentBytes(at now: UInt64) -> Double {
                now > recentAt ? recent * exp(-Double(now - recentAt) / 1e9 / ReceiveBudget.contention) : recent
            }
        }

        init(rate: Int?, now: UInt64) {
            self.rate = rate
            tokens = rate.map { ReceiveBudget.burst(forRate: Double($0)) } ?? 0
            updated = now
        }

        static func nanoseconds(_ seconds: TimeInterval) -> UInt64 { UInt64(max(0, seconds) * 1e9) }

        mutating func join(_ reader: ObjectIdentifier, at now: UInt64, wake: @escaping @Sendable () -> Void) {
            readers[reader] = Reader(tokens: .infinity, updated: now,
                                     contendsUntil: now + Self.nanoseconds(ReceiveBudget.contention), wake: wake)
        }

        /// The new rate; what to call, after the lock, to wake the transfers.
        mutating func setRate(_ new: Int?, at now: UInt64) -> [@Sendable () -> Void] {
            guard new != rate else { return [] }
            let old = rate
            rate = new
            changes += 1
            if let new {
                let burst = ReceiveBudget.burst(forRate: Double(new))
                if old == nil {
                    // From no limit: a full bucket, and every transfer contends from now.
                    tokens = burst
                    for id in readers.keys {
                        readers[id]!.tokens = .infinity
                        readers[id]!.contendsUntil = now + Self.nanoseconds(ReceiveBudget.contention)
                    }
                } else {
                    // What was lent at the old rate is paid at the new one, up to a chunk and a
                    // burst: a debt beyond that was the old rate's to lend.
                    tokens = min(burst, max(tokens, -(burst + ReceiveBudget.chunk)))
                    for id in readers.keys {
                        readers[id]!.tokens = max(readers[id]!.tokens, -(burst + ReceiveBudget.chunk))
                    }
                }
                updated = max(updated, now)
            }
            return readers.values.map(\.wake)
        }

        mutating func take(_ bytes: Int, by id: ObjectIdentifier?, at now: UInt64) -> TimeInterval {
            guard let rate else { return 0 }
            let perSecond = Double(rate)
            if now > updated {
                tokens = min(ReceiveBudget.burst(forRate: perSecond), tokens + Double(now - updated) / 1e9 * perSecond)
                updated = now
            }
            tokens -= Double(bytes)
            let sharedBurst = ReceiveBudget.burst(forRate: perSecond)
            guard let id, var reader = readers[id] else { return tokens < 0 ? -tokens / perSecond : 0 }
            reader.recent = reader.recentBytes(at: now) + Double(bytes)
            reader.recentAt = now
            // Its share: what those that read less than theirs on their own leave, evenly
            // among those that contend (itself included); never less than an even share of all.
            var contenders = 1, others = 0.0
            for (other, state) in readers where other != id {
                if state.contendsUntil > now { contenders += 1 } else { others += state.recentBytes(at: now) / ReceiveBudget.contention }
            }
            let share = max(perSecond / Double(readers.count), (perSecond - others) / Double(contenders))
            let burst = ReceiveBudget.burst(forRate: share)
            if now > reader.updated {
                reader.tokens += Double(now - reader.updated) / 1e9 * share
                reader.updated = now
            }
            reader.tokens = min(burst, reader.tokens) - Double(bytes)
            var own: TimeInterval = 0
            if reader.tokens < 0 {
                // It wants more than its share: it contends.
                own = -reader.tokens / share
                reader.contendsUntil = max(reader.contendsUntil, now + Self.nanoseconds(own + ReceiveBudget.contention))
            }
            // The shared debt is paid by those that contend; one that reads less than its
            // share on its own pays only what goes beyond a burst (the debt stays bounded),
            // else the pauses that fall on it hold it below what it would read.
            let debt = reader.contendsUntil > now ? -tokens : -(tokens + sharedBurst)
            let wait = max(own, debt > 0 ? debt / perSecond : 0)
            readers[id] = reader
            return wait
        }
    }
}

/// A queue's bandwidth limits: one budget overall, and one per host (made as hosts are met).
///
/// Every transfer of the queue reads under both, limited or not, so that a limit set later
/// holds the transfers already running. A host's budget is kept while a per-host limit is set
/// (its debt outlives a transfer); without one, only as long as a transfer holds it.
final class BandwidthBudgets: Sendable {
    let overall: ReceiveBudget
    private let hosts: Protected<Hosts>

    struct Hosts {
        var rate: Int?
        /// The budgets kept: every host's while a per-host limit is set.
        var kept: [String: ReceiveBudget] = [:]
        /// The budgets that transfers hold, while they do.
        var held: [String: Held] = [:]
        /// When to drop the entries whose budget is gone.
        var sweepAt = 64

        struct Held {
            weak var budget: ReceiveBudget?
        }
    }

    init(overall: Int?, perHost: Int?) {
        self.overall = ReceiveBudget(bytesPerSecond: overall)
        hosts = Protected(Hosts(rate: perHost.map { max(1, $0) }))
    }

    /// The per-host limit, in bytes per second; `nil` for none.
    var perHostRate: Int? { hosts.withLock { $0.rate } }

    /// Changes the per-host limit (`nil`: none) of every host, for the transfers running too.
    func setPerHostRate(_ rate: Int?) {
        let rate = rate.map { max(1, $0) }
        let budgets = hosts.withLock { hosts -> [ReceiveBudget] in
            hosts.rate = rate
            let live = Array(hosts.kept.values) + hosts.held.values.compactMap(\.budget)
            if rate == nil {
                hosts.kept.removeAll()
            } else {
                for (host, held) in hosts.held { if let budget = held.budget { hosts.kept[host] = budget } }
            }
            return live
        }
        for budget in budgets { budget.setRate(rate) }
    }

    /// The budgets a transfer to `host` draws from: the queue's and its host's.
    func budgets(forHost host: String) -> [ReceiveBudget] {
        let perHost = hosts.withLock { hosts in
            if let budget = hosts.kept[host] ?? hosts.held[host]?.budget { return budget }
            let budget = ReceiveBudget(bytesPerSecond: hosts.rate)
            if hosts.rate != nil { hosts.kept[host] = budget }
            hosts.held[host] = Hosts.Held(budget: budget)
            if hosts.held.count >= hosts.sweepAt {
                hosts.held = hosts.held.filter { $0.value.budget != nil }
                hosts.sweepAt = max(64, hosts.held.count * 2)
            }
            return budget
        }
        return [overall, perHost]
    }

    var isEnforced: Bool { shortfall == nil }

    /// Why a transfer under one of them was not held to its limit, the first time one was not.
    var shortfall: BandwidthLimitShortfall? {
        overall.shortfall ?? hosts.withLock { hosts in
            hosts.kept.values.lazy.compactMap(\.shortfall).first
                ?? hosts.held.values.lazy.compactMap { $0.budget?.shortfall }.first
        }
    }
}

extension Array where Element == ReceiveBudget {
    /// Takes `bytes` that `reader` received from every budget; the longest pause any of them
    /// asks for.
    func take(_ bytes: Int, by reader: ObjectIdentifier? = nil) -> TimeInterval {
        let now = DispatchTime.now().uptimeNanoseconds
        return reduce(0) { Swift.max($0, $1.take(bytes, by: reader, at: now)) }
    }

    /// Whether any of them limits now, and how many times their limits changed in all.
    var status: (limited: Bool, changes: Int) {
        reduce((false, 0)) { result, budget in
            let status = budget.status
            return (result.limited || status.rate != nil, result.changes + status.changes)
        }
    }

    func markUnenforced(_ reason: BandwidthLimitShortfall) {
        for budget in self { budget.markUnenforced(reason) }
    }

    /// The most a transfer under these budgets may read per second while the others read too:
    /// the smallest of its even shares (`Int.max` without a limit).
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
    /// byte, the bytes charged so far, and the limits' changes they were charged under.
    private let state = Protected<(read: Int, baseline: Int?, charged: Int, changes: Int)>((0, nil, 0, 0))

    /// The bytes to charge for a chunk of `count` bytes whose connection's socket reports
    /// `receipt` now, under limits that changed `changes` times (``ReceiveBudget/status``).
    func charge(forChunkOf count: Int, receipt: (received: Int, unread: Int)?, changes: Int = 0) -> Int {
        state.withLock { state in
            state.read += count
            var target = state.read
            if let receipt {
                // A limit set (or changed) since the last chunk charged: what the socket took
                // in meanwhile was read without one, and is not charged.
                let limitChanged = changes != state.changes
                state.changes = changes
                if state.baseline == nil || limitChanged || receipt.received < state.baseline! + state.read - count {
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

/// Why a transfer under a bandwidth limit was not held to it on the wire
/// (``FetchQueue/bandwidthLimitShortfall``). Its body still reaches the app no faster than the
/// limit; the server may send it faster.
public enum BandwidthLimitShortfall: Sendable, Equatable, CustomStringConvertible {
    /// Its libcurl handle could not be reached to pause the reading: another
    /// FoundationNetworking layout, or Apple platforms (no libcurl). See
    /// ``FetchSession/workarounds`` (`bandwidth-wire`).
    case cannotPause
    /// It ran over a multiplexed connection (HTTP/2 or HTTP/3), whose stream cannot be held on
    /// the wire: it started before the limit was set, or its session could not ask libcurl for
    /// HTTP/1.1 (`task-options` not active in ``FetchSession/workarounds``).
    case multiplexedConnection
    /// Its chunks were not delivered inside libcurl's write callback, where the reading can be
    /// paused (a session whose delegate queue is not FetchKit's).
    case readOffLibcurlThread

    public var description: String {
        switch self {
        case .cannotPause:
            return "a transfer's libcurl handle could not be reached to pause it (another FoundationNetworking layout, or not Linux)"
        case .multiplexedConnection:
            return "a transfer ran over an HTTP/2 or HTTP/3 connection, whose stream cannot be held on the wire"
        case .readOffLibcurlThread:
            return "a transfer's chunks were not delivered inside libcurl's write callback, where its reading can be paused"
        }
    }
}
