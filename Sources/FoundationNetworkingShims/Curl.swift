#if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
import Foundation

/// libcurl as FoundationNetworking links it: the one table of the libcurl functions FetchKit
/// calls, each looked up once per process with `dlsym` (FetchKit links no libcurl of its own,
/// so it calls the very library FoundationNetworking drives), and of the option and info
/// numbers, each spelled once (curl.h, 7.88.1; the numbers are libcurl's ABI and have not
/// changed since they were added).
///
/// **Variadic calls.** `curl_easy_setopt`, `curl_easy_getinfo` and `curl_multi_setopt` are C
/// variadic functions. Each is called through a non-variadic function type per argument kind
/// (a `long`, a pointer, a function pointer, a `long *`, a `double *`, a `char **`): on the
/// Linux ABIs Swift supports (x86-64 System V, AArch64 AAPCS64 on Linux), a variadic integer,
/// pointer or function-pointer argument travels exactly like a fixed one, and a `double *` is
/// a pointer. (Not so on Apple's arm64, where variadic arguments go on the stack: there is no
/// libcurl under URLSession there, and this file is Linux only.)
///
/// **When it is missing.** A process whose FoundationNetworking is linked statically with a
/// libcurl whose symbols are not exported has none of these: every call here answers `nil` or
/// `false`, ``isAvailable`` is `false`, and each workaround that needs libcurl reports itself
/// unavailable (`FetchSession.workarounds`) — a security setting refuses
/// (`TrustConfigurationError.notEnforceable`), a convenience keeps FoundationNetworking's
/// behaviour.
package enum Curl {
    // MARK: Callback types

    /// `curl_write_callback` as the header callback: `size_t (char *buffer, size_t size,
    /// size_t nitems, void *userdata)`.
    package typealias HeaderCallback = @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int
    /// `curl_sockopt_callback`: `int (void *clientp, curl_socket_t curlfd, curlsocktype purpose)`.
    package typealias SocketOptionCallback = @convention(c) (UnsafeMutableRawPointer?, Int32, Int32) -> Int32
    /// `curl_socket_callback`: `int (CURL *easy, curl_socket_t s, int what, void *clientp,
    /// void *socketp)`.
    package typealias SocketCallback = @convention(c) (UnsafeMutableRawPointer?, Int32, Int32, UnsafeMutableRawPointer?,
                                                       UnsafeMutableRawPointer?) -> Int32

    // MARK: Numbers

    /// A `CURLoption` for `curl_easy_setopt`.
    package struct Option: Sendable, Equatable {
        package let rawValue: Int32
        private init(_ rawValue: Int32) { self.rawValue = rawValue }

        package static let connectTimeoutMS = Option(156)            // CURLOPT_CONNECTTIMEOUT_MS (CURLOPTTYPE_LONG + 156)
        package static let httpVersion = Option(84)                  // CURLOPT_HTTP_VERSION (CURLOPTTYPE_VALUES + 84)
        package static let freshConnect = Option(74)                 // CURLOPT_FRESH_CONNECT (CURLOPTTYPE_LONG + 74)
        package static let forbidReuse = Option(75)                  // CURLOPT_FORBID_REUSE (CURLOPTTYPE_LONG + 75)
        package static let suppressConnectHeaders = Option(265)      // CURLOPT_SUPPRESS_CONNECT_HEADERS (CURLOPTTYPE_LONG + 265)
        package static let pinnedPublicKey = Option(10_230)          // CURLOPT_PINNEDPUBLICKEY (CURLOPTTYPE_STRINGPOINT + 230)
        package static let socketOptionData = Option(10_149)         // CURLOPT_SOCKOPTDATA (CURLOPTTYPE_CBPOINT + 149)
        package static let headerFunction = Option(20_079)           // CURLOPT_HEADERFUNCTION (CURLOPTTYPE_FUNCTIONPOINT + 79)
        package static let socketOptionFunction = Option(20_148)     // CURLOPT_SOCKOPTFUNCTION (CURLOPTTYPE_FUNCTIONPOINT + 148)
        package static let caInfoBlob = Option(40_309)               // CURLOPT_CAINFO_BLOB (CURLOPTTYPE_BLOB + 309)
    }

    /// A `CURLINFO` for `curl_easy_getinfo`.
    package struct Info: Sendable, Equatable {
        package let rawValue: Int32
        private init(_ rawValue: Int32) { self.rawValue = rawValue }

        package static let caInfo = Info(0x100000 + 61)              // CURLINFO_CAINFO (CURLINFO_STRING + 61)
        package static let scheme = Info(0x100000 + 49)              // CURLINFO_SCHEME (CURLINFO_STRING + 49)
        package static let headerSize = Info(0x200000 + 11)          // CURLINFO_HEADER_SIZE (CURLINFO_LONG + 11)
        package static let httpVersion = Info(0x200000 + 46)         // CURLINFO_HTTP_VERSION (CURLINFO_LONG + 46)
        package static let contentLengthDownload = Info(0x300000 + 15) // CURLINFO_CONTENT_LENGTH_DOWNLOAD (CURLINFO_DOUBLE + 15)
    }

    /// A `CURLMoption` for `curl_multi_setopt`.
    package struct MultiOption: Sendable, Equatable {
        package let rawValue: Int32
        private init(_ rawValue: Int32) { self.rawValue = rawValue }

        package static let maximumConnections = MultiOption(6)       // CURLMOPT_MAXCONNECTS (CURLOPTTYPE_LONG + 6)
        package static let socketFunction = MultiOption(20_001)      // CURLMOPT_SOCKETFUNCTION (CURLOPTTYPE_FUNCTIONPOINT + 1)
    }

    /// `CURLINFO_HTTP_VERSION`'s answers, and ``Option/httpVersion``'s values: `CURL_HTTP_VERSION_1_0` (1), `_1_1` (2), `_2_0` (3), `_3` (30).
    package enum HTTPVersion {
        package static let http1_0 = 1
        package static let http1_1 = 2
        package static let http2 = 3
        package static let http3 = 30
    }
    /// `CURL_POLL_*`, the `what` of a ``SocketCallback``.
    package enum Poll {
        package static let readable: Int32 = 1      // CURL_POLL_IN
        package static let writable: Int32 = 2      // CURL_POLL_OUT
        package static let remove: Int32 = 4        // CURL_POLL_REMOVE
    }
    /// `CURLSOCKTYPE_IPCXN`, the `purpose` of a ``SocketOptionCallback`` for a connection's socket.
    package static let socketTypeConnection: Int32 = 0
    /// `CURL_SOCKOPT_OK`.
    package static let socketOptionOK: Int32 = 0

    // MARK: The functions, looked up once

    private typealias SetLong = @convention(c) (UnsafeMutableRawPointer, Int32, Int) -> Int32
    private typealias SetPointer = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeRawPointer?) -> Int32
    private typealias SetHeaderCallback = @convention(c) (UnsafeMutableRawPointer, Int32, HeaderCallback) -> Int32
    private typealias SetSocketOptionCallback = @convention(c) (UnsafeMutableRawPointer, Int32, SocketOptionCallback) -> Int32
    private typealias SetSocketCallback = @convention(c) (UnsafeMutableRawPointer, Int32, SocketCallback) -> Int32
    private typealias GetLong = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<Int>) -> Int32
    private typealias GetDouble = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<Double>) -> Int32
    private typealias GetString = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>) -> Int32
    private typealias Pause = @convention(c) (UnsafeMutableRawPointer, Int32) -> Int32

    /// The table: every function found, or none (a libcurl that has some of them is not one to
    /// trust with the others).
    private struct Functions {
        let setLong: SetLong
        let setPointer: SetPointer
        let setHeaderCallback: SetHeaderCallback
        let setSocketOptionCallback: SetSocketOptionCallback
        let getLong: GetLong
        let getDouble: GetDouble
        let getString: GetString
        let pause: Pause
        let multiSetLong: SetLong
        let multiSetSocketCallback: SetSocketCallback
    }

    private static let functions: Functions? = {
        let everything = UnsafeMutableRawPointer(bitPattern: 0)     // RTLD_DEFAULT
        guard let setOption = dlsym(everything, "curl_easy_setopt"),
              let getInfo = dlsym(everything, "curl_easy_getinfo"),
              let pause = dlsym(everything, "curl_easy_pause"),
              let multiSetOption = dlsym(everything, "curl_multi_setopt")
        else { return nil }
        return Functions(
            setLong: unsafeBitCast(setOption, to: SetLong.self),
            setPointer: unsafeBitCast(setOption, to: SetPointer.self),
            setHeaderCallback: unsafeBitCast(setOption, to: SetHeaderCallback.self),
            setSocketOptionCallback: unsafeBitCast(setOption, to: SetSocketOptionCallback.self),
            getLong: unsafeBitCast(getInfo, to: GetLong.self),
            getDouble: unsafeBitCast(getInfo, to: GetDouble.self),
            getString: unsafeBitCast(getInfo, to: GetString.self),
            pause: unsafeBitCast(pause, to: Pause.self),
            multiSetLong: unsafeBitCast(multiSetOption, to: SetLong.self),
            multiSetSocketCallback: unsafeBitCast(multiSetOption, to: SetSocketCallback.self))
    }()

    /// Whether libcurl's functions are in this process.
    package static var isAvailable: Bool { functions != nil }

    // MARK: Calls (each `true` or a value only on CURLE_OK / CURLM_OK)

    /// `curl_easy_setopt` with a `long`.
    package static func set(_ easy: UnsafeMutableRawPointer, _ option: Option, _ value: Int) -> Bool {
        functions.map { $0.setLong(easy, option.rawValue, value) == 0 } ?? false
    }

    /// `curl_easy_setopt` with a pointer (a C string, callback data, or `nil` to unset).
    package static func set(_ easy: UnsafeMutableRawPointer, _ option: Option, pointer: UnsafeRawPointer?) -> Bool {
        functions.map { $0.setPointer(easy, option.rawValue, pointer) == 0 } ?? false
    }

    /// `curl_easy_setopt` with a C string, copied by libcurl.
    package static func set(_ easy: UnsafeMutableRawPointer, _ option: Option, string: String) -> Bool {
        string.withCString { set(easy, option, pointer: $0) }
    }

    /// `curl_easy_setopt` with a header callback.
    package static func set(_ easy: UnsafeMutableRawPointer, _ option: Option, _ callback: HeaderCallback) -> Bool {
        functions.map { $0.setHeaderCallback(easy, option.rawValue, callback) == 0 } ?? false
    }

    /// `curl_easy_setopt` with a socket-option callback.
    package static func set(_ easy: UnsafeMutableRawPointer, _ option: Option, _ callback: SocketOptionCallback) -> Bool {
        functions.map { $0.setSocketOptionCallback(easy, option.rawValue, callback) == 0 } ?? false
    }

    /// `curl_easy_setopt` with a `struct curl_blob { void *data; size_t len; unsigned int
    /// flags; }` of `bytes`, which libcurl copies (`CURL_BLOB_COPY`).
    package static func set(_ easy: UnsafeMutableRawPointer, _ option: Option, copying bytes: UnsafeRawBufferPointer) -> Bool {
        let descriptor = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)
        defer { descriptor.deallocate() }
        descriptor.initializeMemory(as: UInt8.self, repeating: 0, count: 24)
        descriptor.storeBytes(of: UnsafeMutableRawPointer(mutating: bytes.baseAddress), toByteOffset: 0, as: UnsafeMutableRawPointer?.self)
        descriptor.storeBytes(of: bytes.count, toByteOffset: 8, as: Int.self)
        descriptor.storeBytes(of: UInt32(1), toByteOffset: 16, as: UInt32.self)     // CURL_BLOB_COPY
        return set(easy, option, pointer: descriptor)
    }

    /// `curl_easy_getinfo` with a `long *`.
    package static func long(_ easy: UnsafeMutableRawPointer, _ info: Info) -> Int? {
        guard let functions else { return nil }
        var value = 0
        return functions.getLong(easy, info.rawValue, &value) == 0 ? value : nil
    }

    /// `curl_easy_getinfo` with a `double *`.
    package static func double(_ easy: UnsafeMutableRawPointer, _ info: Info) -> Double? {
        guard let functions else { return nil }
        var value = 0.0
        return functions.getDouble(easy, info.rawValue, &value) == 0 ? value : nil
    }

    /// `curl_easy_getinfo` with a `char **`: the string, copied (`nil` also when libcurl has
    /// none).
    package static func string(_ easy: UnsafeMutableRawPointer, _ info: Info) -> String? {
        guard let functions else { return nil }
        var value: UnsafePointer<CChar>?
        guard functions.getString(easy, info.rawValue, &value) == 0, let value else { return nil }
        return String(cString: value)
    }

    /// `curl_easy_pause`: `CURLPAUSE_RECV` (`receiving` off) or `CURLPAUSE_CONT`. libcurl
    /// allows it from inside the handle's own write callback.
    package static func pause(_ easy: UnsafeMutableRawPointer, receiving: Bool) -> Bool {
        functions.map { $0.pause(easy, receiving ? 0 : 1) == 0 } ?? false
    }

    /// `curl_multi_setopt` with a `long`.
    package static func set(multi: UnsafeMutableRawPointer, _ option: MultiOption, _ value: Int) -> Bool {
        functions.map { $0.multiSetLong(multi, option.rawValue, value) == 0 } ?? false
    }

    /// `curl_multi_setopt` with a socket callback.
    package static func set(multi: UnsafeMutableRawPointer, _ option: MultiOption, _ callback: SocketCallback) -> Bool {
        functions.map { $0.multiSetSocketCallback(multi, option.rawValue, callback) == 0 } ?? false
    }
}
#endif
