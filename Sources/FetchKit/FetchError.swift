import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Why a fetch did not succeed.
///
/// Every failed ``AnyFetchOperation`` finishes with exactly one of these kinds in
/// ``AnyFetchOperation/error``; a successful one has `nil` there. Switch over the kinds to react
/// to each; `description` gives a sentence a person can read, naming the URL and the cause.
///
/// Descriptions never show secrets: URLs appear as ``Redaction/redacted(_:)-(URL)`` shows them
/// (the userinfo password and sensitive query values replaced by `REDACTED`), and text from
/// elsewhere — a system message, a server's error body, another error's description — has the
/// URLs in it and the failing URL's secret values redacted as well. The payloads' `url`
/// properties keep the full URL for code that needs it.
///
/// ```swift
/// switch operation.result {
/// case .success(let user)?: show(user)
/// case .failure(.unacceptableStatus(404))?: showNotFound()
/// case .failure(.cancelled)?: break
/// case .failure(let error)?: report(error)
/// case nil: break                                  // not finished yet
/// }
/// ```
///
/// ## Comparing and building errors
///
/// `FetchError` is `Equatable`, and every payload has a public initialiser, so a test can
/// build the error it expects and compare:
///
/// ```swift
/// let expected: FetchError = .cancelled(.init(url: url))
/// print(operation.error == expected)             // a test: #expect(operation.error == expected)
/// print(operation.error?.statusCode == 404)      // a test: #expect(operation.error?.statusCode == 404)
/// ```
///
/// Two errors are equal when they are the same case with equal payloads: every field of the
/// payload compares, the status failure's headers and body prefix included — so a status
/// failure built from a code and a URL equals no real server's answer (it sends headers, and
/// often a body). Compare a status by its code: ``statusCode``, or the pattern
/// `case .unacceptableStatus(404)` or `case .unacceptableStatus(500..<600)` (see ``StatusFailure``). A `URLError`
/// compares as `URLError` does (its code and its `userInfo`). An ``UnderlyingError`` compares
/// by the `NSError` domain and code of the error it carries and by its description (see
/// ``UnderlyingError/==(_:_:)``). To match the kind alone, compare ``code``, or use
/// `if case .timedOut = error`.
///
/// ## Cancellation
///
/// A cancelled fetch finishes with ``cancelled(_:)``, whose ``Cancellation`` names the URL
/// being fetched. It is how FetchKit reports a cancelled fetch, whoever cancelled it: `cancel()`
/// on the operation, on its `OperationQueue` or ``FetchQueue``, or the cancellation of the
/// Swift task that awaits the fetch. (A fetch whose dependency was cancelled, and so sent
/// nothing, fails with ``dependencyFailed(_:)`` instead.) A task awaiting a fetch (`try await queue.fetch(operation)`
/// and the operation's own async waits) that is cancelled cancels the fetch — before it starts
/// or while it is under way — and the awaiting call then throws ``cancelled(_:)``, never
/// `CancellationError`: the async calls throw `FetchError` only. The fetch is cancelled for
/// everyone waiting on it, not only for the cancelled task. A fetch that already finished is
/// not changed by a later cancel, and its result is returned as it is. Cancelling one
/// operation never cancels the Swift task that awaits it; check `Task.isCancelled` after the
/// call if your code must tell "my task was cancelled" from "someone cancelled the fetch".
public enum FetchError: Error, Sendable, Equatable {
    /// The request was missing or unusable, so nothing was sent.
    case invalidRequest(InvalidRequest)
    /// The fetch was cancelled before it finished (see "Cancellation" above); the payload
    /// names the URL.
    ///
    /// `if case .cancelled = error` matches it whatever the URL.
    case cancelled(Cancellation)
    /// A FetchKit timeout fired: no data for the idle timeout, or not done within the total one.
    case timedOut(Timeout)
    /// The transfer failed below HTTP: refused, reset, DNS… The `URLError` is kept. (A failed
    /// TLS handshake or certificate check is ``FetchError/tls(_:)``.)
    case transport(URLError)
    /// The TLS connection could not be trusted or made: an untrusted certificate, a host name
    /// it does not cover, a certificate out of its dates, a failed handshake. Never retried:
    /// the server would present the same certificate. The TLS library's own words are kept.
    case tls(TLSFailure)
    /// The server answered with a status code the operation does not accept.
    case unacceptableStatus(StatusFailure)
    /// The response body is larger than the operation allows; the transfer was stopped.
    case responseTooLarge(SizeLimit)
    /// The body did not match the length the server announced in `Content-Length`.
    case lengthMismatch(LengthMismatch)
    /// ``FetchOperation/parseResponseBody(_:)`` threw; its error is kept.
    case parseFailed(ParseFailure)
    /// A dependency failed or was cancelled, so this operation sent no request.
    case dependencyFailed(DependencyFailure)
    /// A download could not be written: an unwritable destination, a full disk, a failed move.
    case fileSystem(FileFailure)
    /// The redirects went around in a loop, or were more than the ``RedirectPolicy`` allows.
    case redirectFailed(RedirectFailure)
    /// The response head frames its body in a way FetchKit refuses: conflicting
    /// `Content-Length` values, or a content-coded body that only the connection closing ends.
    /// Not retried: the server would answer the same way.
    case invalidResponse(InvalidResponse)
    /// A download's file is not the one expected: its digest differs from
    /// ``DownloadOperation/expectedDigest``. The file was not moved into place, and its partial
    /// file was removed. Not retried.
    case digestMismatch(DigestMismatch)
    /// The queue's ``FetchAuthentication`` could not give the fetch a credential the server
    /// accepts: none is set, its refresh failed or was refused, the refresh limit was reached,
    /// or the server refused the refreshed one too. Nothing was sent without a credential.
    case authenticationFailed(AuthenticationFailure)
    /// A streamed body's reader fell further behind the network than the stream's buffer
    /// allows, where the session could not pause the reading (see ``StreamOverflow``). The
    /// transfer was stopped; memory stayed within the bound.
    case streamOverflow(StreamOverflow)
}

