import Foundation

/// Decides, line by line, which header lines libcurl hands over may reach FoundationNetworking's
/// header parser (Linux): a pure value, fed by ``CurlHeaderCallback``.
///
/// FoundationNetworking (6.3.x, `TransferState.swift`) takes every line after a complete head
/// for the first line of a new head, and drops the response it had: a chunked body's trailer
/// fields (RFC 9112 §7.1.2), which libcurl hands to the header callback after the body, ended
/// the process (`Fatal error: Transfer completed, but there's no response`). An interim `1xx`
/// head followed by the final one made it announce two responses. So this lets through exactly
/// one head per transfer, the final one:
///
/// - the status line, checked as RFC 9112 §4 says (`HTTP/` case-sensitive, a version, a
///   three-digit code, an optional reason phrase without control characters); a valid one
///   without its reason phrase (`HTTP/1.1 200`) passes with the space FoundationNetworking's
///   parser needs, and one whose reason phrase holds control characters passes without it (a
///   client ignores the phrase, RFC 9112 §4); a malformed one refuses the transfer
///   (``Failure/malformedStatusLine(_:)``);
/// - the final head's field lines and the empty line that ends it, each as FoundationNetworking
///   can parse it (which it cannot always, and then refused with a reason, not libcurl's
///   "Failed writing header"): a bare `\n` ending becomes `\r\n`, `Name:value` becomes
///   `Name: value`, a fold line of whitespace only is dropped; a field without a name, or whose
///   bytes are not UTF-8, refuses the transfer (``Failure/malformedField(_:)``);
/// - a `Location` that is scheme-relative (`//host/path`) made absolute with the transfer's
///   scheme: FoundationNetworking resolves one by setting the decoded host on `URLComponents`,
///   and a host such as `[::1]` (decoded `::1`) or `a%20b` ended the process (`Fatal error:
///   Invalid URL`, `HTTPURLProtocol.swift`) before the redirect was even offered to the delegate;
/// - no `Set-Cookie` field with a non-ASCII character before an `=`: Foundation's cookie parser
///   (`HTTPCookie.swift`, `splitNameValue`) counts such a name in UTF-16 units and indexes
///   characters, past the end (`Fatal error: String index is out of bounds`). RFC 6265 makes a
///   cookie or attribute name a token, ASCII only, and has the field ignored;
/// - nothing once libcurl's `Content-Length` no longer fits FoundationNetworking's conversion
///   (2^63 and above, as the `Double` libcurl reports: `Int64(_:)` traps in
///   `EasyHandle.swift`): the transfer is refused (``Failure/contentLengthTooLarge(_:)``);
/// - never an interim head (`100 Continue`, `103 Early Hints`: "a user agent MAY ignore
///   unexpected 1xx responses", RFC 9110 §15.2); libcurl reads past them itself. A `101` that
///   was not asked for is final for libcurl, and so here;
/// - never a line after the final head: those are trailer fields, kept in ``trailers`` (up to
///   ``maximumTrailerBytes``, past which the transfer is refused) and never parsed as a head —
///   nor for cookies, which a trailer may not set (RFC 9110 §6.5.1).
///
/// **Transfers.** FoundationNetworking follows a redirect with a new transfer on the same libcurl
/// handle. libcurl counts each head line it hands over (`CURLINFO_HEADER_SIZE`, `http.c`)
/// after the callback returns, never a trailer, and starts from 0 with each transfer; so a line
/// that arrives when the count is not what this filter expects begins a new transfer.
struct ResponseHeadFilter: Sendable {
    /// Where the transfer is.
    enum Phase: Sendable, Equatable {
        /// The next line is a status line.
        case statusLine
        /// In the final head's fields.
        case fields
        /// In an interim (`1xx`) head's fields, which are dropped.
        case interim
        /// The final head ended: what follows is trailer fields.
        case trailers
    }

    /// What to do with one line.
    enum Verdict: Sendable, Equatable {
        /// Hand it to FoundationNetworking as it is.
        case pass
        /// Hand FoundationNetworking these bytes instead (and tell libcurl the line was taken).
        case passRewritten([UInt8])
        /// Take it without handing it over.
        case drop
        /// Refuse the transfer (libcurl ends it: "Failed writing header"); ``failure`` says why.
        case refuse
    }

