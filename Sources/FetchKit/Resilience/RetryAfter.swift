import Foundation

/// Reads a `Retry-After` header: a number of seconds, or an HTTP date (RFC 9110 §10.2.3).
enum RetryAfter {
    /// The wait it asks for, in seconds from `now` (never negative), or `nil` if unreadable.
    static func seconds(from value: String, now: Date = Date()) -> TimeInterval? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(text) {
            return seconds >= 0 ? TimeInterval(seconds) : nil
        }
        guard let date = httpDate(text, now: now) else { return nil }
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
    static func httpDate(_ text: String, now: Date = Date()) -> Date? {
        HTTPDate.parse(text, now: now)
    }
}
