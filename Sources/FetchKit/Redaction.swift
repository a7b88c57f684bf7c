import Foundation

/// Hides secrets in URLs and header values before FetchKit shows them to a person.
///
/// Every description FetchKit produces — ``FetchError`` descriptions, operation descriptions,
/// messages meant for display — shows URLs through ``redacted(_:)-(URL)``: a password in the
/// URL's userinfo and the values of sensitive query parameters become `REDACTED`, and the rest
/// of the URL stays, so the message is still useful:
///
/// ```swift
/// if let url = URL(string: "https://bob:hunter2@api.example.com/v1/items?page=2&access_token=abc") {
///     print(Redaction.redacted(url))
///     // https://bob:REDACTED@api.example.com/v1/items?page=2&access_token=REDACTED
/// }
/// ```
///
/// Code that needs the full URL still has it: the `url` properties of errors and operations
/// are never redacted. Only the strings made for people are.
///
/// What counts as a secret:
/// - the userinfo's password; a userinfo without a `:` (often a token used as the user name)
///   entirely;
/// - the value of every `name=value` pair whose name is sensitive (``isSensitiveQueryName(_:)``),
///   in the query, in the fragment (an OAuth implicit grant puts `access_token` there) and in
///   path parameters (`/shop;jsessionid=…`), pairs being separated by `&` or `;`;
/// - inside a query value that is itself a URL (`?next=https://…`, raw or percent-encoded),
///   that URL's secrets.
///
/// The sensitive headers are `Authorization`, `Proxy-Authorization`, `Cookie` and `Set-Cookie`
/// (``sensitiveHeaderNames``), and those named like `X-Api-Key` or `X-Auth-Token`
/// (``isSensitiveHeaderName(_:)``).
public enum Redaction {
    /// What a secret is replaced with.
    public static let placeholder = "REDACTED"

    /// Query parameters whose values are secrets, lowercased.
    ///
    /// ``isSensitiveQueryName(_:)`` compares names with these after percent-decoding them and
    /// keeping only their letters and digits, so `Access-Token`, `access%5Ftoken` and
    /// `ACCESS_TOKEN` all match `access_token`. It also treats as sensitive every name that
    /// ends in `token`, `secret`, `password`, `passwd`, `signature`, `credential`, `apikey`,
    /// `privatekey` or `sessionid` (`session_token`, `user[password]`).
    public static let sensitiveQueryNames: Set<String> = [
        "token", "access_token", "id_token", "refresh_token", "api_key", "apikey", "key",
        "password", "passwd", "secret", "client_secret", "signature", "sig",
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
        "x-goog-credential", "awsaccesskeyid", "code", "auth", "authorization",
        "jsessionid", "phpsessid", "sessionid",
    ]

    /// Header fields whose values are secrets, lowercased.
    public static let sensitiveHeaderNames: Set<String> = [
        "authorization", "proxy-authorization", "cookie", "set-cookie",
    ]

    /// Free-text search for a URL's secret values (``redacted(text:mentioning:)``) skips values
    /// shorter than this: replacing every "1" in a message would wreck it and hide nothing.
    static let shortestHuntedSecret = 4

    private static let normalizedNames = Set(sensitiveQueryNames.map(normalized))
    private static let sensitiveSuffixes = [
        "token", "secret", "password", "passwd", "signature", "credential", "apikey", "privatekey", "sessionid",
    ]

    /// Whether the values of query parameter `name` are secrets.
    ///
    /// The name is percent-decoded (`+` read as a space) and compared by its letters and digits
    /// only, without regard to case; see ``sensitiveQueryNames``.
    public static func isSensitiveQueryName(_ name: String) -> Bool {
        let name = normalized(fullyDecoded(name.replacingOccurrences(of: "+", with: " ")))
        guard !name.isEmpty else { return false }
        return normalizedNames.contains(name) || sensitiveSuffixes.contains { name.hasSuffix($0) }
    }

