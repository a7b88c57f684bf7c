import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What makes two requests the same fetch: identical GETs with identical limits, on one session.
///
/// One reference: the fields are in an immutable box made only for a request that may share,
/// so that a handle or a dictionary slot holds one reference, not the fields
/// (`OperationFootprintTests.aWaitingFlightIsAFewWordsInItsQueuesTables`).
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
        let allowsInsecureRedirects: Bool
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
              limits.bandwidthLimit == nil,     // a limit of its own is read by it alone
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
            allowsInsecureRedirects: limits.allowsInsecureRedirects,
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

/// One transfer and the attempts that share it (one, unless identical GETs coalesced), made by
/// its queue when the slot is granted.
///
/// It lives where its transfer lives: everything mutable here is confined to its session's
/// serial queue (the router's), as the ``Transfer``'s is. Its members, the latest response head
/// and progress, and its end are its own, and it fans the transfer's events out to its members'
/// operations without taking its queue's lock. A member added while it runs is added on that
/// queue, so it hears what it missed (start, head, progress — or the end) and then everything
/// else, in order. A member that leaves (its operation was cancelled) stops the transfer only
/// if it was the last one. Its queue hears from it once, when the transfer has ended.
final class Flight: SlotFlight, TransferOwner, @unchecked Sendable {
    /// The attempt that made the flight: its request, limits, session and sink are the
    /// flight's (identical for every member that joins). Kept even if it leaves.
    let first: FlightMember

    // Confined to the session's router queue.
    private var members: [FlightMember]
    private var transfer: Transfer?
    /// What a member added later has missed: whether its slot was granted and its transfer
    /// started, the latest head and progress, and the result once it ended (kept only by a
    /// flight that may be shared: nobody else joins).
    private var granted = false
    private var started = false
    private var head: (response: HTTPURLResponse, expected: Int64?)?
    private var received: (bytes: Int64, expected: Int64?)?
    private var result: TransferResult?
    private var ended = false
    /// The last member, when it left while the transfer ran: it hears of the end when the
    /// stopped transfer has ended — a download's partial file and resume record are then
    /// kept — not before.
    private var leftWhileRunning: FlightMember?
    /// The refresh its members wait for, when its slot was granted while it ran: it sent nothing.
    private var refreshWait: (authentication: FetchAuthentication, generation: UInt64)?

    init(first: FlightMember, members: [FlightMember]) {
        self.first = first
        self.members = members
    }

    private var router: SessionRouter { first.session.router }

    /// Runs `body` on the session's router queue (at once if already there).
    private func onRouter(_ body: @escaping @Sendable () -> Void) {
        if router.isCurrent { body() } else { router.queue.async(execute: body) }
    }

    /// Its slot was granted: creates the transfer and starts it.
    ///
    /// Always later on the router queue, never within the call: a slot is granted as another
    /// flight ends, before that flight's members heard of their end, and a `401` among them
    /// must have started its refresh before this flight decides which credential to send.
    func start() {
        router.queue.async { self.begin() }
    }

    /// Adds a member that joined it running.
    func add(_ member: FlightMember) {
        onRouter {
            if !self.ended { self.members.append(member) }
            self.catchUp(member)
        }
    }

    /// Takes a member out (its operation was cancelled): it hears of its cancel now, or, if it
    /// was the last and the transfer runs, once the stopped transfer has ended. A member the
    /// flight no longer has (told of the end already) hears nothing.
    func remove(_ member: FlightMember) {
        onRouter {
            guard !self.ended, self.members.contains(member) else { return }
            self.members.removeAll { $0 === member }
            if self.members.isEmpty, let transfer = self.transfer {
                self.leftWhileRunning = member
                transfer.stop()
                return
            }
            member.report(.failure(.cancelled(.init(url: member.request.url)), nil))
        }
    }

    private func begin() {
        guard !members.isEmpty else {
            // Every member left before the slot took effect: the slot goes back.
            ended = true
            first.queue?.flightEnded(self, result: .failure(.cancelled(.init(url: first.request.url)), nil))
            return
        }
        let request: URLRequest
        switch first.requestAtGrant() {
        case .send(let current, let generation):
            request = current
            if let generation {
                for member in members where member.carriesCredential {
                    member.operation.credentialChangedAtGrant(to: generation)
                }
            }
        case .waitForRefresh(let authentication, let generation):
            // Nothing is sent with a credential known to be refused: the slot goes back unused,
            // and each member waits for the refresh, holding none.
            ended = true
            refreshWait = (authentication, generation)
            let told = members
            members = []
            let queue = first.queue
            queue?.flightEnded(self, result: .failure(.cancelled(.init(url: first.request.url)), nil))
            for member in told { member.waitForRefresh(of: generation, by: authentication) }
            withExtendedLifetime(queue) {}
            return
        }
        granted = true
        for member in members { member.operation.attemptGranted() }
        let transfer = Transfer(request: request, session: first.session, limits: first.limits,
                                sink: first.sink ?? first.operation.makeBodySink(), owner: self,
                                receiveBudgets: (first.queue?.bandwidthBudgets.budgets(forHost: first.host) ?? [])
                                    + (first.ownBudget.map { [$0] } ?? []),
                                credentialFields: first.credentialFields(in: request))
        self.transfer = transfer
        transfer.start()
    }

