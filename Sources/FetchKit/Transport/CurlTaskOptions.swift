import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import FoundationNetworkingShims

#if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
/// Sets what FetchKit needs on each task's own libcurl easy handle (Linux), before
/// FoundationNetworking first configures it or hands it to libcurl:
///
/// - ``TrustSettings``: libcurl's `CURLOPT_CAINFO_BLOB` (the system's CAs and the added ones)
///   and `CURLOPT_PINNEDPUBLICKEY` (the host's pins), on every task of a session that has them;
/// - ``FetchConfiguration/connectTimeout``: `CURLOPT_CONNECTTIMEOUT_MS`, on the tasks whose
///   fetch sets one (FoundationNetworking sets none, so libcurl's default of 300 s applies);
/// - under a bandwidth limit (``FetchQueue/bandwidthLimit``): HTTP/1.1 (`CURLOPT_HTTP_VERSION`),
///   as an HTTP/2 stream cannot be held to a limit on the wire; a clean slate in
///   ``CurlSocketCallback``'s sockets for the new handle; and, on the tasks whose share of the
///   limit is at most 1 MB/s, a small receive window (``ReceiveWindow``):
///   `CURLOPT_SOCKOPTFUNCTION` and `CURLOPT_SOCKOPTDATA` (replacing FoundationNetworking's
///   callback, which sets nothing) with `CURLOPT_FRESH_CONNECT` and `CURLOPT_FORBID_REUSE`.
///
/// **Where.** FoundationNetworking (read in 6.3.1, `URLSessionTask.swift`) makes a task's
/// protocol object, and with it the libcurl easy handle (`_NativeProtocol.init`), in
/// `_getProtocol`, called inside `resume()`'s `workQueue.sync`. When the session's
/// configuration has a `urlCache`, it first asks the cache, `getCachedResponse(for:completionHandler:)`,
/// and makes the protocol inside the completion handler; `startLoading()` — which configures the
/// handle (`configureEasyHandle`) and adds it to the multi handle — is only queued
/// (`workQueue.async`) from there. So this cache, which answers "nothing cached" at once, runs
/// on the session's serial work queue with the new handle made and not yet used: the one
/// moment when its options can be set with certainty, before any connection for it exists.
/// FoundationNetworking never overwrites these options: on Linux it sets `CURLOPT_CAINFO` only
/// when libcurl has no default (`setCARootBundlePath`), never a blob, a pin, a connect timeout
/// or an HTTP version.
///
/// **Connection reuse.** libcurl (7.88.1, `vtls.c` `Curl_ssl_config_matches`) reuses a pooled
/// connection, HTTP/2 multiplexing included, only for a transfer whose CA blob (byte for byte)
/// and pinned key are the same as the connection's: a connection made without a pin is never
/// reused for a pinned request. A connect timeout bounds only a connection being made: a
/// transfer that reuses one has no connect phase. A transfer asking for HTTP/1.1 never joins
/// an HTTP/2 connection (7.88.1, `url.c` `ConnectionExists`), and offers only `http/1.1` in
/// ALPN when it makes one.
///
/// **Refusal.** Everything is found at run time, through the shims: the easy handle by
/// reflection (`FoundationNetworkingLayout.easyHandle(of:)`), `curl_easy_setopt` and
/// `curl_easy_getinfo` in their table (`Curl`). A ``FetchSession`` proves the whole
/// path on a probe task (cancelled, never resumed: nothing is sent) before its first task.
/// Where it fails, a session with trust settings is not made
/// (``TrustConfigurationError/Reason/notEnforceable(_:)``: a security setting that cannot be
/// enforced refuses), and a session without them sets no connect timeouts
/// (``FetchSession/enforcesConnectTimeouts`` is `false`: a convenience falls back to the idle
/// timeout) and no HTTP version (a bandwidth-limited transfer that then runs over HTTP/2 turns
/// ``FetchQueue/isBandwidthLimitEnforced`` `false`).
///
/// **Swift 6.4** (read in swift-6.4.x-DEVELOPMENT-SNAPSHOT-2026-08-14-a):
/// - #5417 makes `URLSessionTask.cancel()` do its work in a `workQueue.async`: the probe's task
///   asks this cache after `cancel()` returns. The probe waits for that answer (``probeDeadline``)
///   instead of reading it at once; `TaskOptionsProbeTests` cancels late to stand in for it.
///   `resume()` is still a `workQueue.sync` there, so a real task's options are still set before
///   `resume()` returns.
/// - The path itself is unchanged: `_getProtocol` still asks the cache first, the protocol
///   storage, `_NativeProtocol.easyHandle` and `_EasyHandle.rawHandle` keep their names and
///   shapes, and `setupCallbacks` keeps its closures (``CurlHeaderCallback``'s symbol).
/// - #5448 (FoundationNetworking no longer sets the receive buffer size) and #5474 (OpenSSL's
///   exit handler off) change nothing here; see `Transfer.followsInANewTask(_:)` and
///   `Sources/CFetchKitShims/exit_cleanup.c`.
final class CurlTaskOptions: URLCache, @unchecked Sendable {
    /// Finds a task's libcurl easy handle (reflection by default; tests give one that fails).
    typealias HandleLookup = @Sendable (URLSessionTask) -> EasyHandle?
    typealias EasyHandle = FoundationNetworkingLayout.EasyHandle

