import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What makes two requests the same fetch: identical GETs with identical limits, on one session.
///
/// One reference: the fields are in an immutable box made only for a request that may share,
/// so that a handle or a dictionary slot holds 8 bytes, not the fields.
struct FlightKey: Hashable, Sendable {
    private struct Fields: Hashable, Sendable {
        let url: String
        let headers: [String]
        /// Whether the session adds its stored cookies (`httpShouldHandleCookies`).
        let handlesCookies: Bool
        let session: ObjectIdentifier
        let maximumResponseSize: Int64
        let acceptableStatusCodes: Set<Int>
        let idleTimeout: TimeInterval
        let totalTimeout: TimeInterval?
        /// A later attempt's deadline counts from its fetch's start: only the same deadline shares.
        let fetchStartedAt: UInt64?
        let redirects: Int?
        let acceptsNotModified: Bool
    }

    private final class Box: Sendable {
        let fields: Fields
        let hash: Int

        init(_ fields: Fields) {
            self.fields = fields
            hash = fields.hashValue
        }
    }

    private let box: Box

    static func == (lhs: FlightKey, rhs: FlightKey) -> Bool {
        lhs.box === rhs.box || (lhs.box.hash == rhs.box.hash && lhs.box.fields == rhs.box.fields)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(box.hash)
    }

    /// The key of a request that may share a transfer, or `nil` when it must have its own.
    ///
    /// Sharing hands one response to several callers, which is only right when each would
    /// accept that response as its own (RFC 9111: a response to one request may answer another
    /// only when nothing in the second asks for a fresh one). So only these are shared:
    /// - GETs without a body, whose body is kept in memory (a download has a destination of
    ///   its own);
    /// - with no ``CredentialProvider`` (who answers a challenge is per operation), and
    ///   identical headers, `Authorization` and `Cookie` included, and the same
    ///   `httpShouldHandleCookies` (the session adds its stored cookies to one and not the other);
    /// - that do not ask for a fresh answer: no `Cache-Control` with `no-cache`, `no-store` or
    ///   `max-age=0`, no `Pragma: no-cache`, and no cache policy that ignores local data.
    init?(request: URLRequest, limits: TransferLimits, session: FetchSession, sink: (any ResponseBodySink)?) {
        guard request.isGET,
              request.httpBody == nil, request.httpBodyStream == nil,
              sink == nil || sink is MemoryBodySink,      // nil: a memory sink, made at grant
              limits.credentials == nil,
              !Self.asksForAFreshAnswer(request),
              let url = request.url?.absoluteString
        else { return nil }
        let redirects: Int?
        switch limits.redirectPolicy {
        case .follow(let maximum): redirects = maximum
        case .doNotFollow: redirects = nil
        case .ask: return nil   // a closure cannot be compared: such requests are not shared
        }
        box = Box(Fields(
            url: url,
            headers: (request.allHTTPHeaderFields ?? [:]).map { "\($0.key.lowercased()):\($0.value)" }.sorted(),
            handlesCookies: request.httpShouldHandleCookies,
            session: ObjectIdentifier(session),
            maximumResponseSize: limits.maximumResponseSize,
            acceptableStatusCodes: limits.acceptableStatusCodes,
            idleTimeout: limits.idleTimeout,
            totalTimeout: limits.totalTimeout,
            fetchStartedAt: limits.fetchStartedAt,
            redirects: redirects,
            acceptsNotModified: limits.acceptsNotModified
        ))
    }

    /// Whether `request` says that a response made for someone else will not do: `Cache-Control`
    /// `no-cache`, `no-store` or `max-age=0` (RFC 9111 §5.2.1), `Pragma: no-cache` (§5.4), or a
    /// cache policy that ignores local data.
    static func asksForAFreshAnswer(_ request: URLRequest) -> Bool {
        switch request.cachePolicy {
        case .reloadIgnoringLocalCacheData, .reloadIgnoringLocalAndRemoteCacheData: return true
        default: break
        }
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            switch name.lowercased() {
            case "cache-control":
                let directives = value.lowercased().split(separator: ",").map { $0.filter { !$0.isWhitespace } }
                if directives.contains(where: { directive in
                    directive == "no-cache" || directive.hasPrefix("no-cache=") || directive == "no-store"
                        || (directive.hasPrefix("max-age=") && Int(directive.dropFirst("max-age=".count)) == 0)
                }) {
                    return true
                }
            case "pragma":
                if value.lowercased().contains("no-cache") { return true }
            default:
                continue
            }
        }
        return false
    }
}

