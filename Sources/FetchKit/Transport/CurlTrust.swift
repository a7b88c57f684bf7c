import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

#if canImport(FoundationNetworking) && (canImport(Glibc) || canImport(Musl))
/// Enforces ``TrustSettings`` on Linux: sets libcurl's `CURLOPT_CAINFO_BLOB` (the system's CAs
/// and the added ones) and `CURLOPT_PINNEDPUBLICKEY` (the host's pins) on each task's own easy
/// handle before FoundationNetworking first configures it or hands it to libcurl.
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
/// when libcurl has no default (`setCARootBundlePath`), and never a blob or a pin.
///
/// **Connection reuse.** libcurl (7.88.1, `vtls.c` `Curl_ssl_config_matches`) reuses a pooled
/// connection, HTTP/2 multiplexing included, only for a transfer whose CA blob (byte for byte)
/// and pinned key are the same as the connection's: a connection made without a pin is never
/// reused for a pinned request.
///
/// **Refusal.** Everything is found at run time: the easy handle by reflection
/// (`URLSessionTask._protocolStorage` → `.existing(protocol)` → `easyHandle` → `rawHandle`),
/// `curl_easy_setopt` and `curl_easy_getinfo` with `dlsym`. A ``FetchSession`` proves the whole
/// path on a probe task (cancelled, never resumed: nothing is sent) before it accepts the
/// settings; where it fails, the session is not made (``TrustConfigurationError/Reason/notEnforceable(_:)``).
final class CurlTrust: URLCache, @unchecked Sendable {
    /// Finds a task's libcurl easy handle (reflection by default; tests give one that fails).
    typealias HandleLookup = @Sendable (URLSessionTask) -> UnsafeMutableRawPointer?

    let settings: TrustSettings
    private let lookup: HandleLookup
    private let setOption: UnsafeMutableRawPointer
    private let getInfo: UnsafeMutableRawPointer
    /// The CA blob: the system bundle, then the added CAs; `nil` when none are added. Made by
    /// the probe, on the work queue.
    private let caBlob = Protected<[UInt8]?>(nil)
    /// Whether the options were set, by task; taken by ``take(_:)`` once the task is resumed.
    private let outcomes = Protected([ObjectIdentifier: Bool]())

    /// libcurl's option and info numbers (curl.h, 7.88.1).
    private enum Curl {
        static let caInfoBlob: Int32 = 40_309        // CURLOPT_CAINFO_BLOB (CURLOPTTYPE_BLOB + 309)
        static let pinnedPublicKey: Int32 = 10_230   // CURLOPT_PINNEDPUBLICKEY (CURLOPTTYPE_STRINGPOINT + 230)
        static let caInfo: Int32 = 0x100000 + 61     // CURLINFO_CAINFO (CURLINFO_STRING + 61)
        static let blobCopy: UInt32 = 1              // CURL_BLOB_COPY
    }

