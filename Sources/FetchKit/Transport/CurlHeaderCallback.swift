import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Keeps a response's framing from crashing FoundationNetworking (Linux): each task's libcurl
/// header callback goes through ``ResponseHeadFilter`` before FoundationNetworking's own.
///
/// FoundationNetworking sets its header callback (`CURLOPT_HEADERFUNCTION`, closure #3 in
/// `_EasyHandle.setupCallbacks()`, `EasyHandle.swift`) once, when it makes a task's easy handle,
/// with the handle object as its data (`CURLOPT_HEADERDATA`), and parses every line libcurl
/// hands it as part of a head (`TransferState.swift`, `byAppendingHTTP(headerLine:)`). A line
/// after a complete head starts a new, partial one and drops the response: trailer fields after
/// a chunked body ended the process at the transfer's end (6.3.x, `NativeProtocol.swift`:
/// `Fatal error: Transfer completed, but there's no response`; swift-corelibs-foundation
/// e1bc19d78 makes that a lost-connection error instead, in 6.4 only).
///
/// ``CurlTaskOptions`` installs ``guardingCallback`` on each new handle, from the session's
/// URL-cache slot, before FoundationNetworking first configures the handle. The callback's data
/// stays FoundationNetworking's: the callback finds its transfer's filter by it, and calls
/// FoundationNetworking's callback for the lines the filter lets through. It also sets
/// `CURLOPT_SUPPRESS_CONNECT_HEADERS`: a proxy's answer to `CONNECT` is not the response
/// (FoundationNetworking took it for one), and libcurl reads it itself.
///
/// FoundationNetworking's callback is a local symbol, found by its exact name in the library's
/// symbol table (``LoadedFunction``), as ``CurlSocketCallback`` finds the socket callback. Where
/// it is not there (a stripped or static library, another layout), nothing is installed and
/// ``FetchSession/guardsResponseHeads`` is `false`.
enum CurlHeaderCallback {
    /// The name of FoundationNetworking's header callback: the `@convention(c)` thunk of closure
    /// #3 in `_EasyHandle.setupCallbacks()`, `(UnsafeMutablePointer<Int8>, Int, Int,
    /// UnsafeMutableRawPointer?) -> Int`, as built from swift-corelibs-foundation's
    /// `EasyHandle.swift` (read in 6.3.1; `setupCallbacks()` sets the write, read and header
    /// callbacks in that order, unchanged from 6.0 to 6.3.3 and in the 6.4 snapshots of August
    /// 2026). The write and read callbacks have the same type: the name, which counts the
    /// closures, is what tells the header callback apart.
    static let foundationCallbackName =
        "$s20FoundationNetworking11_EasyHandleC14setupCallbacks33_D9E5C2617EDF43EF06D31AE9AD581FE0LLyyFSiSpys4Int8VG_S2iSvSgtcfU1_To"

    #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
    /// libcurl's `curl_write_callback`: `size_t (char *buffer, size_t size, size_t nitems, void *userdata)`.
    typealias Callback = @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int

    /// FoundationNetworking's header callback, found once per process; `nil` if it cannot be
    /// found safely.
    static let foundationCallback: Callback? = LoadedFunction.foundationNetworkingCallbacks[foundationCallbackName]
        .flatMap { UnsafeRawPointer(bitPattern: $0) }.map { unsafeBitCast($0, to: Callback.self) }

