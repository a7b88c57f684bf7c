import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FetchKitTesting
import Testing
@testable import FetchKit

/// Attacks on the session's cookie storing (`CookieJar.store` and the line rewrites before
/// `HTTPCookie` parses a `Set-Cookie` line): a rewrite must not change another cookie's
/// meaning, let the URL or a server smuggle a cookie or attribute, or keep a cookie that a
/// response deleted.
@Suite("Cookies stored: no rewrite changes a cookie's meaning or smuggles one", .timeLimit(.minutes(3)))
struct CookieStoringAttackTests {
    @Test func aCommaInTheDefaultPathDoesNotSmuggleACookie() async throws {
        // The default path comes from the URL, which a link can make up: `,sid=evil` in it,
        // appended as `; Path=/a,sid=evil`, was read by `HTTPCookie` as a second cookie.
        let server = try TestServer()
        defer { server.shutDown() }
        CookieTests.route("/a,sid=evil/page", on: server, setting: ["visitor=1"])
        server.route("/a,sid=evil/other") { _ in .text("ok") }
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/a,sid=evil/page", on: server, with: session)
        #expect(storage.cookies?.map(\.name) == ["visitor"], "no cookie named by the URL")
        try await CookieTests.fetch("/a,sid=evil/other", on: server, with: session)
        #expect(CookieSendingTests.sent("/a,sid=evil/other", on: server) == ["visitor=1"], "it still reaches its directory")
    }

    @Test func aCookieWithoutAPathSetUnderASemicolonReachesItsDirectory() throws {
        // `/shop;v=1/cart`: the default path `/shop;v=1` cannot be written after a `;`; written
        // escaped (`/shop%3Bv=1`) the cookie matched no request at all.
        let url = try #require(URL(string: "http://www.example.com/shop;v=1/cart"))
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "basket=1")
        let next = try #require(URL(string: "http://www.example.com/shop;v=1/pay"))
        #expect(CookieJar.matching(kept, for: next, now: Date()).map(\.name) == ["basket"])
    }

    @Test func aDeletionInAJoinedFieldDeletesItsOwnCookieOnly() async throws {
        // A server that folds its cookies into one field, with a space before a name's `=`:
        // the jar did not split there but `HTTPCookie` did, so `a`'s `Max-Age=0` became the
        // `Expires` of `b` — `a` stayed (emptied, forever) and `b` was never stored.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        CookieTests.route("/login", on: server, setting: ["a=1; Path=/"])
        CookieTests.route("/logout", on: server, setting: ["a=; Max-Age=0; Path=/, b =2; Path=/"])
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/login", on: server, with: session)
        try await CookieTests.fetch("/logout", on: server, with: session)
        #expect(storage.cookies?.map(\.name) == ["b"])
        #expect(CookieJar.lines(of: "a=; Max-Age=0, b =2; Path=/") == ["a=; Max-Age=0", "b =2; Path=/"])
    }

    @Test func aTopLevelDomainWithATrailingDotIsRefused() throws {
        // `Domain=com.` from `evil.com.` was stored as `.com.`, and sent to `bank.com.`.
        let url = try #require(URL(string: "http://evil.com./"))
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "tld=1; Domain=com.; Path=/, own=1; Path=/")
        #expect(kept.map(\.name) == ["own"])
        let bank = try #require(URL(string: "http://bank.com./"))
        #expect(CookieJar.matching(kept, for: bank, now: Date()).isEmpty)
    }

    @Test func aCookieFromAnIPv6HostWrittenInCapitalsIsKept() throws {
        // `HTTPCookie` lowercases the domain; `URL.host` keeps `FE80::1` as written, and the
        // IP-address rule compared the two as they were, dropping every such cookie.
        let url = try #require(URL(string: "http://[FE80::1]/"))
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "sid=1; Path=/")
        #expect(kept.map(\.name) == ["sid"])
        #expect(CookieJar.matching(kept, for: url, now: Date()).map(\.name) == ["sid"])
    }
}

