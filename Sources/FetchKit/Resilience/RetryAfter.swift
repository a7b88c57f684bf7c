import Foundation

/// Reads a `Retry-After` header: a number of seconds, or an HTTP date (RFC 9110 §10.2.3).
enum RetryAfter {
    /// The wait it asks for, in seconds from `now` (never negative), or `nil` if unreadable.
    static func seconds(from value: String, now: Date = Date()) -> TimeInterval? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(text) {
            return seconds >= 0 ? TimeInterval(seconds) : nil
        }
        guard let date = httpDate(text) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }

    /// The wait a failure's response asks for, if it has a readable `Retry-After`.
    static func seconds(in failure: FetchError.StatusFailure, now: Date = Date()) -> TimeInterval? {
        guard let value = failure.headers.first(where: { $0.key.caseInsensitiveCompare("Retry-After") == .orderedSame })?.value else {
            return nil
        }
        return seconds(from: value, now: now)
    }

    /// IMF-fixdate, and the obsolete RFC 850 and asctime forms that recipients must accept.
    static func httpDate(_ text: String) -> Date? {
        for formatter in formatters {
            if let date = formatter.withLock({ $0.date(from: text) }) { return date }
        }
        return nil
    }

    private static let formatters: [Protected<DateFormatter>] = [
        "EEE, dd MMM yyyy HH:mm:ss zzz",   // Sun, 06 Nov 1994 08:49:37 GMT
        "EEEE, dd-MMM-yy HH:mm:ss zzz",    // Sunday, 06-Nov-94 08:49:37 GMT
        "EEE MMM d HH:mm:ss yyyy",         // Sun Nov  6 08:49:37 1994
    ].map { format in
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = format
        return Protected(formatter)
    }
}
