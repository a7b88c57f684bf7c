import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An asynchronous `Operation` that fetches one HTTP request and parses the body into an
/// `Output`.
///
/// Subclass it once per API endpoint, name its output type, and override
/// ``parseResponseBody(_:)`` to return it:
///
/// ```swift
/// nonisolated struct User: Decodable, Sendable {
///     let id: Int
///     let name: String
/// }
///
/// nonisolated final class GetUser: FetchOperation<User>, @unchecked Sendable {
///     override func parseResponseBody(_ body: Data) throws -> User {
///         try JSONDecoder().decode(User.self, from: body)
///     }
/// }
///
/// func loadUser(from url: URL) async throws -> User {
///     try await FetchQueue.shared.fetch(GetUser(url: url))
/// }
/// ```
///
/// For a JSON endpoint you need no subclass: ``JSONFetchOperation``.
///
/// The output is kept under the operation's lock once it finished: read it with
/// ``OutputProducing/result`` (synchronously, `nil` until finished), ``OutputProducing/value``
/// (`try await`), or in a completion handler (``OutputProducing/onCompletion(_:)``, on the main
/// actor). Everything that is not about the output — the request, settings, lifecycle,
/// response, error — is ``AnyFetchOperation``'s.
///
/// **Names FetchKit takes.** Besides `Operation`'s own, an endpoint inherits `request`,
/// `configuration`, `response`, `responseBody`, `sentRequest`, `error`, `attempts`,
/// `isNotModified`, `progress`, `result` and `value`. Do not declare members of these names in
/// a subclass: `result` and `value` come from a protocol extension, so a property of yours with
/// the same name would silently hide them where the static type is your class. Name your own
/// state for what it is (`token`, `user`).
open class FetchOperation<Output: Sendable>: AnyFetchOperation, OutputProducing, @unchecked Sendable {
    /// Creates an operation for `request`.
    ///
    /// - Parameter request: The request to send. It may be `nil` now and set later, or built
    ///   just before sending by overriding ``AnyFetchOperation/makeRequest()``.
    public override init(request: URLRequest? = nil) {
        super.init(request: request)
    }

    /// Creates an operation that GETs `url`.
    ///
    /// A designated initializer, like ``init(request:)``: a subclass's own initializer may
    /// call either through `super`.
    public init(url: URL) {
        super.init(request: URLRequest(url: url))
    }

    /// Parses the body of a successful, validated response into the output. Override it.
    ///
    /// Called exactly once per successful transfer, on ``FetchConfiguration/parseQueue`` —
    /// never on URLSession's delegate queue nor on the main actor. The operation finishes only
    /// when this returns; what it returns is the operation's output. A thrown error becomes
    /// ``FetchError/parseFailed(_:)`` (a thrown ``FetchError`` is kept as it is). Long parses
    /// may check `isCancelled` and stop early: a cancel that arrives while parsing finishes the
    /// operation as ``FetchError/cancelled(_:)``.
    ///
    /// The default returns the body itself when `Output` is `Data`, nothing when it is `Void`,
    /// and otherwise throws: an endpoint with another output must override it.
    ///
    /// - Parameter body: The complete body (empty when the response had none).
    /// - Returns: The output.
    open func parseResponseBody(_ body: Data) throws -> Output {
        if let body = body as? Output { return body }
        if let nothing = () as? Output { return nothing }
        throw MissingParser(operation: "\(type(of: self))")
    }

    /// The output after the server answered `304 Not Modified` to a conditional GET (see
    /// ``FetchConfiguration/validatorStore``): nothing changed since the body the store kept.
    ///
    /// The default parses that body with ``parseResponseBody(_:)``. Without a stored body
    /// (a store made with `storesBodies: false`, ``ValidatorStore/storesBodies``) it returns
    /// nothing when `Output` is `Void`, and otherwise throws
    /// (``FetchError/parseFailed(_:)``, naming this hook). Override it to return what you kept
    /// yourself — for example the previous output — without parsing.
    ///
    /// A plain `FetchOperation` or ``JSONFetchOperation`` — not subclassed, so using this
    /// default — never meets that failure: it sends the store's validators only when the store
    /// kept the body (or its output is `Void`), and otherwise fetches the whole body, as it
    /// would without a store. A subclass sends them whenever the store has them: it says what
    /// a `304` yields by overriding this hook.
    ///
    /// - Parameter storedBody: The body the validator store kept for the URL, if any.
    /// - Returns: The output.
    open func outputWhenNotModified(storedBody: Data?) throws -> Output {
        guard let storedBody else {
            if let nothing = () as? Output { return nothing }
            throw MissingParser(operation: "\(type(of: self))", notModified: true)
        }
        return try parseResponseBody(storedBody)
    }