    /// What was set on one task's handle.
    struct Outcome: Equatable {
        /// Whether the trust settings were set (`true` when the session has none).
        var trust: Bool
        /// Whether the connect timeout asked for was set (`false` when none was asked for).
        var connectTimeout: Bool
        /// Whether HTTP/1.1 was asked for and set (`false` when not asked for).
        var http1: Bool = false
        /// Whether the receive window asked for was set (`false` when none was asked for).
        var receiveWindow: Bool = false
        /// Whether the header callback goes through ``ResponseHeadFilter`` (``CurlHeaderCallback``).
        var headGuard: Bool = false
    }

    /// What one task asks for beyond the session's trust settings.
    struct TaskRequest: Equatable {
        /// A connect timeout, in milliseconds.
        var connectTimeout: Int?
        /// The task's share of a bandwidth limit, in bytes per second, if it reads under one:
        /// it then keeps to HTTP/1.1, and below ``ReceiveWindow/threshold`` gets a small
        /// receive window on a connection of its own.
        var bandwidthShare: Int?
    }

    let trust: TrustSettings
    private let lookup: HandleLookup
    /// The CA blob: the system bundle, then the added CAs; `nil` when none are added. Made by
    /// the probe, on the work queue.
    private let caBlob = Protected<[UInt8]?>(nil)
    /// What each task about to be resumed asks for (a connect timeout, HTTP/1.1), by task;
    /// taken on the work queue when FoundationNetworking asks the cache.
    private let requests = Protected([ObjectIdentifier: TaskRequest]())
    /// What was set, by task; taken by ``take(_:)`` once the task is resumed.
    private let outcomes = Protected([ObjectIdentifier: Outcome]())
    /// Why the path is not proven: "not probed" until the probe, `nil` once it succeeded. Until
    /// then, and if it failed, a task with a connect timeout is resumed without one.
    private let unproven = Protected<String?>("not probed")

