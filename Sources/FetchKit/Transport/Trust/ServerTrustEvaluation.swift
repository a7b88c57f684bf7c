#if !canImport(FoundationNetworking) && canImport(Security) && canImport(CryptoKit)
import CryptoKit
import Foundation
import Security

/// ``TrustSettings`` on Apple platforms, in URLSession's server-trust challenge: the chain is
/// evaluated for the host with the system's anchors and the added ones, then the leaf's key is
/// checked against the host's pins (the same rule as libcurl's `CURLOPT_PINNEDPUBLICKEY`).
enum ServerTrustEvaluation {
    /// Why `serverTrust` is refused for `host`, or `nil` when it is accepted.
    static func refusal(of serverTrust: SecTrust, host: String, settings: TrustSettings) -> FetchError.TLSFailure.Reason? {
        guard SecTrustSetPolicies(serverTrust, SecPolicyCreateSSL(true, host as CFString)) == errSecSuccess else { return .handshakeFailed }
        if !settings.certificateAuthorities.isEmpty {
            let anchors = settings.certificateAuthorities.compactMap { SecCertificateCreateWithData(nil, $0 as CFData) }
            guard anchors.count == settings.certificateAuthorities.count,
                  SecTrustSetAnchorCertificates(serverTrust, anchors as CFArray) == errSecSuccess,
                  SecTrustSetAnchorCertificatesOnly(serverTrust, false) == errSecSuccess   // the system's too
            else { return .untrusted }
        }
        guard SecTrustEvaluateWithError(serverTrust, nil) else { return .untrusted }
        guard let pins = settings.pins(forHost: host) else { return nil }
        guard SecTrustGetCertificateCount(serverTrust) > 0, let leaf = SecTrustGetCertificateAtIndex(serverTrust, 0),
              let key = PEM.subjectPublicKeyInfo(ofCertificate: SecCertificateCopyData(leaf) as Data)
        else { return .pinMismatch }
        return pins.contains(Data(SHA256.hash(data: key))) ? nil : .pinMismatch
    }
}
#endif