    /// Whether the values of header field `name` are secrets (case-insensitive): one of
    /// ``sensitiveHeaderNames``, or a name whose letters and digits end as a sensitive query
    /// name's may (`X-Api-Key`, `X-Auth-Token`, `X-Amz-Security-Token`).
    public static func isSensitiveHeaderName(_ name: String) -> Bool {
        if sensitiveHeaderNames.contains(name.trimmingCharacters(in: .whitespaces).lowercased()) { return true }
        let name = normalized(name)
        return sensitiveSuffixes.contains { name.hasSuffix($0) }
    }

    /// `url` as text for a person: the userinfo password and the values of sensitive query
    /// parameters replaced by ``placeholder``, everything else as it was.
    ///
    /// The URL is shown by its `absoluteString` (a relative URL's `description` would show its
    /// base after ` -- `).
    public static func redacted(_ url: URL) -> String {
        redacted(url.absoluteString)
    }

    /// A URL given as text, redacted as ``redacted(_:)-(URL)`` does.
    ///
    /// Text without a scheme is read as a relative reference: `//user:password@host/…`,
    /// `/path?token=…`, and `user:password@host/…` are all redacted. The result is a fixed
    /// point: redacting it again changes nothing.
    public static func redacted(_ urlString: String) -> String {
        var parts = Parts()
        parse(Substring(urlString), into: &parts, depth: 0)
        return parts.text
    }

    /// A header value for display: ``placeholder`` for a sensitive field; otherwise the value
    /// with any URL in it redacted (a `Location` or `Link` can carry a token).
    public static func redacted(headerValue value: String, forName name: String) -> String {
        isSensitiveHeaderName(name) ? placeholder : redacted(text: value)
    }

    /// Free text for display — a system error message, a server's error body, another error's
    /// description — with its secrets redacted.
    ///
    /// Every `scheme://…` URL in `text` is redacted as ``redacted(_:)-(String)`` does (a
    /// trailing `.`, `,`, `)`… is read as punctuation, not as part of the URL). The value of a
    /// sensitive header written out in the text — `Set-Cookie: …` to the end of its line,
    /// `"Authorization": "…"` to its closing quote, as a debugging page or an echo service
    /// shows them — is redacted too. Then every secret value of the URLs in `urls` (their
    /// passwords and sensitive query values, as written and percent-decoded, of at least four
    /// characters) is replaced wherever it appears, even without its URL around it.
    ///
    /// - Parameters:
    ///   - text: The text to show.
    ///   - urls: URLs whose secrets `text` may contain; `nil`s are skipped. Default: none.
    /// - Returns: `text` with its secrets replaced by ``placeholder``.
    public static func redacted(text: String, mentioning urls: [URL?] = []) -> String {
        let secrets = urls.compactMap { $0 }.flatMap { secretValues(in: $0.absoluteString) }
        return replacing(secrets, in: redactingEmbeddedURLs(in: redactingHeaderFields(in: text)))
    }

    /// The secret values in `urlString`, as written and percent-decoded, longest first, without
    /// values too short to hunt in free text.
    static func secretValues(in urlString: String) -> [String] {
        var parts = Parts()
        parse(Substring(urlString), into: &parts, depth: 0)
        var values: Set<String> = []
        for secret in parts.secrets {
            let spaced = secret.replacingOccurrences(of: "+", with: " ")
            for form in [String(secret), lenientlyDecoded(String(secret)), fullyDecoded(String(secret)),
                         lenientlyDecoded(spaced), fullyDecoded(spaced)]
            where form.count >= shortestHuntedSecret && form != placeholder {
                values.insert(form)
            }
        }
        return values.sorted { $0.utf8.count > $1.utf8.count }
    }

    // MARK: Parsing

    /// The redacted text being built, and the secrets taken out of it.
    private struct Parts {
        var text = ""
        var secrets: [Substring] = []