extension FetchError {
    /// The kind of a ``FetchError``, without its payload: one code per case, for matching,
    /// counting and logging (`"\(error.code)"` is the case's name).
    public enum Code: String, Hashable, Sendable, CaseIterable {
        /// ``FetchError/invalidRequest(_:)``.
        case invalidRequest
        /// ``FetchError/cancelled(_:)``.
        case cancelled
        /// ``FetchError/timedOut(_:)``.
        case timedOut
        /// ``FetchError/transport(_:)``.
        case transport
        /// ``FetchError/tls(_:)``.
        case tls
        /// ``FetchError/unacceptableStatus(_:)``.
        case unacceptableStatus
        /// ``FetchError/responseTooLarge(_:)``.
        case responseTooLarge
        /// ``FetchError/lengthMismatch(_:)``.
        case lengthMismatch
        /// ``FetchError/parseFailed(_:)``.
        case parseFailed
        /// ``FetchError/dependencyFailed(_:)``.
        case dependencyFailed
        /// ``FetchError/fileSystem(_:)``.
        case fileSystem
        /// ``FetchError/redirectFailed(_:)``.
        case redirectFailed
        /// ``FetchError/invalidResponse(_:)``.
        case invalidResponse
        /// ``FetchError/digestMismatch(_:)``.
        case digestMismatch
        /// ``FetchError/authenticationFailed(_:)``.
        case authenticationFailed
        /// ``FetchError/streamOverflow(_:)``.
        case streamOverflow
    }

    /// The error's kind, without its payload.
    ///
    /// ```swift
    /// if error.code == .timedOut { showSlowNetworkHint() }
    /// let failuresByKind = Dictionary(grouping: errors, by: \.code)
    /// ```
    public var code: Code {
        switch self {
        case .invalidRequest: return .invalidRequest
        case .cancelled: return .cancelled
        case .timedOut: return .timedOut
        case .transport: return .transport
        case .tls: return .tls
        case .unacceptableStatus: return .unacceptableStatus
        case .responseTooLarge: return .responseTooLarge
        case .lengthMismatch: return .lengthMismatch
        case .parseFailed: return .parseFailed
        case .dependencyFailed: return .dependencyFailed
        case .fileSystem: return .fileSystem
        case .redirectFailed: return .redirectFailed
        case .invalidResponse: return .invalidResponse
        case .digestMismatch: return .digestMismatch
        case .authenticationFailed: return .authenticationFailed
        case .streamOverflow: return .streamOverflow
        }
    }
}

extension FetchError {
    /// Details of ``FetchError/invalidRequest(_:)``.
    public struct InvalidRequest: Sendable, Equatable, CustomStringConvertible {
        /// What was wrong.
        public enum Reason: Sendable, Equatable {
            /// No request was set and ``AnyFetchOperation/makeRequest()`` returned none.
            case missing
            /// The URL's scheme is not `http` or `https` (the scheme, if any).
            case unsupportedScheme(String?)
            /// The request cannot be sent as HTTP (says why): no host, a bad method or header.
            case malformed(String)
            /// ``AnyFetchOperation/makeRequest()`` threw.
            case preparationFailed(UnderlyingError)
            /// `start()` was called by hand before the operation's dependencies had finished.
            case startedBeforeReady
            /// The ``FetchSession`` was invalidated before this operation could use it.
            case sessionInvalidated
            /// ``FetchQueue/enqueue(_:completion:)`` was given an operation that was already
            /// enqueued, started or finished.
            case alreadyEnqueued
            /// ``FetchQueue`` was given an operation whose dependencies form a cycle, so none of
            /// them could ever start (the name, or type, of one operation in the cycle). The
            /// operation was not enqueued.
            case dependencyCycle(String)
            /// A ``StreamingFetchOperation``'s elements were read a second time (a second loop,
            /// another task): every chunk goes to one reader, and the first one keeps it.
            case streamAlreadyRead
            /// The session's ``TrustSettings`` could not be enforced for this request, so it was
            /// not sent (why): on Linux, an operation with ``FetchConfiguration/credentials``
            /// on such a session (see ``FetchSession/init(configuration:monitors:trust:)``).
            case trustNotEnforceable(String)
        }

        /// What was wrong.
        public let reason: Reason
        /// The request's URL, if there was one.
        public let url: URL?

        /// Creates the details of an invalid request.
        ///
        /// - Parameters:
        ///   - reason: What was wrong.
        ///   - url: The request's URL, if there was one.
        public init(reason: Reason, url: URL?) {
            self.reason = reason
            self.url = url
        }

        /// A sentence naming the redacted URL and what was wrong.
        public var description: String {
            Redaction.redacted(text: text, mentioning: [url])
        }

        private var text: String {
            let target = url.map { " (\(Redaction.redacted($0)))" } ?? ""
            switch reason {
            case .missing:
                return "Invalid request: the operation has no request to send."
            case .unsupportedScheme(let scheme):
                return "Invalid request\(target): scheme \(scheme.map { "'\($0)'" } ?? "(none)") is not supported; use http or https."
            case .malformed(let problem):
                return Prose.sentence("Invalid request\(target): \(problem)")
            case .preparationFailed(let error):
                return Prose.sentence("Invalid request\(target): preparing it failed: \(error)")
            case .startedBeforeReady:
                return "Invalid request\(target): start() was called before the operation's dependencies finished."
            case .sessionInvalidated:
                return "Invalid request\(target): its FetchSession has been invalidated."
            case .alreadyEnqueued:
                return "Not enqueued\(target): the operation was already enqueued, started or finished."
            case .dependencyCycle(let dependency):
                return "Not enqueued\(target): its dependencies form a cycle through \(Prose.clause(dependency)), so none of them could ever start."
            case .trustNotEnforceable(let why):
                return Prose.sentence("Not sent\(target): the session's trust settings cannot be enforced for it: \(why)")
            case .streamAlreadyRead:
                return "Not read\(target): the stream's elements already have a reader; every chunk goes to the first one."
            }
        }
    }

