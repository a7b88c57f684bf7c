import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An operation's attempts: the current one (made, waiting for its slot, started, answered), and
/// what its attempts share (the total timeout's start, the last one sent, a resend after a
/// refused credential). A value, changed only by its transitions, under the operation's lock:
/// it lives in the operation's ``AnyFetchOperation/Record``, beside the
/// ``LifecycleStateMachine`` that decides what the operation does when an attempt ends.
///
/// One attempt's life: ``begin()`` when it is set up (a credential it carries:
/// ``carry(credential:)``; a download's `Range`: ``resume(from:)``); then, while it waits for its
/// queue's slot, ``armDeadline()`` and perhaps ``deadlinePassed(generation:)``, or
/// ``grantedDuringRefresh(of:by:)``; ``started(attempt:request:at:)`` once its transfer began,
/// ``answered(statusCode:)`` at its response head; and ``end()`` when its transfer reported.
///
/// Equatable so that an operation whose attempt state is still the default does not make its
/// record's box (a fetch waiting in a queue makes neither box).
struct AttemptState: Equatable {
    // What the attempts share.

    /// When the first attempt's transfer started, or the fetch first waited for its credential
    /// if that came first (uptime ns; 0 before): the total timeout counts from there.
    private(set) var firstStart: UInt64 = 0
    /// The number of the last attempt whose transfer started (0: none): ``AnyFetchOperation/attempts``.
    private(set) var sentCount = 0
    /// The request of the last attempt whose transfer started: ``AnyFetchOperation/sentRequest``.
    private(set) var lastSentRequest: URLRequest?
    /// Counts the deadline timers of attempts that may wait for a queue slot, so that a timer
    /// knows whether the attempt it watches is still the current one.
    private var deadlineGeneration: Int32 = 0
    /// The fetch was sent again because its credential was refused: a second refusal ends it.
    private(set) var resentAfterRefusal = false

    // The current attempt.

    /// Its transfer started (it may wait for a queue slot first).
    private(set) var hasStarted = false
    /// It got a response head: a server that answered and then stalled is worth another
    /// attempt; one that stayed silent for the whole idle timeout is not.
    private(set) var wasAnswered = false
    /// The fetch's deadline passed while it waited for a slot: it was stopped, and ends as a
    /// total timeout rather than a cancel.
    private var isOverdue = false
    /// The credential generation it carries (0: none; see AnyFetchOperation+Authentication.swift).
    private(set) var credentialGeneration: UInt64 = 0
    /// It was granted its slot while the refresh of this generation ran: it gave the slot back
    /// unsent, and waits for the refresh.
    private var refreshAtGrant: (authentication: FetchAuthentication, generation: UInt64)?
    /// Where a download's attempt resumes its partial file (its `Range`), 0 otherwise.
    private(set) var rangeOffset: Int64 = 0
    /// Where its progress counts from: the bytes on disk under a `206`, 0 otherwise.
    private(set) var progressBase: Int64 = 0

    /// How the current attempt ended, for the decision of what follows (``end()``).
    struct Ending {
        /// It got a response head.
        var answered: Bool
        /// It was stopped in its queue at the fetch's deadline.
        var overdue: Bool
        /// It was granted its slot during the refresh of a credential, and sent nothing.
        var refreshAtGrant: (authentication: FetchAuthentication, generation: UInt64)?
    }

    /// An attempt is set up: nothing of it has started or answered yet, and it carries no
    /// credential until ``carry(credential:)``.
    mutating func begin() {
        hasStarted = false
        wasAnswered = false
        refreshAtGrant = nil
        credentialGeneration = 0
    }

    /// The attempt carries the credential of `generation`: the generation changed at its grant
    /// (a refusal now concerns that one), or the attempt is sent to another origin after a
    /// redirect dropped it (0: none).
    mutating func carry(credential generation: UInt64) {
        credentialGeneration = generation
    }

    /// A download's attempt asks for the bytes from `offset` on (its `Range`).
    mutating func resume(from offset: Int64) {
        rangeOffset = offset
    }

    /// The attempt will wait for its slot under the fetch's deadline: the generation its timer
    /// names.
    mutating func armDeadline() -> Int32 {
        deadlineGeneration &+= 1
        return deadlineGeneration
    }

    /// The timer of `generation` fired: whether the attempt it watches is the current one and
    /// still waits for its slot (it is then overdue, and its caller stops it).
    mutating func deadlinePassed(generation: Int32) -> Bool {
        guard deadlineGeneration == generation, !hasStarted else { return false }
        isOverdue = true
        return true
    }

    /// The fetch waits for its credential before anything was sent: its total timeout counts
    /// from now, if it did not yet. Returns where it counts from.
    mutating func startClock(at now: UInt64) -> UInt64 {
        if firstStart == 0 { firstStart = now }
        return firstStart
    }

    /// The transfer of attempt number `attempt`, sending `request`, started: it counts as sent
    /// (what users read: only what reached the network counts).
    mutating func started(attempt: Int, request: URLRequest?, at now: UInt64) {
        hasStarted = true
        if firstStart == 0 { firstStart = now }
        sentCount = attempt
        lastSentRequest = request
    }

    /// The response head came, with `statusCode`: a `206` continues a partial download, so
    /// progress counts the bytes already on disk.
    mutating func answered(statusCode: Int) {
        wasAnswered = true
        progressBase = statusCode == 206 ? rangeOffset : 0
    }

    /// The attempt was granted its slot while the refresh of `generation` ran: it sent nothing.
    mutating func grantedDuringRefresh(of generation: UInt64, by authentication: FetchAuthentication) {
        refreshAtGrant = (authentication, generation)
    }

    /// The fetch is sent again with a newer credential after a refusal.
    mutating func resendAfterRefusal() {
        resentAfterRefusal = true
    }

    /// The attempt's transfer reported its end: how it went, once.
    mutating func end() -> Ending {
        defer {
            isOverdue = false
            refreshAtGrant = nil
        }
        return Ending(answered: wasAnswered, overdue: isOverdue, refreshAtGrant: refreshAtGrant)
    }

    static func == (lhs: AttemptState, rhs: AttemptState) -> Bool {
        lhs.firstStart == rhs.firstStart && lhs.sentCount == rhs.sentCount && lhs.lastSentRequest == rhs.lastSentRequest
            && lhs.deadlineGeneration == rhs.deadlineGeneration && lhs.resentAfterRefusal == rhs.resentAfterRefusal
            && lhs.hasStarted == rhs.hasStarted && lhs.wasAnswered == rhs.wasAnswered && lhs.isOverdue == rhs.isOverdue
            && lhs.credentialGeneration == rhs.credentialGeneration && lhs.rangeOffset == rhs.rangeOffset
            && lhs.progressBase == rhs.progressBase
            && lhs.refreshAtGrant?.authentication === rhs.refreshAtGrant?.authentication
            && lhs.refreshAtGrant?.generation == rhs.refreshAtGrant?.generation
    }
}
