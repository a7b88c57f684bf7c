import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Stores the cookies that responses set, and adds stored cookies to the requests a
/// ``FetchSession`` sends, in place of FoundationNetworking's own paths on Linux.
///
/// **Sending.** FoundationNetworking matches a stored cookie to a request by host alone: a
/// `Secure` cookie went out over plain HTTP, and a `Path=/admin` cookie with every request to
/// the host. It adds none to the request a redirect makes when the session has a delegate (a
/// session of FetchKit's always has), so a login that sets its cookie on a `302` arrived
/// signed out. And it ignores `URLRequest.httpShouldHandleCookies`. A session therefore turns
/// its `URLSession`'s sending off (`httpShouldSetCookies = false` in its copy) and the jar adds
/// the cookies every request carries under RFC 6265 §5.4 (``matching(_:for:now:)``) as the
/// request is sent — a task's first request and each redirected one — unless the request says
/// `httpShouldHandleCookies = false`. As in URLSession, stored cookies that apply replace a
/// `Cookie` header the request has; a request to which none applies keeps its own.
///
/// **Storing.**
/// When a session's configuration accepts cookies, FoundationNetworking parses every header
/// line of every response for them: it makes the line a `String`, splits it, trims both halves
/// with Foundation character sets and hands the result to `HTTPCookie` — whether or not the line
/// is a `Set-Cookie`. That is about 230,000 instructions for a response of a few headers, a
/// quarter of the CPU of a whole 1 KiB request (`valgrind --tool=callgrind`, raw URLSession and
/// FetchKit alike). A session turns that path off in its `URLSession`'s copy of the
/// configuration (`httpCookieAcceptPolicy = .never`) and stores them here instead, only from a
/// response that has `Set-Cookie`: into the configuration's cookie storage, for the response's
/// URL, through the same `HTTPCookieStorage.setCookies(_:for:mainDocumentURL:)` call, from every
/// response head — a redirect's before it is followed, so that the next request carries them,
/// and a redirect status that is not followed when its task ends.
///
/// Where it differs from FoundationNetworking's path:
/// - Foundation joins the response's `Set-Cookie` lines into one value; the jar splits it again
///   before each `name=` that follows a comma, so that a cookie whose name is not a token
///   (`prefs[lang]=en`) is not read as part of the one before it.
/// - A cookie from a server at an IP address is kept only for that address (RFC 6265 §5.1.3:
///   an IP address domain-matches only itself), where `HTTPCookieStorage` would match a
///   `Domain=0.0.1` against every address ending so.
/// - A cookie whose `Domain` is a top-level domain (`com`, `uk`, `com.`) is refused (RFC 6265
///   §5.3 step 5), unless it names the single-label host that sets it (`localhost`), where
///   the cookie is host-only; longer public suffixes (`co.uk`) are not known. An empty
///   `Domain` is ignored (RFC 6265 §5.2.3), where `HTTPCookie` threw the cookie away.
/// - A cookie set without a valid `Path` gets the directory of the URL that set it (RFC 6265
///   §5.1.4: `/admin` for `/admin/login`), where `HTTPCookie` gives it `/`.
/// - A cookie's `Max-Age` counts (RFC 6265 §5.2.2): `HTTPCookie` on Linux ignores it, and then
///   `Expires` too, so a logout's `Max-Age=0` left the cookie stored, without an expiry.
/// - An `Expires` date is read as RFC 6265 §5.1.1 says (a two-digit year, no weekday), where
///   `HTTPCookie` reads three fixed formats.
/// - The default path, which comes from the URL, is cut back above a `;` or `,` in it, which
///   would end the attribute or start another cookie.
/// - A response to a request that says `httpShouldHandleCookies = false` sets none.
/// - A session whose configuration has a URL cache keeps FoundationNetworking's storing: a
///   response answered from the cache reaches the delegate like any other, and must not set
///   its cookies again. (The jar still sends them.)
///
/// On Apple platforms URLSession's own handling is kept: the jar is off there.
struct CookieJar: Sendable {
    #if canImport(FoundationNetworking)
    /// Where cookies go, or `nil`: the configuration accepts none, or FoundationNetworking
    /// keeps storing them (a URL cache).
    private let storage: HTTPCookieStorage?
    /// Where the cookies that requests carry come from, or `nil`: the configuration sends none.
    private let sendingFrom: HTTPCookieStorage?
    #endif

