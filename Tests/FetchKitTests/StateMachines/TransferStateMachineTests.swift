import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import FetchKit

/// A transfer's states as a pure value: every transition, no network.
@Suite("Transfer state machine", .timeLimit(.minutes(3)))
struct TransferStateMachineTests {
    typealias Machine = TransferStateMachine

    static let url = URL(string: "http://127.0.0.1:8080/file")!
    static let second: UInt64 = 1_000_000_000

    private func machine(method: String = "GET", body: Data? = nil, maximum: Int64 = 1 << 20, idle: TimeInterval = 1,
                         total: TimeInterval? = nil, fetchStartedAt: UInt64? = nil) -> Machine {
        var request = URLRequest(url: Self.url)
        request.httpMethod = method
        request.httpBody = body
        let limits = TransferLimits(idleTimeout: idle, totalTimeout: total, maximumResponseSize: maximum,
                                    acceptableStatusCodes: Set(200..<300), fetchStartedAt: fetchStartedAt)
        return Machine(request: request, limits: limits)
    }

    private func head(_ status: Int, _ headers: [String: String] = [:], url: URL = url) -> HTTPURLResponse {
        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!
    }

    /// Started, with an accepted head announcing `length` bytes.
    private func receiving(_ length: Int, method: String = "GET", maximum: Int64 = 1 << 20) -> (Machine, HTTPURLResponse) {
        var machine = machine(method: method, maximum: maximum)
        _ = machine.start(now: Self.second)
        let response = head(200, ["Content-Length": "\(length)"])
        _ = machine.head(response, now: Self.second)
        return (machine, response)
    }

    // MARK: Start

    @Test func startSendsAndArmsTheIdleClock() {
        var machine = machine(idle: 2)
        #expect(machine.state == .idle)
        let started = machine.start(now: Self.second)
        #expect(started == .send)
        #expect(machine.state == .awaitingHead)
        #expect(machine.chain == [Self.url])
        #expect(machine.nextDeadline == 3 * Self.second)
    }

    @Test func aLaterAttemptStartedPastTheFetchsDeadlineFailsWithoutSending() {
        var machine = machine(total: 1, fetchStartedAt: Self.second)
        let action = machine.start(now: 3 * Self.second)
        #expect(action == .fail(.timedOut(.init(kind: .total, interval: 1, url: Self.url))))
    }

    @Test func theTotalDeadlineCountsFromTheFetchsFirstAttempt() {
        var machine = machine(idle: 10, total: 5, fetchStartedAt: Self.second)
        let started = machine.start(now: 2 * Self.second)
        #expect(started == .send)
        #expect(machine.nextDeadline == 6 * Self.second)
    }

    @Test func aStopBeforeTheStartEndsItOnceAndTheStartIsIgnored() {
        var machine = machine()
        let ending = machine.end(failed: true, taskCompleted: nil, stoppedForBackpressure: false)
        #expect(ending == .init(drainTask: false, cancelTask: false))
        #expect(machine.state == .ended)
        let started = machine.start(now: Self.second)
        #expect(started == .ignore)
        let ending2 = machine.end(failed: true, taskCompleted: nil, stoppedForBackpressure: false)
        #expect(ending2 == nil)
    }

    // MARK: Request body

    @Test func sentBytesAreClampedToTheBodyAndReportedOnlyWhenTheyGrow() throws {
        var machine = machine(method: "POST", body: Data(count: 10))
        _ = machine.start(now: Self.second)
        let sent = machine.sent(4, of: 12, now: Self.second)
        let first = try #require(sent)
        #expect(first.bytes == 4 && first.total == 10)
        let sent2 = machine.sent(4, of: 12, now: Self.second)
        #expect(sent2 == nil)
        let sent3 = machine.sent(12, of: 12, now: Self.second)
        let clamped = try #require(sent3)
        #expect(clamped.bytes == 10 && clamped.total == 10)
    }

    @Test func anAcceptedHeadCompletesTheUploadOnce() {
        var machine = machine(method: "POST", body: Data(count: 10))
        _ = machine.start(now: Self.second)
        _ = machine.sent(4, of: 10, now: Self.second)
        let headAction = machine.head(head(200, ["Content-Length": "3"]), now: Self.second)
        #expect(headAction == .open(expectedLength: 3, bodySent: 10))
        #expect(machine.sentBytes == 10)
        let sent = machine.sent(10, of: 10, now: Self.second)
        #expect(sent == nil)
    }