    /// Details of ``FetchError/cancelled(_:)``.
    public struct Cancellation: Sendable, Equatable, CustomStringConvertible {
        /// The URL being fetched when the fetch was cancelled: the request's URL, or `nil` when
        /// the operation was cancelled before it had a request (one that ``AnyFetchOperation/makeRequest()``
        /// builds, cancelled before it started).
        public let url: URL?

        /// Creates the details of a cancelled fetch.
        ///
        /// - Parameter url: The URL being fetched, if there was one.
        public init(url: URL?) {
            self.url = url
        }

        /// A sentence naming the redacted URL.
        public var description: String {
            url.map { "The fetch of \(Redaction.redacted($0)) was cancelled." } ?? "The fetch was cancelled."
        }
    }

    /// Details of ``FetchError/timedOut(_:)``.
    public struct Timeout: Sendable, Equatable, CustomStringConvertible {
        /// Which limit fired.
        public enum Kind: Sendable, Equatable {
            /// No bytes arrived for ``FetchConfiguration/idleTimeout``.
            case idle
            /// A connection could not be made (name lookup, TCP and TLS handshakes) within
            /// ``FetchConfiguration/connectTimeout``.
            case connect
            /// The fetch did not complete within ``FetchConfiguration/totalTimeout``.
            case total
        }
        /// Which limit fired.
        public let kind: Kind
        /// The limit, in seconds.
        public let interval: TimeInterval
        /// The URL being fetched.
        public let url: URL?

        /// Creates the details of a timeout.
        ///
        /// - Parameters:
        ///   - kind: Which limit fired.
        ///   - interval: The limit, in seconds.
        ///   - url: The URL being fetched.
        public init(kind: Kind, interval: TimeInterval, url: URL?) {
            self.kind = kind
            self.interval = interval
            self.url = url
        }

        /// A sentence naming the redacted URL, the limit and its kind.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "the request"
            switch kind {
            case .idle: return "\(target) timed out: no data for \(Self.format(interval)) (idle timeout)."
            case .connect: return "\(target) timed out: no connection within \(Self.format(interval)) (connect timeout)."
            case .total: return "\(target) timed out: not complete within \(Self.format(interval)) (total timeout)."
            }
        }

