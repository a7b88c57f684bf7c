#if canImport(CommonCrypto)
import CommonCrypto

/// The system's SHA-256 on Apple platforms: CommonCrypto's, part of libSystem, linked directly
/// (on Linux it is libcrypto's, found at run time in the shims target, which is empty here). The
/// same interface as the Linux one, so that ``DigestHasher`` is written once.
struct SystemSHA256: Sendable {
    /// Room for the context (`CC_SHA256_CTX`, 104 bytes), as plain data that a checkpoint copies.
    static let contextSize = MemoryLayout<CC_SHA256_CTX>.size

    /// Always there on Apple platforms.
    static let loaded: SystemSHA256? = SystemSHA256()

    func initialize(_ context: UnsafeMutableRawPointer) -> Int32 {
        CC_SHA256_Init(context.assumingMemoryBound(to: CC_SHA256_CTX.self))
    }

    func update(_ context: UnsafeMutableRawPointer, _ bytes: UnsafeRawPointer, _ count: Int) {
        // CC_LONG is 32 bits: a larger piece goes in steps.
        var offset = 0
        while offset < count {
            let step = min(count - offset, Int(UInt32.max))
            _ = CC_SHA256_Update(context.assumingMemoryBound(to: CC_SHA256_CTX.self), bytes + offset, CC_LONG(step))
            offset += step
        }
    }

    func finish(_ out: UnsafeMutableRawPointer, _ context: UnsafeMutableRawPointer) -> Int32 {
        CC_SHA256_Final(out.assumingMemoryBound(to: UInt8.self), context.assumingMemoryBound(to: CC_SHA256_CTX.self))
    }
}
#endif
