import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import FetchKit

/// TLS failures are a ``FetchError/tls(_:)`` with a reason a caller can switch over, classified
/// from what the TLS library said (on Linux every one arrives as `URLError` -1 with libcurl's
/// words), keeping those words, and never retried.
@Suite("TLS failures you can switch over", .timeLimit(.minutes(3)))
struct TLSFailureTests {
    /// libcurl 7.88 with OpenSSL 3, as `curl` printed them against `openssl s_server` with test
    /// certificates, and the strings libcurl builds for the other cases.
    static let messages: [(String, FetchError.TLSFailure.Reason?)] = [
        ("SSL certificate problem: unable to get local issuer certificate", .untrusted),
        ("SSL certificate problem: self-signed certificate", .untrusted),
        ("SSL certificate problem: self signed certificate in certificate chain", .untrusted),
        ("SSL certificate problem: unable to verify the first certificate", .untrusted),
        ("SSL peer certificate or SSH remote key was not OK", .untrusted),
        ("SSL: no alternative certificate subject name matches target host name '127.0.0.1'", .hostNameMismatch),
        ("SSL: certificate subject name 'other.example' does not match target host name 'api.example.com'", .hostNameMismatch),
        ("SSL certificate problem: certificate has expired", .expired),
        ("SSL certificate problem: certificate is not yet valid", .notYetValid),
        ("SSL: public key does not match pinned public key", .pinMismatch),
        ("OpenSSL/3.0.17: error:0A00010B:SSL routines::wrong version number", .handshakeFailed),
        ("OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:8443", .handshakeFailed),
        ("SSL connect error", .handshakeFailed),
        // Not about TLS: they stay transport errors.
        ("Failed to connect to 127.0.0.1 port 9: Connection refused", nil),
        ("Recv failure: Connection reset by peer", nil),
        ("transfer closed with 5 bytes remaining to read", nil),
        ("Could not resolve host: nowhere.invalid", nil),
    ]

    @Test(arguments: messages.indices)
    func libcurlsWordsAreClassified(index: Int) {
        let (message, reason) = Self.messages[index]
        #expect(FetchError.TLSFailure.classify(message: message) == reason, "\(message)")
    }

    @Test func aTLSFailureFromURLSessionBecomesATLSErrorThatKeepsItsWords() throws {
        let url = try #require(URL(string: "https://api.example.com/items?token=hunter2"))
        let machine = TransferStateMachine(request: URLRequest(url: url), limits: TransferLimits(
            idleTimeout: 30, maximumResponseSize: 1 << 20, acceptableStatusCodes: [200]))
        let words = "SSL certificate problem: certificate has expired"
        let error = machine.failure(for: URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: words]))
        guard case .tls(let failure) = error else {
            Issue.record("expected .tls, got \(error)")
            return
        }
        #expect(failure.reason == .expired)
        #expect(failure.message == words)
        #expect(error.code == .tls)
        #expect(error.description.contains(words), "the library's words stay in the message")
        #expect(!error.description.contains("hunter2"), "the URL's secrets do not")
        #expect(!RetryPolicy.default.isRetryable(error), "the server would present the same certificate")
        // Not every -1 is about TLS.
        let reset = machine.failure(for: URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: "Recv failure: Connection reset by peer"]))
        #expect(reset.code == .transport)
    }
}