    // MARK: Head and body

    @Test func anAcceptedHeadOpensTheSinkAndItsBodyIsWritten() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let response = head(200, ["Content-Length": "5"])
        let headAction = machine.head(response, now: Self.second)
        #expect(headAction == .open(expectedLength: 5, bodySent: nil))
        #expect(machine.state == .receiving(response))
        #expect(machine.response == response)
        let chunk = machine.receive(Data(count: 5), now: Self.second)
        #expect(chunk == .write)
        #expect(machine.receivedBytes == 5)
    }

    @Test func anAnnouncedLengthOverTheLimitFailsAtTheHead() {
        var machine = machine(maximum: 100)
        _ = machine.start(now: Self.second)
        let headAction = machine.head(head(200, ["Content-Length": "101"]), now: Self.second)
        #expect(headAction == .fail(.responseTooLarge(.init(limit: 100, expectedLength: 101, url: Self.url))))
    }

    @Test func aBodyThatRunsPastTheLimitFailsAtTheChunkThatPassesIt() {
        var (machine, _) = receiving(0, maximum: 100)
        let chunk = machine.receive(Data(count: 100), now: Self.second)
        #expect(chunk == .write)
        let chunk2 = machine.receive(Data(count: 1), now: Self.second)
        #expect(chunk2 == .fail(.responseTooLarge(.init(limit: 100, expectedLength: 0, url: Self.url))))
    }

    @Test func aBadlyFramedHeadFails() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        guard case .fail(.invalidResponse) = machine.head(head(200, ["Content-Length": "-1"]), now: Self.second) else {
            Issue.record("a negative Content-Length is accepted")
            return
        }
    }

    @Test func aRefusedStatusKeepsABoundedPrefixOfItsBodyForTheError() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let response = head(404)
        let headAction = machine.head(response, now: Self.second)
        #expect(headAction == .refuse)
        let chunk = machine.receive(Data(repeating: 1, count: 5000), now: Self.second)
        #expect(chunk == .ignore)
        let chunk2 = machine.receive(Data(repeating: 2, count: 10), now: Self.second)
        #expect(chunk2 == .ignore)
        let prefix = Data(repeating: 1, count: FetchError.StatusFailure.bodyPrefixLimit)
        #expect(machine.state == .refusing(response, bodyPrefix: prefix))
        guard case .fail(.unacceptableStatus(let failure)) = machine.complete(error: nil) else {
            Issue.record("a 404 completes without its status error")
            return
        }
        #expect(failure.statusCode == 404 && failure.bodyPrefix == prefix)
    }

    @Test func aRefusedBodyPastTheLimitEndsWithTheStatusError() {
        var machine = machine(maximum: 10)
        _ = machine.start(now: Self.second)
        _ = machine.head(head(500), now: Self.second)
        guard case .fail(.unacceptableStatus(let failure)) = machine.receive(Data(count: 11), now: Self.second) else {
            Issue.record("an endless error body is taken")
            return
        }
        #expect(failure.statusCode == 500)
    }

    @Test func aNewHeadAfterAnAnsweredChallengeStartsTheBodyOver() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        _ = machine.head(head(401), now: Self.second)
        _ = machine.receive(Data(count: 10), now: Self.second)
        let response = head(200, ["Content-Length": "2"])
        let headAction = machine.head(response, now: Self.second)
        #expect(headAction == .open(expectedLength: 2, bodySent: nil))
        #expect(machine.receivedBytes == 0)
        #expect(machine.state == .receiving(response))
    }

    @Test func chunksBeforeAnyHeadAreIgnored() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let chunk = machine.receive(Data(count: 3), now: Self.second)
        #expect(chunk == .ignore)
        #expect(machine.receivedBytes == 0)
    }

    // MARK: Progress

    @Test func progressIsReportedEveryStepAndFlushedOnceWhenTheQueueCatchesUp() {
        var (machine, _) = receiving(1 << 20)
        _ = machine.receive(Data(count: 1000), now: Self.second)
        let progress = machine.progress()
        #expect(progress == .flushLater)
        _ = machine.receive(Data(count: 1000), now: Self.second)
        let progress2 = machine.progress()
        #expect(progress2 == .none, "one flush at a time")
        let flush = machine.flushProgress()
        #expect(flush == .report(bytes: 2000, of: 1 << 20))
        let flush2 = machine.flushProgress()
        #expect(flush2 == .none, "nothing new")
        _ = machine.receive(Data(count: Int(Transfer.progressStep)), now: Self.second)
        let progress3 = machine.progress()
        #expect(progress3 == .report(bytes: 2000 + Transfer.progressStep, of: 1 << 20))
    }

    @Test func theLastByteIsReportedAtOnce() {
        var (machine, _) = receiving(10)
        _ = machine.receive(Data(count: 10), now: Self.second)
        let progress = machine.progress()
        #expect(progress == .report(bytes: 10, of: 10))
    }

    @Test func aFlushQueuedBeforeTheEndReportsNothingAfterIt() {
        var (machine, _) = receiving(1 << 20)
        _ = machine.receive(Data(count: 1000), now: Self.second)
        let progress = machine.progress()
        #expect(progress == .flushLater)
        _ = machine.end(failed: true, taskCompleted: false, stoppedForBackpressure: false)
        let flush = machine.flushProgress()
        #expect(flush == .none)
    }

    // MARK: Completion and the end

    @Test func successWritesOutThenEndsExactlyOnce() {
        var (machine, response) = receiving(3)
        _ = machine.receive(Data(count: 3), now: Self.second)
        let completion = machine.complete(error: nil)
        #expect(completion == .close(response))
        #expect(machine.state == .writingOut(response))
        #expect(machine.written() == response)
        let ending = machine.end(failed: false, taskCompleted: true, stoppedForBackpressure: false)
        #expect(ending == .init(drainTask: false, cancelTask: false))
        #expect(machine.state == .ended)
        let ending2 = machine.end(failed: true, taskCompleted: true, stoppedForBackpressure: false)
        #expect(ending2 == nil, "a stop after the end")
        let completion2 = machine.complete(error: nil)
        #expect(completion2 == .ignore)
        let chunk = machine.receive(Data(count: 1), now: Self.second)
        #expect(chunk == .ignore)
        let headAction = machine.head(response, now: Self.second)
        #expect(headAction == .ignore)
    }

    @Test func aStopWhileWritingOutWinsAndTheWrittenBodyIsNotClosed() {
        var (machine, _) = receiving(3)
        _ = machine.receive(Data(count: 3), now: Self.second)
        _ = machine.complete(error: nil)
        let ending = machine.end(failed: true, taskCompleted: true, stoppedForBackpressure: false)
        #expect(ending == .init(drainTask: false, cancelTask: false), "a completed task is not cancelled")
        #expect(machine.written() == nil)
    }

    @Test func noTimeoutFiresWhileWritingOut() {
        var (machine, _) = receiving(3)
        _ = machine.receive(Data(count: 3), now: Self.second)
        _ = machine.complete(error: nil)
        #expect(machine.deadlineReached(now: 100 * Self.second) == .ignore)
        #expect(machine.confirmIdleTimeout(now: 100 * Self.second) == .ignore)
    }

    @Test func aFailureCancelsARunningTask() {
        var (machine, _) = receiving(3)
        let ending = machine.end(failed: true, taskCompleted: false, stoppedForBackpressure: false)
        #expect(ending == .init(drainTask: false, cancelTask: true))
    }

    @Test func aBodyShorterThanItsLengthFails() {
        var (machine, _) = receiving(10)
        _ = machine.receive(Data(count: 3), now: Self.second)
        let completion = machine.complete(error: nil)
        #expect(completion == .fail(.lengthMismatch(.init(expected: 10, received: 3, url: Self.url))))
    }

    @Test func theLengthOfAHeadResponseIsNotChecked() {
        var (machine, response) = receiving(10, method: "HEAD")
        let completion = machine.complete(error: nil)
        #expect(completion == .close(response))
    }

    @Test func aConnectionLostBeforeTheAnnouncedLengthIsALengthMismatch() {
        var (machine, _) = receiving(10)
        _ = machine.receive(Data(count: 4), now: Self.second)
        let completion = machine.complete(error: URLError(.networkConnectionLost))
        #expect(completion == .fail(.lengthMismatch(.init(expected: 10, received: 4, url: Self.url))))
    }

    @Test func aCompletionWithoutAHeadIsABadServerResponse() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        guard case .fail(.transport(let error)) = machine.complete(error: nil) else {
            Issue.record("no transport error")
            return
        }
        #expect(error.code == .badServerResponse)
        #expect(error.failingURL == Self.url)
    }

    // MARK: Redirects and challenges

    @Test func aStopWhileARedirectIsAnsweredDoesNotCancelTheWaitingTask() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let redirecting = machine.beginRedirect(now: Self.second)
        #expect(redirecting)
        let ending = machine.end(failed: true, taskCompleted: false, stoppedForBackpressure: false)
        #expect(ending == .init(drainTask: false, cancelTask: false))
        machine.endRedirect()
        let redirecting2 = machine.beginRedirect(now: Self.second)
        #expect(!redirecting2, "an ended transfer leaves the redirect unanswered")
        let resending = machine.resend(now: Self.second)
        #expect(!resending)
    }

    @Test func aFollowedRedirectExtendsTheChainAndBecomesTheCurrentRequest() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let next = URLRequest(url: URL(string: "http://127.0.0.1:8080/next")!)
        let redirecting = machine.beginRedirect(now: Self.second)
        #expect(redirecting)
        machine.follow(next)
        machine.endRedirect()
        #expect(machine.chain == [Self.url, next.url!])
        #expect(machine.currentRequest == next)
        #expect(!machine.answeringRedirect)
        let resending = machine.resend(now: 2 * Self.second)
        #expect(resending)
    }

    @Test func aTransferThatNeverStartedSendsNoRedirectedRequest() {
        var machine = machine()
        let resending = machine.resend(now: Self.second)
        #expect(!resending, "nothing to resend before the first request went out")
    }

    @Test func aDeclinedChallengeEndsWithItsStatusNotACancel() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        _ = machine.head(head(401), now: Self.second)
        machine.declineChallenge()
        guard case .fail(.unacceptableStatus(let failure)) = machine.complete(error: URLError(.cancelled)) else {
            Issue.record("a declined challenge does not end with its 401")
            return
        }
        #expect(failure.statusCode == 401)
    }

    // MARK: Backpressure

    @Test func aStopForTheDiskDrainsTheTaskThenEndsWhenItCompletes() {
        var (machine, response) = receiving(1 << 20)
        _ = machine.receive(Data(count: 1000), now: Self.second)
        let ending = machine.end(failed: true, taskCompleted: false, stoppedForBackpressure: true)
        #expect(ending == .init(drainTask: true, cancelTask: true))
        #expect(machine.state == .draining)
        #expect(machine.isEnded)
        let chunk = machine.receive(Data(count: 10), now: Self.second)
        #expect(chunk == .writeLate)
        let chunk2 = machine.receive(Data(count: 10), now: Self.second)
        #expect(chunk2 == .writeLate)
        let headAction = machine.head(response, now: Self.second)
        #expect(headAction == .ignore)
        #expect(machine.deadlineReached(now: 100 * Self.second) == .ignore)
        let ending2 = machine.end(failed: true, taskCompleted: false, stoppedForBackpressure: true)
        #expect(ending2 == nil)
        let completion = machine.complete(error: URLError(.cancelled))
        #expect(completion == .stoppedTaskCompleted(bodyComplete: false))
        #expect(machine.state == .ended)
        let chunk3 = machine.receive(Data(count: 10), now: Self.second)
        #expect(chunk3 == .ignore, "no chunk after the task completed")
        let completion2 = machine.complete(error: nil)
        #expect(completion2 == .ignore)
    }

    @Test func aStoppedTaskThatCompletedCleanlyDeliveredTheWholeBody() {
        var (machine, _) = receiving(1 << 20)
        _ = machine.end(failed: true, taskCompleted: false, stoppedForBackpressure: true)
        let completion = machine.complete(error: nil)
        #expect(completion == .stoppedTaskCompleted(bodyComplete: true))
    }

    @Test func withoutATaskNothingIsDrained() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let ending = machine.end(failed: true, taskCompleted: nil, stoppedForBackpressure: true)
        #expect(ending == .init(drainTask: false, cancelTask: false))
        #expect(machine.state == .ended)
    }

    // MARK: Timeouts

    @Test func anIdleDeadlineIsConfirmedBehindWhatIsQueuedThenFails() {
        var machine = machine(idle: 1)
        _ = machine.start(now: Self.second)
        #expect(machine.deadlineReached(now: Self.second + Self.second / 2) == .reschedule(at: 2 * Self.second))
        #expect(machine.deadlineReached(now: 2 * Self.second) == .confirmIdle)
        #expect(machine.confirmIdleTimeout(now: 2 * Self.second) == .fail(.timedOut(.init(kind: .idle, interval: 1, url: Self.url))))
    }

    @Test func dataQueuedBehindTheTimerMovesTheIdleDeadline() {
        var (machine, _) = receiving(100)
        #expect(machine.deadlineReached(now: 2 * Self.second) == .confirmIdle)
        _ = machine.receive(Data(count: 1), now: 2 * Self.second)
        #expect(machine.confirmIdleTimeout(now: 2 * Self.second) == .reschedule(at: 3 * Self.second))
    }

    @Test func theTotalDeadlineFailsEvenWithActivity() {
        var machine = machine(idle: 10, total: 2)
        _ = machine.start(now: Self.second)
        _ = machine.sent(1, of: 0, now: 3 * Self.second)
        #expect(machine.deadlineReached(now: 3 * Self.second) == .fail(.timedOut(.init(kind: .total, interval: 2, url: Self.url))))
    }

    @Test func noTimeoutBeforeTheStartOrAfterTheEnd() {
        var machine = machine()
        #expect(machine.deadlineReached(now: .max) == .ignore)
        _ = machine.start(now: Self.second)
        _ = machine.end(failed: true, taskCompleted: nil, stoppedForBackpressure: false)
        #expect(machine.deadlineReached(now: .max) == .ignore)
        #expect(machine.confirmIdleTimeout(now: .max) == .ignore)
    }

    // MARK: Failures (TransferFailure.swift)

    @Test(arguments: [
        (URLError.Code.timedOut, FetchError.Code.timedOut),
        (.cancelled, .cancelled),
        (.httpTooManyRedirects, .redirectFailed),
        (.cannotConnectToHost, .transport),
    ])
    func urlErrorsMapToFetchErrors(code: URLError.Code, expected: FetchError.Code) {
        var machine = machine()
        _ = machine.start(now: Self.second)
        guard case .fail(let error) = machine.complete(error: URLError(code)) else {
            Issue.record("no failure")
            return
        }
        #expect(error.code == expected)
        if case .transport(let underlying) = error {
            #expect(underlying.failingURL == Self.url, "the failing URL is filled in")
        }
    }

    @Test func anErrorThatIsNoURLErrorIsAnUnknownTransportError() {
        struct Odd: Error {}
        var machine = machine()
        _ = machine.start(now: Self.second)
        guard case .fail(.transport(let error)) = machine.complete(error: Odd()) else {
            Issue.record("no transport error")
            return
        }
        #expect(error.code == .unknown)
    }

    @Test func aContentCodingMakesTheLengthUncheckable() {
        var machine = machine()
        _ = machine.start(now: Self.second)
        let response = head(200, ["Content-Length": "10", "Content-Encoding": "gzip"])
        _ = machine.head(response, now: Self.second)
        _ = machine.receive(Data(count: 30), now: Self.second)
        let completion = machine.complete(error: nil)
        #expect(completion == .close(response))
    }

    // MARK: Impossible transitions

    @Test func anImpossibleEventTraps() async {
        await #expect(processExitsWith: .failure) {
            let machine = TransferStateMachine(request: URLRequest(url: URL(string: "http://127.0.0.1/")!),
                                               limits: TransferLimits(idleTimeout: 1, maximumResponseSize: 1, acceptableStatusCodes: [200]))
            _ = machine.written()
        }
    }
}
