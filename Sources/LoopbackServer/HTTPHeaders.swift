/// An ordered list of HTTP header fields, as received or as to be sent.
///
/// Order and duplicates are preserved. Look-ups by name are ASCII case-insensitive, as
/// HTTP field names are.
///
/// ```swift
/// var headers: HTTPHeaders = ["Content-Type": "text/plain"]
/// headers.add(name: "Set-Cookie", value: "a=1")
/// headers["content-type"]  // "text/plain"
/// ```
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible, Equatable {
    /// One header field: its name as written, and its value with surrounding whitespace removed.
    public typealias Element = (name: String, value: String)

    private var fields: [Field]

    private struct Field: Sendable, Equatable {
        var name: String
        var value: String
    }

    /// Creates headers from `(name, value)` pairs, kept in the given order.
    public init(_ pairs: [(String, String)]) {
        fields = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    /// Creates an empty header list.
    public init() {
        fields = []
    }

    /// Creates headers from a dictionary literal, kept in the literal's order.
    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// The first value of the field called `name` (compared case-insensitively), or `nil`.
    ///
    /// Setting a value replaces every field of that name with one field at the position of the
    /// first; setting `nil` removes them all.
    public subscript(name: String) -> String? {
        get {
            for field in fields where Self.equalsIgnoringCase(field.name, name) { return field.value }
            return nil
        }
        set {
            if let newValue {
                replaceOrAdd(name: name, value: newValue)
            } else {
                remove(name: name)
            }
        }
    }

    /// Every value of the field called `name` (case-insensitive), in order.
    public func values(for name: String) -> [String] {
        fields.lazy.filter { Self.equalsIgnoringCase($0.name, name) }.map(\.value)
    }

    /// Whether a field called `name` (case-insensitive) is present.
    public func contains(_ name: String) -> Bool {
        fields.contains { Self.equalsIgnoringCase($0.name, name) }
    }

    /// Appends a field, keeping any existing fields of the same name.
    public mutating func add(name: String, value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every field called `name` with a single one holding `value` (at the position
    /// of the first such field, or at the end).
    public mutating func replaceOrAdd(name: String, value: String) {
        if let first = fields.firstIndex(where: { Self.equalsIgnoringCase($0.name, name) }) {
            fields[first].value = value
            var index = fields.index(after: first)
            while index < fields.endIndex {
                if Self.equalsIgnoringCase(fields[index].name, name) {
                    fields.remove(at: index)
                } else {
                    index += 1
                }
            }
        } else {
            fields.append(Field(name: name, value: value))
        }
    }

    /// Removes every field called `name` (case-insensitive).
    public mutating func remove(name: String) {
        fields.removeAll { Self.equalsIgnoringCase($0.name, name) }
    }

    /// The number of fields, counting duplicates.
    public var count: Int { fields.count }

    /// Whether there are no fields.
    public var isEmpty: Bool { fields.isEmpty }

    /// Iterates over the fields in order.
    public func makeIterator() -> AnyIterator<Element> {
        var iterator = fields.makeIterator()
        return AnyIterator {
            guard let field = iterator.next() else { return nil }
            return (name: field.name, value: field.value)
        }
    }

    /// The fields as `Name: value` lines.
    public var description: String {
        fields.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    /// Whether a comma-separated field such as `Connection` lists `token` (case-insensitive).
    func listContains(_ name: String, token: String) -> Bool {
        for value in values(for: name) {
            for item in value.split(separator: ",") {
                if Self.equalsIgnoringCase(item.trimmingOWS(), token) { return true }
            }
        }
        return false
    }

    /// ASCII case-insensitive string equality, without allocating.
    static func equalsIgnoringCase(_ a: String, _ b: String) -> Bool {
        var ai = a.utf8.makeIterator()
        var bi = b.utf8.makeIterator()
        while true {
            switch (ai.next(), bi.next()) {
            case (nil, nil):
                return true
            case let (x?, y?):
                if x == y { continue }
                if lower(x) != lower(y) { return false }
            default:
                return false
            }
        }
    }

    @inline(__always)
    private static func lower(_ c: UInt8) -> UInt8 {
        (c >= 65 && c <= 90) ? c + 32 : c
    }
}

extension StringProtocol {
    /// The string without leading and trailing spaces and horizontal tabs (HTTP's "OWS").
    func trimmingOWS() -> String {
        var start = startIndex
        var end = endIndex
        while start < end, self[start] == " " || self[start] == "\t" { start = index(after: start) }
        while end > start {
            let before = index(before: end)
            guard self[before] == " " || self[before] == "\t" else { break }
            end = before
        }
        return String(self[start..<end])
    }
}
