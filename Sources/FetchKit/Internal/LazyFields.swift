/// A group of fields stored behind one pointer and boxed at their first write: until then
/// nothing is allocated and every field reads as its default (`Fields()`).
///
/// For state that many instances never use (an operation waiting in a queue of tens of
/// thousands needs no transfer record and no handler lists). Writing a field its default
/// value (`nil`, or an `Equatable`'s default such as `0`) does not make the box; ``ifMade(_:)``
/// changes the fields only if they exist (to clear lists, say). Not thread-safe: reach it
/// under a lock.
struct LazyFields<Fields: DefaultConstructible> {
    private final class Box {
        var fields: Fields

        init(_ fields: Fields) {
            self.fields = fields
        }
    }

    private var box: Box?

    init() {}

    /// Whether the fields have been written (tests).
    var isMade: Bool {
        box != nil
    }

    subscript<T>(field: WritableKeyPath<Fields, T>) -> T {
        get { box.map { $0.fields[keyPath: field] } ?? Fields()[keyPath: field] }
        set {
            if box == nil, Self.isDefault(newValue, of: field) { return }
            made().fields[keyPath: field] = newValue
        }
    }

    /// Changes the fields if they were made; does nothing otherwise.
    func ifMade(_ change: (inout Fields) -> Void) {
        if let box { change(&box.fields) }
    }

    /// Changes the fields, made now if they were not.
    mutating func withMade<Result>(_ change: (inout Fields) -> Result) -> Result {
        change(&made().fields)
    }

    private mutating func made() -> Box {
        if let box { return box }
        let made = Box(Fields())
        box = made
        return made
    }

    /// Whether `value` is `field`'s default: both `nil`, or equal (an `Equatable` value). The
    /// check runs only while the box does not exist.
    private static func isDefault<T>(_ value: T, of field: WritableKeyPath<Fields, T>) -> Bool {
        let standard = Fields()[keyPath: field]
        if let value = value as? any OptionalValue, let standard = standard as? any OptionalValue {
            return value.isNone && standard.isNone
        }
        guard let value = value as? any Equatable else { return false }
        return value.isEqual(to: standard)
    }
}

/// An `Optional` of any type, to ask whether it is `nil`.
private protocol OptionalValue {
    var isNone: Bool { get }
}

extension Optional: OptionalValue {
    fileprivate var isNone: Bool {
        self == nil
    }
}

extension Equatable {
    /// Whether `other` is a value of this type equal to this one.
    fileprivate func isEqual(to other: Any) -> Bool {
        (other as? Self) == self
    }
}

/// Fields that ``LazyFields`` can make from nothing.
protocol DefaultConstructible {
    init()
}
