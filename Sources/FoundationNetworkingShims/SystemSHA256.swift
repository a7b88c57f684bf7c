import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Not FoundationNetworking, but a function found at run time all the same: FetchKit's
/// ``SystemSHA256`` is libcrypto's (Linux, loaded by libcurl under FoundationNetworking) or
/// CommonCrypto's (Apple platforms, part of libSystem). If it is not there, FetchKit hashes
/// with its own Swift SHA-256 (`DigestHasher`): slower, the same digest.
/// The system's SHA-256, found with `dlsym` in what the process has loaded.
package struct SystemSHA256: Sendable {
    #if canImport(Darwin)
    // int CC_SHA256_Init(CC_SHA256_CTX *); int CC_SHA256_Update(CC_SHA256_CTX *, const void *, CC_LONG);
    // int CC_SHA256_Final(unsigned char *, CC_SHA256_CTX *). CC_LONG is 32 bits.
    private typealias Update = @convention(c) (UnsafeMutableRawPointer, UnsafeRawPointer, UInt32) -> Int32
    private static let names = ("CC_SHA256_Init", "CC_SHA256_Update", "CC_SHA256_Final")
    #else
    // int SHA256_Init(SHA256_CTX *); int SHA256_Update(SHA256_CTX *, const void *, size_t);
    // int SHA256_Final(unsigned char *, SHA256_CTX *).
    private typealias Update = @convention(c) (UnsafeMutableRawPointer, UnsafeRawPointer, Int) -> Int32
    private static let names = ("SHA256_Init", "SHA256_Update", "SHA256_Final")
    #endif
    private typealias Initialize = @convention(c) (UnsafeMutableRawPointer) -> Int32
    private typealias Finish = @convention(c) (UnsafeMutableRawPointer, UnsafeMutableRawPointer) -> Int32

    private let initializeFunction: Initialize
    private let updateFunction: Update
    private let finishFunction: Finish

    /// Room for the context: `SHA256_CTX` is 112 bytes, `CC_SHA256_CTX` 104; four times that
    /// leaves a margin for any layout to come.
    package static let contextSize = 512

    package static let loaded: SystemSHA256? = {
        let everything = UnsafeMutableRawPointer(bitPattern: 0)     // RTLD_DEFAULT
        guard let initialize = dlsym(everything, names.0),
              let update = dlsym(everything, names.1),
              let finish = dlsym(everything, names.2)
        else { return nil }
        return SystemSHA256(
            initializeFunction: unsafeBitCast(initialize, to: Initialize.self),
            updateFunction: unsafeBitCast(update, to: Update.self),
            finishFunction: unsafeBitCast(finish, to: Finish.self)
        )
    }()

    package func initialize(_ context: UnsafeMutableRawPointer) -> Int32 {
        initializeFunction(context)
    }

    package func update(_ context: UnsafeMutableRawPointer, _ bytes: UnsafeRawPointer, _ count: Int) {
        #if canImport(Darwin)
        var offset = 0
        while offset < count {
            let step = min(count - offset, Int(UInt32.max))
            _ = updateFunction(context, bytes + offset, UInt32(step))
            offset += step
        }
        #else
        _ = updateFunction(context, bytes, count)
        #endif
    }

    package func finish(_ out: UnsafeMutableRawPointer, _ context: UnsafeMutableRawPointer) -> Int32 {
        finishFunction(out, context)
    }
}
