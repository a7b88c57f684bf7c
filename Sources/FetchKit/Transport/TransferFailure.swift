import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How a transfer's failures read as ``FetchError``s: pure functions of what its state machine knows.
extension TransferStateMachine {
    /// The error for a task that completed with `error`.
    func failure(for error: any Error) -> FetchError {
        if declinedChallenge, case .refusing(let response, let prefix) = state {
            return statusFailure(response, bodyPrefix: prefix)
        }
        guard let error = error as? URLError else {
            return .transport(Self.urlError(.unknown, url: url, underlying: error))
        }
        // The server closed before the announced length: on Linux libcurl says so only in words
        // ("transfer closed with N bytes remaining", URLError -1). The numbers say it better.
        if let response, let expected = expectedBytes, receivedBytes < expected, bodyLengthIsCheckable(response),
           [.unknown, .networkConnectionLost, .cannotParseResponse].contains(error.code) {
            return .lengthMismatch(.init(expected: expected, received: receivedBytes, url: response.url ?? url))
        }
        let message = error.localizedDescription
        if let reason = FetchError.TLSFailure.classify(code: error.code)
            ?? (error.code == .unknown ? FetchError.TLSFailure.classify(message: message) : nil) {
            return .tls(.init(reason: reason, message: message, url: url))
        }
        if let reason = Self.refusedHead(message: message) {
            return .invalidResponse(.init(reason: reason, url: url))
        }
        switch error.code {
        case .cancelled:
            // Not ours (ours end the transfer before URLSession reports): the session was
            // invalidated and cancelled its tasks.
            return .cancelled(.init(url: url))
        case .timedOut:
            // FetchKit's own idle deadline ends the transfer before URLSession's backstop can:
            // a timeout from libcurl before any response is the connect timeout set on its handle.
            if connectTimeoutSet, response == nil, let connect = limits.connectTimeout {
                return .timedOut(.init(kind: .connect, interval: connect, url: url))
            }
            return .timedOut(.init(kind: .idle, interval: limits.idleTimeout, url: url))
        case .httpTooManyRedirects:
            // Foundation's own limit (20) was reached before the policy's.
            return .redirectFailed(.init(kind: .tooMany(20), chain: chain))
        default:
            return .transport(error.failingURL == nil ? Self.urlError(error.code, url: url, underlying: error) : error)
        }
    }

    /// What was wrong with a response head that libcurl refused before anyone else saw it, read
    /// from its message (7.88, `http.c`): a status line without an HTTP version or a three-digit
    /// code, and a `Content-Length` that is not a number. `nil` for any other message.
    static func refusedHead(message: String) -> FetchError.InvalidResponse.Reason? {
        if message.contains("Unsupported HTTP version") {
            return .malformedStatusLine("its status line has no HTTP version libcurl reads (libcurl: \(message.prefix(80)))")
        }
        if message.contains("Unsupported response code in HTTP response") {
            return .malformedStatusLine("its status line has no three-digit status code (libcurl: \(message.prefix(80)))")
        }
        if message.contains("Invalid Content-Length: value") {
            return .invalidContentLength("as libcurl read it")
        }
        return nil
    }

    /// A `URLError` naming the failing `url`, and the `underlying` error if any.
    static func urlError(_ code: URLError.Code, url: URL?, underlying: (any Error)? = nil) -> URLError {
        var info: [String: Any] = [:]
        if let url {
            info[NSURLErrorFailingURLErrorKey] = url
        }
        if let underlying {
            info[NSUnderlyingErrorKey] = underlying
            info[NSLocalizedDescriptionKey] = (underlying as? URLError)?.localizedDescription ?? String(describing: underlying)
        }
        return URLError(code, userInfo: info)
    }

    /// An unacceptable status, with the response's headers and the body's first bytes.
    func statusFailure(_ response: HTTPURLResponse, bodyPrefix: Data) -> FetchError {
        var headers: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            headers[String(describing: name)] = String(describing: value)
        }
        return .unacceptableStatus(.init(statusCode: response.statusCode, headers: headers, bodyPrefix: bodyPrefix,
                                         url: response.url ?? url))
    }

    func tooLarge(_ response: HTTPURLResponse) -> FetchError {
        .responseTooLarge(.init(limit: limits.maximumResponseSize, expectedLength: expectedBytes, url: response.url ?? url))
    }

    /// Whether `Content-Length` describes the bytes URLSession hands over: not for HEAD, not for
    /// bodiless statuses, and not when a content coding was decoded on the way.
    func bodyLengthIsCheckable(_ response: HTTPURLResponse) -> Bool {
        if currentRequest.httpMethod?.uppercased() == "HEAD" { return false }
        if response.statusCode == 204 || response.statusCode == 304 || (100..<200).contains(response.statusCode) { return false }
        let coding = (response.value(forHTTPHeaderField: "Content-Encoding") ?? "identity").lowercased()
        return coding == "identity" || coding.isEmpty
    }
}
