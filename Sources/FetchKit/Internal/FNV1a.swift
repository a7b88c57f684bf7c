/// The 64-bit FNV-1a hash of a string's UTF-8: stable across runs and platforms (unlike
/// `Hasher`, which is seeded per process). For names and fingerprints, not for security.
enum FNV1a {
    static func hash(_ text: String) -> UInt64 {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            value ^= UInt64(byte)
            value &*= 0x0000_0100_0000_01B3
        }
        return value
    }

    /// `value` as exactly `digits` lowercase hex digits (its low bits).
    static func hex(_ value: UInt64, digits: Int) -> String {
        let text = String(value, radix: 16)
        return text.count >= digits ? String(text.suffix(digits)) : String(repeating: "0", count: digits - text.count) + text
    }
}