    /// Why a transfer was refused.
    enum Failure: Sendable, Equatable {
        /// The status line is not one (what was wrong, with the line as received).
        case malformedStatusLine(String)
        /// The trailer fields passed ``maximumTrailerBytes``.
        case trailersTooLarge(Int)
        /// A field line cannot be parsed (what was wrong, with the field's name).
        case malformedField(String)
        /// The `Content-Length` (as received) is 2^63 or more.
        case contentLengthTooLarge(String)
    }

    /// The most trailer bytes kept for one response; more refuse the transfer.
    static let maximumTrailerBytes = 64 << 10

    private(set) var phase = Phase.statusLine
    /// The final response's trailer fields: names lowercased, repeated fields joined with ", ".
    private(set) var trailers: [String: String] = [:]
    /// Why the transfer was refused, once it was.
    private(set) var failure: Failure?
    private var trailerBytes = 0
    /// libcurl's count of head bytes expected when the next line of this transfer arrives.
    private var expectedHeaderSize = 0
    /// The last `Content-Length` value of the final head, as received.
    private var contentLengthField = ""

    /// The verdict on `line` (as libcurl hands it over, line ending included), given libcurl's
    /// count of head bytes of the transfer so far (`CURLINFO_HEADER_SIZE`, read on entry), its
    /// `Content-Length` as FoundationNetworking reads it (`CURLINFO_CONTENT_LENGTH_DOWNLOAD`,
    /// -1 when none), and a way to learn the transfer's scheme (`CURLINFO_SCHEME`).
    mutating func take(_ line: UnsafeRawBufferPointer, headerSize: Int, contentLength: Double,
                       scheme: () -> String? = { nil }) -> Verdict {
        if headerSize != expectedHeaderSize {
            // A new transfer on the same handle (a redirect followed): a new response.
            self = ResponseHeadFilter()
        }
        if failure != nil { return .refuse }
        let verdict = decide(line, headerSize: headerSize, scheme: scheme)
        switch verdict {
        case .pass, .passRewritten:
            // FoundationNetworking converts libcurl's length to Int64 with each line it gets.
            guard contentLength.isNaN || contentLength >= 9_223_372_036_854_775_808.0 else { return verdict }
            failure = .contentLengthTooLarge(contentLengthField.isEmpty ? String(format: "%.0f", contentLength) : contentLengthField)
            return .refuse
        case .drop, .refuse:
            return verdict
        }
    }

    private mutating func decide(_ line: UnsafeRawBufferPointer, headerSize: Int, scheme: () -> String?) -> Verdict {
        let content = Self.withoutLineEnding(line)
        switch phase {
        case .trailers:
            return takeTrailer(content)
        case .statusLine:
            expectedHeaderSize = headerSize + line.count
            switch StatusLine.check(content) {
            case .failure(let problem):
                failure = .malformedStatusLine(problem.description)
                return .refuse
            case .success(let status):
                let interim = (100..<200).contains(status.code) && status.code != 101
                phase = interim ? .interim : .fields
                if interim { return .drop }
                if status.lacksReasonPhrase || status.hasControlInReason {
                    // FoundationNetworking needs the space before an empty reason phrase; one
                    // with control bytes (terminal escapes) goes no further.
                    return .passRewritten(Array(content.prefix(while: { $0 != UInt8(ascii: " ") })) + Array(" \(status.code) \r\n".utf8))
                }
                return Self.endsInCRLF(line) ? .pass : .passRewritten(Array(content) + Array("\r\n".utf8))
            }
        case .fields:
            expectedHeaderSize = headerSize + line.count
            if content.isEmpty {
                phase = .trailers
                return Self.endsInCRLF(line) ? .pass : .passRewritten(Array("\r\n".utf8))
            }
            return takeField(line, content, scheme: scheme)
        case .interim:
            expectedHeaderSize = headerSize + line.count
            if content.isEmpty { phase = .statusLine }
            return .drop
        }
    }

