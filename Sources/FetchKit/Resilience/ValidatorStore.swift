import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Remembers each URL's validators — `ETag` and `Last-Modified` — for conditional GETs.
///
/// Give operations a store and they send `If-None-Match` / `If-Modified-Since` with the
/// validators of their last successful fetch. A `304 Not Modified` then finishes the operation
/// successfully with ``AnyFetchOperation/isNotModified`` set, and its output made from the body
/// the store kept (``FetchOperation/outputWhenNotModified(storedBody:)``): callers get the same
/// model as from a `200`, with one short response on the wire. Validators are recorded only
/// after a response parsed successfully, so a body that failed to parse is fetched whole next
/// time.
///
/// ```swift
/// let validators = ValidatorStore(persistingTo: cachesFolder.appendingPathComponent("feeds.validators.json"))
/// for feed in feeds {
///     let operation = GetFeed(url: feed)
///     operation.configuration.validatorStore = validators
///     queue.enqueue(operation)
/// }
/// ```
///
/// A store made with `storesBodies: false` keeps validators only. A subclass using it says
/// what a `304` yields by overriding ``FetchOperation/outputWhenNotModified(storedBody:)``
/// (without that, a `304` fails as ``FetchError/parseFailed(_:)`` naming the hook). A plain
/// ``FetchOperation`` or ``JSONFetchOperation``, which cannot make its output without the body,
/// sends no validators from such a store and fetches the body whole.
///
/// This works on Linux, where URLCache's revalidation hooks are not dependable: FetchKit sends
/// the headers and reads the 304 itself.
public final class ValidatorStore: @unchecked Sendable {
    /// What is remembered for one URL.
    public struct Validators: Codable, Sendable, Equatable {
        /// The `ETag` of the last successful response.
        public var entityTag: String?
        /// Its `Last-Modified`.
        public var lastModified: String?
        /// Its body, when the store keeps bodies.
        public var body: Data?
    }

    private struct State {
        var entries: [String: Validators] = [:]
        var saveScheduled = false
    }

    private struct File: Codable {
        var version = 1
        var entries: [String: Validators]
    }

    /// Whether bodies are kept with the validators.
    public let storesBodies: Bool
    /// Where the store is persisted, if anywhere.
    public let fileURL: URL?
    private let state = Protected(State())
    private let saveQueue = DispatchQueue(label: "FetchKit.ValidatorStore.save")

    /// Creates an empty store in memory.
    ///
    /// - Parameter storesBodies: Whether to keep each body with its validators. Default `true`:
    ///     a typed operation makes its output from the kept body on a `304`.
    public init(storesBodies: Bool = true) {
        self.storesBodies = storesBodies
        fileURL = nil
    }

    /// Creates a store persisted to `fileURL`: loaded from it now (an unreadable file is
    /// ignored), and written back, atomically, shortly after each change and on ``save()``.
    ///
    /// - Parameters:
    ///   - fileURL: The file.
    ///   - storesBodies: Whether to keep each body with its validators. Default `true`:
    ///     a typed operation makes its output from the kept body on a `304`.
    public init(persistingTo fileURL: URL, storesBodies: Bool = true) {
        self.storesBodies = storesBodies
        self.fileURL = fileURL
        if let data = try? Data(contentsOf: fileURL), let file = try? JSONDecoder().decode(File.self, from: data) {
            state.withLock { $0.entries = file.entries }
        }
    }

    /// The validators remembered for `url`.
    public func validators(for url: URL) -> Validators? {
        state.withLock { $0.entries[Self.key(url)] }
    }

    /// How many URLs have validators.
    public var count: Int {
        state.withLock { $0.entries.count }
    }

    /// Forgets `url`'s validators.
    public func removeValidators(for url: URL) {
        state.withLock { _ = $0.entries.removeValue(forKey: Self.key(url)) }
        scheduleSave()
    }

    /// Forgets everything.
    public func removeAll() {
        state.withLock { $0.entries.removeAll() }
        scheduleSave()
    }

    /// Writes the store to its file now (it does so on its own shortly after each change).
    ///
    /// - Throws: The file system's error.
    public func save() throws {
        guard let fileURL else { return }
        let entries = state.withLock { $0.entries }
        let data = try JSONEncoder().encode(File(entries: entries))
        try data.write(to: fileURL, options: .atomic)
    }

    // MARK: Used by operations

    /// Records a successful response's validators (and body), or forgets the URL if it has none.
    func record(_ response: HTTPURLResponse, body: Data?, for url: URL) {
        let entityTag = response.value(forHTTPHeaderField: "ETag")
        let lastModified = response.value(forHTTPHeaderField: "Last-Modified")
        state.withLock { state in
            if entityTag == nil && lastModified == nil {
                state.entries.removeValue(forKey: Self.key(url))
            } else {
                state.entries[Self.key(url)] = Validators(entityTag: entityTag, lastModified: lastModified,
                                                          body: storesBodies ? body : nil)
            }
        }
        scheduleSave()
    }

    private func scheduleSave() {
        guard fileURL != nil else { return }
        let schedule = state.withLock { state -> Bool in
            defer { state.saveScheduled = true }
            return !state.saveScheduled
        }
        guard schedule else { return }
        // Coalesces a burst of changes (a refresh of every feed) into one write.
        saveQueue.asyncAfter(deadline: .now() + 0.2) { [self] in
            state.withLock { $0.saveScheduled = false }
            try? save()
        }
    }

    static func key(_ url: URL) -> String {
        url.absoluteString
    }
}
