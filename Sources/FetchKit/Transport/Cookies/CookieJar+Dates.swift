import Foundation

extension CookieJar {
    /// RFC 6265 §5.1.1: the date a cookie's `Expires` value names, or `nil` if it names none.
    ///
    /// `HTTPCookie` reads three fixed formats only: it read `Wed, 21-Oct-37 07:28:00 GMT` as
    /// the year 37 (the cookie was thrown away as expired) and `21 Oct 2037 07:28:00 GMT` as
    /// no date (the cookie outlived it). This is the RFC's algorithm: the value's tokens, split
    /// at delimiters, give the first time (`hh:mm:ss`), day of month (one or two digits),
    /// month (a name's first three letters) and year (two to four digits); a year of 70–99 is
    /// 19xx, one of 0–69 20xx.
    static func cookieDate(_ value: Substring) -> Date? {
        func isDelimiter(_ byte: UInt8) -> Bool {
            byte == 0x09 || (0x20...0x2F).contains(byte) || (0x3B...0x40).contains(byte)
                || (0x5B...0x60).contains(byte) || (0x7B...0x7E).contains(byte)
        }
        /// The number that `token` starts with, if it has `count` digits, and what follows them.
        func number(_ token: ArraySlice<UInt8>, _ count: ClosedRange<Int>) -> (Int, ArraySlice<UInt8>)? {
            let digits = token.prefix { (0x30...0x39).contains($0) }
            guard count.contains(digits.count) else { return nil }
            return (digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }, token.dropFirst(digits.count))
        }
        func time(_ token: ArraySlice<UInt8>) -> (Int, Int, Int)? {
            guard let (hour, rest) = number(token, 1...2), rest.first == UInt8(ascii: ":"),
                  let (minute, rest) = number(rest.dropFirst(), 1...2), rest.first == UInt8(ascii: ":"),
                  let (second, _) = number(rest.dropFirst(), 1...2)
            else { return nil }
            return (hour, minute, second)
        }
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        var clock: (hour: Int, minute: Int, second: Int)?
        var day: Int?
        var month: Int?
        var year: Int?
        for token in Array(value.utf8).split(whereSeparator: isDelimiter) {
            if clock == nil, let found = time(token) {
                clock = found
            } else if day == nil, let (found, _) = number(token, 1...2) {
                day = found
            } else if month == nil, token.count >= 3,
                      let found = months.firstIndex(of: String(decoding: token.prefix(3), as: UTF8.self).lowercased()) {
                month = found + 1
            } else if year == nil, let (found, _) = number(token, 2...4) {
                year = found
            }
        }
        guard var year, let month, let day, let clock else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, clock.hour <= 23, clock.minute <= 59, clock.second <= 59 else { return nil }
        let days = HTTPDate.daysSince1970(year: year, month: month, day: day)
        // A day the month does not have (`31 Feb`) is no date.
        guard HTTPDate.civilDate(daysSince1970: days) == (year, month, day) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + clock.hour * 3600 + clock.minute * 60 + clock.second))
    }

    /// `date` as an `Expires` value that `HTTPCookie` reads (`Thu, 01 Jan 1970 00:00:00 GMT`),
    /// to the second. Written by hand (``HTTPDate``): a `DateFormatter` made for each line cost
    /// as much as `HTTPCookie`'s whole parse.
    static func expiresValue(_ date: Date) -> String {
        HTTPDate.format(date)
    }
}
