import Foundation

/// HTTP dates (RFC 9110 §5.6.7), read and written by hand: a `DateFormatter` (ICU underneath)
/// cost more per date than the rest of a small download's bookkeeping, and needs a lock.
package enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longWeekdays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `date` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), to the second (rounded down).
    package static func format(_ date: Date) -> String {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let time = seconds - days * 86_400
        let (year, month, day) = civilDate(daysSince1970: days)
        func padded(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(weekdays[weekday(daysSince1970: days)]), \(padded(day, 2)) \(months[month - 1]) \(padded(year, 4)) "
            + "\(padded(time / 3600, 2)):\(padded(time / 60 % 60, 2)):\(padded(time % 60, 2)) GMT"
    }

    /// The date `text` names in one of the three forms a recipient must accept: IMF-fixdate
    /// (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`, a two-digit
    /// year read as within 50 years of now, §5.6.7) and asctime (`Sun Nov  6 08:49:37 1994`);
    /// `nil` for anything else, a day the month does not have included. Surrounding spaces are
    /// ignored; the weekday is not checked against the date, as RFC 9110 allows.
    package static func parse(_ text: some StringProtocol, now: Date = Date()) -> Date? {
        var scanner = Scanner(Array(text.utf8))
        scanner.skipSpaces()
        guard let name = scanner.letters() else { return nil }
        let parts: (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int)
        let comma = scanner.take(",")
        if comma, weekdays.contains(name) {
            // IMF-fixdate: `, 06 Nov 1994 08:49:37 GMT`
            guard scanner.take(" "), let day = scanner.digits(2...2), scanner.take(" "), let month = scanner.month(),
                  scanner.take(" "), let year = scanner.digits(4...4), scanner.take(" "), let clock = scanner.clock(),
                  scanner.take(" "), scanner.take("GMT") else { return nil }
            parts = (year, month, day, clock.0, clock.1, clock.2)
        } else if comma, longWeekdays.contains(name) {
            // RFC 850: `, 06-Nov-94 08:49:37 GMT`
            guard scanner.take(" "), let day = scanner.digits(2...2), scanner.take("-"), let month = scanner.month(),
                  scanner.take("-"), let short = scanner.digits(2...2), scanner.take(" "), let clock = scanner.clock(),
                  scanner.take(" "), scanner.take("GMT") else { return nil }
            // This century's year, or the last century's if that is more than 50 years ahead.
            let current = civilDate(daysSince1970: Int((now.timeIntervalSince1970 / 86_400).rounded(.down))).0
            var year = current - current % 100 + short
            if year > current + 50 { year -= 100 }
            parts = (year, month, day, clock.0, clock.1, clock.2)
        } else if !comma, weekdays.contains(name) {
            // asctime: ` Nov  6 08:49:37 1994` (the day padded with a space)
            guard scanner.take(" "), let month = scanner.month(), scanner.take(" ") else { return nil }
            _ = scanner.take(" ")
            guard let day = scanner.digits(1...2), scanner.take(" "), let clock = scanner.clock(), scanner.take(" "),
                  let year = scanner.digits(4...4) else { return nil }
            parts = (year, month, day, clock.0, clock.1, clock.2)
        } else {
            return nil
        }
        scanner.skipSpaces()
        guard scanner.atEnd, (1...31).contains(parts.day), parts.hour <= 23, parts.minute <= 59, parts.second <= 60 else { return nil }
        let days = daysSince1970(year: parts.year, month: parts.month, day: parts.day)
        guard civilDate(daysSince1970: days) == (parts.year, parts.month, parts.day) else { return nil }
        // A leap second (`:60`) is the next second's start.
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + parts.hour * 3600 + parts.minute * 60 + parts.second))
    }

    /// The days from 1970-01-01 to a day of the proleptic Gregorian calendar (negative before).
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let year = month <= 2 ? year - 1 : year
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The year, month and day that `days` after 1970-01-01 is (the inverse of `daysSince1970`).
    static func civilDate(daysSince1970 days: Int) -> (Int, Int, Int) {
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

    /// 0 for Sunday: 1970-01-01 was a Thursday.
    private static func weekday(daysSince1970 days: Int) -> Int {
        ((days % 7) + 11) % 7
    }

    /// Reads ASCII bytes left to right.
    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }

        mutating func skipSpaces() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
        }

        /// Takes `literal` if it comes next.
        mutating func take(_ literal: StaticString) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            let matches = literal.withUTF8Buffer { expected in
                expected.indices.allSatisfy { bytes[index + $0] == expected[$0] }
            }
            if matches { index += count }
            return matches
        }

        /// A run of ASCII letters, if one comes next.
        mutating func letters() -> String? {
            let start = index
            while index < bytes.count, (0x41...0x5A).contains(bytes[index]) || (0x61...0x7A).contains(bytes[index]) { index += 1 }
            return index > start ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
        }

        /// A number of so many digits, if one comes next.
        mutating func digits(_ count: ClosedRange<Int>) -> Int? {
            let start = index
            var value = 0
            while index < bytes.count, index - start < count.upperBound, (0x30...0x39).contains(bytes[index]) {
                value = value * 10 + Int(bytes[index] - 0x30)
                index += 1
            }
            guard count.contains(index - start) else {
                index = start
                return nil
            }
            return value
        }

        /// A month's three-letter name (`Nov`), as 1...12.
        mutating func month() -> Int? {
            guard bytes.count - index >= 3 else { return nil }
            let name = String(decoding: bytes[index..<index + 3], as: UTF8.self)
            guard let found = HTTPDate.months.firstIndex(of: name) else { return nil }
            index += 3
            return found + 1
        }

        /// `hh:mm:ss`.
        mutating func clock() -> (Int, Int, Int)? {
            guard let hour = digits(2...2), take(":"), let minute = digits(2...2), take(":"), let second = digits(2...2) else { return nil }
            return (hour, minute, second)
        }
    }
}
