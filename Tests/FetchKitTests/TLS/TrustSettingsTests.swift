import Foundation
@testable import FetchKit
import FetchKitTesting
import Testing

// Trust settings (issue 22, point 4): what TrustSettings accepts and refuses as input, when a
// FetchSession refuses them, and — against nginx with a test CA that is NOT in the system
// bundle — that an added CA is trusted and a pin holds, in this very process (no mount
// namespace: FetchKit's own setting is what makes the CA trusted).

@Suite("Trust settings: input and refusal", .timeLimit(.minutes(2)))
struct TrustSettingsInputTests {
    static let digest = Data(repeating: 7, count: 32).base64EncodedString()

    @Test func garbageAndKeysAreNotCertificates() throws {
        var trust = TrustSettings()
        for text in ["", "hello", "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n",
                     "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n", "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n"] {
            #expect(throws: TrustConfigurationError.self, "\(text)") { try trust.addCertificateAuthorities(pem: text) }
        }
        let key = "-----BEGIN PRIVATE KEY-----\nTUlJQ3NlY3JldGtleW1hdGVyaWFs\n-----END PRIVATE KEY-----\n"
        do {
            try trust.addCertificateAuthorities(pem: key)
            Issue.record("a private key was taken for a certificate")
        } catch {
            guard case .invalidCertificate = error.reason else { Issue.record("\(error)"); return }
            #expect("\(error)".contains("PRIVATE KEY, not a CERTIFICATE"), "\(error)")
            #expect(!"\(error)".contains("TUlJQ3"), "the key itself is never repeated: \(error)")
        }
        #expect(trust.isEmpty, "nothing was added")
    }

    @Test func anUnreadableFileIsAClearError() {
        var trust = TrustSettings()
        let missing = URL(fileURLWithPath: "/nonexistent/fetchkit-ca.pem")
        #expect { try trust.addCertificateAuthorities(contentsOf: missing) } throws: { error in
            guard let error = error as? TrustConfigurationError, case .unreadableFile(let why) = error.reason else { return false }
            return why.contains(missing.path)
        }
        #expect(throws: TrustConfigurationError.self) { try trust.addCertificateAuthorities(contentsOf: URL(fileURLWithPath: "/")) }
    }

    @Test func malformedPinsAndHostsAreRefused() throws {
        var trust = TrustSettings()
        for pins in [[], ["abc"], [String(repeating: "A", count: 44)], ["sha256//" + Data(count: 31).base64EncodedString()],
                     ["sha1//" + Self.digest], [Self.digest + ";" + Self.digest]] {
            #expect(throws: TrustConfigurationError.self, "\(pins)") { try trust.pinPublicKeys(pins, forHost: "example.com") }
        }
        for host in ["", ".", "a b", "a;b", "a/b", "[]"] {
            #expect(throws: TrustConfigurationError.self, "'\(host)'") { try trust.pinPublicKeys([Self.digest], forHost: host) }
        }
        #expect(trust.isEmpty)
    }

    @Test func pinsAreKeyedByHostWithoutCaseAndGivenToLibcurlInItsForm() throws {
        var trust = TrustSettings()
        let other = Data(repeating: 9, count: 32).base64EncodedString()
        try trust.pinPublicKeys(["sha256//" + Self.digest], forHost: "API.Example.com.")
        try trust.pinPublicKeys([other, Self.digest], forHost: "api.example.com")
        try trust.pinPublicKeys([Self.digest], forHost: "[::1]")
        #expect(trust.curlPinnedPublicKey(forHost: "api.example.COM") == "sha256//\(Self.digest);sha256//\(other)")
        #expect(trust.curlPinnedPublicKey(forHost: "::1") == "sha256//\(Self.digest)")
        #expect(trust.curlPinnedPublicKey(forHost: "example.com") == nil)
        #expect(trust.curlPinnedPublicKey(forHost: nil) == nil)
    }

    #if canImport(FoundationNetworking)
    @Test func aSessionRefusesSettingsItCannotSetOnEachTask() throws {
        var trust = TrustSettings()
        try trust.pinPublicKeys([Self.digest], forHost: "127.0.0.1")
        // The guarded lookup of a task's libcurl handle finds nothing (another layout of
        // FoundationNetworking): the session is not made.
        #expect { try FetchSession(configuration: FetchSession.defaultConfiguration(), monitors: [], trust: trust,
                                   handleLookup: { _ in nil }) } throws: { error in
            guard let error = error as? TrustConfigurationError, case .notEnforceable = error.reason else { return false }
            return "\(error)".contains("refused")
        }
        // A configuration whose URL cache slot is taken.
        let cached = FetchSession.defaultConfiguration()
        cached.urlCache = URLCache(memoryCapacity: 0, diskCapacity: 0, diskPath: "/dev/null")
        #expect { try FetchSession(configuration: cached, trust: trust) } throws: { error in
            guard let error = error as? TrustConfigurationError, case .notEnforceable(let why) = error.reason else { return false }
            return why.contains("urlCache")
        }
        // Here the path is there: the probe passes, and the session is made.
        let session = try FetchSession(trust: trust)
        #expect(session.trust == trust && session.setsTrustPerTask)
        #expect(try FetchSession(trust: TrustSettings()).setsTrustPerTask == false, "nothing to set, nothing set")
    }

    @Test func credentialsAreRefusedBeforeAnythingIsSentOnLinux() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        var trust = TrustSettings()
        try trust.pinPublicKeys([Self.digest], forHost: "127.0.0.1")
        let operation = FetchOperation<Data>(url: server.url("/bytes/10"))
        operation.configuration.session = try FetchSession(trust: trust)
        operation.configuration.credentials = .perHost(["127.0.0.1": URLCredential(user: "u", password: "p", persistence: .none)])
        let result = await fetchResult(operation)
        guard case .failure(.invalidRequest(let failure)) = result, case .trustNotEnforceable(let why) = failure.reason else {
            Issue.record("\(result)")
            return
        }
        #expect(why.contains("authentication challenge"), "\(why)")
        #expect(server.counters.requestsReceived == 0, "nothing was sent")
    }
    #endif
}

