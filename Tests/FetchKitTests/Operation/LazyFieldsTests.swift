import Foundation
import Testing
@testable import FetchKit

@Suite("Lazy fields (pure)", .timeLimit(.minutes(3)))
struct LazyFieldsTests {
    final class Reference: Sendable {}

    struct Fields: DefaultConstructible {
        var count: Int64 = 0
        var flag = false
        var length: Int64?
        var preset: Int? = 7
        var name: String?
        var reference: Reference?
        var list: [Int] = []
        var identity = Reference()     // neither optional nor equatable
    }

    @Test func writingADefaultMakesNoBox() {
        var fields = LazyFields<Fields>()
        fields[\.count] = 0
        fields[\.flag] = false
        fields[\.length] = nil
        fields[\.name] = nil
        fields[\.reference] = nil
        fields[\.list] = []
        #expect(!fields.isMade)
        #expect(fields[\.preset] == 7, "an unmade box reads every default")
    }

    @Test(arguments: [
        "count", "flag", "length", "preset-nil", "preset-other", "name", "reference", "list", "identity",
    ])
    func writingAnythingElseMakesTheBox(field: String) {
        var fields = LazyFields<Fields>()
        let reference = Reference()
        switch field {
        case "count": fields[\.count] = 1
        case "flag": fields[\.flag] = true
        case "length": fields[\.length] = 0
        case "preset-nil": fields[\.preset] = nil
        case "preset-other": fields[\.preset] = 8
        case "name": fields[\.name] = ""
        case "reference": fields[\.reference] = reference
        case "list": fields[\.list] = [1]
        default: fields[\.identity] = reference
        }
        #expect(fields.isMade)
        switch field {
        case "count": #expect(fields[\.count] == 1)
        case "flag": #expect(fields[\.flag])
        case "length": #expect(fields[\.length] == 0)
        case "preset-nil": #expect(fields[\.preset] == nil)
        case "preset-other": #expect(fields[\.preset] == 8)
        case "name": #expect(fields[\.name] == "")
        case "reference": #expect(fields[\.reference] === reference)
        case "list": #expect(fields[\.list] == [1])
        default: #expect(fields[\.identity] === reference)
        }
    }

    @Test func anOptionalWhoseDefaultIsSetIsNotItsDefaultWhenNil() {
        // `preset` defaults to 7: writing nil is a change, and 7 (an optional, compared as one
        // only when both are nil) makes the box too — as it always did.
        var fields = LazyFields<Fields>()
        fields[\.preset] = 7
        #expect(fields.isMade)
    }
}
