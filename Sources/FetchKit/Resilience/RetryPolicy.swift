import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// When and how soon a failed fetch is tried again.
///
/// The default policy retries twice, with exponential backoff and jitter (about 0.5 s, then
/// 1 s), but only requests that are safe to repeat (idempotent methods: GET, HEAD, OPTIONS,
/// TRACE, PUT, DELETE), and only failures that may well pass: transport errors such as a
/// refused or dropped connection, a server that stalled mid-body (an idle timeout after the
/// response head), a body cut short, and the statuses 408, 429, 500, 502, 503 and 504. A
/// `Retry-After` header (seconds or an HTTP date) sets the wait instead, up to
/// ``maximumRetryAfter``; asking for longer ends the retries.
///
/// Two bounds hold whatever the policy says:
/// - An idle timeout with no response head — the server was silent for the whole
///   ``FetchConfiguration/idleTimeout`` (by default the request's `timeoutInterval`) — is never
///   retried: the fetch fails after that one interval, as a URLSession user expects.
/// - The operation's ``FetchConfiguration/totalTimeout`` is a deadline over every attempt and
///   every wait: a retry is not begun once it has passed or when its wait would pass it.
///
/// So without a ``FetchConfiguration/totalTimeout`` a fetch lasts at most about
/// `(1 + maximumRetries)` attempts plus the waits between them; set one for a hard bound.
///
/// ```swift
/// operation.configuration.retryPolicy = RetryPolicy(maximumRetries: 5, baseDelay: 1)
/// operation.configuration.retryPolicy = .none                       // one attempt only
/// ```
public struct RetryPolicy: Sendable, Equatable {
    /// Retries after the first attempt (so attempts are `1 + maximumRetries`). Default 2.
    public var maximumRetries: Int
    /// The wait before the first retry, in seconds. Default 0.5.
    public var baseDelay: TimeInterval
    /// How much each wait grows over the last. Default 2.
    public var multiplier: Double
    /// The longest computed wait, in seconds. Default 30.
    public var maximumDelay: TimeInterval
    /// The random spread of each wait: 0.25 means ±25 %. Default 0.25.
    public var jitter: Double
    /// The statuses worth a retry. Default 408, 429, 500, 502, 503, 504.
    public var retryableStatusCodes: Set<Int>
    /// Whether to retry requests that may not be safe to repeat (POST, PATCH…). Default `false`.
    public var retriesNonIdempotentRequests: Bool
    /// The longest `Retry-After` to wait for, in seconds; a longer one ends the retries.
    /// Default 120.
    public var maximumRetryAfter: TimeInterval

    /// Creates a policy; every parameter has the default described on its property.
    public init(
        maximumRetries: Int = 2,
        baseDelay: TimeInterval = 0.5,
        multiplier: Double = 2,
        maximumDelay: TimeInterval = 30,
        jitter: Double = 0.25,
        retryableStatusCodes: Set<Int> = [408, 429, 500, 502, 503, 504],
        retriesNonIdempotentRequests: Bool = false,
        maximumRetryAfter: TimeInterval = 120
    ) {
        self.maximumRetries = max(0, maximumRetries)
        self.baseDelay = max(0, baseDelay)
        self.multiplier = max(1, multiplier)
        self.maximumDelay = max(0, maximumDelay)
        self.jitter = min(1, max(0, jitter))
        self.retryableStatusCodes = retryableStatusCodes
        self.retriesNonIdempotentRequests = retriesNonIdempotentRequests
        self.maximumRetryAfter = max(0, maximumRetryAfter)
    }

    /// Two retries with backoff and jitter; see ``RetryPolicy``.
    public static let `default` = RetryPolicy()

    /// One attempt, never retried.
    public static let none = RetryPolicy(maximumRetries: 0)

    /// The methods that are safe to repeat (RFC 9110 §9.2.2).
    public static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]

    /// Whether an error may pass on another attempt.
    ///
    /// An idle ``FetchError/timedOut(_:)`` counts as retryable here; FetchKit still retries
    /// it only when the server had answered (see ``RetryPolicy``). A connect timeout is
    /// retryable, as a refused connection is (nothing was sent). A total one never is.
    public func isRetryable(_ error: FetchError) -> Bool {
        switch error {
        case .transport(let urlError):
            return Self.transientCodes.contains(urlError.code)
        case .timedOut(let timeout):
            return timeout.kind == .idle || timeout.kind == .connect
        case .lengthMismatch:
            return true
        case .unacceptableStatus(let failure):
            return retryableStatusCodes.contains(failure.statusCode)
        case .invalidRequest, .cancelled, .responseTooLarge, .parseFailed, .dependencyFailed, .fileSystem, .redirectFailed,
             .invalidResponse, .tls, .digestMismatch, .authenticationFailed, .streamOverflow:
            return false
        }
    }

    /// The wait before the next attempt, or `nil` if there should be none.
    ///
    /// - Parameters:
    ///   - error: Why attempt `attempt` failed.
    ///   - attempt: The attempt that failed, from 1.
    ///   - method: The request's method.
    func delay(after error: FetchError, attempt: Int, method: String) -> TimeInterval? {
        guard attempt <= maximumRetries, isRetryable(error) else { return nil }
        guard retriesNonIdempotentRequests || Self.idempotentMethods.contains(method.uppercased()) else { return nil }
        if case .unacceptableStatus(let failure) = error, let asked = RetryAfter.seconds(in: failure) {
            return asked <= maximumRetryAfter ? asked : nil
        }
        let exponential = baseDelay * pow(multiplier, Double(attempt - 1))
        let capped = min(maximumDelay, exponential)
        return capped * Double.random(in: (1 - jitter)...(1 + jitter))
    }

    /// Transport failures that say nothing about the request itself.
    static let transientCodes: Set<URLError.Code> = [
        .timedOut, .cannotConnectToHost, .networkConnectionLost, .notConnectedToInternet,
        .cannotFindHost, .dnsLookupFailed, .badServerResponse, .cannotParseResponse,
        .resourceUnavailable, .secureConnectionFailed, .cannotLoadFromNetwork,
    ]
}

/// A retry about to happen: what failed, and how long the operation waits.
public struct RetryEvent: Sendable {
    /// The attempt that will start after the wait, from 2.
    public let attempt: Int
    /// The wait, in seconds.
    public let delay: TimeInterval
    /// Why the previous attempt failed.
    public let error: FetchError
}