        mutating func secret(_ value: Substring) {
            if value != Substring(Redaction.placeholder) { secrets.append(value) }
            text += Redaction.placeholder
        }
    }

    private static func parse(_ input: Substring, into parts: inout Parts, depth: Int) {
        var rest = input
        // scheme ":" — letters first, then letters, digits, "+", "-", ".".
        if let colon = rest.firstIndex(of: ":"), isScheme(rest[..<colon]) {
            parts.text += rest[...colon]
            rest = rest[rest.index(after: colon)...]
        }
        // The authority: after "//", or (without it) a leading "user:password@host".
        let hasSlashes = rest.hasPrefix("//")
        if hasSlashes {
            parts.text += "//"
            rest = rest.dropFirst(2)
        }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            let userinfo = authority[..<at]
            if let colon = userinfo.firstIndex(of: ":") {
                parts.text += userinfo[...colon]
                parts.secret(userinfo[userinfo.index(after: colon)...])
            } else {
                parts.secret(userinfo)
            }
            parts.text += authority[at...]
        } else {
            parts.text += authority
        }
        rest = rest[authorityEnd...]

        // The path, its segments' parameters ("/shop;jsessionid=…/cart") redacted.
        let pathEnd = rest.firstIndex { $0 == "?" || $0 == "#" } ?? rest.endIndex
        let segments = rest[..<pathEnd].split(separator: "/", omittingEmptySubsequences: false)
        for (index, segment) in segments.enumerated() {
            if index > 0 { parts.text += "/" }
            if let semicolon = segment.firstIndex(of: ";") {
                parts.text += segment[...semicolon]
                pairs(segment[segment.index(after: semicolon)...], separators: [";"], into: &parts, depth: depth)
            } else {
                parts.text += segment
            }
        }
        rest = rest[pathEnd...]