    /// Where FoundationNetworking looks for the system bundle when libcurl names none.
    static let systemBundlePaths = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                                    "/usr/share/ssl/certs/ca-bundle.crt", "/usr/local/share/certs/ca-root-nss.crt",
                                    "/etc/ssl/cert.pem"]

    /// A hook setting `trust` (which may be empty) and the connect timeouts, or why there
    /// cannot be one.
    init(trust: TrustSettings, lookup: @escaping HandleLookup = FoundationNetworkingLayout.easyHandle(of:)) throws(TrustConfigurationError) {
        guard Curl.isAvailable else { throw TrustConfigurationError(.notEnforceable("libcurl's curl_easy_setopt is not in this process")) }
        self.trust = trust
        self.lookup = lookup
        // No disk: "/dev/null" cannot become a directory, so URLCache keeps none.
        super.init(memoryCapacity: 0, diskCapacity: 0, diskPath: "/dev/null")
    }

    /// Proves, on `session` (whose configuration has this cache), that the options can be set:
    /// a task made and cancelled without being resumed (nothing is sent), whose handle must be
    /// found and take every option. Call it before the session has any other task.
    ///
    /// - Returns: `nil` when proven, otherwise why not (also kept in ``probeFailure``).
    ///
    /// `cancel` is how the probe's task is cancelled: `URLSessionTask.cancel()` unless a test
    /// stands in for a toolchain whose `cancel()` does its work later (see ``probeDeadline``).
    @discardableResult
    func probe(_ session: URLSession, deadline: TimeInterval = CurlTaskOptions.probeDeadline,
               cancel: (URLSessionTask) -> Void = { $0.cancel() }) -> String? {
        let failure = runProbe(session, deadline: deadline, cancel: cancel)
        unproven.withLock { $0 = failure }
        return failure
    }

    /// How long the probe waits for FoundationNetworking to ask this cache, after the cancel.
    ///
    /// In 6.3, `URLSessionTask.cancel()` makes the task's protocol (and asks the cache) inside a
    /// `workQueue.sync`: the answer is there when `cancel()` returns. From 6.4
    /// (swift-corelibs-foundation #5417, "Fix deadlock with URLSessionTask cancellation"), it
    /// does the same in a `workQueue.async`: the answer comes a moment later, on the work queue.
    /// The probe waits for the answer on both, up to this long.
    static let probeDeadline: TimeInterval = 10

    private func runProbe(_ session: URLSession, deadline: TimeInterval, cancel: (URLSessionTask) -> Void) -> String? {
        var request = URLRequest(url: URL(string: "https://fetchkit-trust-probe.invalid/")!)
        request.httpMethod = "GET"
        let task = session.dataTask(with: request)
        let key = ObjectIdentifier(task)
        probe.withLock { $0 = ProbeState(task: key) }
        defer { probe.withLock { $0 = ProbeState() } }
        cancel(task)    // makes the protocol, through this cache, on the work queue; sends nothing
        let answered = probe.wait(until: Date(timeIntervalSinceNow: deadline)) { !$0.answered }
        _ = CurlHeaderCallback.take(task)
        guard answered, let outcome = take(task) else {
            return "FoundationNetworking did not ask the session's URL cache before making the task's libcurl handle "
                + "(within \(deadline) s of cancelling the probe's task)"
        }
        guardsHeads.withLock { $0 = outcome.headGuard }
        guard outcome.trust, outcome.connectTimeout, outcome.http1 else {
            return "the task's libcurl handle was not found (another FoundationNetworking layout) or did not take "
                + "CURLOPT_CAINFO_BLOB, CURLOPT_PINNEDPUBLICKEY, CURLOPT_CONNECTTIMEOUT_MS and CURLOPT_HTTP_VERSION"
        }
        return nil
    }

    /// Whether the probe put ``CurlHeaderCallback`` on its task's handle: then every task's
    /// response head goes through ``ResponseHeadFilter``.
    var guardsResponseHeads: Bool { guardsHeads.snapshot }

    /// How many of this session's tasks have a head filter and have not completed (for tests).
    var headFilterCount: Int { CurlHeaderCallback.count(of: ObjectIdentifier(self)) }
    private let guardsHeads = Protected(false)

    /// The probe's task while it runs, and whether FoundationNetworking asked for it yet.
    private struct ProbeState {
        var task: ObjectIdentifier?
        var answered = false
    }
    private let probe = Protected(ProbeState())

    /// Why the probe did not prove that each task's handle takes the options; `nil` once it did.
    var probeFailure: String? { unproven.snapshot }

    /// Asks for `request` on `task`, which is about to be resumed.
    func willResume(_ task: URLSessionTask, _ request: TaskRequest) {
        guard probeFailure == nil, request != TaskRequest() else { return }
        requests.withLock { $0[ObjectIdentifier(task)] = request }
    }

    /// What was set on `task`'s handle (`nil`: FoundationNetworking never asked, or there was
    /// nothing to set), forgotten once read. Read it right after `resume()`, which asks
    /// synchronously.
    func take(_ task: URLSessionTask) -> Outcome? {
        let key = ObjectIdentifier(task)
        requests.withLock { $0[key] = nil }
        return outcomes.withLock { $0.removeValue(forKey: key) }
    }

    // MARK: URLCache: nothing is ever cached

    override func getCachedResponse(for dataTask: URLSessionDataTask,
                                    completionHandler: @Sendable @escaping (CachedURLResponse?) -> Void) {
        // Makes the protocol and its easy handle, and queues `startLoading()` behind this.
        completionHandler(nil)
        let key = ObjectIdentifier(dataTask)
        let isProbe = probe.withLock { $0.task == key }
        let request = isProbe ? TaskRequest(connectTimeout: 1_000, bandwidthShare: Int.max)
            : requests.withLock { $0.removeValue(forKey: key) } ?? TaskRequest()
        let outcome = apply(to: dataTask, request, isProbe: isProbe)
        // Nothing asked for (the common case): nothing for `take(_:)` to read.
        guard !trust.isEmpty || request != TaskRequest() || isProbe else { return }
        outcomes.withLock { $0[key] = outcome }
        if isProbe {
            probe.withLock { $0.answered = true }
            probe.broadcast()
        }
    }

    override func cachedResponse(for request: URLRequest) -> CachedURLResponse? { nil }
    override func storeCachedResponse(_ cachedResponse: CachedURLResponse, for request: URLRequest) {}
    override func storeCachedResponse(_ cachedResponse: CachedURLResponse, for dataTask: URLSessionDataTask) {}
    override func removeCachedResponse(for request: URLRequest) {}
    override func removeCachedResponse(for dataTask: URLSessionDataTask) {}
    override func removeAllCachedResponses() {}
    override func removeCachedResponses(since date: Date) {}

    // MARK: Setting the options (URLSession's work queue)

    /// Sets the options on `task`'s new easy handle. The probe sets every option, a pin, a
    /// connect timeout and HTTP/1.1 included, to prove each takes (its handle never connects).
    private func apply(to task: URLSessionTask, _ request: TaskRequest, isProbe: Bool) -> Outcome {
        guard let found = lookup(task) else { return Outcome(trust: trust.isEmpty && !isProbe, connectTimeout: false) }
        let handle = found.raw
        // First: every task's head goes through the filter where it can.
        let guarded = CurlHeaderCallback.install(on: handle, callbackData: found.callbackData, task: task,
                                                 owner: ObjectIdentifier(self))
        let trusted = applyTrust(to: handle, host: task.originalRequest?.url?.host, isProbe: isProbe)
        let timed = request.connectTimeout.map { Curl.set(handle, .connectTimeoutMS, max(1, $0)) } ?? false
        let http1 = request.bandwidthShare != nil && Curl.set(handle, .httpVersion, Curl.HTTPVersion.http1_1)
        // The probe's handle never connects: no window (a convenience) to prove on it.
        let window = isProbe ? false : request.bandwidthShare.map { applyBandwidthShare($0, to: handle) } ?? false
        return Outcome(trust: trusted, connectTimeout: timed, http1: http1, receiveWindow: window, headGuard: guarded)
    }

    /// Prepares `handle`, new, for a transfer under a bandwidth limit whose share is `share`
    /// bytes per second: forgets any socket watched for a handle freed at its address
    /// (``CurlSocketCallback/forget(_:)``), and, up to ``ReceiveWindow/threshold``, gives it a
    /// new connection of its own with a small receive window, closed when the transfer ends
    /// (``ReceiveWindow``). Whether a window was set (`false` when none is needed).
    private func applyBandwidthShare(_ share: Int, to handle: UnsafeMutableRawPointer) -> Bool {
        CurlSocketCallback.forget(handle)
        guard let bytes = ReceiveWindow.bytes(forShare: share) else { return false }
        // The function first: FoundationNetworking's own callback must never be handed this data
        // (it reads it as its handle object). Nothing uses the handle in between (this runs on
        // the work queue, before the handle is added to libcurl).
        guard Curl.set(handle, .socketOptionFunction, ReceiveWindow.callback) else { return false }
        guard Curl.set(handle, .socketOptionData, pointer: ReceiveWindow.callbackData(bytes: bytes)) else {
            // No callback at all (libcurl's default) rather than this one with the old data;
            // FoundationNetworking's sets nothing.
            _ = Curl.set(handle, .socketOptionFunction, pointer: nil)
            return false
        }
        // A connection of its own, which no other transfer gets from the pool afterwards.
        return Curl.set(handle, .freshConnect, 1) && Curl.set(handle, .forbidReuse, 1)
    }

    /// Sets the trust options on `handle`; whether all took (`true` when there are none).
    private func applyTrust(to handle: UnsafeMutableRawPointer, host: String?, isProbe: Bool) -> Bool {
        if !trust.certificateAuthorities.isEmpty {
            guard let blob = caBlob.withLock({ blob in
                if blob == nil { blob = makeBlob(defaultBundle: defaultBundlePath(of: handle)) }
                return blob
            }) else { return false }
            guard blob.withUnsafeBytes({ Curl.set(handle, .caInfoBlob, copying: $0) }) else { return false }
        }
        let pin = isProbe ? "sha256//" + Data(count: 32).base64EncodedString() : trust.curlPinnedPublicKey(forHost: host)
        if let pin {
            guard Curl.set(handle, .pinnedPublicKey, string: pin) else { return false }
        }
        return true
    }

    /// The CA file libcurl uses by default (`CURLINFO_CAINFO`: its built-in default, the path
    /// FoundationNetworking keeps too), or, if it has none, the first of FoundationNetworking's
    /// own list that can be read.
    private func defaultBundlePath(of handle: UnsafeMutableRawPointer) -> String? {
        if let path = Curl.string(handle, .caInfo) { return path }
        return Self.systemBundlePaths.first { FileManager.default.isReadableFile(atPath: $0) }
    }

    /// The system bundle (if it can be read: otherwise only the added CAs are trusted), then
    /// the added CAs.
    private func makeBlob(defaultBundle path: String?) -> [UInt8] {
        var bytes = [UInt8]()
        if let path, let system = FileManager.default.contents(atPath: path), system.count <= 64 << 20 {
            bytes += system
            if bytes.last != UInt8(ascii: "\n") { bytes.append(UInt8(ascii: "\n")) }
        }
        bytes += Array(trust.certificateAuthoritiesPEM.utf8)
        return bytes
    }
}
#endif
