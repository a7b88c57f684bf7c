#if canImport(CommonCrypto)
import CommonCrypto

/// The system's digests on Apple platforms: CommonCrypto's, part of libSystem, linked directly
/// (on Linux they are libcrypto's, found at run time in the shims target, which is empty here).
/// The same interface as the Linux one, so that ``DigestHasher`` is written once.
struct SystemDigest: Sendable {
    enum Function: Sendable, CaseIterable {
        case sha256, sha512, sha1, md5
    }

    let function: Function

    /// Room for any of the contexts, as plain data that a checkpoint copies.
    static let contextSize = max(MemoryLayout<CC_SHA256_CTX>.size, MemoryLayout<CC_SHA512_CTX>.size,
                                 MemoryLayout<CC_SHA1_CTX>.size, MemoryLayout<CC_MD5_CTX>.size)

    /// Always there on Apple platforms.
    static func loaded(_ function: Function) -> SystemDigest? {
        SystemDigest(function: function)
    }

    func initialize(_ context: UnsafeMutableRawPointer) -> Int32 {
        switch function {
        case .sha256: return CC_SHA256_Init(context.assumingMemoryBound(to: CC_SHA256_CTX.self))
        case .sha512: return CC_SHA512_Init(context.assumingMemoryBound(to: CC_SHA512_CTX.self))
        case .sha1: return CC_SHA1_Init(context.assumingMemoryBound(to: CC_SHA1_CTX.self))
        case .md5: return CC_MD5_Init(context.assumingMemoryBound(to: CC_MD5_CTX.self))
        }
    }

    func update(_ context: UnsafeMutableRawPointer, _ bytes: UnsafeRawPointer, _ count: Int) {
        // CC_LONG is 32 bits: a larger piece goes in steps.
        var offset = 0
        while offset < count {
            let step = CC_LONG(min(count - offset, Int(UInt32.max)))
            switch function {
            case .sha256: _ = CC_SHA256_Update(context.assumingMemoryBound(to: CC_SHA256_CTX.self), bytes + offset, step)
            case .sha512: _ = CC_SHA512_Update(context.assumingMemoryBound(to: CC_SHA512_CTX.self), bytes + offset, step)
            case .sha1: _ = CC_SHA1_Update(context.assumingMemoryBound(to: CC_SHA1_CTX.self), bytes + offset, step)
            case .md5: _ = CC_MD5_Update(context.assumingMemoryBound(to: CC_MD5_CTX.self), bytes + offset, step)
            }
            offset += Int(step)
        }
    }

    func finish(_ out: UnsafeMutableRawPointer, _ context: UnsafeMutableRawPointer) -> Int32 {
        let out = out.assumingMemoryBound(to: UInt8.self)
        switch function {
        case .sha256: return CC_SHA256_Final(out, context.assumingMemoryBound(to: CC_SHA256_CTX.self))
        case .sha512: return CC_SHA512_Final(out, context.assumingMemoryBound(to: CC_SHA512_CTX.self))
        case .sha1: return CC_SHA1_Final(out, context.assumingMemoryBound(to: CC_SHA1_CTX.self))
        case .md5: return CC_MD5_Final(out, context.assumingMemoryBound(to: CC_MD5_CTX.self))
        }
    }
}
#endif