    private mutating func takeField(_ line: UnsafeRawBufferPointer, _ content: UnsafeRawBufferPointer.SubSequence,
                                    scheme: () -> String?) -> Verdict {
        let first = content[content.startIndex]
        if first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
            // A fold (obs-fold, RFC 9112 §5.2): libcurl joins it to the field before; one of
            // whitespace only adds nothing, and FoundationNetworking cannot parse it.
            if content.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) { return .drop }
            guard Self.isUTF8(content) else {
                failure = .malformedField("a continuation line is not UTF-8")
                return .refuse
            }
            return Self.endsInCRLF(line) ? .pass : .passRewritten(Array(content) + Array("\r\n".utf8))
        }
        // libcurl refuses a field line without a colon.
        guard let colon = content.firstIndex(of: UInt8(ascii: ":")) else { return .pass }
        let nameBytes = content[content.startIndex..<colon]
        guard !nameBytes.isEmpty else {
            failure = .malformedField("a field has no name")
            return .refuse
        }
        guard Self.isUTF8(content) else {
            failure = .malformedField("the field \(StatusLine.quoted(Array(nameBytes.prefix(60)))) is not UTF-8")
            return .refuse
        }
        var value = content[(colon + 1)...]
        while let space = value.first, space == UInt8(ascii: " ") || space == UInt8(ascii: "\t") { value = value.dropFirst() }
        var rewritten = false
        if Self.is(nameBytes, "content-length") {
            contentLengthField = String(decoding: value.prefix(60), as: UTF8.self)
        } else if Self.is(nameBytes, "set-cookie"), Self.hasNonASCIIName(value) {
            // Ignored, as RFC 6265 §5.2 ignores a malformed one: never parsed.
            return .drop
        } else if Self.is(nameBytes, "location"), value.starts(with: [UInt8(ascii: "/"), UInt8(ascii: "/")]) {
            guard let scheme = scheme()?.lowercased(), scheme == "http" || scheme == "https" else { return .drop }
            return .passRewritten(Array(nameBytes) + Array(": \(scheme):".utf8) + Array(value) + Array("\r\n".utf8))
        }
        // FoundationNetworking (before 6.4) wants a space after the colon, and `\r\n`.
        if colon + 1 == content.endIndex || (content[colon + 1] != UInt8(ascii: " ") && content[colon + 1] != UInt8(ascii: "\t")) {
            rewritten = true
        }
        guard rewritten || !Self.endsInCRLF(line) else { return .pass }
        return .passRewritten(Array(nameBytes) + Array(": ".utf8) + Array(value) + Array("\r\n".utf8))
    }

    /// Whether a `Set-Cookie` value has a non-ASCII byte in a name: before the `=` of any of its
    /// `;`-separated parts (the cookie's, or an attribute's).
    static func hasNonASCIIName(_ value: UnsafeRawBufferPointer.SubSequence) -> Bool {
        var inName = true
        for byte in value {
            if byte == UInt8(ascii: ";") { inName = true } else if byte == UInt8(ascii: "=") { inName = false } else if inName, byte >= 0x80 { return true }
        }
        return false
    }

    /// Whether the field name `bytes` is `lowercaseName`, in any case.
    static func `is`(_ bytes: UnsafeRawBufferPointer.SubSequence, _ lowercaseName: StaticString) -> Bool {
        guard bytes.count == lowercaseName.utf8CodeUnitCount else { return false }
        return lowercaseName.withUTF8Buffer { name in
            zip(bytes, name).allSatisfy { byte, wanted in byte | (byte >= 0x41 && byte <= 0x5A ? 0x20 : 0) == wanted }
        }
    }

    /// Whether `bytes` are UTF-8: at once when they are ASCII (nearly every field line), by
    /// decoding otherwise.
    static func isUTF8(_ bytes: UnsafeRawBufferPointer.SubSequence) -> Bool {
        bytes.allSatisfy { $0 < 0x80 } || String(validating: bytes, as: UTF8.self) != nil
    }

    /// Whether `line` ends in `\r\n`.
    static func endsInCRLF(_ line: UnsafeRawBufferPointer) -> Bool {
        line.count >= 2 && line[line.count - 2] == UInt8(ascii: "\r") && line[line.count - 1] == UInt8(ascii: "\n")
    }

    private mutating func takeTrailer(_ content: UnsafeRawBufferPointer.SubSequence) -> Verdict {
        // libcurl hands over no empty line after trailers; another would be nothing to keep.
        guard !content.isEmpty else { return .drop }
        trailerBytes += content.count
        guard trailerBytes <= Self.maximumTrailerBytes else {
            failure = .trailersTooLarge(Self.maximumTrailerBytes)
            trailers = [:]
            return .refuse
        }
        guard let colon = content.firstIndex(of: UInt8(ascii: ":")), colon > content.startIndex else {
            // Not a field line (libcurl checks HTTP/1.1's; an HTTP/2 trailer is always one):
            // nothing to keep, nothing to hand over.
            return .drop
        }
        let name = String(decoding: content[content.startIndex..<colon], as: UTF8.self).lowercased()
        let value = String(decoding: content[(colon + 1)...], as: UTF8.self)
            .trimmingCharacters(in: [" ", "\t"])
        if let earlier = trailers[name] {
            trailers[name] = earlier + ", " + value
        } else {
            trailers[name] = value
        }
        return .drop
    }

    /// `line` without its `\n` or `\r\n`.
    static func withoutLineEnding(_ line: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer.SubSequence {
        var end = line.endIndex
        if end > line.startIndex, line[end - 1] == UInt8(ascii: "\n") { end -= 1 }
        if end > line.startIndex, line[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        return line[line.startIndex..<end]
    }
}

/// An HTTP status line, checked (RFC 9112 §4; libcurl's `HTTP/2 200 ` for HTTP/2 and 3).
struct StatusLine: Equatable {
    /// The status code.
    let code: Int
    /// Whether the line ends right after the code, with no space and no reason phrase.
    let lacksReasonPhrase: Bool
    /// Whether the reason phrase holds a control character (RFC 9112 §4 allows none; a client
    /// ignores the phrase's content, §4, so it is dropped rather than the response refused).
    var hasControlInReason = false

    /// The status line `content` (without its line ending), or what is wrong with it, in
    /// words that quote the line (control bytes escaped, at most 80 characters). A reason
    /// phrase with control characters is not a failure (``hasControlInReason``).
    static func check(_ content: UnsafeRawBufferPointer.SubSequence) -> Result<StatusLine, StatusLineProblem> {
        let bytes = Array(content)
        func problem(_ what: String) -> Result<StatusLine, StatusLineProblem> {
            .failure(StatusLineProblem(description: "the status line \(quoted(bytes)) \(what)"))
        }
        let prefix = Array("HTTP/".utf8)
        guard bytes.starts(with: prefix) else {
            if bytes.count >= 5, String(decoding: bytes[0..<5], as: UTF8.self).uppercased() == "HTTP/" {
                return problem("does not start with HTTP/ in capitals (the protocol name is case-sensitive, RFC 9112 §2.3)")
            }
            return problem("does not start with HTTP/")
        }
        var index = prefix.count
        func isDigit(_ at: Int) -> Bool { at < bytes.count && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[at]) }
        // HTTP-version: DIGIT "." DIGIT; libcurl writes HTTP/2 and HTTP/3 with one digit.
        guard isDigit(index) else { return problem("has no HTTP version after HTTP/") }
        index += 1
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            guard isDigit(index + 1) else { return problem("has an HTTP version that is not two digits around a dot") }
            index += 2
        }
        guard index < bytes.count, bytes[index] == UInt8(ascii: " ") else {
            return problem("has no single space after its HTTP version")
        }
        index += 1
        guard isDigit(index), isDigit(index + 1), isDigit(index + 2) else {
            return problem("has no three-digit status code")
        }
        let code = bytes[index..<index + 3].reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        guard code >= 100 else { return problem("has a status code below 100") }
        index += 3
        if index == bytes.count { return .success(StatusLine(code: code, lacksReasonPhrase: true)) }
        guard bytes[index] == UInt8(ascii: " ") else { return problem("has more than three digits, or no space, after its status code") }
        // reason-phrase = 1*( HTAB / SP / VCHAR / obs-text )
        let clean = bytes[(index + 1)...].allSatisfy { $0 == 0x09 || $0 >= 0x20 && $0 != 0x7F }
        return .success(StatusLine(code: code, lacksReasonPhrase: false, hasControlInReason: !clean))
    }

    /// `bytes` in quotes: printable ASCII as is, anything else as `\xNN`, cut at 80.
    static func quoted(_ bytes: [UInt8]) -> String {
        var text = ""
        for byte in bytes.prefix(80) {
            if (0x20..<0x7F).contains(byte), byte != UInt8(ascii: "\\"), byte != UInt8(ascii: "\"") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return "\"" + text + (bytes.count > 80 ? "…" : "") + "\""
    }
}

/// What is wrong with a status line, in words.
struct StatusLineProblem: Error, Equatable {
    let description: String
}

private extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
