#if os(Linux) && (canImport(Glibc) || canImport(Musl))
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Not FoundationNetworking, but functions found at run time all the same: FetchKit's
/// `SystemDigest` on Linux is libcrypto's (`SHA256_Init`/`_Update`/`_Final`, and the same for
/// `SHA512`, `SHA1` and `MD5`), which libcurl under FoundationNetworking has loaded into the
/// process (Apple platforms link CommonCrypto's directly, in FetchKit: this target is empty
/// there). If an algorithm's functions are not there, FetchKit hashes with its own Swift
/// implementation (`DigestHasher`): slower, the same digest.
package struct SystemDigest: Sendable {
    /// An algorithm libcrypto has the `<prefix>_Init`/`_Update`/`_Final` functions of.
    package enum Function: String, Sendable, CaseIterable {
        case sha256 = "SHA256"
        case sha512 = "SHA512"
        case sha1 = "SHA1"
        case md5 = "MD5"
    }

    // int X_Init(X_CTX *); int X_Update(X_CTX *, const void *, size_t);
    // int X_Final(unsigned char *, X_CTX *).
    private typealias Initialize = @convention(c) (UnsafeMutableRawPointer) -> Int32
    private typealias Update = @convention(c) (UnsafeMutableRawPointer, UnsafeRawPointer, Int) -> Int32
    private typealias Finish = @convention(c) (UnsafeMutableRawPointer, UnsafeMutableRawPointer) -> Int32

    private let initializeFunction: Initialize
    private let updateFunction: Update
    private let finishFunction: Finish

    /// Room for any of the contexts as plain data (`SHA256_CTX` is 112 bytes, `SHA512_CTX`
    /// 216, `SHA_CTX` 96, `MD5_CTX` 92): 512 leaves a margin for any layout to come.
    package static let contextSize = 512

    private static let table: [Function: SystemDigest] = {
        var found: [Function: SystemDigest] = [:]
        let everything = UnsafeMutableRawPointer(bitPattern: 0)     // RTLD_DEFAULT
        for function in Function.allCases {
            guard let initialize = dlsym(everything, function.rawValue + "_Init"),
                  let update = dlsym(everything, function.rawValue + "_Update"),
                  let finish = dlsym(everything, function.rawValue + "_Final")
            else { continue }
            found[function] = SystemDigest(
                initializeFunction: unsafeBitCast(initialize, to: Initialize.self),
                updateFunction: unsafeBitCast(update, to: Update.self),
                finishFunction: unsafeBitCast(finish, to: Finish.self))
        }
        return found
    }()

    /// `function`'s implementation, if the process has it loaded.
    package static func loaded(_ function: Function) -> SystemDigest? {
        table[function]
    }

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