        static func format(_ seconds: TimeInterval) -> String {
            seconds < 10 ? String(format: "%.3g s", seconds) : String(format: "%.0f s", seconds)
        }
    }

    /// Details of ``FetchError/unacceptableStatus(_:)``.
    public struct StatusFailure: Sendable, Equatable, CustomStringConvertible {
        /// The HTTP status code.
        public let statusCode: Int
        /// The response's header fields.
        public let headers: [String: String]
        /// The first bytes of the body (at most ``bodyPrefixLimit``), for diagnostics.
        public let bodyPrefix: Data
        /// The URL that answered (after redirects).
        public let url: URL?

        /// How many bytes of an error body FetchKit keeps.
        public static let bodyPrefixLimit = 4096

        /// Creates the details of an unacceptable status.
        ///
        /// - Parameters:
        ///   - statusCode: The HTTP status code.
        ///   - headers: The response's header fields. Defaults to none.
        ///   - bodyPrefix: The first bytes of the body; only the first ``bodyPrefixLimit``
        ///     bytes are kept. Defaults to none.
        ///   - url: The URL that answered.
        public init(statusCode: Int, headers: [String: String] = [:], bodyPrefix: Data = Data(), url: URL?) {
            self.statusCode = statusCode
            self.headers = headers
            self.bodyPrefix = bodyPrefix.count > Self.bodyPrefixLimit ? Data(bodyPrefix.prefix(Self.bodyPrefixLimit)) : bodyPrefix
            self.url = url
        }

        /// The body prefix as UTF-8 text, if it is text.
        public var bodyText: String? { String(data: bodyPrefix, encoding: .utf8) }

        /// Matches a status failure by its code alone, in a `switch` or `if case`:
        ///
        /// ```swift
        /// switch operation.result {
        /// case .failure(.unacceptableStatus(404))?: showNotFound()
        /// case .failure(.unacceptableStatus(500..<600))?: showRetryLater()
        /// default: break
        /// }
        /// ```
        ///
        /// (`==` compares every field — the server's headers and body included — so a
        /// ``StatusFailure`` built from a code alone never equals one a server sent.)
        ///
        /// - Parameters:
        ///   - statusCode: The code to match.
        ///   - failure: The failure a fetch ended with.
        /// - Returns: Whether `failure` has that ``statusCode``.
        public static func ~= (statusCode: Int, failure: StatusFailure) -> Bool {
            failure.statusCode == statusCode
        }

        /// Matches a status failure whose code is in `codes` (`500..<600`, `400...`).
        ///
        /// - Parameters:
        ///   - codes: The codes to match.
        ///   - failure: The failure a fetch ended with.
        /// - Returns: Whether `codes` contains `failure`'s ``statusCode``.
        public static func ~= <Codes: RangeExpression<Int>>(codes: Codes, failure: StatusFailure) -> Bool {
            codes.contains(failure.statusCode)
        }

        /// The reason phrase registered for ``statusCode`` in the IANA HTTP Status Code Registry
        /// (RFC 9110 §15 and its companions), such as `"Not Found"` for 404; `nil` for a code
        /// with none. 418 has none: RFC 9110 §15.5.19 reserves it as "(Unused)" (the "I'm a
        /// teapot" of RFC 2324 belongs to a joke protocol, not to HTTP).
        ///
        /// The server's own reason phrase is not available: URLSession does not keep it.
        public var reasonPhrase: String? {
            HTTPStatus.reasonPhrase(for: statusCode)
        }

        /// ``headers`` for display: the values of `Authorization`, `Proxy-Authorization`,
        /// `Cookie` and `Set-Cookie` replaced by `REDACTED`, URLs in the others redacted
        /// (``Redaction/redacted(headerValue:forName:)``).
        public var redactedHeaders: [String: String] {
            Dictionary(uniqueKeysWithValues: headers.map { ($0.key, Redaction.redacted(headerValue: $0.value, forName: $0.key)) })
        }

        /// A sentence naming the redacted URL, the status and, on one line, the first words of
        /// the body — with the URLs in the body and the URL's secret values redacted.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "the server"
            var text = "\(target) answered HTTP \(statusCode)\(reasonPhrase.map { " (\($0))" } ?? "")."
            // A glimpse of the body, on one line: error pages are often HTML spread over many.
            if let body = bodyText {
                let glimpse = Redaction.redacted(text: body, mentioning: [url]).split(whereSeparator: \.isWhitespace).joined(separator: " ")
                if !glimpse.isEmpty {
                    text += " Body: " + (glimpse.count > 120 ? glimpse.prefix(120) + "…" : glimpse)
                }
            }
            return text
        }
    }

    /// Details of ``FetchError/responseTooLarge(_:)``.
    public struct SizeLimit: Sendable, Equatable, CustomStringConvertible {
        /// The operation's ``FetchConfiguration/maximumResponseSize``.
        public let limit: Int64
        /// The length the server announced, if it did.
        public let expectedLength: Int64?
        /// The URL being fetched.
        public let url: URL?

        /// Creates the details of a response over the size limit.
        ///
        /// - Parameters:
        ///   - limit: The limit, in bytes.
        ///   - expectedLength: The length the server announced, if it did.
        ///   - url: The URL being fetched.
        public init(limit: Int64, expectedLength: Int64?, url: URL?) {
            self.limit = limit
            self.expectedLength = expectedLength
            self.url = url
        }

        /// A sentence naming the redacted URL, the limit and the announced length.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "the response"
            let announced = expectedLength.map { "; it announced \($0) bytes" } ?? ""
            return "\(target) is larger than the \(limit)-byte limit\(announced)."
        }
    }

    /// Details of ``FetchError/lengthMismatch(_:)``.
    public struct LengthMismatch: Sendable, Equatable, CustomStringConvertible {
        /// The length in `Content-Length`.
        public let expected: Int64
        /// The bytes that actually arrived.
        public let received: Int64
        /// The URL being fetched.
        public let url: URL?

        /// Creates the details of a length mismatch.
        ///
        /// - Parameters:
        ///   - expected: The length in `Content-Length`.
        ///   - received: The bytes that actually arrived.
        ///   - url: The URL being fetched.
        public init(expected: Int64, received: Int64, url: URL?) {
            self.expected = expected
            self.received = received
            self.url = url
        }

        /// A sentence naming the redacted URL and both lengths.
        public var description: String {
            "\(url.map(Redaction.redacted) ?? "The response") announced \(expected) bytes but \(received) arrived."
        }
    }

    /// Details of ``FetchError/parseFailed(_:)``.
    public struct ParseFailure: Sendable, Equatable, CustomStringConvertible {
        /// What ``FetchOperation/parseResponseBody(_:)`` threw.
        public let underlying: UnderlyingError
        /// The URL whose body failed to parse.
        public let url: URL?

        /// Creates the details of a failed parse.
        ///
        /// - Parameters:
        ///   - underlying: What the parse threw.
        ///   - url: The URL whose body failed to parse.
        public init(underlying: UnderlyingError, url: URL?) {
            self.underlying = underlying
            self.url = url
        }

        /// A sentence naming the redacted URL and the parse error.
        public var description: String {
            Redaction.redacted(text: Prose.sentence("Parsing the response from \(url.map(Redaction.redacted) ?? "the server") failed: \(underlying)"),
                               mentioning: [url])
        }
    }

    /// Details of ``FetchError/dependencyFailed(_:)``.
    public struct DependencyFailure: Sendable, Equatable, CustomStringConvertible {
        /// The dependency's `name`, or its type when it has none.
        public let dependency: String
        /// The dependency's own error; `nil` for a cancelled dependency that is not a ``AnyFetchOperation``.
        public let dependencyError: UnderlyingError?

        /// Creates the details of a failed dependency.
        ///
        /// - Parameters:
        ///   - dependency: The dependency's `name` (FetchKit quotes it: `"'token'"`), or its type.
        ///   - dependencyError: The dependency's own error; `nil` for a cancelled dependency
        ///     that is not a ``FetchOperation``.
        public init(dependency: String, dependencyError: UnderlyingError?) {
            self.dependency = dependency
            self.dependencyError = dependencyError
        }

        /// The dependency's own ``FetchError``, when the dependency was a fetch that failed
        /// (`nil` if it was cancelled without being one, or failed with another error).
        ///
        /// ```swift
        /// if case .dependencyFailed(let failure) = error, failure.dependencyFetchError?.statusCode == 401 {
        ///     logIn()
        /// }
        /// ```
        public var dependencyFetchError: FetchError? {
            dependencyError?.error as? FetchError
        }

        /// Whether the dependency was cancelled (as opposed to failing).
        public var dependencyWasCancelled: Bool {
            guard let error = dependencyError?.error as? FetchError else { return dependencyError == nil }
            return error.isCancellation
        }

        /// A sentence naming the dependency and its error.
        public var description: String {
            if let error = dependencyError {
                return Prose.sentence("Not sent: dependency \(dependency) failed: \(error)")
            }
            return "Not sent: dependency \(dependency) was cancelled."
        }
    }

    /// Details of ``FetchError/fileSystem(_:)``.
    public struct FileFailure: Sendable, Equatable, CustomStringConvertible {
        /// What went wrong.
        public enum Kind: Sendable, Equatable {
            /// The destination's directory does not exist or cannot be written, or the
            /// destination is a directory. Nothing was sent.
            case unwritableDestination
            /// The disk (or the user's quota) is full.
            case diskFull
            /// Writing the partial file failed for another reason.
            case writeFailed
            /// Moving the finished file into place failed.
            case moveFailed
            /// Another download is writing the same destination: in this process, or in another
            /// one that holds the partial file's lock (see
            /// ``DownloadOperation/otherProcessDownloading``). Nothing was sent or written.
            case destinationInUse
            /// The destination or the partial file is a symbolic link, a hard link or not a
            /// regular file, and FetchKit never writes through one. Nothing outside was touched.
            case unsafePath
        }
        /// What went wrong.
        public let kind: Kind
        /// The file concerned.
        public let path: String
        /// The system error number (`errno`), when there was one.
        public let code: Int32?

        /// Creates the details of a file-system failure.
        ///
        /// - Parameters:
        ///   - kind: What went wrong.
        ///   - path: The file concerned.
        ///   - code: The system error number (`errno`), if there was one. Defaults to `nil`.
        public init(kind: Kind, path: String, code: Int32? = nil) {
            self.kind = kind
            self.path = path
            self.code = code
        }

        /// A sentence naming the file, what went wrong and the system's reason.
        public var description: String {
            let reason = code.map { Prose.clause(String(cString: strerror($0))) }
            switch kind {
            case .unwritableDestination:
                return "Cannot download to \(path): \(reason ?? "its directory is missing or not writable")."
            case .diskFull:
                return "Writing \(path) failed: the disk is full\(reason.map { " (\($0))" } ?? "")."
            case .writeFailed:
                return "Writing \(path) failed\(reason.map { ": \($0)" } ?? "")."
            case .moveFailed:
                return "Moving the download into place at \(path) failed\(reason.map { ": \($0)" } ?? "")."
            case .destinationInUse:
                return "Cannot download to \(path): another download is writing it."
            case .unsafePath:
                return "Refusing to write \(path): it is a symbolic link, a hard link or not a regular file, and FetchKit never writes through one."
            }
        }
    }

    /// Details of ``FetchError/redirectFailed(_:)``.
    public struct RedirectFailure: Sendable, Equatable, CustomStringConvertible {
        /// What went wrong.
        public enum Kind: Sendable, Equatable {
            /// The chain came back to a URL it had visited.
            case loop
            /// More redirects than the limit.
            case tooMany(Int)
            /// A redirect with this status (307, 308, or 301/302 for a method other than
            /// POST) must resend the request body, but the body is a stream
            /// (`httpBodyStream`), which cannot be replayed. Set `httpBody` instead.
            case bodyNotReplayable(Int)
            /// A redirect from `https` to plain `http`, refused: following it would send the
            /// request, and read the answer, unprotected. Allow it per operation with
            /// ``FetchConfiguration/allowsInsecureRedirects``.
            case insecureRedirect
            /// A redirect to a URL whose scheme (lowercased, e.g. `ftp` or `file`) is neither
            /// `http` nor `https`, refused whatever the policy: a server must not send a fetch
            /// to another protocol or to the client's own files.
            case unsupportedScheme(String)
        }
        /// What went wrong.
        public let kind: Kind
        /// The URLs visited, first to last, and the one it would have gone to next.
        public let chain: [URL]

        /// Creates the details of a failed redirect.
        ///
        /// - Parameters:
        ///   - kind: What went wrong.
        ///   - chain: The URLs visited, first to last, and the one it would have gone to next.
        public init(kind: Kind, chain: [URL]) {
            self.kind = kind
            self.chain = chain
        }

        /// A sentence naming what went wrong and the redacted chain of URLs.
        public var description: String {
            let path = chain.map(Redaction.redacted).joined(separator: " → ")
            switch kind {
            case .loop: return "Redirect loop: \(path)."
            case .tooMany(let limit): return "More than \(limit) redirects: \(path)."
            case .bodyNotReplayable(let status):
                return "Cannot follow the \(status) redirect \(path): it must resend the request body, and a body stream cannot be replayed."
            case .insecureRedirect:
                return "Refused a redirect from HTTPS to plain HTTP: \(path). Set allowsInsecureRedirects to follow such redirects."
            case .unsupportedScheme(let scheme):
                // A URL's scheme has only letters, digits, `+`, `-` and `.`: nothing to escape.
                return "Refused a redirect to \(scheme.isEmpty ? "a URL without a scheme" : scheme + ":"); only http and https are followed: \(path)."
            }
        }
    }

    /// Details of ``FetchError/streamOverflow(_:)``: a ``StreamingFetchOperation``'s reader
    /// fell more than ``limit`` bytes behind the network.
    ///
    /// On Linux FetchKit pauses the reading while the reader is behind, so this does not happen
    /// where the pause is in effect (``FetchSessionReport``, entry `reader-pace`); where it is
    /// not, the stream ends with this error rather than hold more.
    public struct StreamOverflow: Sendable, Equatable, CustomStringConvertible {
        /// The most the stream holds for its reader, in bytes.
        public let limit: Int
        /// The URL being fetched.
        public let url: URL?

        /// Creates the details of a stream whose reader fell too far behind.
        ///
        /// - Parameters:
        ///   - limit: The most the stream holds, in bytes.
        ///   - url: The URL being fetched.
        public init(limit: Int, url: URL?) {
            self.limit = limit
            self.url = url
        }

        /// A sentence naming the redacted URL and the limit.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "the response"
            return "The stream of \(target) was stopped: its reader fell more than \(limit) bytes behind, "
                + "and the reading could not be paused (see the session's workarounds, reader-pace)."
        }
    }

    /// Why a fetch that needed the queue's credential did not get one the server accepts (see
    /// ``FetchAuthentication``).
    public struct AuthenticationFailure: Sendable, Equatable, CustomStringConvertible {
        /// What went wrong.
        public indirect enum Reason: Sendable, Equatable {
            /// No credential is set (never logged in, or logged out): nothing was sent.
            case noCredential
            /// The refresh of the credential failed — its operation's error, such as the refresh
            /// endpoint's `400` or `401`, its cancellation, or its timeout
            /// (``FetchAuthentication/refreshTimeout``). Every fetch that waited for it fails
            /// once with this; after any failure but a cancellation or a timeout, so does each
            /// later fetch of the same credential, without another refresh, until a new
            /// credential is set.
            case refreshFailed(FetchError)
            /// The server refused the credential again after the fetch was sent with a refreshed
            /// one (the status it answered, usually 401). The fetch is not refreshed twice.
            case refused(statusCode: Int)
            /// More than `maximum` refreshes started within `window` seconds: a backstop against
            /// a server that keeps refusing fresh credentials. The fetch was not sent with a
            /// refreshed credential: not at all if its credential was to be refreshed before it
            /// was sent, or once, with the credential the server refused.
            case refreshLimitReached(maximum: Int, window: TimeInterval)
        }

        /// What went wrong.
        public let reason: Reason
        /// The ``FetchCredential/generation`` of the credential concerned (0 if none was set).
        public let generation: UInt64
        /// The URL of the fetch.
        public internal(set) var url: URL?

        /// Creates the details of an authentication failure.
        ///
        /// - Parameters:
        ///   - reason: What went wrong.
        ///   - generation: The credential's generation (0 if none was set).
        ///   - url: The URL of the fetch.
        public init(reason: Reason, generation: UInt64, url: URL?) {
            self.reason = reason
            self.generation = generation
            self.url = url
        }

        /// A sentence naming the redacted URL and what went wrong.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "The request"
            switch reason {
            case .noCredential:
                return "\(target) was not sent: no credential is set (log in first)."
            case .refreshFailed(let error):
                return "\(target) was not authorised: refreshing credential \(generation) failed: \(Prose.clause(error.description))."
            case .refused(let statusCode):
                return "\(target) was not authorised: the server refused the refreshed credential \(generation) too (HTTP \(statusCode))."
            case .refreshLimitReached(let maximum, let window):
                return "\(target) was not authorised: more than \(maximum) credential refreshes within \(Int(window)) s; refreshing stopped."
            }
        }
    }

    /// Details of ``FetchError/invalidResponse(_:)``.
    public struct InvalidResponse: Sendable, Equatable, CustomStringConvertible {
        /// What was wrong with the response head.
        public enum Reason: Sendable, Equatable {
            /// `Content-Length` holds different values (the field value as received, e.g.
            /// `"10, 20"`). RFC 9112 §6.3 makes this an unrecoverable error: where the body
            /// ends is ambiguous. Identical values (`"10, 10"`) are accepted as one.
            case conflictingContentLength(String)
            /// `Content-Length` is not a decimal number (the field value as received).
            case invalidContentLength(String)
            /// The body has this content coding (`"gzip"`…) and neither `Content-Length` nor
            /// chunked framing: only the connection closing ends it, and the decoder on Linux
            /// (libcurl) reports a stream cut in the middle as complete, so a truncated body
            /// cannot be told from a whole one.
            case unframedEncodedBody(coding: String)
            /// The status line is not one (RFC 9112 §4): what was wrong, with the line as
            /// received (control bytes escaped, at most 80 characters) — `Http/1.1 200 OK` (the
            /// protocol name is case-sensitive), no three-digit code. A valid
            /// one without a reason phrase (`HTTP/1.1 200`) is accepted.
            case malformedStatusLine(String)
            /// The trailer fields after the body passed `limit` bytes (see
            /// ``AnyFetchOperation/responseTrailers``).
            case trailersTooLarge(limit: Int)
            /// A header field cannot be read (what was wrong, naming the field): it has no name,
            /// or its bytes are not UTF-8.
            case malformedHeaderField(String)
            /// The `Content-Length` (the field value as received) is 2^63 or more: no body is
            /// that long, and FoundationNetworking cannot hold the number.
            case contentLengthTooLarge(String)
            /// A download's resume was answered with a range of another file: the `206` did not
            /// carry the validator (`ETag`, else `Last-Modified`) the partial file was made with,
            /// or its `Content-Range` gave another total length (what changed, in words). The
            /// server ignored `If-Range`. The partial file was removed, never appended to; a
            /// ``DownloadOperation`` starts over by itself unless
            /// ``DownloadOperation/restartsWhenSourceChanges`` is `false`.
            case changedWhileResuming(String)
            /// A download's resume was answered with a `206` whose range is not the rest of the
            /// file (what is wrong, in words): its `Content-Range` cannot be read, does not start
            /// where the partial file ends, ends before the file's last byte or past it, or its
            /// length is not the response's
            /// `Content-Length`; or its body ran past its range. Nothing past the range was
            /// appended, and the partial file is kept for another try.
            case rangeMismatch(String)
            /// A `206 Partial Content` answered a request that asked for no range (no `Range`
            /// header): its body is a part of the resource, and taking it for the whole would
            /// give a short result that looks complete.
            case unsolicitedPartialContent
            /// A body read as lines (``TextLines``, ``JSONLines``, ``ServerSentEvents``) had a
            /// line longer than `limit` bytes: it was not held, and the sequence ended.
            case lineTooLong(limit: Int)
            /// A server-sent event's data passed `limit` bytes (``ServerSentEventParser``): it
            /// was not held, and the sequence ended.
            case eventTooLarge(limit: Int)
            /// An event stream (``FetchQueue/events(from:reconnection:maximumEventSize:configuration:)``)
            /// was answered with another media type (the `Content-Type` as received, at most 80
            /// characters; empty when there was none): an error page or a portal, not events. It
            /// is not reconnected.
            case notAnEventStream(contentType: String)

            init(_ refused: ResponseHeadFilter.Failure) {
                switch refused {
                case .malformedStatusLine(let problem): self = .malformedStatusLine(problem)
                case .trailersTooLarge(let limit): self = .trailersTooLarge(limit: limit)
                case .malformedField(let problem): self = .malformedHeaderField(problem)
                case .contentLengthTooLarge(let field): self = .contentLengthTooLarge(field)
                }
            }
        }

        /// What was wrong.
        public let reason: Reason
        /// The URL that answered.
        public let url: URL?

        /// Creates the details of an invalid response.
        ///
        /// - Parameters:
        ///   - reason: What was wrong with the response head.
        ///   - url: The URL that answered.
        public init(reason: Reason, url: URL?) {
            self.reason = reason
            self.url = url
        }

        /// A sentence naming the redacted URL and what was wrong.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "The server"
            switch reason {
            case .conflictingContentLength(let field):
                return "\(target) sent conflicting Content-Length values (\(field.prefix(60))), so where its body ends is ambiguous."
            case .invalidContentLength(let field):
                return "\(target) sent a Content-Length that is not a number (\(field.prefix(60)))."
            case .unframedEncodedBody(let coding):
                return "\(target) sent a \(coding.prefix(40))-encoded body with neither Content-Length nor chunked framing, "
                    + "so a complete body cannot be told from a truncated one."
            case .malformedStatusLine(let problem):
                return "\(target) sent a response that is not HTTP: \(problem.prefix(300))."
            case .trailersTooLarge(let limit):
                return "\(target) sent more than \(limit) bytes of trailer fields after its body."
            case .malformedHeaderField(let problem):
                return "\(target) sent a response head that cannot be read: \(problem.prefix(200))."
            case .contentLengthTooLarge(let field):
                return "\(target) sent a Content-Length (\(field.prefix(60))) larger than any body can be."
            case .changedWhileResuming(let change):
                return "\(target) changed while it was being resumed (\(change.prefix(200))): the partial file was discarded."
            case .rangeMismatch(let problem):
                return "\(target) answered the resume with a range that is not the rest of the file: \(problem.prefix(200))."
            case .unsolicitedPartialContent:
                return "\(target) answered with 206 Partial Content, but no range was asked for: the body is only part of the resource."
            case .lineTooLong(let limit):
                return "\(target) sent a line longer than \(limit) bytes."
            case .eventTooLarge(let limit):
                return "\(target) sent an event with more than \(limit) bytes of data."
            case .notAnEventStream(let contentType):
                let found = contentType.isEmpty ? "no Content-Type" : "Content-Type \(contentType.prefix(80))"
                return "\(target) answered an event stream's request with \(found), not text/event-stream."
            }
        }
    }

    /// Details of ``FetchError/tls(_:)``.
    public struct TLSFailure: Sendable, Equatable, CustomStringConvertible {
        /// Why the connection was not made.
        public enum Reason: Sendable, Equatable {
            /// The certificate does not chain to a trusted authority: an unknown or private CA,
            /// a self-signed certificate, or an intermediate the server did not send.
            case untrusted
            /// The certificate does not cover the host name (or IP address) asked for.
            case hostNameMismatch
            /// The certificate has expired.
            case expired
            /// The certificate is not valid yet.
            case notYetValid
            /// The server's public key is not one of those pinned for it.
            case pinMismatch
            /// The handshake failed: no common protocol or cipher, an alert from the server, a
            /// server that does not speak TLS.
            case handshakeFailed
        }

        /// Why the connection was not made.
        public let reason: Reason
        /// What the TLS library said (libcurl's message on Linux), unredacted of anything but
        /// URLs.
        public let message: String
        /// The URL asked for.
        public let url: URL?

        /// Creates the details of a TLS failure.
        ///
        /// - Parameters:
        ///   - reason: Why the connection was not made.
        ///   - message: What the TLS library said.
        ///   - url: The URL asked for.
        public init(reason: Reason, message: String, url: URL?) {
            self.reason = reason
            self.message = message
            self.url = url
        }

        /// A sentence naming the redacted URL, the reason, and the TLS library's words.
        public var description: String {
            let target = url.map(Redaction.redacted) ?? "the server"
            let why = switch reason {
            case .untrusted: "its certificate is not trusted"
            case .hostNameMismatch: "its certificate is not for this host name"
            case .expired: "its certificate has expired"
            case .notYetValid: "its certificate is not valid yet"
            case .pinMismatch: "its public key does not match the pinned key"
            case .handshakeFailed: "the TLS handshake failed"
            }
            return Redaction.redacted(text: Prose.sentence("TLS connection to \(target) refused: \(why) (\(message))"), mentioning: [url])
        }

        /// The failure a TLS library's `message` describes, or `nil` if it is not about TLS.
        ///
        /// On Linux, FoundationNetworking reports every TLS failure as `URLError` -1 with
        /// libcurl's message, so the message is what tells them apart (libcurl's wording with
        /// OpenSSL's verify strings: "SSL certificate problem: certificate has expired",
        /// "SSL: no alternative certificate subject name matches target host name …",
        /// "SSL: public key does not match pinned public key", "OpenSSL SSL_connect: …").
        static func classify(message: String) -> Reason? {
            let text = message.lowercased()
            if text.contains("pinned public key") { return .pinMismatch }
            if text.contains("does not match target host name") || text.contains("subject name matches target host")
                || text.contains("unable to obtain common name") {
                return .hostNameMismatch
            }
            if text.hasPrefix("ssl certificate problem") || text.hasPrefix("ssl peer certificate") {
                if text.contains("certificate has expired") { return .expired }
                if text.contains("not yet valid") { return .notYetValid }
                return .untrusted
            }
            if text.hasPrefix("openssl") || text.hasPrefix("ssl connect error") || text.hasPrefix("tls connect error")
                || text.contains("ssl routines") || text.contains("ssl_connect") || text.contains("ssl_error_") {
                return .handshakeFailed
            }
            return nil
        }

        /// The failure an Apple platform's `URLError` code reports, if it is one about TLS.
        static func classify(code: URLError.Code) -> Reason? {
            switch code {
            case .serverCertificateUntrusted, .serverCertificateHasUnknownRoot: return .untrusted
            case .serverCertificateHasBadDate: return .expired
            case .serverCertificateNotYetValid: return .notYetValid
            case .secureConnectionFailed, .clientCertificateRejected, .clientCertificateRequired: return .handshakeFailed
            default: return nil
            }
        }
    }

    /// An error of any type, carried inside a `Sendable` ``FetchError``.
    ///
    /// Errors thrown by your code (a parse, a request builder) need not be `Sendable`; FetchKit
    /// hands them on once, after your code returned, and never mutates them.
    public struct UnderlyingError: @unchecked Sendable, Equatable, CustomStringConvertible {
        /// The original error.
        public let error: any Error

        /// Wraps an error.
        ///
        /// - Parameter error: The error to carry; it is kept as it is.
        public init(_ error: any Error) { self.error = error }

        /// The error's description (its `errorDescription` if it is a `LocalizedError`), with
        /// the URLs in it redacted.
        public var description: String {
            Redaction.redacted(text: text)
        }

        /// The error's own text, unredacted.
        private var text: String {
            (error as? LocalizedError)?.errorDescription ?? String(describing: error)
        }

        /// Whether two wrapped errors are the same error, as far as a type-erased error can
        /// tell: the same `NSError` domain and code (for a Swift error, its type's name and
        /// its case or ``CustomNSError`` code) and the same text (its `errorDescription`, or
        /// `String(describing:)`). Two values of one `Equatable` error type that differ only
        /// in a field their text does not show compare equal.
        public static func == (lhs: UnderlyingError, rhs: UnderlyingError) -> Bool {
            let left = lhs.error as NSError
            let right = rhs.error as NSError
            return left.domain == right.domain && left.code == right.code && lhs.text == rhs.text
        }
    }
}

