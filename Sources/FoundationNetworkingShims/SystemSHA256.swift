#if os(Linux) && (canImport(Glibc) || canImport(Musl))
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Not FoundationNetworking, but a function found at run time all the same: FetchKit's
/// `SystemSHA256` on Linux is libcrypto's, which libcurl under FoundationNetworking has loaded
/// into the process (Apple platforms link CommonCrypto's directly, in FetchKit: this target is
/// empty there). If it is not there, FetchKit hashes with its own Swift SHA-256
/// (`DigestHasher`): slower, the same digest.
/// The system's SHA-256, found with `dlsym` in what the process has loaded.
package struct SystemSHA256: Sendable {
    // int SHA256_Init(SHA256_CTX *); int SHA256_Update(SHA256_CTX *, const void *, size_t);
    // int SHA256_Final(unsigned char *, SHA256_CTX *).
    private typealias Update = @convention(c) (UnsafeMutableRawPointer, UnsafeRawPointer, Int) -> Int32
    private static let names = ("SHA256_Init", "SHA256_Update", "SHA256_Final")
    private typealias Initialize = @convention(c) (UnsafeMutableRawPointer) -> Int32
    private typealias Finish = @convention(c) (UnsafeMutableRawPointer, UnsafeMutableRawPointer) -> Int32

    private let initializeFunction: Initialize
    private let updateFunction: Update
    private let finishFunction: Finish

    /// Room for the context: `SHA256_CTX` is 112 bytes; four times that
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
        _ = updateFunction(context, bytes, count)
    }

    package func finish(_ out: UnsafeMutableRawPointer, _ context: UnsafeMutableRawPointer) -> Int32 {
        finishFunction(out, context)
    }
}
#endif
