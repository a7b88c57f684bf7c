import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FoundationNetworkingShims

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
/// symbol table by the shims (`FoundationNetworkingCallbacks.header`), as the socket callback
/// ``CurlSocketCallback`` stands in front of is. Where
/// it is not there (a stripped or static library, another layout), nothing is installed and
/// ``FetchSession/guardsResponseHeads`` is `false`.
enum CurlHeaderCallback {
    #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
    typealias Callback = Curl.HeaderCallback

    /// FoundationNetworking's header callback, found once per process; `nil` if it cannot be
    /// found safely.
    static var foundationCallback: Callback? { FoundationNetworkingCallbacks.header }

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

    /// Puts ``guardingCallback`` on `easy`, a new handle of `task` whose FoundationNetworking
    /// callback data is `callbackData`, before libcurl uses it. Call it on URLSession's work
    /// queue.
    ///
    /// - Returns: Whether it is installed (if not, the handle is as FoundationNetworking left it).
    static func install(on easy: UnsafeMutableRawPointer, callbackData: UnsafeMutableRawPointer, task: URLSessionTask,
                        owner: ObjectIdentifier) -> Bool {
        guard foundationCallback != nil, Curl.isAvailable else { return false }
        let taskKey = ObjectIdentifier(task)
        // A handle made at a freed one's address starts clean: its entry is replaced.
        table.withLock { table in
            if let stale = table.entries.updateValue(Entry(easy: easy, task: taskKey, owner: owner), forKey: callbackData) {
                if table.dataByTask[stale.task] == callbackData { table.dataByTask[stale.task] = nil }
            }
            table.dataByTask[taskKey] = callbackData
        }
        // Without the suppression a proxy's CONNECT answer would be taken for the final head.
        guard Curl.set(easy, .suppressConnectHeaders, 1), Curl.set(easy, .headerFunction, guardingCallback) else {
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

    /// The libcurl handle of `task`, if the filter is on it and the task has not completed: a
    /// lookup in the filter's table, no reflection. Use it on URLSession's work queue only.
    static func easyHandle(of task: URLSessionTask) -> UnsafeMutableRawPointer? {
        table.withLock { table in
            table.dataByTask[ObjectIdentifier(task)].flatMap { table.entries[$0]?.easy }
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
        guard let buffer, let userdata, length > 0 else {
            return original(buffer, size, count, userdata)
        }
        let verdict = CurlHeaderCallback.table.withLock { table -> ResponseHeadFilter.Verdict? in
            guard let easy = table.entries[userdata]?.easy else { return nil }
            // libcurl's count of this transfer's head bytes so far (a `long`), and its length as
            // FoundationNetworking's callback reads it. (Reading libcurl's state calls nothing out.)
            guard let headerSize = Curl.long(easy, .headerSize),
                  let contentLength = Curl.double(easy, .contentLengthDownload)
            else { return .refuse }
            return table.entries[userdata]?.filter.take(UnsafeRawBufferPointer(start: buffer, count: length), headerSize: headerSize,
                                                         contentLength: contentLength) {
                Curl.string(easy, .scheme)
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
