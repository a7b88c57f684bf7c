import Foundation

/// Hides secrets in URLs and header values before FetchKit shows them to a person.
///
/// Every description FetchKit produces — ``FetchError`` descriptions, operation descriptions,
/// messages meant for display — shows URLs through ``redacted(_:)-(URL)``: a password in the
/// URL's userinfo and the values of sensitive query parameters become `REDACTED`, and the rest
/// of the URL stays, so the message is still useful:
///
/// ```swift
/// let url = URL(string: "https://bob:hunter2@api.example.com/v1/items?page=2&access_token=abc")!
/// Redaction.redacted(url)
/// // "https://bob:REDACTED@api.example.com/v1/items?page=2&access_token=REDACTED"
/// ```
///
/// Code that needs the full URL still has it: the `url` properties of errors and operations
/// are never redacted. Only the strings made for people are.
///
/// The sensitive query parameters are compared without regard to case:
/// ``sensitiveQueryNames``. The sensitive headers are `Authorization`,
/// `Proxy-Authorization`, `Cookie` and `Set-Cookie` (``sensitiveHeaderNames``).
public enum Redaction {
    /// What a secret is replaced with.
    public static let placeholder = "REDACTED"

    /// Query parameters whose values are secrets, lowercased.
    public static let sensitiveQueryNames: Set<String> = [
        "token", "access_token", "id_token", "refresh_token", "api_key", "apikey", "key",
        "password", "passwd", "secret", "client_secret", "signature", "sig",
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
        "x-goog-credential", "awsaccesskeyid", "code",
    ]

    /// Header fields whose values are secrets, lowercased.
    public static let sensitiveHeaderNames: Set<String> = [
        "authorization", "proxy-authorization", "cookie", "set-cookie",
    ]

    /// Whether the values of query parameter `name` are secrets (case-insensitive).
    public static func isSensitiveQueryName(_ name: String) -> Bool {
        sensitiveQueryNames.contains(name.lowercased())
    }

    /// Whether the values of header field `name` are secrets (case-insensitive).
    public static func isSensitiveHeaderName(_ name: String) -> Bool {
        sensitiveHeaderNames.contains(name.lowercased())
    }

    /// `url` as text for a person: the userinfo password and the values of sensitive query
    /// parameters replaced by ``placeholder``, everything else as it was.
    public static func redacted(_ url: URL) -> String {
        redacted(url.absoluteString)
    }

    /// A URL given as text, redacted as ``redacted(_:)-(URL)`` does. Text that is not a URL
    /// is returned with any `user:password@` before its first `/` path and any sensitive
    /// `name=value` pairs after a `?` redacted all the same.
    public static func redacted(_ urlString: String) -> String {
        var text = Substring(urlString)
        var result = ""
        // Scheme and authority: "scheme://user:password@host"
        if let schemeEnd = text.range(of: "://") {
            result += text[..<schemeEnd.upperBound]
            text = text[schemeEnd.upperBound...]
            let authorityEnd = text.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? text.endIndex
            let authority = text[..<authorityEnd]
            if let at = authority.lastIndex(of: "@") {
                let userinfo = authority[..<at]
                if let colon = userinfo.firstIndex(of: ":") {
                    result += userinfo[..<colon] + ":" + placeholder
                } else {
                    // A lone userinfo is often a token used as the user name.
                    result += placeholder
                }
                result += authority[at...]
            } else {
                result += authority
            }
            text = text[authorityEnd...]
        }
        // The path as it is; then the query's and the fragment's `name=value` pairs (an
        // OAuth implicit grant puts `access_token` in the fragment).
        let fragmentStart = text.firstIndex(of: "#") ?? text.endIndex
        let beforeFragment = text[..<fragmentStart]
        if let question = beforeFragment.firstIndex(of: "?") {
            result += beforeFragment[...question]
            result += redactingPairs(beforeFragment[beforeFragment.index(after: question)...])
        } else {
            result += beforeFragment
        }
        if fragmentStart < text.endIndex {
            result += "#" + redactingPairs(text[text.index(after: fragmentStart)...])
        }
        return result
    }

    private static func redactingPairs(_ text: Substring) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return String(pair) }
            let name = pair[..<equals]
            let decoded = name.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(name)
            return isSensitiveQueryName(decoded) ? name + "=" + placeholder : String(pair)
        }.joined(separator: "&")
    }

    /// A header value for display: ``placeholder`` for a sensitive field, the value otherwise.
    public static func redacted(headerValue value: String, forName name: String) -> String {
        isSensitiveHeaderName(name) ? placeholder : value
    }
}
