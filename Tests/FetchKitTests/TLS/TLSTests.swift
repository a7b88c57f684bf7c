import Foundation
import FetchKit
import FetchKitTesting
import Testing

// HTTPS end to end: nginx terminates TLS (and HTTP/2) on 127.0.0.1 with certificates a test CA
// made for this run, in front of a TestServer. libcurl on Linux trusts the system bundle
// and nothing else, so TLSProbe runs the fetches in a private mount namespace where a bundle
// holding the test CA is mounted over it; the machine's own bundle is never modified.

@Suite("HTTPS through nginx with a test CA", .timeLimit(.minutes(3)),
       .disabled(if: TLSTools.unavailable != nil, Comment(rawValue: TLSTools.unavailable ?? "")),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the fetches run in TLSProbe, a process of their own, and CI's time goes to openssl and nginx"))
struct TLSTests {
    @Test func aTrustedServerServesAGetAndAMebibyteThroughAQueue() async throws {
        let machineBundle = FileManager.default.contents(atPath: TestPKI.systemBundle)
        let ((results, port), log) = try await withTLSServer { server, pki in
            let results = try await runTLSProbe([server.url(.valid, "/bytes/100"), server.url(.valid, "/bytes/1048576")],
                                                trusting: pki.trustBundle)
            #expect(server.backend.requests("/bytes/100").count == 1)
            #expect(server.backend.requests("/bytes/1048576").count == 1)
            return (results, server.ports[.valid])
        }
        for (result, count) in zip(results, [100, 1_048_576]) {
            #expect(result.succeeded, "\(result)")
            #expect(result.fields["status"] == "200", "\(result)")
            #expect(result.fields["bytes"] == "\(count)", "\(result)")
            #expect(result.fields["pattern"] == "match", "\(result)")
            #expect(result.fields["attempts"] == "1", "\(result)")
        }
        let served = log.filter { $0.hasPrefix("\(port ?? 0) ") }
        #expect(served.count == 2 && served.allSatisfy { $0.contains(" HTTP/2.0 200 GET /bytes/") }, "\(log)")
        #expect(served.contains { $0.hasSuffix(" 1048576") }, "\(log)")
        #expect(FileManager.default.contents(atPath: TestPKI.systemBundle) == machineBundle,
                "the machine's CA bundle is the same after the run")
    }

    @Test func theSameServerFailsWhereItsCAIsNotTrusted() async throws {
        let (results, _) = try await withTLSServer { server, _ in
            let results = try await runTLSProbe([server.url(.valid, "/bytes/100")], trusting: nil)
            #expect(server.backend.counters.requestsReceived == 0, "no request reaches the server")
            return results
        }
        let result = try #require(results.first)
        #expect(!result.succeeded, "\(result)")
        #expect(result.fields["kind"] == "tls", "\(result)")
        #expect(result.fields["reason"] == "untrusted", "\(result)")
        #expect(result.text.contains("SSL certificate problem: unable to get local issuer certificate"), "\(result)")
        #expect(result.fields["attempts"] == "1", "not retried: \(result)")
    }

    /// A certificate the client must refuse, the reason FetchKit gives, what libcurl (7.88.1,
    /// OpenSSL 3.0) says of it, and a certificate differing from it only in what makes it bad,
    /// which the client accepts.
    struct Refusal: Sendable, CustomTestStringConvertible {
        let kind: TestPKI.Kind
        let reason: FetchError.TLSFailure.Reason
        let message: String
        let control: TestPKI.Kind
        var testDescription: String { kind.rawValue }
    }

    static let refusals = [
        Refusal(kind: .expired, reason: .expired, message: "SSL certificate problem: certificate has expired", control: .valid),
        Refusal(kind: .wrongHost, reason: .hostNameMismatch, message: "SSL: no alternative certificate subject name matches target host name '127.0.0.1'", control: .valid),
        Refusal(kind: .selfSigned, reason: .untrusted, message: "SSL certificate problem: self-signed certificate", control: .valid),
        Refusal(kind: .intermediateMissing, reason: .untrusted, message: "SSL certificate problem: unable to get local issuer certificate", control: .intermediateSent),
    ]

    @Test(arguments: refusals)
    func aBadCertificateFailsEvenWithTheCATrusted(_ refusal: Refusal) async throws {
        let (results, _) = try await withTLSServer { server, pki in
            let results = try await runTLSProbe([server.url(refusal.kind, "/bytes/100"), server.url(refusal.control, "/bytes/100")],
                                                trusting: pki.trustBundle)
            #expect(server.backend.requests("/bytes/100").count == 1, "only the control's request reaches the server")
            return results
        }
        let (refused, control) = (results[0], results[1])
        #expect(control.succeeded, "\(refusal.control) is accepted in the same process: \(control)")
        #expect(!refused.succeeded, "\(refused)")
        #expect(refused.fields["kind"] == "tls", "\(refused)")
        #expect(refused.fields["reason"] == "\(refusal.reason)", "\(refused)")
        #expect(refused.text.contains(refusal.message), "\(refused)")
        #expect(refused.fields["attempts"] == "1", "not retried: \(refused)")
    }

    @Test func twentySmallFetchesGoOverHTTP2() async throws {
        let count = 20
        let ((results, port), log) = try await withTLSServer { server, pki in
            let urls = (0..<count).map { server.url(.valid, "/bytes/\(1000 + $0)") }
            return (try await runTLSProbe(urls, trusting: pki.trustBundle), server.ports[.valid])
        }
        for (index, result) in results.enumerated() {
            #expect(result.succeeded && result.fields["bytes"] == "\(1000 + index)" && result.fields["pattern"] == "match", "\(result)")
        }
        let served = log.filter { $0.hasPrefix("\(port ?? 0) ") }
        #expect(served.count == count, "\(log)")
        #expect(served.allSatisfy { $0.contains(" HTTP/2.0 200 ") }, "every request came over HTTP/2: \(served)")
    }

    @Test func aRedirectFromHTTPSToPlainHTTPIsRefusedBeforeAnythingIsSentInTheClear() async throws {
        let (results, _) = try await withTLSServer { server, pki in
            // Not 127.0.0.1: nginx rewrites a Location naming its upstream into its own https URL.
            let plain = "http://localhost:\(server.backend.port)/bytes/100"
            let secure = server.url(.valid, "/bytes/100").absoluteString
            func redirect(to target: String) -> URL {
                let query = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
                return server.url(.valid, "/redirect-to?url=\(query)")
            }
            // At once, on one HTTP/2 connection (FoundationNetworking's own following of the
            // second would crash: see TLSRedirectTests).
            let results = try await runTLSProbe([redirect(to: plain), redirect(to: secure)], trusting: pki.trustBundle)
            #expect(server.backend.requests("/bytes/100").count == 1, "only the followed one reached /bytes/100")
            #expect(!server.backend.requests.contains { $0.header("Host")?.hasPrefix("localhost") == true },
                    "nothing was sent in the clear")
            return results
        }
        let downgraded = results[0]
        #expect(!downgraded.succeeded && downgraded.fields["kind"] == "redirectFailed", "\(downgraded)")
        #expect("\(downgraded)".contains("HTTPS to plain HTTP"), "the error says why: \(downgraded)")
        #expect(results[1].succeeded && results[1].fields["bytes"] == "100", "an HTTPS to HTTPS redirect is followed: \(results[1])")
    }
}