extension FetchError {
    /// Details of ``FetchError/digestMismatch(_:)``.
    public struct DigestMismatch: Sendable, Equatable, CustomStringConvertible {
        /// The digest the download was to have (``DownloadOperation/expectedDigest``).
        public let expected: FileDigest
        /// The digest of the bytes that arrived.
        public let actual: FileDigest
        /// How many bytes were hashed: the whole file, resumed bytes included.
        public let byteCount: Int64
        /// The URL being downloaded.
        public let url: URL?
        /// The destination, where the file was not moved.
        public let path: String

        /// Creates the details of a digest mismatch.
        ///
        /// - Parameters:
        ///   - expected: The digest the download was to have.
        ///   - actual: The digest of the bytes that arrived.
        ///   - byteCount: How many bytes were hashed.
        ///   - url: The URL being downloaded.
        ///   - path: The destination.
        public init(expected: FileDigest, actual: FileDigest, byteCount: Int64, url: URL?, path: String) {
            self.expected = expected
            self.actual = actual
            self.byteCount = byteCount
            self.url = url
            self.path = path
        }

        /// A sentence naming the redacted URL, the destination and both digests.
        public var description: String {
            "\(url.map(Redaction.redacted) ?? "The download") failed its \(expected.algorithm.name) check: expected \(expected.hex), "
                + "got \(actual.hex) for \(byteCount) bytes; \(path) was not written."
        }
    }
}

