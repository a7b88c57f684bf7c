import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import FetchKit

/// An operation's attempts as a pure value (``AttemptState``): each transition, and what the
/// decision after an attempt reads of it.
@Suite("Attempt state (pure)", .timeLimit(.minutes(1)))
struct AttemptStateTests {
    private struct NoRefresh: FetchAuthenticator {
        func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential> {
            FetchOperation(request: URLRequest(url: URL(fileURLWithPath: "/")))
        }
    }

    let request = URLRequest(url: URL(fileURLWithPath: "/file"))

    @Test func theDefaultIsEqualToAFreshValueSoAWaitingFetchMakesNoBox() {
        var state = AttemptState()
        state.begin()
        #expect(state == AttemptState(), "beginning an attempt of a fresh fetch changes nothing stored")
        state.carry(credential: 3)
        #expect(state != AttemptState())
    }

    @Test func aStartedAttemptCountsAsSentAndStartsTheClockOnce() {
        var state = AttemptState()
        state.begin()
        state.started(attempt: 1, request: request, at: 100)
        #expect(state.hasStarted && state.sentCount == 1 && state.lastSentRequest == request && state.firstStart == 100)
        state.begin()
        #expect(!state.hasStarted && !state.wasAnswered, "a new attempt has neither started nor been answered")
        #expect(state.sentCount == 1 && state.firstStart == 100, "what the attempts share stays")
        state.started(attempt: 2, request: request, at: 500)
        #expect(state.sentCount == 2 && state.firstStart == 100, "the total timeout counts from the first start")
    }

    @Test func waitingForACredentialStartsTheClockBeforeAnythingIsSent() {
        var state = AttemptState()
        let first = state.startClock(at: 40)
        let again = state.startClock(at: 90)
        #expect(first == 40 && again == 40)
        state.started(attempt: 1, request: request, at: 120)
        #expect(state.firstStart == 40 && state.sentCount == 1)
    }

    @Test func aDeadlineStopsOnlyTheCurrentAttemptWhileItWaits() {
        var state = AttemptState()
        state.begin()
        let first = state.armDeadline()
        state.begin()
        let second = state.armDeadline()
        let stale = state.deadlinePassed(generation: first)
        let current = state.deadlinePassed(generation: second)
        #expect(!stale, "a stale timer stops nothing")
        #expect(current)
        let ended = state.end()
        let endedAgain = state.end()
        #expect(ended.overdue)
        #expect(!endedAgain.overdue, "ending reports it once")

        state.begin()
        let third = state.armDeadline()
        state.started(attempt: 2, request: request, at: 1)
        let afterStart = state.deadlinePassed(generation: third)
        #expect(!afterStart, "a started attempt is stopped by its own transfer's clock")
        let startedEnd = state.end()
        #expect(!startedEnd.overdue)
    }

    @Test func aResumedDownloadCountsProgressFromTheRangeOnlyUnder206() {
        var state = AttemptState()
        state.begin()
        state.resume(from: 4096)
        state.answered(statusCode: 206)
        let resumed = state.end()
        #expect(state.wasAnswered && state.progressBase == 4096 && resumed.answered)
        state.begin()
        state.answered(statusCode: 200)
        #expect(state.progressBase == 0, "a 200 is the whole file again")
    }

    @Test func aGrantDuringARefreshIsReportedOnceAndCarriedCredentialsFollowTheAttempt() {
        let authentication = FetchAuthentication(authenticator: NoRefresh(), origins: [])
        var state = AttemptState()
        state.begin()
        state.carry(credential: 7)
        #expect(state.credentialGeneration == 7)
        state.grantedDuringRefresh(of: 8, by: authentication)
        let ending = state.end()
        #expect(ending.refreshAtGrant?.generation == 8 && ending.refreshAtGrant?.authentication === authentication)
        let later = state.end()
        #expect(later.refreshAtGrant == nil)
        state.carry(credential: 0)
        #expect(state.credentialGeneration == 0, "a redirect to another origin dropped it")
        state.begin()
        state.carry(credential: 9)
        #expect(!state.resentAfterRefusal)
        state.resendAfterRefusal()
        state.begin()
        #expect(state.resentAfterRefusal && state.credentialGeneration == 0, "one resend per fetch; each attempt carries its own")
    }
}
