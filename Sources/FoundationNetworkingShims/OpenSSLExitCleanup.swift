#if os(Linux)
import CFetchKitShims

/// What FetchKit did about OpenSSL's exit-time cleanup when the process loaded it (Linux):
/// the handler OpenSSL registers with `atexit` races, at exit, with URLSession objects released
/// on libdispatch threads, and can crash the process as it exits (swift-corelibs-foundation
/// #5469; Swift 6.4 turns the handler off itself, #5474). The step itself is C
/// (`Sources/CFetchKitShims/exit_cleanup.c`), as it must run before any URLSession is made.
package enum OpenSSLExitCleanup: Equatable, Sendable {
    /// Turned off: OpenSSL registers no exit handler in this process.
    case disabled
    /// Not turned off: why.
    case unavailable(String)

    /// The state of this process.
    package static var current: OpenSSLExitCleanup {
        switch fetchkit_openssl_exit_cleanup() {
        case FetchKitOpenSSLExitCleanupDisabled: return .disabled
        case FetchKitOpenSSLExitCleanupNoOpenSSL: return .unavailable("no OpenSSL in this process")
        case FetchKitOpenSSLExitCleanupTooOld: return .unavailable("OpenSSL older than 1.1.1 has no OPENSSL_INIT_NO_ATEXIT")
        case FetchKitOpenSSLExitCleanupFailed: return .unavailable("OPENSSL_init_crypto failed")
        default:
            return .unavailable("FetchKit's load-time step did not run (its object file was not linked)")
        }
    }

    /// The linked OpenSSL's version, as `OpenSSL_version_num()` gives it (`0x30000130` is
    /// 3.0.19), or `nil` without OpenSSL.
    package static var openSSLVersionNumber: UInt? {
        let number = fetchkit_openssl_version_number()
        return number == 0 ? nil : UInt(number)
    }

    /// Whether OpenSSL already ran its cleanup (tests call it from an `atexit` handler); `nil`
    /// without OpenSSL.
    package static var openSSLWasCleanedUp: Bool? {
        switch fetchkit_openssl_was_cleaned_up() {
        case 0: return false
        case 1: return true
        default: return nil
        }
    }
}
#endif