extension FetchError: CustomStringConvertible, LocalizedError {
    /// A sentence a person can read, naming the redacted URL and the cause.
    public var description: String {
        switch self {
        case .invalidRequest(let details): return details.description
        case .cancelled(let details): return details.description
        case .timedOut(let details): return details.description
        case .transport(let error):
            // The system's message may quote the URL, whole or in pieces.
            // (The string form's key, spelled out: its constant is deprecated.)
            let failingString = error.userInfo["NSErrorFailingURLStringKey"] as? String
            let failing = [error.failingURL, failingString.flatMap { URL(string: $0) }]
            let target = error.failingURL.map(Redaction.redacted) ?? "the request"
            // The code first: the system's message may or may not end with a full stop.
            return Redaction.redacted(text: Prose.sentence("\(target) failed (URLError \(error.code.rawValue)): \(error.localizedDescription)"),
                                      mentioning: failing)
        case .tls(let details): return details.description
        case .unacceptableStatus(let details): return details.description
        case .responseTooLarge(let details): return details.description
        case .lengthMismatch(let details): return details.description
        case .parseFailed(let details): return details.description
        case .dependencyFailed(let details): return details.description
        case .fileSystem(let details): return details.description
        case .redirectFailed(let details): return details.description
        case .invalidResponse(let details): return details.description
        case .digestMismatch(let details): return details.description
        case .authenticationFailed(let details): return details.description
        case .streamOverflow(let details): return details.description
        }
    }