@Suite("Trust settings over HTTPS: an added CA and pins, in process", .timeLimit(.minutes(3)),
       .disabled(if: TLSTools.unavailable != nil, Comment(rawValue: TLSTools.unavailable ?? "")),
       .disabled(if: runsUnderSanitizer && ProcessInfo.processInfo.environment["FETCHKIT_TLS_UNDER_SANITIZER"] != "1",
                 "under a sanitizer, CI's time goes to openssl and nginx; FETCHKIT_TLS_UNDER_SANITIZER=1 runs it (in process)"))
struct TrustSettingsTLSTests {
    @Test func aCAOnlyInTheSettingIsTrustedAndWithoutItTheServerIsNot() async throws {
        let (checks, _) = try await withTLSServer { server, pki in
            var trust = TrustSettings()
            try trust.addCertificateAuthorities(contentsOf: pki.caCertificate)
            #expect(trust.certificateAuthorities.count == 1)
            // The first request of a fresh session (a fresh connection) already trusts the CA.
            let trusted = try FetchSession(trust: trust)
            let url = server.url(.valid, "/bytes/200000")
            let (operation, result) = await fetch(url, in: trusted)
            #expect((try? result.get()) == TestResponse.patternBytes(count: 200_000), "\(result)")
            #expect(operation.response?.statusCode == 200)
            // A session without the setting: the system bundle alone, where the test CA is not.
            let (_, plain) = await fetch(server.url(.valid, "/bytes/100"), in: FetchSession())
            #expect(tlsReason(plain) == .untrusted, "\(plain)")
            #expect(server.backend.requests("/bytes/100").count == 0, "no request reached the server")
            // The added CA widens nothing else: a certificate for another host still fails.
            let (_, wrongHost) = await fetch(server.url(.wrongHost, "/bytes/100"), in: trusted)
            #expect(tlsReason(wrongHost) == .hostNameMismatch, "\(wrongHost)")
            return true
        }
        #expect(checks)
    }

