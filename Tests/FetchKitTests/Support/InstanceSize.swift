/// The size of a class's instances, read from its metadata: Swift's class metadata on Linux
/// (no Objective-C interop) keeps it as a 32-bit field 24 bytes in, after the kind, the
/// superclass, the flags and the address point.
enum InstanceSize {
    /// Whether ``of(_:)`` can read it on this platform.
    static var isKnown: Bool {
        #if os(Linux)
        return true
        #else
        return false
        #endif
    }

    static func of(_ type: AnyClass) -> Int? {
        guard isKnown else { return nil }
        return Int(unsafeBitCast(type, to: UnsafeRawPointer.self).load(fromByteOffset: 24, as: UInt32.self))
    }
}