    /// Brings a member added late to where the flight is, then, if it ended, tells it how.
    private func catchUp(_ member: FlightMember) {
        let operation = member.operation
        if granted { operation.attemptGranted() }
        if started { operation.transferDidStart() }
        if let head { operation.transferDidReceive(response: head.response, expectedLength: head.expected) }
        if let received { operation.transferDidReceive(bytes: received.bytes, of: received.expected) }
        guard ended else { return }
        if let (authentication, generation) = refreshWait {
            member.waitForRefresh(of: generation, by: authentication)
        } else {
            member.report(result ?? .failure(.cancelled(.init(url: member.request.url)), nil))
        }
    }

    // MARK: TransferOwner (router queue)

    /// The flight is over: its queue frees the slot (and stops letting identical requests join
    /// it), then each member hears how it ended. The queue is held until they have: a member's
    /// fetch may be the last work of a queue its owner dropped, and the queue, freed, cancels
    /// what has not heard its result.
    func transferDidEnd(_ result: TransferResult, of handle: any TransferHandle) {
        ended = true
        transfer = nil
        if first.key != nil { self.result = result }
        var told = members
        members = []
        if let left = leftWhileRunning { told.append(left) }
        leftWhileRunning = nil
        let queue = first.queue
        queue?.flightEnded(self, result: result)
        for member in told {
            member.report(result)
        }
        withExtendedLifetime(queue) {}
    }

    func transferDidStart() {
        started = true
        for member in members { member.operation.transferDidStart() }
    }

    func transferDidSend(bytes: Int64, of total: Int64?) {
        // A request with a body is never shared: this flight has one member.
        for member in members { member.operation.transferDidSend(bytes: bytes, of: total) }
    }

    func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?) {
        head = (response, expectedLength)
        received = nil
        for member in members { member.operation.transferDidReceive(response: response, expectedLength: expectedLength) }
    }

    func transferDidRedirect(_ response: HTTPURLResponse, to request: URLRequest) {
        for member in members { member.operation.transferDidRedirect(response, to: request) }
    }

    func transferDidReceive(bytes: Int64, of expectedLength: Int64?) {
        received = (bytes, expectedLength)
        for member in members { member.operation.transferDidReceive(bytes: bytes, of: expectedLength) }
    }
}

/// One attempt's place in a ``FetchQueue``: the transfer handle a queue gives it. Immutable:
/// where it waits was reserved when it was made; whether it waits, runs in a flight or has
/// ended is its queue's and its flight's to know.
final class FlightMember: SlotHolder, TransferHandle, Sendable {
    let request: URLRequest
    /// Whose attempt it is: the operation hears of the transfer (its ``TransferOwner``).
    let operation: AnyFetchOperation
    /// What few attempts have, in a box made only for those (`nil` for most).
    private let attachments: Attachments?
    /// The origin its per-host limit applies to, as the string its queue's scheduler holds.
    let host: String
    // Weak: the operation holds its member, and must not keep a queue its owner dropped. A
    // queue that is freed cancels its operations; a member whose queue is gone then reports
    // the cancel itself.
    weak let queue: FetchQueue?
    /// Where it waits for its slot, reserved in its queue's scheduler when it was made.
    let place: SlotPlace
    let limits: TransferLimits
    /// Its fetch's identifier in its queue.
    let id: FetchID
    /// Its operation's session (read when it was made: reading it takes the operation's lock).
    let session: FetchSession

    /// A sink made before the grant (a download's), a key to share a transfer by, where a
    /// download resumes, the credential and the fetch's own bandwidth budget. Unchecked for the
    /// sink alone, which is not used until the transfer that it is handed to uses it, on its
    /// session's queue.
    private final class Attachments: @unchecked Sendable {
        let sink: (any ResponseBodySink)?
        let key: FlightKey?
        let resumedFrom: Int64
        let credential: AttemptCredential?
        let ownBudget: ReceiveBudget?