    /// The same as ``description``.
    public var errorDescription: String? { description }

    /// Whether this is ``FetchError/cancelled(_:)``.
    public var isCancellation: Bool {
        code == .cancelled
    }

    /// The HTTP status code of an ``FetchError/unacceptableStatus(_:)``.
    public var statusCode: Int? {
        if case .unacceptableStatus(let failure) = self { return failure.statusCode }
        return nil
    }

    /// The `URLError` of a ``FetchError/transport(_:)`` failure.
    public var urlError: URLError? {
        if case .transport(let error) = self { return error }
        return nil
    }
}

/// Sentences built from pieces of text that come from elsewhere (a system message, an error's
/// description), which may or may not end with a full stop already.
enum Prose {
    /// `text` as a sentence: ends with one full stop, unless it ends with `.`, `!`, `?` or `…`.
    static func sentence(_ text: String) -> String {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let last = trimmed.last else { return trimmed }
        return ".!?…".contains(last) ? trimmed : trimmed + "."
    }

    /// `text` as a clause inside a sentence: without trailing spaces or full stops.
    static func clause(_ text: String) -> String {
        var trimmed = Substring(text.trimmingCharacters(in: .whitespacesAndNewlines))
        while trimmed.last == "." { trimmed = trimmed.dropLast() }
        return String(trimmed)
    }
}