    /// FetchKit's own class, not subclassed, uses the default ``outputWhenNotModified(storedBody:)``:
    /// it can answer a `304` without a stored body only when its output is `Void`. A subclass
    /// may override the hook (which FetchKit cannot see), so it revalidates.
    override var revalidatesWithoutStoredBody: Bool {
        Output.self == Void.self || type(of: self) != FetchOperation<Output>.self
    }

    override func makeOutput(from body: ResponseBody?, notModified: Bool) throws -> any Sendable {
        if notModified {
            return try outputWhenNotModified(storedBody: body?.data)
        }
        return try parseResponseBody(body?.data ?? Data())
    }
}

/// Why a ``FetchOperation`` could not make its output: it does not override the hook that
/// makes one.
struct MissingParser: Error, CustomStringConvertible {
    let operation: String
    var notModified = false
    var hook = "parseResponseBody(_:)"

    var description: String {
        if notModified {
            return "\(operation) got 304 Not Modified, its validator store keeps no bodies, and it does not override outputWhenNotModified(storedBody:)"
        }
        return "\(operation) does not override \(hook)"
    }
}

/// A ``FetchOperation`` whose output is the body itself: a plain GET, with no subclass.
///
/// ```swift
/// func icon(at url: URL) async throws -> Data {
///     try await FetchQueue.shared.fetch(DataFetchOperation(url: url))
/// }
/// ```
///
/// It is `FetchOperation<Data>` under a shorter name, beside ``JSONFetchOperation``.
public typealias DataFetchOperation = FetchOperation<Data>

/// A ``FetchOperation`` that decodes a JSON body: a JSON GET is one line, with no subclass.
///
/// ```swift
/// nonisolated struct Repository: Decodable, Sendable {
///     let name: String
///     let stars: Int
/// }
///
/// func repositories(at url: URL) async throws -> [Repository] {
///     try await FetchQueue.shared.fetch(JSONFetchOperation<[Repository]>(url: url))
/// }
/// ```
///
/// It sends `Accept: application/json` unless the request sets another `Accept` — whether the
/// request was given to the initialiser, set later, or built by ``AnyFetchOperation/makeRequest()``
/// (the header is added as the request is sent: ``AnyFetchOperation/sentRequest`` shows it,
/// ``AnyFetchOperation/request`` does not). Subclass it to fix an endpoint's request or
/// decoder once.
open class JSONFetchOperation<Output: Decodable & Sendable>: FetchOperation<Output>, @unchecked Sendable {
    /// The decoder the body is decoded with.
    public let decoder: JSONDecoder

    /// Creates an operation that sends `request` and decodes the body as `Output`.
    ///
    /// - Parameters:
    ///   - request: The request to send. It may be `nil` now and set later, or built just
    ///     before sending by overriding ``AnyFetchOperation/makeRequest()``. Default: `nil`.
    ///   - decoder: The decoder to use. Default: a `JSONDecoder()` with its default strategies.
    public init(request: URLRequest? = nil, decoder: JSONDecoder = JSONDecoder()) {
        self.decoder = decoder
        super.init(request: request)
    }

    /// Creates an operation that GETs `url` and decodes the body as `Output`.
    ///
    /// A designated initializer, like ``init(request:decoder:)``: a subclass's own initializer
    /// may call either through `super`.
    ///
    /// - Parameters:
    ///   - url: The URL to get.
    ///   - decoder: The decoder to use. Default: a `JSONDecoder()` with its default strategies.
    public init(url: URL, decoder: JSONDecoder = JSONDecoder()) {
        self.decoder = decoder
        super.init(request: URLRequest(url: url))
    }

    /// Decodes the body as `Output` with ``decoder``.
    open override func parseResponseBody(_ body: Data) throws -> Output {
        try decoder.decode(Output.self, from: body)
    }

    /// Not subclassed, it uses the default ``FetchOperation/outputWhenNotModified(storedBody:)``,
    /// which needs a stored body (see `revalidatesWithoutStoredBody` there).
    override var revalidatesWithoutStoredBody: Bool {
        type(of: self) != JSONFetchOperation<Output>.self
    }

    /// Adds `Accept: application/json` to the request being sent, unless it has an `Accept`.
    override func prepareTransferRequest(_ request: URLRequest) throws(FetchError) -> URLRequest {
        var request = try super.prepareTransferRequest(request)
        if request.value(forHTTPHeaderField: "Accept") == nil {
            request.setValue("application/json", forHTTPHeaderField: "Accept")
        }
        return request
    }
}
