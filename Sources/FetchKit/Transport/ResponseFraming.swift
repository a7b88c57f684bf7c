import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a response head says about where its body ends, checked before the body is accepted.
///
/// FoundationNetworking hides two hostile framings that libcurl (7.88) accepts silently:
///
/// - **Conflicting `Content-Length` values.** libcurl frames the body by the *last* field (or
///   the first number of `10, 20`), while Foundation joins the fields into `"10, 20"` and then
///   reports no length at all. RFC 9112 §6.3 makes such a response an unrecoverable error;
///   identical values (`10, 10`) may be taken as one.
/// - **A content-coded body delimited only by the connection closing** (HTTP/1.x, neither
///   `Content-Length` nor chunked framing). libcurl always decodes gzip and deflate for
///   FoundationNetworking and reports a stream cut in the middle as a success, so FetchKit
///   cannot tell a complete body from a truncated one. (With `Content-Length` or chunked
///   framing libcurl detects truncation itself; HTTP/2 marks the end of every stream.)
struct ResponseFraming {
    /// Why a head was refused (``FetchError/InvalidResponse/Reason``, as an `Error`).
    enum Problem: Error, Equatable {
        case conflictingContentLength(String)
        case invalidContentLength(String)
        case unframedEncodedBody(coding: String)

        /// The reason FetchKit reports.
        var reason: FetchError.InvalidResponse.Reason {
            switch self {
            case .conflictingContentLength(let field): return .conflictingContentLength(field)
            case .invalidContentLength(let field): return .invalidContentLength(field)
            case .unframedEncodedBody(let coding): return .unframedEncodedBody(coding: coding)
            }
        }
    }

    /// The body length from `Content-Length` (one value, or several identical ones), if any.
    let contentLength: Int64?

    /// Reads `response`'s framing, or says why it is unacceptable.
    ///
    /// - Parameters:
    ///   - response: The response head.
    ///   - method: The request's method (a `HEAD` response has no body).
    ///   - hasBody: Whether the body matters: `false` for a response whose body FetchKit
    ///     discards (a status it does not accept), which is then checked for its length only.
    static func read(_ response: HTTPURLResponse, method: String?, hasBody: Bool = true) -> Result<ResponseFraming, Problem> {
        var length: Int64?
        if let field = response.value(forHTTPHeaderField: "Content-Length") {
            switch parseContentLength(field) {
            case .success(let value): length = value
            case .failure(let problem): return .failure(problem)
            }
        }
        if hasBody, length == nil, bodyCanFollow(response, method: method),
           let coding = contentCoding(response), !isChunked(response), isHTTP1(response) {
            return .failure(.unframedEncodedBody(coding: coding))
        }
        return .success(ResponseFraming(contentLength: length))
    }

    /// One length from a `Content-Length` field value: `"10"`, or `"10, 10"` (fields joined by
    /// Foundation, or a list the server sent) when all values agree.
    static func parseContentLength(_ field: String) -> Result<Int64, Problem> {
        // The usual field, one number, read without splitting or trimming (which build
        // Foundation character sets: 1.4 % of a small request's CPU).
        if let number = plainNumber(field) { return .success(number) }
        let values = field.split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) }
        var lengths: [Int64] = []
        for value in values {
            guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let number = Int64(value) else {
                return .failure(.invalidContentLength(field))
            }
            lengths.append(number)
        }
        guard let first = lengths.first else { return .failure(.invalidContentLength(field)) }
        guard lengths.allSatisfy({ $0 == first }) else { return .failure(.conflictingContentLength(field)) }
        return .success(first)
    }

    /// `field` read as one decimal number of 1 to 18 digits (no sign, no spaces, no overflow),
    /// or `nil` if it is anything else.
    private static func plainNumber(_ field: String) -> Int64? {
        var number: Int64 = 0
        var digits = 0
        for byte in field.utf8 {
            guard byte >= 0x30, byte <= 0x39, digits < 18 else { return nil }
            number = number * 10 + Int64(byte - 0x30)
            digits += 1
        }
        return digits > 0 ? number : nil
    }

    /// Whether the response may carry a body at all.
    private static func bodyCanFollow(_ response: HTTPURLResponse, method: String?) -> Bool {
        if method?.uppercased() == "HEAD" { return false }
        let status = response.statusCode
        return !(100..<200).contains(status) && status != 204 && status != 304
    }

    /// The content coding other than `identity`, if any (`"gzip"`, `"deflate, gzip"`…).
    private static func contentCoding(_ response: HTTPURLResponse) -> String? {
        guard let field = response.value(forHTTPHeaderField: "Content-Encoding") else { return nil }
        let codings = field.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .filter { !$0.isEmpty && $0 != "identity" }
        return codings.isEmpty ? nil : codings.joined(separator: ", ")
    }

    /// Whether the body is chunked: `chunked` is the last transfer coding (RFC 9112 §6.3).
    private static func isChunked(_ response: HTTPURLResponse) -> Bool {
        guard let field = response.value(forHTTPHeaderField: "Transfer-Encoding") else { return false }
        let last = field.split(separator: ",").last.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        return last == "chunked"
    }

    /// Whether the exchange certainly used HTTP/1.x, where a body without length or chunking
    /// ends at the close. FoundationNetworking does not report the version, so this is
    /// inferred: plain `http` is always HTTP/1.x (libcurl negotiates HTTP/2 over TLS only, and
    /// FoundationNetworking asks for nothing else), and connection-specific fields cannot come
    /// from HTTP/2 (RFC 9113 §8.2.2; libcurl's nghttp2 rejects such a response). An `https`
    /// response without any of them may be HTTP/2, whose streams end explicitly.
    private static func isHTTP1(_ response: HTTPURLResponse) -> Bool {
        if response.url?.scheme?.lowercased() == "http" { return true }
        return ["Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"]
            .contains { response.value(forHTTPHeaderField: $0) != nil }
    }
}
