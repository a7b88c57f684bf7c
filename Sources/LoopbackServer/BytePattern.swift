import Foundation

/// The deterministic byte pattern that pattern bodies (`/bytes/{n}`, `/trickle/...`,
/// ``ScriptAction/writePattern(offset:count:)``) are made of.
///
/// The byte at absolute offset `i` of a body is `UInt8(truncatingIfNeeded: i % 251)`. Because
/// 251 is prime and not a power of two, a body that was truncated, duplicated, shifted or
/// reassembled from ranges in the wrong order does not match, so clients can verify any slice
/// of a body knowing only its offset.
public enum BytePattern {
    /// The pattern's period.
    public static let period = 251

    /// The byte at absolute `offset` (which must not be negative).
    @inline(__always)
    public static func byte(at offset: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: offset % period)
    }

    /// `count` pattern bytes starting at absolute `offset`.
    public static func data(offset: Int, count: Int) -> Data {
        precondition(offset >= 0 && count >= 0, "offset and count must not be negative")
        var data = Data(capacity: count)
        forEachSlice(offset: offset, count: count) { data.append(contentsOf: $0) }
        return data
    }

    /// Whether `data` equals the pattern bytes starting at absolute `offset`.
    public static func matches(_ data: Data, offset: Int) -> Bool {
        firstMismatch(in: data, offset: offset) == nil
    }

    /// The index (relative to the start of `data`) of the first byte of `data` that differs
    /// from the pattern starting at absolute `offset`, or `nil` if all match.
    public static func firstMismatch(in data: Data, offset: Int) -> Int? {
        precondition(offset >= 0, "offset must not be negative")
        return data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Int? in
            var index = 0
            var start = offset % period
            // Compare against the shared buffer slice by slice (memcmp speed), then find the
            // exact index only inside a slice that differs.
            return buffer.withUnsafeBytes { (pattern: UnsafeRawBufferPointer) -> Int? in
                while index < bytes.count {
                    let length = min(bytes.count - index, pattern.count - start)
                    if memcmp(bytes.baseAddress! + index, pattern.baseAddress! + start, length) != 0 {
                        for i in 0..<length where bytes[index + i] != pattern[start + i] { return index + i }
                    }
                    index += length
                    start = 0
                }
                return nil
            }
        }
    }

    /// One period repeated 4096 times (1,028,096 bytes): every run of pattern bytes up to
    /// about 1 MiB is a contiguous slice of it, and because its length is a multiple of the
    /// period, a body can be streamed from it slice after slice without allocating.
    static let buffer: [UInt8] = {
        var bytes = [UInt8](repeating: 0, count: period * 4096)
        for i in 0..<bytes.count { bytes[i] = UInt8(truncatingIfNeeded: i % period) }
        return bytes
    }()

    /// Calls `body` with consecutive slices of the shared buffer that together make the
    /// `count` pattern bytes at absolute `offset`. Stops early if `body` returns `false`.
    /// Returns whether every slice was handed over.
    @discardableResult
    static func forEachSlice(offset: Int, count: Int, _ body: (UnsafeRawBufferPointer) -> Bool) -> Bool {
        buffer.withUnsafeBytes { all in
            var start = offset % period
            var remaining = count
            while remaining > 0 {
                let length = min(remaining, all.count - start)
                if !body(UnsafeRawBufferPointer(rebasing: all[start..<(start + length)])) { return false }
                remaining -= length
                start = 0 // the buffer's length is a multiple of the period
            }
            return true
        }
    }

    /// Variant of ``forEachSlice(offset:count:_:)`` for bodies that cannot fail.
    static func forEachSlice(offset: Int, count: Int, _ body: (UnsafeRawBufferPointer) -> Void) {
        forEachSlice(offset: offset, count: count) { (slice: UnsafeRawBufferPointer) -> Bool in
            body(slice)
            return true
        }
    }
}