    @Test func aPinOfTheServersKeyHoldsAndAnyOtherKeyStopsTheFirstRequestBeforeItIsSent() async throws {
        let (checks, log) = try await withTLSServer { server, pki in
            let validPin = try await opensslPin(of: pki.certificate(.valid))
            let otherPin = try await opensslPin(of: pki.certificate(.otherKey))
            #expect(validPin != otherPin)
            // FetchKit's own reading of a certificate's key gives what openssl gives.
            let der = try #require(try TrustSettings.certificates(of: pki.certificate(.valid)).first)
            #expect(PEM.subjectPublicKeyInfo(ofCertificate: der) == (try await opensslSubjectPublicKeyInfo(of: pki.certificate(.valid))))

            var base = TrustSettings()
            try base.addCertificateAuthorities(contentsOf: pki.caCertificate)
            var right = base, wrong = base
            try right.pinPublicKeys([validPin], forHost: "127.0.0.1")
            try wrong.pinPublicKeys(["sha256//" + otherPin], forHost: "127.0.0.1")

            // A fresh session whose very first request is pinned to another key.
            let wrongSession = try FetchSession(trust: wrong)
            let (refusedOperation, refused) = await fetch(server.url(.valid, "/bytes/300000"), in: wrongSession)
            #expect(tlsReason(refused) == .pinMismatch, "\(refused)")
            if case .failure(.tls(let failure)) = refused {
                #expect(failure.message.contains("pinned public key"), "libcurl's words are kept: \(failure.message)")
            }
            #expect(refusedOperation.progress.completedUnitCount == 0, "not a byte of the body was delivered")
            #expect(refusedOperation.response == nil && refusedOperation.attempts == 1)
            #expect(server.backend.requests("/bytes/300000").count == 0, "the request never reached the server")

            // The right pin: served, twice (the second on the pooled, pinned connection).
            let rightSession = try FetchSession(trust: right)
            for _ in 0..<2 {
                let (_, served) = await fetch(server.url(.valid, "/bytes/1000"), in: rightSession)
                #expect((try? served.get()) == TestResponse.patternBytes(count: 1000), "\(served)")
            }
            // The other key's server, same CA, same host: refused by the right pin.
            let (_, otherServer) = await fetch(server.url(.otherKey, "/bytes/1000"), in: rightSession)
            #expect(tlsReason(otherServer) == .pinMismatch, "\(otherServer)")
            #expect(server.backend.requests("/bytes/1000").count == 2)
            return server.ports[.valid]
        }
        let port = try #require(checks)
        #expect(log.filter { $0.hasPrefix("\(port) ") && $0.contains("/bytes/300000") }.isEmpty, "nginx served no pinned-out request: \(log)")
    }

    @Test func aRedirectFromAnUnpinnedHostToAPinnedOneIsPinned() async throws {
        let (checks, _) = try await withTLSServer { server, pki in
            var trust = TrustSettings()
            try trust.addCertificateAuthorities(contentsOf: pki.caCertificate)
            // 127.0.0.1 is pinned to another key; localhost (the same server, the same
            // certificate) is not.
            try trust.pinPublicKeys([try await opensslPin(of: pki.certificate(.otherKey))], forHost: "127.0.0.1")
            let session = try FetchSession(trust: trust)
            let port = server.ports[.valid] ?? 0
            let (_, unpinned) = await fetch(URL(string: "https://localhost:\(port)/bytes/100")!, in: session)
            #expect((try? unpinned.get())?.count == 100, "the unpinned host is served: \(unpinned)")
            // Followed on the same libcurl handle, the redirect would go out without the pin.
            let target = "https://127.0.0.1:\(port)/bytes/100".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let (_, redirected) = await fetch(URL(string: "https://localhost:\(port)/redirect-to?url=\(target)")!, in: session)
            #expect(tlsReason(redirected) == .pinMismatch, "\(redirected)")
            #expect(server.backend.requests("/bytes/100").count == 1, "only the unpinned request was served")
            return true
        }
        #expect(checks)
    }
}

/// Fetches `url` through `session`, once (no retry).
private func fetch(_ url: URL, in session: FetchSession) async -> (FetchOperation<Data>, Result<Data, FetchError>) {
    let operation = FetchOperation<Data>(url: url)
    operation.configuration.session = session
    operation.configuration.retryPolicy = .none
    return (operation, await fetchResult(operation))
}

private func fetchResult(_ operation: FetchOperation<Data>) async -> Result<Data, FetchError> {
    let queue = FetchQueue(maximumConcurrentTransfers: 2)
    do throws(FetchError) {
        return .success(try await queue.fetch(operation))
    } catch {
        return .failure(error)
    }
}

private func tlsReason(_ result: Result<Data, FetchError>) -> FetchError.TLSFailure.Reason? {
    if case .failure(.tls(let failure)) = result { return failure.reason }
    return nil
}

extension TrustSettings {
    /// The DER certificates of a PEM file (tests).
    static func certificates(of file: URL) throws -> [Data] {
        try PEM.certificates(in: String(contentsOf: file, encoding: .utf8))
    }
}