extension CookieStoringAttackTests {
    @Test(arguments: ["http://localhost/", "http://intranet/", "http://intranet./"])
    func aSingleLabelHostNamingItselfAsDomainSetsAHostOnlyCookie(_ address: String) throws {
        // RFC 6265 §5.3 step 5: a `Domain` that is a public suffix (every single label is one)
        // and the host itself makes the cookie host-only; kept as `.localhost`, it went to
        // `evil.localhost` too.
        let url = try #require(URL(string: address))
        let host = try #require(url.host)
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "sid=1; Domain=\(host); Path=/")
        #expect(kept.map(\.name) == ["sid"])
        #expect(CookieJar.matching(kept, for: url, now: Date()).map(\.name) == ["sid"])
        let sub = try #require(URL(string: "http://evil.\(host)/"))
        #expect(CookieJar.matching(kept, for: sub, now: Date()).isEmpty)
    }

    @Test func anExpiresWithATwoDigitYearIsReadAsRFC6265Says() throws {
        // RFC 6265 §5.1.1: a year of 70-99 is 19xx, one of 0-69 is 20xx.
        let url = try #require(URL(string: "http://www.example.com/"))
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "sid=1; Expires=Wed, 21-Oct-37 07:28:00 GMT; Path=/")
        let expires = try #require(kept.first?.expiresDate)
        #expect(Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "GMT")!, from: expires).year == 2037)
    }

    @Test func anExpiresWithoutAWeekdayIsRead() throws {
        let url = try #require(URL(string: "http://www.example.com/"))
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "sid=1; Expires=21 Oct 2037 07:28:00 GMT; Path=/")
        #expect(kept.first?.expiresDate != nil)
    }
}

extension CookieStoringAttackTests {
    @Test func cookieDatesAreReadAsRFC6265Says() throws {
        let expected = Date(timeIntervalSince1970: 784_111_777) // Sun, 06 Nov 1994 08:49:37 GMT
        for value in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
                      "6 november 1994 8:49:37", "Sun, 06 Nov 1994 08:49:37 +0100"] {
            #expect(CookieJar.cookieDate(Substring(value)) == expected, "\(value)")
        }
        for value in ["", "soon", "Thu, 31 Feb 2030 00:00:00 GMT", "Thu, 01 Jan 1600 00:00:00 GMT",
                      "Thu, 01 Jan 1970 24:00:00 GMT", "Thu, 01 Jan 1970", "Thu, 001 Jan 1970 00:00:00 GMT"] {
            #expect(CookieJar.cookieDate(Substring(value)) == nil, "\(value)")
        }
        #expect(CookieJar.expiringByMaxAge("a=1; Expires=soon; Path=/", now: Date()) == "a=1; Path=/", "a value that is no date is ignored")
        #expect(CookieJar.expiringByMaxAge("a=1; Expires=Sun, 06-Nov-94 08:49:37 GMT; Expires=soon", now: Date())
            == "a=1; Expires=Sun, 06 Nov 1994 08:49:37 GMT", "the last that is a date counts")
    }

    @Test func aCookieDeletedByAPastExpiresIsNotSentAgain() async throws {
        // Express's `clearCookie`, PHP's `setcookie(name, "", 1)`: a date in the past, no Max-Age.
        let server = try TestServer.standard()
        defer { server.shutDown() }
        CookieTests.route("/login", on: server, setting: ["sid=abc; Path=/", "php=1; Path=/", "keep=1; Path=/"])
        CookieTests.route("/logout", on: server, setting: [
            "sid=; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT",
            "php=deleted; expires=Thu, 01-Jan-1970 00:00:01 GMT; path=/",
        ])
        let (session, storage) = CookieTests.session()
        try await CookieTests.fetch("/login", on: server, with: session)
        try await CookieTests.fetch("/logout", on: server, with: session)
        try await CookieTests.fetch("/headers", on: server, with: session)
        #expect(CookieSendingTests.sent("/headers", on: server) == ["keep=1"])
        #expect(storage.cookies?.map(\.name) == ["keep"])
    }
}

extension CookieStoringAttackTests {
    @Test func anExpiresValueIsWhatADateFormatterWritesAndReadsBack() throws {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        // 1601 to 9999, in steps of 997 days and 12,345 seconds; and around leap days.
        var seconds = -11_644_473_600
        var dates: [Date] = []
        while seconds < 253_402_300_799 {
            dates.append(Date(timeIntervalSince1970: TimeInterval(seconds)))
            seconds += 997 * 86_400 + 12_345
        }
        dates += [951_782_400, 951_868_799, 4_107_542_400, -2_203_891_200, 0, -1].map { Date(timeIntervalSince1970: $0) }
        for date in dates {
            let value = CookieJar.expiresValue(date)
            #expect(value == formatter.string(from: date))
            #expect(CookieJar.cookieDate(Substring(value)) == Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)))
        }
    }
}

extension CookieStoringAttackTests {
    @Test func anEmptyDomainIsIgnored() throws {
        // RFC 6265 §5.2.3: an empty `Domain` is ignored entirely. `HTTPCookie` made it `.`,
        // which no host matches, and the cookie was thrown away.
        let url = try #require(URL(string: "http://www.example.com/"))
        let kept = try CookieSendingAttackTests.stored(from: url, setting: "own=1; Domain=; Path=/")
        #expect(kept.map(\.domain) == ["www.example.com"], "host-only")
        let earlier = try CookieSendingAttackTests.stored(from: url, setting: "site=1; Domain=example.com; Domain=; Path=/")
        #expect(earlier.map(\.domain) == [".example.com"], "the Domain before it counts")
    }
}
