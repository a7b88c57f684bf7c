import Foundation

/// What a ``FetchSession`` trusts over HTTPS beyond the system's certificate authorities, and
/// which public keys it requires of which hosts.
///
/// Certificate verification always stays on: these settings add trust anchors and narrow what
/// is accepted, never widen it past a valid chain and a matching host name. There is no
/// "trust everything" setting.
///
/// - **Additional certificate authorities** (PEM): a server whose chain ends at one of them is
///   trusted, as one whose chain ends at a CA of the system is. Use it for a private CA.
/// - **Public-key pins** per host: a connection to a pinned host is accepted only if its
///   certificate's public key (its DER `SubjectPublicKeyInfo`) has one of the SHA-256 digests
///   given, *in addition to* a valid chain. A mismatch fails with
///   ``FetchError/TLSFailure/Reason/pinMismatch`` before the request is sent.
///
/// ```swift
/// var trust = TrustSettings()
/// try trust.addCertificateAuthorities(contentsOf: URL(fileURLWithPath: "/etc/myapp/private-ca.pem"))
/// try trust.pinPublicKeys(["r7uFQNXxSwIUbPqI8nLZsyEuz9bBL6V4OzRdczo2ndQ="], forHost: "api.example.com")
/// let session = try FetchSession(trust: trust)      // keep it for the process
/// operation.configuration.session = session
/// ```
///
/// A pin is the base64 SHA-256 digest of the key, the form libcurl's `--pinnedpubkey` takes
/// (with or without its `sha256//` prefix). `openssl` computes it from a certificate:
///
/// ```
/// openssl x509 -in server.pem -pubkey -noout | openssl pkey -pubin -outform der \
///   | openssl dgst -sha256 -binary | base64
/// ```
///
/// Pin more than one key per host (the current one and the next) so that a key rotation does
/// not lock you out. Host names match without regard to case; a pin applies to its host on
/// every port.
///
/// Invalid input — a file that cannot be read, text with no certificate, a private key, a
/// digest that is not 32 bytes of base64, an empty host — throws ``TrustConfigurationError``
/// at once, never later and never a crash. See ``FetchSession/init(configuration:monitors:trust:)``
/// for how the settings are enforced, and when a session refuses them.
public struct TrustSettings: Sendable, Equatable {
    /// The DER bytes of each additional certificate authority, in the order added.
    public private(set) var certificateAuthorities: [Data] = []
    /// The SHA-256 digests (32 bytes each) of the public keys each host may present, by host
    /// name (lowercased, without a trailing dot or IPv6 brackets).
    public private(set) var pinnedKeys: [String: [Data]] = [:]

    /// Settings that add nothing: the system's trust, no pins.
    public init() {}

    /// Whether the settings add no certificate authority and pin no key.
    public var isEmpty: Bool {
        certificateAuthorities.isEmpty && pinnedKeys.isEmpty
    }

    /// Trusts every certificate in `pem` (one or more `-----BEGIN CERTIFICATE-----` blocks) as
    /// a certificate authority, in addition to the system's.
    ///
    /// - Parameter pem: PEM text with at least one certificate and nothing else between its
    ///   blocks' markers.
    /// - Throws: ``TrustConfigurationError/Reason/invalidCertificate(_:)`` when there is no
    ///   certificate, a block is not a certificate (a private key, say) or is not valid base64
    ///   DER. Nothing is added then.
    public mutating func addCertificateAuthorities(pem: String) throws(TrustConfigurationError) {
        certificateAuthorities += try PEM.certificates(in: pem)
    }

