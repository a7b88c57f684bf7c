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
        let days = daysSince1970(year: year, month: month, day: day)
        // A day the month does not have (`31 Feb`) is no date.
        guard civilDate(daysSince1970: days) == (year, month, day) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + clock.hour * 3600 + clock.minute * 60 + clock.second))
    }

    /// `date` as an `Expires` value that `HTTPCookie` reads (`Thu, 01 Jan 1970 00:00:00 GMT`),
    /// to the second. Written by hand: a `DateFormatter` made for each line cost as much as
    /// `HTTPCookie`'s whole parse.
    static func expiresValue(_ date: Date) -> String {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let time = seconds - days * 86_400
        let (year, month, day) = civilDate(daysSince1970: days)
        let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func padded(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(weekdays[((days % 7) + 11) % 7]), \(padded(day, 2)) \(months[month - 1]) \(padded(year, 4)) "
            + "\(padded(time / 3600, 2)):\(padded(time / 60 % 60, 2)):\(padded(time % 60, 2)) GMT"
    }

    /// The days from 1970-01-01 to a day of the proleptic Gregorian calendar (negative before).
    private static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let year = month <= 2 ? year - 1 : year
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The year, month and day that `days` after 1970-01-01 is (the inverse of `daysSince1970`).
    private static func civilDate(daysSince1970 days: Int) -> (Int, Int, Int) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
