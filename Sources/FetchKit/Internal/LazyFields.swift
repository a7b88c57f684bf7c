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

    /// Changes the fields if they were made, and returns what `change` did; does nothing and
    /// returns `nil` otherwise.
    @discardableResult
    func ifMade<Result>(_ change: (inout Fields) -> Result) -> Result? {
        box.map { change(&$0.fields) }
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
    ///
    /// The field's type is asked, not the value: a metatype cast allocates nothing (and is
    /// resolved at compile time for a concrete field), where casting the value to an
    /// existential boxed it — two heap allocations for a large optional, on every write of a
    /// default (`core.observed?.received(…)` writes `nil` back when there is no record).
    private static func isDefault<T>(_ value: T, of field: WritableKeyPath<Fields, T>) -> Bool {
        if let optional = T.self as? any OptionalValue.Type {
            // A value that is set is no optional's default: the default is not even made.
            guard withUnsafePointer(to: value, { optional.isNone(at: $0) }) else { return false }
            let standard = Fields()[keyPath: field]
            return withUnsafePointer(to: standard) { optional.isNone(at: $0) }
        }
        guard let equatable = T.self as? any Equatable.Type else { return false }
        let standard = Fields()[keyPath: field]
        return withUnsafePointer(to: value) { value in
            withUnsafePointer(to: standard) { standard in equatable.equal(value, standard) }
        }
    }
}

/// An `Optional` of any type, to ask whether one is `nil`.
private protocol OptionalValue {
    /// Whether the optional of this type at `pointer` is `nil`.
    static func isNone(at pointer: UnsafeRawPointer) -> Bool
}

extension Optional: OptionalValue {
    fileprivate static func isNone(at pointer: UnsafeRawPointer) -> Bool {
        pointer.assumingMemoryBound(to: Self.self).pointee == nil
    }
}

extension Equatable {
    /// Whether the values of this type at `lhs` and `rhs` are equal.
    fileprivate static func equal(_ lhs: UnsafeRawPointer, _ rhs: UnsafeRawPointer) -> Bool {
        lhs.assumingMemoryBound(to: Self.self).pointee == rhs.assumingMemoryBound(to: Self.self).pointee
    }
}

/// Fields that ``LazyFields`` can make from nothing.
protocol DefaultConstructible {
    init()
}