        // The query, then the fragment (which an app may route as "#/callback?access_token=…").
        let fragmentStart = rest.firstIndex(of: "#") ?? rest.endIndex
        if rest.first == "?" {
            parts.text += "?"
            pairs(rest[rest.index(after: rest.startIndex)..<fragmentStart], separators: ["&", ";"], into: &parts, depth: depth)
        }
        if fragmentStart < rest.endIndex {
            parts.text += "#"
            pairs(rest[rest.index(after: fragmentStart)...], separators: ["&", ";", "?"], into: &parts, depth: depth)
        }
    }

    /// `name=value` pairs, each value of a sensitive name replaced, URLs in other values redacted.
    private static func pairs(_ text: Substring, separators: Set<Character>, into parts: inout Parts, depth: Int) {
        var start = text.startIndex
        while true {
            let end = text[start...].firstIndex { separators.contains($0) } ?? text.endIndex
            let pair = text[start..<end]
            if let equals = pair.firstIndex(of: "=") {
                parts.text += pair[...equals]
                let value = pair[pair.index(after: equals)...]
                if isSensitiveQueryName(String(pair[..<equals])) {
                    parts.secret(value)
                } else {
                    nestedURL(value, into: &parts, depth: depth)
                }
            } else {
                parts.text += pair
            }
            guard end < text.endIndex else { return }
            parts.text.append(text[end])
            start = text.index(after: end)
        }
    }

    /// A value that is itself a URL (`next=https://u:pw@host/…`), raw or percent-encoded, is
    /// redacted as one; any other value stays.
    private static func nestedURL(_ value: Substring, into parts: inout Parts, depth: Int) {
        guard depth < 4, value.contains("%") || value.contains("://") else {
            parts.text += value
            return
        }
        let decoded = fullyDecoded(value.replacingOccurrences(of: "+", with: " "))
        guard decoded.contains("://") else {
            parts.text += value
            return
        }
        var nested = Parts()
        parse(Substring(decoded), into: &nested, depth: depth + 1)
        if decoded == String(value) {
            parts.text += nested.text
            parts.secrets += nested.secrets
        } else if nested.text == decoded {
            // Nothing secret inside: keep the value as it was written.
            parts.text += value
        } else {
            // Written encoded: show the redacted URL encoded again, so that it stays one value.
            parts.text += nested.text.addingPercentEncoding(withAllowedCharacters: valueAllowed) ?? placeholder
            parts.secrets.append(value)
        }
    }

    private static let valueAllowed = CharacterSet(charactersIn:
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")

    private static func isScheme(_ text: Substring) -> Bool {
        guard let first = text.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic else { return false }
        return text.unicodeScalars.allSatisfy(isSchemeCharacter)
    }

    /// A name's letters and digits, lowercased.
    private static func normalized(_ name: String) -> String {
        String(String.UnicodeScalarView(name.lowercased().unicodeScalars.filter {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))
        }))
    }

    /// `text` percent-decoded until nothing changes (a few rounds at most): a server that
    /// decodes twice sees `%2574oken` as `token`. Invalid escapes are left as they are.
    static func fullyDecoded(_ text: String) -> String {
        var text = text
        for _ in 0..<4 {
            let decoded = lenientlyDecoded(text)
            if decoded == text { break }
            text = decoded
        }
        return text
    }

    /// Percent-decodes every valid `%XX`, leaving invalid escapes and invalid UTF-8 alone.
    private static func lenientlyDecoded(_ text: String) -> String {
        guard text.contains("%") else { return text }
        var bytes: [UInt8] = []
        let utf8 = Array(text.utf8)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "%"), index + 2 < utf8.count,
               let high = hexValue(utf8[index + 1]), let low = hexValue(utf8[index + 2]) {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self) ?? String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: Free text

    /// Every `scheme://…` run in `text` redacted as a URL.
    private static func redactingEmbeddedURLs(in text: String) -> String {
        guard text.contains("://") else { return text }
        let scalars = Array(text.unicodeScalars)
        var result = String.UnicodeScalarView()
        var index = 0
        while index < scalars.count {
            guard let start = urlStart(in: scalars, at: index) else {
                result.append(scalars[index])
                index += 1
                continue
            }
            var end = start
            while end < scalars.count, !endsURL(scalars[end]) { end += 1 }
            // Trailing punctuation belongs to the sentence, not to the URL.
            while end > start, ".,;:!?)]}'".unicodeScalars.contains(scalars[end - 1]) { end -= 1 }
            result.append(contentsOf: scalars[index..<start])
            let url = String(String.UnicodeScalarView(scalars[start..<end]))
            result.append(contentsOf: redacted(url).unicodeScalars)
            index = max(end, start + 1)
        }
        return String(result)
    }

    /// Where the URL whose "://" is at or after `index` starts, if its "://" is exactly the
    /// next thing after a scheme beginning at or after `index`.
    private static func urlStart(in scalars: [Unicode.Scalar], at index: Int) -> Int? {
        // A scheme starts at a letter not preceded by a scheme character.
        guard scalars[index].isASCII, scalars[index].properties.isAlphabetic else { return nil }
        if index > 0, isSchemeCharacter(scalars[index - 1]) { return nil }
        var end = index
        while end < scalars.count, isSchemeCharacter(scalars[end]) { end += 1 }
        guard end + 2 < scalars.count, scalars[end] == ":", scalars[end + 1] == "/", scalars[end + 2] == "/" else { return nil }
        return index
    }

    private static func isSchemeCharacter(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "+-.".unicodeScalars.contains(scalar))
    }

    private static func endsURL(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace || scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
            || "\"<>`\\^{|}".unicodeScalars.contains(scalar)
    }

    /// The values of sensitive header fields written in `text` ("Cookie: a=b" to the end of
    /// the line; `"Authorization": "Bearer x"` or `authorization='x'` to the closing quote).
    private static func redactingHeaderFields(in text: String) -> String {
        let lowercased = text.lowercased()
        guard lowercased.contains("cookie") || lowercased.contains("authorization") else { return text }
        let bytes = Array(text.utf8)
        let names = sensitiveHeaderNames.map { Array($0.utf8) }
        var result: [UInt8] = []
        var index = 0
        scan: while index < bytes.count {
            let startsWord = index == 0 || !isNameByte(bytes[index - 1])
            if startsWord {
                for name in names where hasPrefixIgnoringCase(bytes, name, at: index) {
                    var cursor = index + name.count
                    guard cursor == bytes.count || !isNameByte(bytes[cursor]) else { continue }
                    if cursor < bytes.count, bytes[cursor] == UInt8(ascii: "\"") || bytes[cursor] == UInt8(ascii: "'") { cursor += 1 }
                    while cursor < bytes.count, bytes[cursor] == UInt8(ascii: " ") || bytes[cursor] == UInt8(ascii: "\t") { cursor += 1 }
                    guard cursor < bytes.count, bytes[cursor] == UInt8(ascii: ":") || bytes[cursor] == UInt8(ascii: "=") else { continue }
                    cursor += 1
                    while cursor < bytes.count, bytes[cursor] == UInt8(ascii: " ") || bytes[cursor] == UInt8(ascii: "\t") { cursor += 1 }
                    var quote: UInt8?
                    if cursor < bytes.count, bytes[cursor] == UInt8(ascii: "\"") || bytes[cursor] == UInt8(ascii: "'") {
                        quote = bytes[cursor]
                        cursor += 1
                    }
                    var end = cursor
                    while end < bytes.count, bytes[end] != UInt8(ascii: "\n"), bytes[end] != UInt8(ascii: "\r"), bytes[end] != quote {
                        end += 1
                    }
                    guard end > cursor else { continue }
                    result += bytes[index..<cursor]
                    result += Array(placeholder.utf8)
                    index = end
                    continue scan
                }
            }
            result.append(bytes[index])
            index += 1
        }
        // Only ASCII runs were replaced, up to ASCII delimiters or the end: still valid UTF-8.
        return String(decoding: result, as: UTF8.self)
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }

    private static func hasPrefixIgnoringCase(_ bytes: [UInt8], _ lowercasedASCII: [UInt8], at index: Int) -> Bool {
        guard index + lowercasedASCII.count <= bytes.count else { return false }
        for offset in lowercasedASCII.indices {
            let byte = bytes[index + offset]
            let folded = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
            if folded != lowercasedASCII[offset] { return false }
        }
        return true
    }

    /// `secrets` (longest first) replaced by the placeholder wherever they appear in `text`,
    /// leaving placeholders already there alone.
    private static func replacing(_ secrets: [String], in text: String) -> String {
        guard !secrets.isEmpty else { return text }
        let needles = secrets.map { Array($0.utf8) }
        let marker = Array(placeholder.utf8)
        let bytes = Array(text.utf8)
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = 0
        search: while index < bytes.count {
            // A placeholder already there stays (redacting is idempotent), unless a longer
            // secret starts with it: `REDACTEDhunter2` must not pass as redacted.
            let atMarker = hasPrefix(bytes, marker, at: index)
            for needle in needles where (!atMarker || needle.count > marker.count) && hasPrefix(bytes, needle, at: index) {
                result += marker
                index += needle.count
                continue search
            }
            if atMarker {
                result += marker
                index += marker.count
                continue
            }
            result.append(bytes[index])
            index += 1
        }
        // Whole UTF-8 sequences were replaced by ASCII, so the bytes are still valid UTF-8.
        return String(decoding: result, as: UTF8.self)
    }

    private static func hasPrefix(_ bytes: [UInt8], _ needle: [UInt8], at index: Int) -> Bool {
        guard !needle.isEmpty, index + needle.count <= bytes.count else { return false }
        for offset in needle.indices where bytes[index + offset] != needle[offset] { return false }
        return true
    }
}