    /// The jar for a session made from `configuration`. On Linux it turns FoundationNetworking's
    /// cookie handling off in `configuration` (the session's own copy) and takes it over:
    /// sending, if the configuration sends cookies; storing, if it accepts them and has no URL
    /// cache.
    init(takingOverFrom configuration: URLSessionConfiguration) {
        #if canImport(FoundationNetworking)
        sendingFrom = configuration.httpShouldSetCookies ? configuration.httpCookieStorage : nil
        configuration.httpShouldSetCookies = false
        guard configuration.httpCookieAcceptPolicy != .never, configuration.urlCache == nil else {
            storage = nil
            return
        }
        storage = configuration.httpCookieStorage
        configuration.httpCookieAcceptPolicy = .never
        #endif
    }

    /// Whether it adds the stored cookies to each request (the configuration sends cookies).
    var sendsCookies: Bool { sendingFrom != nil }

    /// Whether it stores the cookies responses set (the configuration accepts cookies, and has
    /// no URL cache).
    var storesCookies: Bool { storage != nil }

    /// `request` with the stored cookies it carries in its `Cookie` header, if any apply (on
    /// Linux; URLSession adds them elsewhere).
    func sending(_ request: URLRequest) -> URLRequest {
        #if canImport(FoundationNetworking)
        // `cookies(for:)` matches by host only: the rest of the match is `matching`'s.
        guard let sendingFrom, request.httpShouldHandleCookies, let url = request.url,
              let stored = sendingFrom.cookies(for: url), !stored.isEmpty
        else { return request }
        let cookies = Self.matching(stored, for: url, now: Date())
        guard let header = HTTPCookie.requestHeaderFields(with: cookies)["Cookie"], !header.isEmpty else { return request }
        var request = request
        request.setValue(header, forHTTPHeaderField: "Cookie")
        return request
        #else
        return request
        #endif
    }

    /// Stores the cookies that `response`, the answer to `task`'s request, sets, if any and if
    /// the request handles cookies (on Linux; URLSession does elsewhere).
    func store(from response: HTTPURLResponse, of task: URLSessionTask) {
        #if canImport(FoundationNetworking)
        // The header first: most responses set no cookie, and then nothing else is read.
        guard let storage, let field = response.value(forHTTPHeaderField: "Set-Cookie"),
              let url = response.url, let host = url.host,
              (task.currentRequest ?? task.originalRequest)?.httpShouldHandleCookies != false
        else { return }
        // `HTTPCookie` lowercases a cookie's domain; `URL.host` keeps an address as written
        // (`FE80::1`).
        let origin = host.lowercased()
        let isAddress = Self.isIPAddress(origin)
        let bareHost = Self.withoutTrailingDots(Substring(origin))
        var cookies: [HTTPCookie] = []
        let defaultPath = Self.writable(Self.defaultPath(of: url))
        for var line in Self.lines(of: field) {
            // Foundation's parser indexes past the end of a name with a non-ASCII character
            // (`HTTPCookie.swift`, `splitNameValue`: a crash); RFC 6265 makes names tokens, and
            // such a field is ignored. (A session's head filter drops these first, where it has one.)
            if Array(line.utf8).withUnsafeBytes({ ResponseHeadFilter.hasNonASCIIName($0[...]) }) { continue }
            // `HTTPCookie` gives a cookie without a valid `Path` the path `/`, not the
            // directory of the URL that set it (RFC 6265 §5.2.4): name that one (the last
            // `Path` counts).
            if defaultPath != "/", !Self.namesAPath(line) {
                line += "; Path=" + defaultPath
            }
            line = Self.hostOnly(line, naming: isAddress ? nil : bareHost)
            line = Self.expiringByMaxAge(line, now: Date())
            cookies += HTTPCookie.cookies(withResponseHeaderFields: ["Set-Cookie": line], for: url)
        }
        if isAddress {
            cookies.removeAll { $0.domain.lowercased() != origin }
        } else {
            // A top-level domain is a public suffix (RFC 6265 §5.3 step 5): `Domain=com` would
            // reach every `.com` host, and `Domain=com.` every `.com.` one. (Longer public
            // suffixes, `co.uk`, need the public suffix list, which FetchKit does not carry.)
            cookies.removeAll { cookie in
                let domain = cookie.domain.lowercased()
                guard domain.hasPrefix(".") else { return false }
                let bare = Self.withoutTrailingDots(domain.dropFirst())
                return !bare.contains(".") && bare != bareHost
            }
        }
        guard !cookies.isEmpty else { return }
        storage.setCookies(cookies, for: url, mainDocumentURL: nil)
        #endif
    }

