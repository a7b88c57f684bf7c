import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import FetchKit

/// A redirect from `https` to plain `http`: refused unless the fetch allows it, and then without
/// the credentials that belonged to HTTPS. Asked of the transfer directly, as URLSession asks
/// it (no TLS server is needed to decide).
@Suite("Redirects from HTTPS to HTTP", .timeLimit(.minutes(3)))
struct InsecureRedirectTests {
    /// What a transfer reported at its end.
    private final class EndRecorder: TransferOwner, @unchecked Sendable {
        let ended = Locked<[TransferResult]>([])
        func transferDidSend(bytes: Int64, of total: Int64?) {}
        func transferDidReceive(response: HTTPURLResponse, expectedLength: Int64?) {}
        func transferDidReceive(bytes: Int64, of expectedLength: Int64?) {}
        func transferDidEnd(_ result: TransferResult, of handle: any TransferHandle) { ended.withLock { $0.append(result) } }
    }

    /// Declines every challenge it is asked to forward (FetchKit answers challenges itself).
    private final class Sender: NSObject, URLAuthenticationChallengeSender {
        func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) {}
        func continueWithoutCredential(for challenge: URLAuthenticationChallenge) {}
        func cancel(_ challenge: URLAuthenticationChallenge) {}
        func performDefaultHandling(for challenge: URLAuthenticationChallenge) {}
        func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) {}
    }

    private func transfer(allowing: Bool, credentials: CredentialProvider? = nil) throws -> (Transfer, EndRecorder) {
        var request = URLRequest(url: try #require(URL(string: "https://api.example.com/start")))
        request.setValue("Bearer secret-token", forHTTPHeaderField: "Authorization")
        request.setValue("session=abc", forHTTPHeaderField: "Cookie")
        let limits = TransferLimits(settings: .init(totalTimeout: nil, maximumResponseSize: 1 << 20, acceptableStatusCodes: [200],
                                                    credentials: credentials, redirectPolicy: .default,
                                                    allowsInsecureRedirects: allowing),
                                    idleTimeout: 30)
        let owner = EndRecorder()
        let transfer = Transfer(request: request, session: .shared, limits: limits, sink: MemoryBodySink(limit: 1 << 20), owner: owner)
        return (transfer, owner)
    }

    private func redirect(_ transfer: Transfer, from: String, to: String) throws -> Transfer.RedirectDecision {
        let url = try #require(URL(string: from))
        let response = try #require(HTTPURLResponse(url: url, statusCode: 302, httpVersion: "HTTP/1.1", headerFields: ["Location": to]))
        var next = transfer.request
        next.url = URL(string: to)
        // On the transfer's queue, as URLSession's callbacks are; then whatever the redirect
        // queued there behind it (a resend) has run before the test reads the transfer again.
        let decision = transfer.queue.sync { transfer.redirect(response, to: next) }
        transfer.queue.sync {}
        return decision
    }

    /// A Basic challenge from api.example.com on `port`.
    private func basicChallenge(port: Int, protocol scheme: String) -> URLAuthenticationChallenge {
        let space = URLProtectionSpace(host: "api.example.com", port: port, protocol: scheme, realm: "api",
                                       authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        return URLAuthenticationChallenge(protectionSpace: space, proposedCredential: nil, previousFailureCount: 0,
                                          failureResponse: nil, error: nil, sender: Sender())
    }

    @Test func aRedirectFromHTTPSToHTTPIsRefusedByDefault() throws {
        let (transfer, owner) = try transfer(allowing: false)
        let decision = try redirect(transfer, from: "https://api.example.com/start", to: "http://api.example.com/plain")
        guard case .stop = decision else {
            Issue.record("followed: \(decision)")
            return
        }
        let results = owner.ended.withLock { $0 }
        guard results.count == 1, case .failure(.redirectFailed(let failure), _) = results[0] else {
            Issue.record("expected one redirect failure, got \(results)")
            return
        }
        #expect(failure.kind == .insecureRedirect)
        #expect(failure.chain.last?.absoluteString == "http://api.example.com/plain")
        #expect(failure.description.contains("HTTPS to plain HTTP"))
        #expect(!failure.description.contains("secret-token"))
    }

    @Test func aRedirectThatStaysOnHTTPSOrStartsOnHTTPIsFollowed() throws {
        #expect(!RedirectPolicy.isDowngrade(from: URL(string: "https://a.example/"), to: URL(string: "https://b.example/")))
        #expect(!RedirectPolicy.isDowngrade(from: URL(string: "http://a.example/"), to: URL(string: "http://b.example/")))
        #expect(!RedirectPolicy.isDowngrade(from: URL(string: "http://a.example/"), to: URL(string: "https://a.example/")))
        #expect(RedirectPolicy.isDowngrade(from: URL(string: "HTTPS://a.example/"), to: URL(string: "Http://a.example/")))
        let (transfer, owner) = try transfer(allowing: false)
        let decision = try redirect(transfer, from: "https://api.example.com/start", to: "https://api.example.com/next")
        guard decision.followed != nil else {
            Issue.record("not followed: \(decision)")
            return
        }
        #expect(owner.ended.withLock { $0 }.isEmpty)
    }

    @Test func anAllowedDowngradeCarriesNoCredentials() throws {
        let credential = URLCredential(user: "alice", password: "s3cret", persistence: .none)
        let (transfer, owner) = try transfer(allowing: true, credentials: .perHost(["api.example.com": credential]))
        let decision = try redirect(transfer, from: "https://api.example.com/start", to: "http://api.example.com/plain")
        guard let next = decision.followed else {
            Issue.record("not followed: \(decision)")
            return
        }
        #expect(owner.ended.withLock { $0 }.isEmpty)
        #expect(next.value(forHTTPHeaderField: "Authorization") == nil)
        #expect(next.value(forHTTPHeaderField: "Cookie") == nil)

        // The plain-HTTP host asks for credentials: the ones meant for HTTPS are not given.
        let (disposition, answered) = transfer.answer(basicChallenge(port: 80, protocol: "http"))
        #expect(disposition == .cancelAuthenticationChallenge)
        #expect(answered == nil)
    }

    @Test func theSameCredentialsAnswerOverHTTPSWithoutADowngrade() throws {
        // The control for the test above: the provider does answer this host.
        let credential = URLCredential(user: "alice", password: "s3cret", persistence: .none)
        let (transfer, _) = try transfer(allowing: true, credentials: .perHost(["api.example.com": credential]))
        let (disposition, answered) = transfer.answer(basicChallenge(port: 443, protocol: "https"))
        #expect(disposition == .useCredential)
        #expect(answered?.user == "alice")
    }

    @Test func fetchesThatDifferInWhetherTheyAllowADowngradeDoNotShareATransfer() throws {
        let request = URLRequest(url: try #require(URL(string: "https://api.example.com/feed")))
        func limits(_ allowing: Bool) -> TransferLimits {
            TransferLimits(settings: .init(totalTimeout: nil, maximumResponseSize: 1 << 20, acceptableStatusCodes: [200],
                                           credentials: nil, redirectPolicy: .default, allowsInsecureRedirects: allowing),
                           idleTimeout: 30)
        }
        let strict = FlightKey(request: request, limits: limits(false), session: .shared, sink: nil)
        let lax = FlightKey(request: request, limits: limits(true), session: .shared, sink: nil)
        #expect(strict != nil && lax != nil)
        #expect(strict != lax)
    }
}