    /// Trusts every certificate in the PEM file at `file` as a certificate authority, in
    /// addition to the system's. The file is read now, once.
    ///
    /// - Parameter file: A local PEM file, at most 4 MiB.
    /// - Throws: ``TrustConfigurationError/Reason/unreadableFile(_:)`` when it cannot be read,
    ///   and as ``addCertificateAuthorities(pem:)`` when its text is not certificates.
    public mutating func addCertificateAuthorities(contentsOf file: URL) throws(TrustConfigurationError) {
        let data: Data
        do {
            guard file.isFileURL else { throw CocoaError(.fileReadUnsupportedScheme) }
            let size = (try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.intValue ?? 0
            guard size <= PEM.maximumFileSize else {
                throw TrustConfigurationError(.unreadableFile("\(file.path) is larger than \(PEM.maximumFileSize) bytes"))
            }
            data = try Data(contentsOf: file)
        } catch let error as TrustConfigurationError {
            throw error
        } catch {
            throw TrustConfigurationError(.unreadableFile("\(file.path) cannot be read: \(error.localizedDescription)"))
        }
        do {
            try addCertificateAuthorities(pem: String(decoding: data, as: UTF8.self))
        } catch {
            guard case .invalidCertificate(let problem) = error.reason else { throw error }
            throw TrustConfigurationError(.invalidCertificate("\(file.path): \(problem)"))
        }
    }

    /// Requires connections to `host` to present a public key with one of `digests`, on top
    /// of a valid chain. Calling it again for the same host adds to its digests.
    ///
    /// - Parameters:
    ///   - digests: Base64 SHA-256 digests of DER `SubjectPublicKeyInfo`s, each with or without
    ///     a `sha256//` prefix. At least one.
    ///   - host: The host name or IP address as it appears in URLs (case does not matter).
    /// - Throws: ``TrustConfigurationError/Reason/invalidPin(_:)`` for an empty list or a
    ///   digest that is not 32 bytes of base64; ``TrustConfigurationError/Reason/invalidHost(_:)``
    ///   for an empty host or one with spaces, `/`, `;` or control characters.
    public mutating func pinPublicKeys(_ digests: [String], forHost host: String) throws(TrustConfigurationError) {
        guard let key = Self.hostKey(host), !key.contains(where: { $0.isWhitespace || "/;@".contains($0) || $0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } == true })
        else { throw TrustConfigurationError(.invalidHost("'\(host.prefix(100))' is not a host name")) }
        guard !digests.isEmpty else { throw TrustConfigurationError(.invalidPin("no digest given for \(key)")) }
        var decoded = [Data]()
        for (index, digest) in digests.enumerated() {
            var text = digest.trimmingCharacters(in: .whitespaces)
            if text.lowercased().hasPrefix("sha256//") { text.removeFirst(8) }
            guard text.count == 44, let bytes = Data(base64Encoded: text), bytes.count == 32 else {
                throw TrustConfigurationError(.invalidPin("digest \(index + 1) for \(key) is not the base64 of a SHA-256 digest (44 characters, 32 bytes)"))
            }
            decoded.append(bytes)
        }
        pinnedKeys[key, default: []] += decoded.filter { !(pinnedKeys[key] ?? []).contains($0) }
    }

    /// The digests `host` must present one of; `nil` when it is not pinned.
    func pins(forHost host: String?) -> [Data]? {
        host.flatMap(Self.hostKey).flatMap { pinnedKeys[$0] }
    }

    /// The value of libcurl's `CURLOPT_PINNEDPUBLICKEY` for `host` (`sha256//…;sha256//…`), or
    /// `nil` when it is not pinned.
    func curlPinnedPublicKey(forHost host: String?) -> String? {
        pins(forHost: host).map { $0.map { "sha256//" + $0.base64EncodedString() }.joined(separator: ";") }
    }

    /// The additional CAs as PEM text, one block each.
    var certificateAuthoritiesPEM: String {
        certificateAuthorities.map(PEM.encode).joined()
    }

    /// `host` lowercased, without IPv6 brackets or one trailing dot; `nil` when empty.
    static func hostKey(_ host: String) -> String? {
        var key = host.lowercased()
        if key.hasPrefix("["), key.hasSuffix("]") { key = String(key.dropFirst().dropLast()) }
        if key.hasSuffix(".") { key.removeLast() }
        return key.isEmpty ? nil : key
    }
}

/// Why ``TrustSettings`` or a ``FetchSession`` with them could not be set up. Thrown at
/// configuration time, never while fetching.
public struct TrustConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong.
    public enum Reason: Sendable, Equatable {
        /// A CA file could not be read (the path and why).
        case unreadableFile(String)
        /// PEM text held no certificate, or something that is not one (what and where; the
        /// text itself is never repeated).
        case invalidCertificate(String)
        /// A pin is not a base64 SHA-256 digest (which one).
        case invalidPin(String)
        /// A host name is empty or not a host name.
        case invalidHost(String)
        /// This platform's URLSession offers no way FetchKit can be sure to enforce the
        /// settings on every request, so the session was not made (why). Nothing was sent.
        case notEnforceable(String)
    }

    /// What was wrong.
    public let reason: Reason

    /// Creates the error.
    public init(_ reason: Reason) {
        self.reason = reason
    }

    /// A sentence saying what was wrong.
    public var description: String {
        switch reason {
        case .unreadableFile(let why): return "Trust settings: the CA file \(why)."
        case .invalidCertificate(let why): return "Trust settings: not a PEM certificate: \(why)."
        case .invalidPin(let why): return "Trust settings: invalid public-key pin: \(why)."
        case .invalidHost(let why): return "Trust settings: invalid host to pin: \(why)."
        case .notEnforceable(let why): return "Trust settings cannot be enforced here, so they are refused: \(why)."
        }
    }
}