        init(_ attempt: QueuedAttempt, key: FlightKey?) {
            sink = attempt.sink
            self.key = key
            resumedFrom = attempt.resumedFrom
            credential = attempt.credential
            ownBudget = attempt.ownBudget
        }
    }

    /// `nil` for a body kept in memory: the flight makes its sink at grant.
    var sink: (any ResponseBodySink)? { attachments?.sink }
    /// What makes it the same fetch as others, if it may share a transfer.
    var key: FlightKey? { attachments?.key }
    /// Where the attempt resumes a download's partial file (with `Range`), or 0.
    var resumedFrom: Int64 { attachments?.resumedFrom ?? 0 }
    /// The budget of the fetch's own bandwidth limit, if it has one.
    var ownBudget: ReceiveBudget? { attachments?.ownBudget }

    /// Whether the attempt's request carries its queue's credential.
    var carriesCredential: Bool { attachments?.credential != nil }

    /// The header fields the credential put on `request`, added or changed from the request the
    /// operation made: a redirect to another origin must not carry them.
    func credentialFields(in request: URLRequest) -> [String] {
        guard let bare = attachments?.credential?.bareRequest else { return [] }
        return (request.allHTTPHeaderFields ?? [:]).compactMap { name, value in
            bare.value(forHTTPHeaderField: name) == value ? nil : name
        }
    }

    /// What the slot's grant sends.
    enum AtGrant {
        /// This request; with the credential of `generation` if it changed since the attempt
        /// was made (`nil`: as made).
        case send(URLRequest, generation: UInt64?)
        /// Nothing: the credential it carries is being refreshed (or its refresh failed, or it
        /// was forgotten): the attempt waits for that refresh, and begins again.
        case waitForRefresh(FetchAuthentication, generation: UInt64)
    }

    /// The request to send now that the slot is granted: with the current credential if the
    /// one it was made with has changed meanwhile (a fetch that waited while the credential was
    /// refreshed or set is not sent with the old one), or none while that credential is being
    /// refreshed. On the router queue.
    func requestAtGrant() -> AtGrant {
        guard let carried = attachments?.credential else { return .send(request, generation: nil) }
        switch carried.authentication.atGrant(carried: carried.generation) {
        case .sendAsMade:
            return .send(request, generation: nil)
        case .send(let current):
            var fresh = carried.bareRequest
            carried.authentication.authenticator.apply(current, to: &fresh)
            return .send(fresh, generation: current.generation)
        case .wait(let generation):
            return .waitForRefresh(carried.authentication, generation: generation)
        }
    }

    /// Its slot was granted while the refresh of `generation` ran: nothing was sent, and its
    /// operation waits for the refresh. Outside every lock.
    func waitForRefresh(of generation: UInt64, by authentication: FetchAuthentication) {
        operation.slotGrantedDuringRefresh(of: generation, by: authentication, handle: self)
    }

    /// The member `attempt` is in its queue: shared by `key` (if any), waiting for its slot at
    /// `place`, counted against `host`'s limit.
    init(_ attempt: QueuedAttempt, key: FlightKey?, queue: FetchQueue?, host: String, place: SlotPlace) {
        operation = attempt.owner
        id = attempt.id
        request = attempt.request
        limits = attempt.limits
        session = attempt.session
        attachments = attempt.sink == nil && key == nil && attempt.resumedFrom == 0 && attempt.credential == nil
            && attempt.ownBudget == nil ? nil : Attachments(attempt, key: key)
        self.queue = queue
        self.host = host
        self.place = place
    }

    static func == (lhs: FlightMember, rhs: FlightMember) -> Bool { lhs === rhs }

    func stop() {
        guard let queue else {
            endOrphaned()
            return
        }
        queue.transition { $0.leave(self) }
    }

    /// Its queue is gone (it was freed, cancelling what it held): the attempt ends as cancelled.
    /// (Its operation ignores the report if it heard of its end already.)
    private func endOrphaned() {
        report(.failure(.cancelled(.init(url: request.url)), nil))
    }

    /// Tells the operation the transfer ended, outside every lock. Its operation takes it only
    /// if this is still its current attempt.
    func report(_ result: TransferResult) {
        operation.transferDidEnd(result, of: self)
    }

    /// The origin a per-host limit applies to: scheme, host and port.
    static func hostKey(of url: URL?) -> String {
        guard let url else { return "" }
        let scheme = url.scheme?.lowercased() ?? "http"
        let host = url.host?.lowercased() ?? ""
        return "\(scheme)://\(host):\(Transfer.effectivePort(url).map(String.init) ?? "")"
    }
}