    /// Where FoundationNetworking looks for the system bundle when libcurl names none.
    static let systemBundlePaths = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                                    "/usr/share/ssl/certs/ca-bundle.crt", "/usr/local/share/certs/ca-root-nss.crt",
                                    "/etc/ssl/cert.pem"]

    /// A hook for `settings`, or why there cannot be one.
    init(settings: TrustSettings, lookup: @escaping HandleLookup = CurlTrust.easyHandle(of:)) throws(TrustConfigurationError) {
        guard let setOption = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_setopt"),
              let getInfo = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "curl_easy_getinfo")
        else { throw TrustConfigurationError(.notEnforceable("libcurl's curl_easy_setopt is not in this process")) }
        self.settings = settings
        self.lookup = lookup
        self.setOption = setOption
        self.getInfo = getInfo
        // No disk: "/dev/null" cannot become a directory, so URLCache keeps none.
        super.init(memoryCapacity: 0, diskCapacity: 0, diskPath: "/dev/null")
    }

    /// Proves, on `session` (whose configuration has this cache), that the options can be set:
    /// a task made and cancelled without being resumed (nothing is sent), whose handle must be
    /// found and take both options. Call it before the session has any other task.
    func probe(_ session: URLSession) throws(TrustConfigurationError) {
        var request = URLRequest(url: URL(string: "https://fetchkit-trust-probe.invalid/")!)
        request.httpMethod = "GET"
        let task = session.dataTask(with: request)
        probing.withLock { $0 = true }
        task.cancel()   // makes the protocol, through this cache, on the work queue; sends nothing
        probing.withLock { $0 = false }
        guard let outcome = take(task) else {
            throw TrustConfigurationError(.notEnforceable(
                "FoundationNetworking did not ask the session's URL cache before making the task's libcurl handle"))
        }
        guard outcome else {
            throw TrustConfigurationError(.notEnforceable(
                "the task's libcurl handle was not found (another FoundationNetworking layout) or did not take CURLOPT_CAINFO_BLOB and CURLOPT_PINNEDPUBLICKEY"))
        }
    }
    private let probing = Protected(false)

    /// Whether the options were set on `task`'s handle (`nil`: FoundationNetworking never asked),
    /// forgotten once read. Read it right after `resume()`, which asks synchronously.
    func take(_ task: URLSessionTask) -> Bool? {
        outcomes.withLock { $0.removeValue(forKey: ObjectIdentifier(task)) }
    }

    // MARK: URLCache: nothing is ever cached

    override func getCachedResponse(for dataTask: URLSessionDataTask,
                                    completionHandler: @Sendable @escaping (CachedURLResponse?) -> Void) {
        // Makes the protocol and its easy handle, and queues `startLoading()` behind this.
        completionHandler(nil)
        let applied = apply(to: dataTask)
        outcomes.withLock { $0[ObjectIdentifier(dataTask)] = applied }
    }

    override func cachedResponse(for request: URLRequest) -> CachedURLResponse? { nil }
    override func storeCachedResponse(_ cachedResponse: CachedURLResponse, for request: URLRequest) {}
    override func storeCachedResponse(_ cachedResponse: CachedURLResponse, for dataTask: URLSessionDataTask) {}
    override func removeCachedResponse(for request: URLRequest) {}
    override func removeCachedResponse(for dataTask: URLSessionDataTask) {}
    override func removeAllCachedResponses() {}
    override func removeCachedResponses(since date: Date) {}

    // MARK: Setting the options (URLSession's work queue)

    private typealias SetPointerOption = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeRawPointer?) -> Int32
    private typealias GetStringInfo = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>) -> Int32

    /// Sets the options on `task`'s new easy handle; whether all took.
    private func apply(to task: URLSessionTask) -> Bool {
        guard let handle = lookup(task) else { return false }
        // CURLcode curl_easy_setopt(CURL *, CURLoption, ...) with a pointer: on the Linux ABIs
        // Swift supports, a variadic pointer argument travels like a fixed one.
        let set = unsafeBitCast(setOption, to: SetPointerOption.self)
        if !settings.certificateAuthorities.isEmpty {
            guard let blob = caBlob.withLock({ blob in
                if blob == nil { blob = makeBlob(defaultBundle: defaultBundlePath(of: handle)) }
                return blob
            }) else { return false }
            // struct curl_blob { void *data; size_t len; unsigned int flags; }, copied by libcurl.
            let applied = blob.withUnsafeBytes { bytes -> Bool in
                let descriptor = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)
                defer { descriptor.deallocate() }
                descriptor.initializeMemory(as: UInt8.self, repeating: 0, count: 24)
                descriptor.storeBytes(of: UnsafeMutableRawPointer(mutating: bytes.baseAddress), toByteOffset: 0, as: UnsafeMutableRawPointer?.self)
                descriptor.storeBytes(of: bytes.count, toByteOffset: 8, as: Int.self)
                descriptor.storeBytes(of: Curl.blobCopy, toByteOffset: 16, as: UInt32.self)
                return set(handle, Curl.caInfoBlob, descriptor) == 0   // CURLE_OK
            }
            guard applied else { return false }
        }
        // The probe sets a pin too, to prove the option takes (its handle never connects).
        let pin = probing.snapshot ? "sha256//" + Data(count: 32).base64EncodedString()
                                   : settings.curlPinnedPublicKey(forHost: task.originalRequest?.url?.host)
        if let pin {
            guard pin.withCString({ set(handle, Curl.pinnedPublicKey, $0) }) == 0 else { return false }
        }
        return true
    }

    /// The CA file libcurl uses by default (`CURLINFO_CAINFO`: its built-in default, the path
    /// FoundationNetworking keeps too), or, if it has none, the first of FoundationNetworking's
    /// own list that can be read.
    private func defaultBundlePath(of handle: UnsafeMutableRawPointer) -> String? {
        let get = unsafeBitCast(getInfo, to: GetStringInfo.self)
        var value: UnsafePointer<CChar>?
        if get(handle, Curl.caInfo, &value) == 0, let value { return String(cString: value) }
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
        bytes += Array(settings.certificateAuthoritiesPEM.utf8)
        return bytes
    }

    // MARK: Finding the easy handle

    /// `task`'s libcurl easy handle, once FoundationNetworking has made its protocol: found by
    /// reflection, each step checked; `nil` on any other layout.
    @Sendable static func easyHandle(of task: URLSessionTask) -> UnsafeMutableRawPointer? {
        guard let storage = child("_protocolStorage", of: task) else { return nil }
        let state = Mirror(reflecting: storage)
        guard state.displayStyle == .enum, let existing = state.children.first, existing.label == "existing",
              let urlProtocol = existing.value as? URLProtocol, urlProtocol.task === task,
              let easyHandle = child("easyHandle", of: urlProtocol).flatMap(unwrapped),
              let raw = child("rawHandle", of: easyHandle).flatMap(unwrapped)
        else { return nil }
        if let pointer = raw as? UnsafeMutableRawPointer { return pointer }
        if let pointer = raw as? OpaquePointer { return UnsafeMutableRawPointer(pointer) }
        return nil
    }

    /// The stored property `label` of `value`, looked for in its class and its superclasses.
    private static func child(_ label: String, of value: Any) -> Any? {
        var mirror: Mirror? = Mirror(reflecting: value)
        while let current = mirror {
            if let found = current.children.first(where: { $0.label == label }) { return found.value }
            mirror = current.superclassMirror
        }
        return nil
    }

    /// `value` itself, or what it wraps if it is an optional (`nil` if that is empty).
    private static func unwrapped(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first?.value
    }
}
#endif