    /// `name` without the dots it ends with (`com.` → `com`).
    private static func withoutTrailingDots(_ name: Substring) -> Substring {
        var name = name
        while name.hasSuffix(".") { name = name.dropLast() }
        return name
    }

    /// `line` without the `Domain` attributes that do not count:
    /// - an empty one (RFC 6265 §5.2.3 ignores it; `HTTPCookie` made it `.`, and the cookie
    ///   was refused);
    /// - all of them if the last names `host`, a single label, itself (`Domain=localhost` from
    ///   `localhost`): a single label is a public suffix, and RFC 6265 §5.3 step 5 makes a
    ///   cookie whose `Domain` is the public suffix that set it host-only, where `HTTPCookie`
    ///   would send it to every `*.localhost` too. `host` is `nil` for an IP address.
    static func hostOnly(_ line: String, naming host: Substring?) -> String {
        let parts = line.split(separator: ";", omittingEmptySubsequences: false)
        let name = attributeName
        func value(_ attribute: Substring) -> String { attributeValue(attribute).lowercased() }
        let domains = parts.dropFirst().filter { name($0) == "domain" }
        guard !domains.isEmpty else { return line }
        let counted = domains.filter { !value($0).isEmpty }
        if let host, !host.contains("."), let last = counted.last {
            var domain = Substring(value(last))
            if domain.hasPrefix(".") { domain = domain.dropFirst() }
            if withoutTrailingDots(domain) == host {
                return ([parts[0]] + parts.dropFirst().filter { name($0) != "domain" }).joined(separator: ";")
            }
        }
        guard counted.count < domains.count else { return line }
        return ([parts[0]] + parts.dropFirst().filter { name($0) != "domain" || !value($0).isEmpty }).joined(separator: ";")
    }

    /// Stores the cookies of a task's last response if FoundationNetworking withheld its head
    /// from the delegate: a redirect status it did not follow (no `Location`). After a followed
    /// redirect the task's response is the last one, stored as it arrived.
    func storeFromWithheldHead(of task: URLSessionTask) {
        #if canImport(FoundationNetworking)
        guard storage != nil, let response = task.response as? HTTPURLResponse else { return }
        switch response.statusCode {
        case 301...303, 305...308: store(from: response, of: task)
        default: return
        }
        #endif
    }

