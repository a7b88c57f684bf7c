#if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
import Foundation
import FoundationNetworking

/// FoundationNetworking's own libcurl callbacks that FetchKit's stand in front of (each of
/// FetchKit's calls the original for everything it does not change). They are local symbols:
/// found by their exact names in the library's symbol table (``LoadedFunction``), looked up
/// together the first time either is needed, one read of the mappings and of the file's tables
/// for both. Where one is not there (a stripped or static library, another layout), it is
/// `nil` and its workaround is not installed.
package enum FoundationNetworkingCallbacks {
    /// The header callback: the `@convention(c)` thunk of closure #3 in
    /// `_EasyHandle.setupCallbacks()`, `(UnsafeMutablePointer<Int8>, Int, Int,
    /// UnsafeMutableRawPointer?) -> Int`, as built from swift-corelibs-foundation's
    /// `EasyHandle.swift` (read in 6.3.1; `setupCallbacks()` sets the write, read and header
    /// callbacks in that order, unchanged from 6.0 to 6.3.3 and in the 6.4 snapshots of August
    /// 2026). The write and read callbacks have the same type: the name, which counts the
    /// closures, is what tells the header callback apart.
    package static let headerCallbackName =
        "$s20FoundationNetworking11_EasyHandleC14setupCallbacks33_D9E5C2617EDF43EF06D31AE9AD581FE0LLyyFSiSpys4Int8VG_S2iSvSgtcfU1_To"

    /// The socket callback: closure #1 in `URLSession._MultiHandle.setupCallbacks()`,
    /// `@convention(c) (CURL *, curl_socket_t, Int32, UnsafeMutableRawPointer?,
    /// UnsafeMutableRawPointer?) -> Int32`, as built from swift-corelibs-foundation's
    /// `MultiHandle.swift` (read in the 6.3.1 release; its `register`, `createSources` and
    /// `tearDown` are the same from 6.0 to 6.3.3 and on `main` of August 2026).
    package static let socketCallbackName =
        "$s20FoundationNetworking10URLSessionC12_MultiHandleC14setupCallbacks33_76FB65EF45BDE9115477B690E87F5E28LLyyFs5Int32VSv_A2ISvSgAJtcfU_To"

    /// Both, by name, as addresses (numbers, which are `Sendable`).
    private static let addresses: [String: UInt] = {
        // An address inside FoundationNetworking: its `URLSession` class object.
        let anchor = unsafeBitCast(URLSession.self as AnyClass, to: UnsafeRawPointer.self)
        return LoadedFunction.addresses(of: [headerCallbackName, socketCallbackName], inFileMappedAt: anchor)
            .mapValues { UInt(bitPattern: $0) }
    }()

    /// FoundationNetworking's header callback, or `nil` if it cannot be found safely.
    package static let header: Curl.HeaderCallback? = addresses[headerCallbackName]
        .flatMap { UnsafeRawPointer(bitPattern: $0) }.map { unsafeBitCast($0, to: Curl.HeaderCallback.self) }

    /// FoundationNetworking's socket callback, or `nil` if it cannot be found safely.
    package static let socket: Curl.SocketCallback? = addresses[socketCallbackName]
        .flatMap { UnsafeRawPointer(bitPattern: $0) }.map { unsafeBitCast($0, to: Curl.SocketCallback.self) }

    /// The address of `callback` (for tests: it must be the one the symbol table names).
    package static func address(of callback: Curl.SocketCallback) -> UnsafeRawPointer {
        unsafeBitCast(callback, to: UnsafeRawPointer.self)
    }
}
#endif
