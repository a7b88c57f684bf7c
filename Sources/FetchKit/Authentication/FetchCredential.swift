import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The credential a ``FetchAuthentication`` applies to each attempt: a token, what refreshes
/// it, when it expires, and the generation FetchKit gave it.
///
/// You make one after logging in, and your refresh operation returns a new one; FetchKit
/// numbers each credential it is given with a ``generation`` of its own, one higher every time
/// the credential changes, and remembers which generation each attempt was sent with. That is
/// how it tells a `401` for the current credential (refresh it, once) from a late `401` for an
/// older one (send again with the current one).
///
/// Its `description`, `debugDescription` and mirror (what `dump(_:)`, `print` and a debugger
/// show) never show the tokens.
public struct FetchCredential: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    /// The access token, which ``FetchAuthenticator/apply(_:to:)`` puts on the request
    /// (by default as `Authorization: Bearer <token>`).
    public var token: String
    /// What your refresh operation sends to get a new ``token``, if your API has one.
    public var refreshToken: String?
    /// When ``token`` stops being accepted, if you know it. By default a credential that
    /// expires within ``FetchAuthenticator/refreshMargin`` is refreshed before it is used.
    public var expiresAt: Date?
    /// Which credential of the ``FetchAuthentication`` this is: 0 for one that was never set
    /// there; then 1, 2, 3… for each credential set or refreshed, in order. FetchKit sets it.
    public internal(set) var generation: UInt64 = 0

    /// A credential.
    ///
    /// - Parameters:
    ///   - token: The access token.
    ///   - refreshToken: What refreshes it, if anything. Default `nil`.
    ///   - expiresAt: When the token expires, if known. Default `nil`: refreshed only when a
    ///     server refuses it.
    public init(token: String, refreshToken: String? = nil, expiresAt: Date? = nil) {
        self.token = token
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
    }

    /// Whether two credentials have the same tokens and expiry. The ``generation`` is not
    /// compared: the credential you made equals the one you set, whose generation FetchKit gave it.
    public static func == (lhs: FetchCredential, rhs: FetchCredential) -> Bool {
        lhs.token == rhs.token && lhs.refreshToken == rhs.refreshToken && lhs.expiresAt == rhs.expiresAt
    }

    /// The generation and expiry, without the tokens.
    public var description: String {
        "FetchCredential(generation: \(generation), token: REDACTED\(refreshToken == nil ? "" : ", refreshToken: REDACTED")\(expiresAt.map { ", expiresAt: \($0)" } ?? ""))"
    }

    /// The same as ``description``: the tokens are redacted.
    public var debugDescription: String { description }

    /// The fields, with `REDACTED` in place of each token.
    public var customMirror: Mirror {
        Mirror(self, children: [
            "token": "REDACTED",
            "refreshToken": refreshToken.map { _ in "REDACTED" } as String? as Any,
            "expiresAt": expiresAt as Any,
            "generation": generation,
        ], displayStyle: .struct)
    }
}

/// What an app tells FetchKit about its API's credentials: how to put one on a request, how to
/// recognise a refusal, when to refresh before use, and how to refresh.
///
/// Only ``makeRefreshOperation(for:)`` has no default. The refresh is an operation like any
/// endpoint of yours — a ``FetchOperation`` whose output is the new ``FetchCredential`` — and
/// FetchKit runs it on the queue whose fetch needed it, ahead of the others, without applying
/// a credential to it (``FetchConfiguration/authenticates`` is set to `false`): monitors see it,
/// ``FetchQueue/cancelAll()`` cancels it. If it fails, or its server answers `401`, the refresh
/// failed.
///
/// ```swift
/// /// POST the refresh token; the body of the answer is the new access token.
/// nonisolated final class RefreshToken: FetchOperation<FetchCredential>, @unchecked Sendable {
///     init(api: URL, refreshToken: String) {
///         var request = URLRequest(url: api.appendingPathComponent("refresh"))
///         request.httpMethod = "POST"
///         request.httpBody = Data(refreshToken.utf8)
///         super.init(request: request)
///     }
///
///     override func parseResponseBody(_ body: Data) throws -> FetchCredential {
///         FetchCredential(token: String(decoding: body, as: UTF8.self), refreshToken: nil)
///     }
/// }
///
/// nonisolated struct APIAuthenticator: FetchAuthenticator {
///     let api: URL
///
///     func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential> {
///         RefreshToken(api: api, refreshToken: credential.refreshToken ?? "")
///     }
/// }
/// ```
public protocol FetchAuthenticator: Sendable {
    /// Puts `credential` on `request`. Called for each attempt, after
    /// ``AnyFetchOperation/makeRequest()`` and the attempt's own headers, so what it sets wins.
    /// Every header field it adds or changes stays with the request's origin: a redirect to
    /// another origin drops it, as it drops `Authorization`. Default: `Authorization: Bearer <token>`.
    func apply(_ credential: FetchCredential, to request: inout URLRequest)

    /// Whether `response` means that the server refused the credential the request carried.
    /// Default: its status is `401`.
    func isRefused(_ response: HTTPURLResponse) -> Bool

    /// Whether `credential` must be refreshed before it is sent at all. Default: it expires
    /// within ``refreshMargin``.
    func needsRefresh(_ credential: FetchCredential) -> Bool

    /// How long before its ``FetchCredential/expiresAt`` a credential is refreshed by the default
    /// ``needsRefresh(_:)``. Default 30 seconds.
    var refreshMargin: TimeInterval { get }

    /// The operation that gets a new credential for `credential`. FetchKit runs it once per
    /// generation, however many fetches need it; its output replaces the credential.
    func makeRefreshOperation(for credential: FetchCredential) -> FetchOperation<FetchCredential>
}

extension FetchAuthenticator {
    public func apply(_ credential: FetchCredential, to request: inout URLRequest) {
        request.setValue("Bearer \(credential.token)", forHTTPHeaderField: "Authorization")
    }

    public func isRefused(_ response: HTTPURLResponse) -> Bool {
        response.statusCode == 401
    }

    public var refreshMargin: TimeInterval { 30 }

    public func needsRefresh(_ credential: FetchCredential) -> Bool {
        guard let expiresAt = credential.expiresAt else { return false }
        return expiresAt.timeIntervalSinceNow < refreshMargin
    }
}