/// One transfer and the operations that share it (one, unless identical GETs coalesced).
///
/// Its first member waits for a slot in its queue's ``SlotScheduler``; the flight is made when
/// the slot is granted (or when that member joins, if identical requests may join it while it
/// waits), then owns the real ``Transfer`` and fans its events out to every member. A member
/// that leaves (its operation was cancelled) stops the transfer only if it was the last one.
/// What changes about a flight — whether it runs, its members, its transfer — is in its queue's
/// ``QueueState`` (``QueueState/FlightRecord``); this object is what it sends.
final class Flight: Sendable {
    /// The attempt that made the flight: its request, limits, session and sink are the
    /// flight's (identical for every member that joins). Immutable, and kept even if it leaves.
    let first: FlightMember
    /// Its first member's, held weakly there: a queue its owner dropped is freed; a queue with
    /// a transfer in flight keeps itself until the transfer ends (``QueueState/wantsKeepAlive``).
    private var queue: FetchQueue? { first.queue }

    var key: FlightKey? { first.key }
    var host: String { first.host }
    var request: URLRequest { first.request }
    var limits: TransferLimits { first.limits }
    /// Its first member's operation's. Reads that operation's lock: never under the queue's.
    var session: FetchSession { first.session }
    /// The transfer's sink: the first attempt's; or, for a body kept in memory, a new one, made
    /// when the slot is granted (the queue calls this once per flight, as it creates the transfer).
    func makeSink() -> any ResponseBodySink {
        first.sink ?? first.operation.makeBodySink()
    }
    /// Its identity in its queue: its first member's, which waited for its slot.
    var ticket: ObjectIdentifier { ObjectIdentifier(first) }

    /// - Parameter member: The attempt that makes it; the flight reaches its queue through it.
    init(first member: FlightMember) {
        first = member
    }
}

extension Flight: TransferOwner {
    func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?) {
        let now = DispatchTime.now().uptimeNanoseconds
        let members = queue?.transition { $0.flightReceived(self, response: response, expectedLength: expectedLength, now: now) } ?? []
        for member in members {
            member.operation.transferDidReceive(response: response, expectedLength: expectedLength)
        }
    }

    func transferDidReceive(bytes: Int64, of expectedLength: Int64?) {
        let members = queue?.transition { $0.flightHeard(self, received: (bytes, expectedLength)) } ?? []
        for member in members {
            member.operation.transferDidReceive(bytes: bytes, of: expectedLength)
        }
    }

    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest) {
        let members = queue?.transition { $0.flightRedirected(self, response: response, to: request) } ?? []
        for member in members {
            member.operation.transferDidRedirect(response, to: request)
        }
    }

    func transferDidStart() {
        forEachMember { $0.transferDidStart() }
    }

    func transferDidSend(bytes: Int64, of total: Int64?) {
        // A request with a body is never shared: this flight has one member.
        forEachMember { $0.transferDidSend(bytes: bytes, of: total) }
    }

    /// Tells every member's operation, outside the queue's lock.
    private func forEachMember(_ tell: (AnyFetchOperation) -> Void) {
        let members = queue?.transition { $0.flightHeard(self) } ?? []
        for member in members {
            tell(member.operation)
        }
    }

    func transferDidEnd(_ result: TransferResult) {
        // The members hear of the end after this flight let go of its queue: one of them may be
        // the last work that keeps the queue, which its owner may have dropped.
        var queue = self.queue
        let now = DispatchTime.now().uptimeNanoseconds
        let (replays, members) = queue?.transition { state in
            (state.replaysBeforeEnd(of: self, now: now), state.flightEnded(self, result: result))
        } ?? ([], [])
        queue = nil
        for (member, latest) in replays {
            member.catchUp(with: latest)
        }
        for member in members {
            member.report(result)
        }
    }
}

/// The members of a flight, in the order they joined: the first inline, the others in an array
/// made only when a second joins (most flights have one member).
struct FlightMembers: Sequence, ExpressibleByArrayLiteral {
    private var first: FlightMember?
    private var others: [FlightMember] = []

    init(_ member: FlightMember) {
        first = member
    }

    init(arrayLiteral members: FlightMember...) {
        for member in members { append(member) }
    }

    var isEmpty: Bool { first == nil }

    mutating func append(_ member: FlightMember) {
        if first == nil {
            first = member
        } else {
            others.append(member)
        }
    }

    mutating func remove(_ member: FlightMember) {
        if first === member {
            first = others.isEmpty ? nil : others.removeFirst()
        } else {
            others.removeAll { $0 === member }
        }
    }

    func makeIterator() -> Iterator {
        Iterator(head: first, rest: others.makeIterator())
    }

    /// The first, then the others: a value, so that walking the members (several times per
    /// request) allocates nothing.
    struct Iterator: IteratorProtocol {
        fileprivate var head: FlightMember?
        fileprivate var rest: IndexingIterator<[FlightMember]>

        mutating func next() -> FlightMember? {
            if let member = head {
                head = nil
                return member
            }
            return rest.next()
        }
    }
}