    /// `CURLcode curl_easy_getinfo(CURL *, CURLINFO, ...)` with a `long *`: on the Linux ABIs
    /// Swift supports, a variadic pointer argument travels like a fixed one.
    typealias GetLongInfo = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<Int>) -> Int32

    /// The same with a `double *`.
    typealias GetDoubleInfo = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<Double>) -> Int32
    /// The same with a `char **`.
    typealias GetStringInfo = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>) -> Int32

    /// `curl_easy_getinfo`, looked up once, as each of the three.
    private static let getLong: GetLongInfo? = curlEasyGetInfo().map { unsafeBitCast($0, to: GetLongInfo.self) }
    private static let getDouble: GetDoubleInfo? = curlEasyGetInfo().map { unsafeBitCast($0, to: GetDoubleInfo.self) }
    private static let getString: GetStringInfo? = curlEasyGetInfo().map { unsafeBitCast($0, to: GetStringInfo.self) }
    private static func curlEasyGetInfo() -> UnsafeMutableRawPointer? { dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_getinfo") }

    /// One handle's filter, by FoundationNetworking's callback data (its handle object's
    /// address), and the task it serves. Touched on URLSession's work queue, where libcurl runs,
    /// and once by the router when the task completes.
    private struct Entry {
        let easy: UnsafeMutableRawPointer
        let task: ObjectIdentifier
        /// Who installed it (a session's ``CurlTaskOptions``).
        let owner: ObjectIdentifier
        var filter = ResponseHeadFilter()
    }

    private struct Table {
        var entries: [UnsafeMutableRawPointer: Entry] = [:]
        var dataByTask: [ObjectIdentifier: UnsafeMutableRawPointer] = [:]
    }

    private static let table = Protected(Table())

    /// libcurl's option and info numbers (curl.h, 7.88.1).
    private enum Curl {
        static let headerFunction: Int32 = 20_079          // CURLOPT_HEADERFUNCTION (CURLOPTTYPE_FUNCTIONPOINT + 79)
        static let suppressConnectHeaders: Int32 = 265     // CURLOPT_SUPPRESS_CONNECT_HEADERS (CURLOPTTYPE_LONG + 265)
        static let headerSize: Int32 = 0x200000 + 11       // CURLINFO_HEADER_SIZE (CURLINFO_LONG + 11)
        static let contentLength: Int32 = 0x300000 + 15    // CURLINFO_CONTENT_LENGTH_DOWNLOAD (CURLINFO_DOUBLE + 15)
        static let scheme: Int32 = 0x100000 + 49           // CURLINFO_SCHEME (CURLINFO_STRING + 49)
    }

    /// Puts ``guardingCallback`` on `easy`, a new handle of `task` whose FoundationNetworking
    /// callback data is `callbackData`, before libcurl uses it; `setOption` is
    /// `curl_easy_setopt`. Call it on URLSession's work queue.
    ///
    /// - Returns: Whether it is installed (if not, the handle is as FoundationNetworking left it).
    static func install(on easy: UnsafeMutableRawPointer, callbackData: UnsafeMutableRawPointer, task: URLSessionTask,
                        owner: ObjectIdentifier, setOption: UnsafeMutableRawPointer) -> Bool {
        guard foundationCallback != nil, getLong != nil, getDouble != nil, getString != nil else { return false }
        let taskKey = ObjectIdentifier(task)
        // A handle made at a freed one's address starts clean: its entry is replaced.
        table.withLock { table in
            if let stale = table.entries.updateValue(Entry(easy: easy, task: taskKey, owner: owner), forKey: callbackData) {
                if table.dataByTask[stale.task] == callbackData { table.dataByTask[stale.task] = nil }
            }
            table.dataByTask[taskKey] = callbackData
        }
        // CURLcode curl_easy_setopt(CURL *, CURLoption, ...) with a function pointer or a `long`:
        // on the Linux ABIs Swift supports, a variadic argument travels like a fixed one.
        typealias SetFunctionOption = @convention(c) (UnsafeMutableRawPointer, Int32, Callback) -> Int32
        typealias SetLongOption = @convention(c) (UnsafeMutableRawPointer, Int32, Int) -> Int32
        let setLong = unsafeBitCast(setOption, to: SetLongOption.self)
        let setFunction = unsafeBitCast(setOption, to: SetFunctionOption.self)
        // Without the suppression a proxy's CONNECT answer would be taken for the final head.
        guard setLong(easy, Curl.suppressConnectHeaders, 1) == 0,              // CURLE_OK
              setFunction(easy, Curl.headerFunction, guardingCallback) == 0
        else {
            _ = take(task)
            return false
        }
        return true
    }

    /// What the filter of `task`'s handle kept (its trailers) and why it refused the transfer,
    /// if it did, forgotten once read; `nil` if nothing was installed for `task`. Call it when
    /// the task has completed (libcurl calls the callback no more for it).
    static func take(_ task: URLSessionTask) -> ResponseHeadFilter? {
        table.withLock { table in
            guard let data = table.dataByTask.removeValue(forKey: ObjectIdentifier(task)) else { return nil }
            return table.entries.removeValue(forKey: data)?.filter
        }
    }

    /// How many handles `owner` put a filter on whose tasks have not completed (for tests: none
    /// once they all did).
    static func count(of owner: ObjectIdentifier) -> Int {
        table.withLock { $0.entries.values.count { $0.owner == owner } }
    }

    /// What libcurl calls instead of FoundationNetworking's header callback.
    static let guardingCallback: Callback = { buffer, size, count, userdata in
        // Installed only when `foundationCallback` was found.
        guard let original = CurlHeaderCallback.foundationCallback else { return 0 }
        let length = size &* count
        guard let buffer, let userdata, length > 0, let getLong = CurlHeaderCallback.getLong,
              let getDouble = CurlHeaderCallback.getDouble, let getString = CurlHeaderCallback.getString
        else {
            return original(buffer, size, count, userdata)
        }
        let verdict = CurlHeaderCallback.table.withLock { table -> ResponseHeadFilter.Verdict? in
            guard let easy = table.entries[userdata]?.easy else { return nil }
            // libcurl's count of this transfer's head bytes so far (a `long`), and its length as
            // FoundationNetworking's callback reads it. (Reading libcurl's state calls nothing out.)
            var headerSize = 0
            var contentLength = -1.0
            guard getLong(easy, Curl.headerSize, &headerSize) == 0,
                  getDouble(easy, Curl.contentLength, &contentLength) == 0
            else { return .refuse }
            return table.entries[userdata]?.filter.take(UnsafeRawBufferPointer(start: buffer, count: length), headerSize: headerSize,
                                                         contentLength: contentLength) {
                var scheme: UnsafePointer<CChar>?
                guard getString(easy, Curl.scheme, &scheme) == 0, let scheme else { return nil }
                return String(cString: scheme)
            }
        }
        switch verdict {
        case nil, .pass?:
            return original(buffer, size, count, userdata)
        case .drop?:
            return length
        case .refuse?:
            return 0        // libcurl ends the transfer: CURLE_WRITE_ERROR
        case .passRewritten(let bytes)?:
            var line = bytes.map { CChar(bitPattern: $0) }
            let taken = line.withUnsafeMutableBufferPointer { line in original(line.baseAddress, 1, line.count, userdata) }
            // FoundationNetworking takes a whole line or refuses it (0).
            return taken == bytes.count ? length : 0
        }
    }
    #endif
}
