import Foundation
import Testing
@testable import FetchKit

/// ``HTTPDate``: the three forms RFC 9110 §5.6.7 makes recipients accept, and nothing else.
@Suite("HTTP dates, read and written by hand", .timeLimit(.minutes(3)))
struct HTTPDateTests {
    private let november6 = Date(timeIntervalSince1970: 784_111_777)   // Sun, 06 Nov 1994 08:49:37 GMT

    @Test func theThreeFormsNameTheSameMoment() {
        let now = Date(timeIntervalSince1970: 1_796_000_000)   // 2026
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT", now: now) == november6)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT", now: now) == november6)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994", now: now) == november6)
        #expect(HTTPDate.parse("  Sun, 06 Nov 1994 08:49:37 GMT \t", now: now) == november6, "surrounding spaces")
    }

    @Test func aTwoDigitYearMoreThanFiftyYearsAheadIsTheLastCentury() {
        let now = Date(timeIntervalSince1970: 1_796_000_000)   // 2026
        let in2030 = HTTPDate.parse("Monday, 06-Nov-30 08:49:37 GMT", now: now)
        let in1977 = HTTPDate.parse("Monday, 06-Nov-77 08:49:37 GMT", now: now)
        #expect(in2030.map { HTTPDate.format($0).hasSuffix("2030 08:49:37 GMT") } == true)
        #expect(in1977.map { HTTPDate.format($0).hasSuffix("1977 08:49:37 GMT") } == true)
    }

    @Test func formattingIsIMFFixdateAndReadsBack() {
        #expect(HTTPDate.format(november6) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 0)) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: -1)) == "Wed, 31 Dec 1969 23:59:59 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 951_782_400)) == "Tue, 29 Feb 2000 00:00:00 GMT")
        for seconds in stride(from: -2_000_000_000, through: 4_000_000_000, by: 86_413 * 997) {
            let date = Date(timeIntervalSince1970: TimeInterval(seconds))
            #expect(HTTPDate.parse(HTTPDate.format(date)) == date, "\(HTTPDate.format(date))")
        }
    }

    @Test func anythingElseIsNoDate() {
        for text in ["", "GMT", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
                     "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:61:00 GMT",
                     "Sun, 06 Xyz 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT junk",
                     "Funday, 06 Nov 1994 08:49:37 GMT", "1994-11-06T08:49:37Z", "784111777", "Sun Nov  6 08:49:37 94",
                     "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT\u{0}"] {
            #expect(HTTPDate.parse(text) == nil, "\(text.debugDescription)")
        }
    }
}