/// One operation's place in a ``Flight``: the transfer handle a ``FetchQueue`` gives it.
final class FlightMember: TransferHandle, @unchecked Sendable {
    // The fields are ordered to pack into 120 bytes, a 128-byte allocation (tens of thousands
    // may wait): the request (9 bytes on Linux) with a flag after it, then words, then the
    // odd-sized ones.
    let request: URLRequest
    /// It joined its flight running and waits for the replay that brings it to where the
    /// transfer is (``QueueState/replay(to:of:now:)``). Guarded by the queue's lock.
    var awaitingReplay = false
    /// Whose attempt it is: the operation hears of the transfer (its ``TransferOwner``).
    let operation: AnyFetchOperation
    /// What few attempts have, in a box made only for those (`nil` for most).
    private let attachments: Attachments?
    /// The origin its per-host limit applies to. Guarded by the queue's lock: the join swaps
    /// it for the equal string the scheduler already holds, so that waiting fetches to one host
    /// share one.
    var host: String
    // Weak: the operation holds its member, and must not keep a queue its owner dropped. A
    // queue that is freed cancels its operations; a member whose queue is gone then reports
    // the cancel itself.
    private(set) weak var queue: FetchQueue?
    /// Where the first member of a flight waits for its slot in its queue's scheduler, to
    /// withdraw or raise it there. Guarded by the queue's lock.
    var place = SlotScheduler<QueueState.Waiter>.Place.none
    let limits: TransferLimits

    /// Where it is. Guarded by the queue's lock and changed only by ``QueueState`` transitions,
    /// which hand the member's end to one caller (it becomes ``QueueState/Membership/ended``
    /// once); or, once its queue is gone, under ``orphans``.
    var membership = QueueState.Membership.new
    /// Guards ``membership`` of members whose queue is gone (nothing else touches it then).
    private static let orphans = Protected(())

    /// A sink made before the grant (a download's), a key to share a transfer by, and where a
    /// download resumes.
    private final class Attachments {
        let sink: (any ResponseBodySink)?
        let key: FlightKey?
        let resumedFrom: Int64

        init(sink: (any ResponseBodySink)?, key: FlightKey?, resumedFrom: Int64) {
            self.sink = sink
            self.key = key
            self.resumedFrom = resumedFrom
        }
    }

    /// `nil` for a body kept in memory: the flight makes its sink at grant (``Flight/makeSink()``).
    var sink: (any ResponseBodySink)? { attachments?.sink }
    /// What makes it the same fetch as others, if it may share a transfer.
    var key: FlightKey? { attachments?.key }
    /// Where the attempt resumes a download's partial file (with `Range`), or 0: its fetch's
    /// progress counts from there if the server answers `206 Partial Content`.
    var resumedFrom: Int64 { attachments?.resumedFrom ?? 0 }
    /// Its operation's session. Reads the operation's lock: never under the queue's.
    var session: FetchSession { operation.session }

    init(operation: AnyFetchOperation, request: URLRequest, limits: TransferLimits,
         sink: (any ResponseBodySink)?, key: FlightKey?, resumedFrom: Int64 = 0, queue: FetchQueue) {
        self.operation = operation
        self.request = request
        self.limits = limits
        attachments = sink == nil && key == nil && resumedFrom == 0
            ? nil : Attachments(sink: sink, key: key, resumedFrom: resumedFrom)
        self.queue = queue
        host = Self.hostKey(of: request.url)
    }

    func start() {
        guard let queue else {
            endOrphaned()
            return
        }
        let priority = operation.queuePriority      // outside the queue's lock: Foundation's
        queue.transition { $0.join(self, priority: priority) }
    }

    func stop() {
        guard let queue else {
            endOrphaned()
            return
        }
        queue.transition { $0.leave(self) }
    }

    /// Its queue is gone (it was freed, cancelling what it held): the member ends as cancelled,
    /// once.
    private func endOrphaned() {
        let first = Self.orphans.withLock { _ -> Bool in
            if case .ended = membership { return false }
            membership = .ended
            return true
        }
        if first { report(.failure(.cancelled(.init(url: request.url)), nil)) }
    }

    /// Brings the operation of a member that joined a running flight to where the transfer is:
    /// it started, and its latest head and progress. Outside the queue's lock, on the router
    /// queue, in order with the flight's events.
    func catchUp(with latest: QueueState.Latest) {
        operation.transferDidStart()
        if let (head, expected) = latest.response {
            operation.transferDidReceive(response: head, expectedLength: expected)
        }
        if let received = latest.received {
            operation.transferDidReceive(bytes: received.bytes, of: received.expected)
        }
    }

    /// Tells the operation the transfer ended. Outside the queue's lock, by the one caller
    /// that ended the membership.
    func report(_ result: TransferResult) {
        operation.transferDidEnd(result)
    }

    /// The origin a per-host limit applies to: scheme, host and port.
    static func hostKey(of url: URL?) -> String {
        guard let url else { return "" }
        let scheme = url.scheme?.lowercased() ?? "http"
        let host = url.host?.lowercased() ?? ""
        return "\(scheme)://\(host):\(Transfer.effectivePort(url).map(String.init) ?? "")"
    }
}