/// Just enough PEM and DER for trust settings: certificate blocks in, DER out; the
/// `SubjectPublicKeyInfo` of a certificate, to pin.
enum PEM {
    /// The largest CA file read.
    static let maximumFileSize = 4 << 20

    /// The DER of each certificate block in `text`.
    static func certificates(in text: String) throws(TrustConfigurationError) -> [Data] {
        var found = [Data]()
        var label: String?
        var body = ""
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if let current = label {
                if line == "-----END \(current)-----" {
                    guard current == "CERTIFICATE" else {
                        // Never echo the block: it may be a private key.
                        throw TrustConfigurationError(.invalidCertificate("block \(found.count + 1) is a \(current.prefix(40)), not a CERTIFICATE"))
                    }
                    guard let der = Data(base64Encoded: body), Self.isDERSequence(der) else {
                        throw TrustConfigurationError(.invalidCertificate("certificate \(found.count + 1) (ending on line \(number + 1)) is not valid base64 DER"))
                    }
                    found.append(der)
                    label = nil
                    body = ""
                } else if line.hasPrefix("-----") {
                    throw TrustConfigurationError(.invalidCertificate("line \(number + 1) starts a block before the one above ends"))
                } else {
                    body += line
                    guard body.utf8.count <= maximumFileSize else {
                        throw TrustConfigurationError(.invalidCertificate("a block is larger than \(maximumFileSize) bytes"))
                    }
                }
            } else if line.hasPrefix("-----BEGIN "), line.hasSuffix("-----"), line.count > 16 {
                label = String(line.dropFirst(11).dropLast(5))
            }
        }
        guard label == nil else { throw TrustConfigurationError(.invalidCertificate("the last block has no END line")) }
        guard !found.isEmpty else { throw TrustConfigurationError(.invalidCertificate("no -----BEGIN CERTIFICATE----- block")) }
        return found
    }

    /// `der` as one PEM certificate block.
    static func encode(_ der: Data) -> String {
        let base64 = der.base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN CERTIFICATE-----\n\(base64)\n-----END CERTIFICATE-----\n"
    }

    /// Whether `der` is exactly one DER SEQUENCE (a certificate is one).
    static func isDERSequence(_ der: Data) -> Bool {
        let bytes = [UInt8](der)
        guard let (tag, start, end) = element(in: bytes, at: 0) else { return false }
        return tag == 0x30 && start > 0 && end == bytes.count
    }

    /// The DER `SubjectPublicKeyInfo` of the certificate `der` (what a pin digests), or `nil`
    /// when it is not a certificate.
    static func subjectPublicKeyInfo(ofCertificate der: Data) -> Data? {
        let bytes = [UInt8](der)
        // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serial,
        // signature, issuer, validity, subject, subjectPublicKeyInfo, … }, … }
        guard let (certificateTag, certificateStart, _) = element(in: bytes, at: 0), certificateTag == 0x30,
              let (tbsTag, tbsStart, tbsEnd) = element(in: bytes, at: certificateStart), tbsTag == 0x30
        else { return nil }
        var position = tbsStart
        var index = 0
        while position < tbsEnd, let (tag, _, end) = element(in: bytes, at: position) {
            if index == 0, tag == 0xA0 {    // the version, which v1 certificates leave out
                position = end
                continue
            }
            if index == 5 {
                return tag == 0x30 && end <= tbsEnd ? Data(bytes[position..<end]) : nil
            }
            index += 1
            position = end
        }
        return nil
    }

    /// The tag, the start of the content and the end of the DER element at `offset`, if it is
    /// whole inside `bytes` (definite lengths up to four bytes only).
    static func element(in bytes: [UInt8], at offset: Int) -> (tag: UInt8, contentStart: Int, end: Int)? {
        guard offset + 2 <= bytes.count else { return nil }
        let tag = bytes[offset]
        let first = bytes[offset + 1]
        var length = 0
        var start = offset + 2
        if first < 0x80 {
            length = Int(first)
        } else {
            let count = Int(first & 0x7F)
            guard count >= 1, count <= 4, start + count <= bytes.count else { return nil }
            for byte in bytes[start..<start + count] { length = length << 8 | Int(byte) }
            start += count
        }
        guard length <= bytes.count - start else { return nil }
        return (tag, start, start + length)
    }
}