    /// The `Set-Cookie` lines that Foundation joined with commas: split before each `name=`
    /// (or `name =`) that follows a comma (a name holds no `;`, `,`, `=` or white space, so the
    /// comma in an `Expires` date, followed by a day number, a space and a month, is not a
    /// split). Every place `HTTPCookie` splits a line is one of these.
    static func lines(of field: String) -> [String] {
        let bytes = Array(field.utf8)
        func isNameByte(_ byte: UInt8) -> Bool {
            !(byte == UInt8(ascii: ";") || byte == UInt8(ascii: ",") || byte == UInt8(ascii: "=")
                || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t"))
        }
        var lines: [String] = []
        var start = 0
        var index = 0
        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: ",") else {
                index += 1
                continue
            }
            var name = index + 1
            while name < bytes.count, bytes[name] == UInt8(ascii: " ") || bytes[name] == UInt8(ascii: "\t") { name += 1 }
            var end = name
            while end < bytes.count, isNameByte(bytes[end]) { end += 1 }
            // White space may stand before the `=`, as `HTTPCookie` reads it: a split it
            // makes in a line of the jar's would give one cookie's attributes to the next.
            var equals = end
            while equals < bytes.count, bytes[equals] == UInt8(ascii: " ") || bytes[equals] == UInt8(ascii: "\t") { equals += 1 }
            if end > name, equals < bytes.count, bytes[equals] == UInt8(ascii: "=") {
                lines.append(String(decoding: bytes[start..<index], as: UTF8.self))
                start = name
            }
            index += 1
        }
        lines.append(String(decoding: bytes[start...], as: UTF8.self))
        return lines
    }

    /// RFC 6265 §5.1.4: the default path of a cookie set by a response for `url` — the URL's
    /// path up to, not including, its last `/`, or `/` when that leaves nothing.
    static func defaultPath(of url: URL) -> String {
        let path = URLComponents(url: url, resolvingAgainstBaseURL: true)?.percentEncodedPath ?? url.path
        guard path.hasPrefix("/"), let last = path.lastIndex(of: "/"), last != path.startIndex else { return "/" }
        return String(path[..<last])
    }

    /// `path` as a `Path` attribute can carry it. The path comes from the URL, which may hold
    /// a `;` (it would end the attribute) or a `,` (`HTTPCookie` reads `,sid=evil` as another
    /// cookie): a path with either is cut back to the directory above the first one
    /// (`/a,b=c/d` → `/`), where the cookie still goes; escaped, it would match no request.
    static func writable(_ path: String) -> String {
        guard let cut = path.firstIndex(where: { $0 == ";" || $0 == "," }) else { return path }
        let head = path[..<cut]
        guard let slash = head.lastIndex(of: "/"), slash != head.startIndex else { return "/" }
        return String(head[..<slash])
    }

    /// The name of a `Set-Cookie` attribute (what precedes its `=`), trimmed and lower-cased.
    private static func attributeName(_ attribute: Substring) -> String {
        String(attribute.prefix { $0 != "=" }).trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// The value of a `Set-Cookie` attribute (what follows its first `=`), trimmed; empty
    /// without one.
    private static func attributeValue(_ attribute: Substring) -> String {
        attribute.drop { $0 != "=" }.dropFirst().trimmingCharacters(in: .whitespaces)
    }

    /// Whether the `Set-Cookie` line's last `Path` attribute is a path (starts with `/`): RFC 6265
    /// §5.2.4 and §5.3 step 7; `HTTPCookie` gives any other cookie the path `/`.
    static func namesAPath(_ line: String) -> Bool {
        var path: Substring?
        for attribute in line.split(separator: ";").dropFirst() {
            let parts = attribute.split(separator: "=", maxSplits: 1)
            guard parts.first?.trimmingCharacters(in: .whitespaces).lowercased() == "path" else { continue }
            path = parts.count == 2 ? Substring(parts[1].trimmingCharacters(in: .whitespaces)) : ""
        }
        return path?.hasPrefix("/") ?? false
    }

    /// `line` with its `Max-Age` (RFC 6265 §5.2.2, which wins over `Expires`) written as an
    /// `Expires` date, which `HTTPCookie` reads: it reads `Max-Age` only for a version-1 cookie,
    /// and ignores `Expires` when `Max-Age` is there, so a `Max-Age=0` that deletes a cookie
    /// left it with no expiry at all. A `Max-Age` of zero or less expires the cookie at once;
    /// a longer one than 400 days is cut to 400 days (RFC 6265bis). Without a valid `Max-Age`,
    /// the last `Expires` that names a date (``cookieDate(_:)``) is written in the form
    /// `HTTPCookie` reads, and the others are dropped (RFC 6265 §5.2.1 ignores them). `line`
    /// unchanged without either attribute.
    static func expiringByMaxAge(_ line: String, now: Date) -> String {
        let parts = line.split(separator: ";", omittingEmptySubsequences: false)
        let name = attributeName
        var maximumAge: Int?
        for attribute in parts.dropFirst() where name(attribute) == "max-age" {
            let value = attributeValue(attribute)
            let negative = value.hasPrefix("-")
            let digits = negative ? value.dropFirst() : Substring(value)
            guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { continue }
            maximumAge = negative ? 0 : Int(digits) ?? Int.max
        }
        let expires: Date?
        if let maximumAge {
            let seconds = min(max(maximumAge, 0), 400 * 24 * 3600)
            expires = seconds == 0 ? Date(timeIntervalSince1970: 0) : now.addingTimeInterval(TimeInterval(seconds))
        } else {
            let dates = parts.dropFirst().filter { name($0) == "expires" }
            guard !dates.isEmpty else { return line }
            expires = dates.compactMap { cookieDate($0.drop { $0 != "=" }.dropFirst()) }.last
        }
        let kept = [parts[0]] + parts.dropFirst().filter { !["max-age", "expires"].contains(name($0)) }
        return kept.joined(separator: ";") + (expires.map { "; Expires=" + expiresValue($0) } ?? "")
    }

    /// The cookies of `cookies` that a request for `url` carries (RFC 6265 §5.4), longest path
    /// first: the host domain-matches the cookie's domain (only itself for a host-only cookie,
    /// whose domain has no leading dot, and for an IP address), the URL's path is within the
    /// cookie's, a `Secure` cookie goes only over HTTPS, and an expired one not at all.
    static func matching(_ cookies: [HTTPCookie], for url: URL, now: Date) -> [HTTPCookie] {
        guard let host = url.host?.lowercased() else { return [] }
        let secure = url.scheme?.lowercased() == "https"
        // The path as the request line sends it: `URL.path` drops a trailing `/` (so a
        // `Path=/docs/` cookie missed `/docs/`) and decodes percent escapes.
        let sentPath = URLComponents(url: url, resolvingAgainstBaseURL: true)?.percentEncodedPath ?? url.path
        let path = sentPath.isEmpty ? "/" : sentPath
        let matched = cookies.filter { cookie in
            guard !cookie.isSecure || secure, cookie.expiresDate.map({ $0 > now }) ?? true else { return false }
            return domainMatches(host, cookie.domain.lowercased()) && pathMatches(path, cookie.path)
        }
        // Stable: cookies of equal path keep the storage's order.
        return matched.enumerated().sorted { a, b in
            a.element.path.utf8.count != b.element.path.utf8.count
                ? a.element.path.utf8.count > b.element.path.utf8.count : a.offset < b.offset
        }.map(\.element)
    }

    /// RFC 6265 §5.1.3, with a host-only cookie's domain written without a leading dot (as
    /// `HTTPCookie` writes it).
    private static func domainMatches(_ host: String, _ domain: String) -> Bool {
        guard domain.hasPrefix(".") else { return host == domain }
        let bare = domain.dropFirst()
        if host == bare { return true }
        return host.hasSuffix(domain) && !isIPAddress(host)
    }

    /// RFC 6265 §5.1.4: the cookie's path is the request's, or a prefix of it that ends at a `/`.
    private static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        let cookiePath = cookiePath.isEmpty ? "/" : cookiePath
        guard requestPath.hasPrefix(cookiePath) else { return false }
        return requestPath.utf8.count == cookiePath.utf8.count || cookiePath.hasSuffix("/")
            || requestPath.utf8.dropFirst(cookiePath.utf8.count).first == UInt8(ascii: "/")
    }

    /// Whether `host` is an IPv4 or IPv6 address rather than a name.
    static func isIPAddress(_ host: String) -> Bool {
        var address = in6_addr()
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return inet_pton(AF_INET, bare, &address) == 1 || inet_pton(AF_INET6, bare, &address) == 1
    }
}
