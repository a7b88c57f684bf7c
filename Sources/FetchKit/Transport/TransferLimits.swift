import Foundation

/// The limits a transfer enforces itself.
///
/// Small (a waiting fetch's flight member holds one): what its fetch's configuration sets is
/// in one immutable ``Settings`` box, shared by every attempt of operations configured alike
/// (their ``AnyFetchOperation/ConfigurationBox`` makes it once); what an attempt adds is inline.
struct TransferLimits: Sendable {
    /// What a fetch's configuration sets.
    final class Settings: Sendable {
        let totalTimeout: TimeInterval?
        let connectTimeout: TimeInterval?
        let maximumResponseSize: Int64
        let acceptableStatusCodes: Set<Int>
        let credentials: CredentialProvider?
        let redirectPolicy: RedirectPolicy
        let allowsInsecureRedirects: Bool
        let bandwidthLimit: Int?

        init(totalTimeout: TimeInterval?, connectTimeout: TimeInterval? = nil, maximumResponseSize: Int64,
             acceptableStatusCodes: Set<Int>, credentials: CredentialProvider?, redirectPolicy: RedirectPolicy,
             allowsInsecureRedirects: Bool = false, bandwidthLimit: Int? = nil) {
            self.bandwidthLimit = bandwidthLimit
            self.totalTimeout = totalTimeout
            self.connectTimeout = connectTimeout
            self.maximumResponseSize = maximumResponseSize
            self.acceptableStatusCodes = acceptableStatusCodes
            self.credentials = credentials
            self.redirectPolicy = redirectPolicy
            self.allowsInsecureRedirects = allowsInsecureRedirects
        }
    }

    private let settings: Settings
    /// The longest wait for the next byte. Enforced at sub-second precision by FetchKit;
    /// URLSession's own (whole-second, truncated) timeout is only a later backstop.
    var idleTimeout: TimeInterval
    /// ``fetchStartedAt`` (0 for none: an uptime is never 0) in the low 63 bits, and
    /// ``acceptsNotModified`` in the top one: one word, so that a waiting member's limits fit
    /// in three.
    private var startAndNotModified: UInt64 = 0

    /// When the fetch's first attempt started (uptime ns), for a later attempt: the total
    /// timeout counts from there. `nil` for a first attempt, whose clock starts with it.
    var fetchStartedAt: UInt64? {
        get {
            let start = startAndNotModified & ~Self.notModifiedBit
            return start == 0 ? nil : start
        }
        set { startAndNotModified = startAndNotModified & Self.notModifiedBit | (newValue ?? 0) & ~Self.notModifiedBit }
    }

    /// Whether a `304 Not Modified` is a success (the request carried validators).
    var acceptsNotModified: Bool {
        get { startAndNotModified & Self.notModifiedBit != 0 }
        set { startAndNotModified = newValue ? startAndNotModified | Self.notModifiedBit : startAndNotModified & ~Self.notModifiedBit }
    }

    private static var notModifiedBit: UInt64 { 1 << 63 }

    /// The most the whole fetch may take, every attempt and wait included, or `nil`.
    var totalTimeout: TimeInterval? { settings.totalTimeout }
    /// The longest a new connection may take to be made (DNS, TCP, TLS), or `nil`: set on the
    /// task's libcurl handle where the session can (``FetchSession/enforcesConnectTimeouts``).
    var connectTimeout: TimeInterval? { settings.connectTimeout }
    /// The largest body accepted.
    var maximumResponseSize: Int64 { settings.maximumResponseSize }
    /// Status codes that count as success.
    var acceptableStatusCodes: Set<Int> { settings.acceptableStatusCodes }
    /// Who answers authentication challenges, if anyone.
    var credentials: CredentialProvider? { settings.credentials }
    /// What to do with redirects.
    var redirectPolicy: RedirectPolicy { settings.redirectPolicy }
    /// Whether a redirect from `https` to `http` is followed.
    var allowsInsecureRedirects: Bool { settings.allowsInsecureRedirects }
    /// The fetch's own bandwidth limit (``FetchConfiguration/bandwidthLimit``), or `nil`.
    var bandwidthLimit: Int? { settings.bandwidthLimit }

    init(idleTimeout: TimeInterval, totalTimeout: TimeInterval? = nil, acceptsNotModified: Bool = false,
         maximumResponseSize: Int64, acceptableStatusCodes: Set<Int>, credentials: CredentialProvider? = nil,
         redirectPolicy: RedirectPolicy = .default, fetchStartedAt: UInt64? = nil) {
        self.init(settings: Settings(totalTimeout: totalTimeout, maximumResponseSize: maximumResponseSize,
                                     acceptableStatusCodes: acceptableStatusCodes, credentials: credentials,
                                     redirectPolicy: redirectPolicy),
                  idleTimeout: idleTimeout)
        self.acceptsNotModified = acceptsNotModified
        self.fetchStartedAt = fetchStartedAt
    }

    init(settings: Settings, idleTimeout: TimeInterval) {
        self.settings = settings
        self.idleTimeout = idleTimeout
    }

    func accepts(_ statusCode: Int) -> Bool {
        acceptableStatusCodes.contains(statusCode) || (statusCode == 304 && acceptsNotModified)
    }
}
