import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A list of downloads that survives a restart, a crash or `kill -9`: what was tracked and has
/// not completed yet.
///
/// ```swift
/// func startDownloads(on queue: FetchQueue) throws {
///     let journal = try DownloadJournal(contentsOf: folder.appendingPathComponent("downloads.json"))
///     // At launch: enqueue what the last run left unfinished; each resumes its partial file.
///     for restored in journal.restore().downloads {
///         queue.enqueue(restored.operation, on: .global) { _ in }
///     }
///     // A new download: tracked until it completes.
///     let download = DownloadOperation(url: isoURL, destination: folder.appendingPathComponent("big.iso"))
///     try journal.track(download)
///     queue.enqueue(download, on: .global) { _ in }
/// }
/// ```
///
/// **What it keeps.** An entry per tracked download: an identifier (yours, or a new UUID), the
/// URL, the destination, the expected digest (``DownloadOperation/expectedDigest``) and the
/// request's headers. A download that succeeds leaves the journal; one that fails or is cancelled
/// stays, so that ``restore(request:)`` tries it again (``remove(_:)-(String)`` forgets it). A restored
/// download resumes its partial file as any download to the same destination from the same URL
/// does (see ``DownloadOperation``): after `kill -9` the partial file is resumed from its length,
/// and a digest is checked over the whole file.
///
/// **Secrets.** Unless you pass `storesSecrets: true`, nothing secret is written: a URL with a
/// password or a sensitive query parameter (``Redaction``) is kept only redacted, and sensitive
/// headers (`Authorization`, `Cookie`, …) not at all. Such an entry is not
/// ``Entry/isComplete``: ``restore(request:)`` asks your closure for its request, by identifier.
///
/// **Crash safety.** Every change rewrites the whole journal to a new file beside it, flushed to
/// disk (`fsync`), then renamed over the old one: a crash at any moment leaves the old list or the
/// new one, never a torn file. The file is private to this user (mode 0600), never written through
/// a link, and read only if it is a private regular file of at most 16 MiB. One process at a time
/// uses a journal: it holds an advisory lock (`flock(2)`) on `<name>.lock` beside it, and a second
/// ``init(contentsOf:storesSecrets:)`` fails with ``JournalError/Kind/inUse(by:)``.
public final class DownloadJournal: Sendable {
    /// One download of the journal.
    public struct Entry: Sendable, Hashable, Codable {
        /// The identifier you gave ``DownloadJournal/track(_:identifier:)``, or a UUID.
        public let identifier: String
        /// The URL, if the journal holds it in clear: `nil` when it holds a secret and the journal
        /// does not store secrets.
        public let url: URL?
        /// The URL with its secrets redacted, for a person.
        public let redactedURL: String
        /// Where the file goes.
        public let destination: URL
        /// The expected digest, as `sha256:<hex>`, if the download had one.
        public let expectedDigest: String?
        /// The request's method, if not `GET`.
        public let method: String?
        /// The request's headers that the journal holds.
        public let headers: [String: String]
        /// Whether the entry holds the whole request: no secret was left out.
        public let isComplete: Bool

        /// ``expectedDigest`` read back: `nil` if there is none, or if it is not a digest FetchKit
        /// knows (``DownloadJournal/restore(request:)`` then leaves the entry unresolved).
        public var digest: FileDigest? {
            guard let text = expectedDigest else { return nil }
            let parts = text.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let algorithm = FileDigest.Algorithm(named: String(parts[0])) else { return nil }
            return FileDigest(algorithm, hex: String(parts[1]))
        }

        /// The request the entry describes, if it is complete.
        public var request: URLRequest? {
            guard isComplete, let url else { return nil }
            var request = URLRequest(url: url)
            if let method { request.httpMethod = method }
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            return request
        }

        /// Whether ``destination`` is an absolute file path: one that is not (`file:name`, as a
        /// journal edited by hand may hold) would be written relative to the process's working
        /// directory, and is not restored.
        var hasAbsoluteDestination: Bool {
            destination.isFileURL && destination.path.hasPrefix("/")
        }

        /// The entry as read from a file: its destination standardized (`.` and `..` resolved,
        /// as a download to it resolves them), so that what an app checks is where it writes.
        func standardized() -> Entry {
            guard hasAbsoluteDestination else { return self }
            return Entry(identifier: identifier, url: url, redactedURL: redactedURL,
                         destination: destination.standardizedFileURL, expectedDigest: expectedDigest,
                         method: method, headers: headers, isComplete: isComplete)
        }
    }

    /// Why a journal could not be opened, read or written.
    public struct JournalError: Error, Sendable, Equatable, CustomStringConvertible {
        /// What went wrong.
        public enum Kind: Sendable, Equatable {
            /// Another process uses the journal; its ID, if known.
            case inUse(by: Int32?)
            /// The file is not a private regular file of this user's, is larger than 16 MiB, or
            /// cannot be read (`errno`, if known).
            case unreadable(Int32?)
            /// The file is not a journal FetchKit wrote.
            case malformed
            /// The new journal could not be written (`errno`, if known): the previous one stands.
            case writeFailed(Int32?)
            /// The identifier is already tracked.
            case duplicateIdentifier(String)
            /// The download has already started: track it before you enqueue it.
            case alreadyStarted
        }

        /// What went wrong.
        public let kind: Kind
        /// The journal's path.
        public let path: String

        public var description: String {
            switch kind {
            case .inUse(let pid):
                return "the download journal \(path) is in use by another process" + (pid.map { " (pid \($0))" } ?? "")
            case .unreadable(let code):
                return "the download journal \(path) cannot be read" + Self.reason(code)
                    + " (it must be a regular file of this user's, not a link, of at most 16 MiB)"
            case .malformed:
                return "the download journal \(path) is not a FetchKit journal"
            case .writeFailed(let code):
                return "the download journal \(path) could not be written" + Self.reason(code)
            case .duplicateIdentifier(let identifier):
                return "the download journal \(path) already tracks '\(identifier)'"
            case .alreadyStarted:
                return "a download must be tracked before it starts (journal \(path))"
            }
        }

        private static func reason(_ code: Int32?) -> String {
            code.map { ": " + String(cString: strerror($0)) } ?? ""
        }
    }

    /// The journal's file.
    public let fileURL: URL
    /// Whether secrets are written in clear.
    public let storesSecrets: Bool

    private let lock: PartialFileLock
    private let state: Protected<Contents>
    /// Where the file is written, one write at a time: a change's own write, and the writes
    /// that catch up with downloads that left (``leave(_:)``).
    let writer = DispatchQueue(label: "FetchKit.DownloadJournal.writer")
    /// How many times the file was written (tests).
    let writeCount = Protected(0)

    /// The entries, and whether the file lags behind them.
    private struct Contents {
        var entries: [Entry]
        /// Downloads left since the last write: the file still lists them.
        var unwritten = false
        /// A write that catches up is queued on ``writer`` and has not begun.
        var catchUpQueued = false
    }

    /// The most a journal file may hold: 16 MiB.
    static let maximumSize = 16 << 20

    private struct File: Codable {
        var version: Int
        var entries: [Entry]
    }

    /// Opens the journal at `fileURL`, or starts an empty one there (the file is written at the
    /// first change). Its directory must exist.
    ///
    /// - Parameters:
    ///   - fileURL: The journal's file.
    ///   - storesSecrets: Whether URLs with passwords or tokens and sensitive headers are written
    ///     in clear. Default `false`.
    /// - Throws: ``JournalError``: another process uses it, or the file is not a journal.
    public init(contentsOf fileURL: URL, storesSecrets: Bool = false) throws(JournalError) {
        let fileURL = fileURL.standardizedFileURL
        self.fileURL = fileURL
        self.storesSecrets = storesSecrets
        let path = fileURL.path
        switch PartialFileLock.acquire(at: fileURL.appendingPathExtension("lock")) {
        case .success(let lock): self.lock = lock
        case .failure(.held(let pid)): throw JournalError(kind: .inUse(by: pid), path: path)
        case .failure(.unusable(let code)): throw JournalError(kind: .unreadable(code), path: path)
        }
        // New files that a process killed while it wrote left behind: no one writes them now.
        let directory = fileURL.deletingLastPathComponent()
        let stem = "." + fileURL.lastPathComponent + "."
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [] {
            if name.hasPrefix(stem) && name.hasSuffix(".new") && name.dropFirst(stem.count).dropLast(4).allSatisfy(\.isNumber) {
                LocalFile.remove(directory.appendingPathComponent(name, isDirectory: false))
            } else if FileBodySink.isStaleWholeFile(named: name, in: directory) {
                // A small body's file that a process killed between its write and its rename
                // left behind (``FileBodySink``): a minute old, it is no one's.
                LocalFile.remove(directory.appendingPathComponent(name, isDirectory: false))
            }
        }
        var entries: [Entry] = []
        if let status = LocalFile.status(fileURL) {
            guard status.isPrivateRegularFile, let data = LocalFile.read(fileURL, limit: Self.maximumSize) else {
                lock.release()
                throw JournalError(kind: .unreadable(nil), path: path)
            }
            guard let file = try? JSONDecoder().decode(File.self, from: data), file.version == 1 else {
                lock.release()
                throw JournalError(kind: .malformed, path: path)
            }
            entries = file.entries.map { $0.standardized() }
        }
        state = Protected(Contents(entries: entries))
    }

    deinit {
        // Downloads that left while the write that follows them waited (``leaveDelay``).
        try? catchUp()
        lock.release()
    }

    /// The downloads tracked and not completed, in the order they were tracked.
    public var entries: [Entry] {
        state.withLock { $0.entries }
    }

    /// Tracks `download` until it succeeds: the journal is written now, before it starts, and
    /// the entry leaves when it succeeds, before the download's completion handlers run (see
    /// ``flush()`` for when the file follows). Call it before you enqueue the download. The
    /// download holds the journal until it finishes.
    ///
    /// - Parameters:
    ///   - download: A download that has not started.
    ///   - identifier: Yours, to find the entry again (``restore(request:)`` hands it back);
    ///     default a new UUID.
    /// - Returns: The entry's identifier.
    @discardableResult
    public func track(_ download: DownloadOperation, identifier: String? = nil) throws(JournalError) -> String {
        try track([(download, identifier)])[0]
    }

    /// Tracks several downloads with one write of the journal: a list of a thousand costs one
    /// write, not a thousand. Otherwise as ``track(_:identifier:)``; nothing is tracked if one of
    /// them cannot be.
    ///
    /// - Parameters:
    ///   - downloads: Downloads that have not started, each with your identifier or `nil` for a
    ///     new UUID.
    ///   - replacingExisting: Whether an entry already listed under one of the identifiers is
    ///     replaced (a download given again: the download the old entry listed, if it still
    ///     runs, no longer takes the entry with it when it succeeds); `false` (the default)
    ///     refuses it with
    ///     ``JournalError/Kind/duplicateIdentifier(_:)``. Two of `downloads` with one identifier
    ///     are refused either way.
    /// - Returns: The entries' identifiers, in order.
    @discardableResult
    public func track(_ downloads: [(download: DownloadOperation, identifier: String?)],
                      replacingExisting: Bool = false) throws(JournalError) -> [String] {
        var added: [Entry] = []
        for (download, identifier) in downloads {
            guard download.core.withLock({ $0.machine.phase == .pending }), let request = download.request else {
                throw JournalError(kind: .alreadyStarted, path: fileURL.path)
            }
            added.append(makeEntry(identifier: identifier ?? UUID().uuidString, request: request,
                                   destination: download.destination, digest: download.expectedDigest))
        }
        var seen = Set<String>()
        for entry in added where !seen.insert(entry.identifier).inserted {
            throw JournalError(kind: .duplicateIdentifier(entry.identifier), path: fileURL.path)
        }
        try change { entries throws(JournalError) in
            if replacingExisting {
                entries.removeAll { seen.contains($0.identifier) }
            } else if let listed = entries.first(where: { seen.contains($0.identifier) }) {
                throw JournalError(kind: .duplicateIdentifier(listed.identifier), path: fileURL.path)
            }
            entries += added
        }
        for (index, entry) in added.enumerated() {
            downloads[index].download.whenSucceeded { self.leave(entry) }
        }
        return added.map(\.identifier)
    }

    /// Forgets the entry `identifier` (nothing happens if there is none), and writes the journal.
    public func remove(_ identifier: String) throws(JournalError) {
        try remove([identifier])
    }

    /// Forgets the entries `identifiers` (those there are), with one write of the journal.
    public func remove(_ identifiers: [String]) throws(JournalError) {
        let gone = Set(identifiers)
        try change { entries in entries.removeAll { gone.contains($0.identifier) } }
    }

    /// Writes the journal now if it lags behind downloads that succeeded, and returns once it
    /// is on disk.
    ///
    /// A download that succeeds leaves ``entries`` at once, before its completion handlers run;
    /// the file follows within a second, in one write, on a queue of the
    /// journal's own, for every download that succeeded meanwhile (a journal of a thousand small
    /// files is not written a thousand times over, nor flushed to disk once per file). A crash in between leaves such a download listed, and
    /// ``restore(request:)`` downloads it again. Call this before you read the file yourself or
    /// remove it.
    public func flush() throws(JournalError) {
        let outcome = writer.sync { () -> Result<Void, JournalError> in
            do throws(JournalError) {
                try catchUp()
            } catch {
                return .failure(error)
            }
            return .success(())
        }
        try outcome.get()
    }

    /// The downloads to enqueue again: one per entry, each resuming its partial file.
    ///
    /// An entry that is not ``Entry/isComplete`` (a secret was left out) gets its request from
    /// `request`; one it returns `nil` for, or whose digest or URL cannot be read, or whose
    /// destination is not an absolute file path, is listed in `unresolved` and stays in the
    /// journal. The operations are tracked: each leaves the journal when it succeeds.
    ///
    /// A download goes where its entry says. When the journal's file may have been written by
    /// someone else (it lies in a shared or synced folder), check ``Entry/destination`` in
    /// `request` and return `nil` for one outside your folder: destinations are read back
    /// standardized (no `..`), so a check of the path is a check of where the file goes.
    ///
    /// ```swift
    /// let restored = journal.restore { entry in
    ///     entry.destination.deletingLastPathComponent().path == folder.standardizedFileURL.path ? entry.request : nil
    /// }
    /// ```
    ///
    /// - Parameter request: Makes the request of an entry: called for every entry, complete or not
    ///   (return `entry.request` to keep what the journal holds). Default: the entry's own.
    public func restore(request: (Entry) -> URLRequest? = { $0.request })
        -> (downloads: [(identifier: String, operation: DownloadOperation)], unresolved: [Entry]) {
        var downloads: [(identifier: String, operation: DownloadOperation)] = []
        var unresolved: [Entry] = []
        for entry in entries {
            let digest = entry.digest
            guard entry.expectedDigest == nil || digest != nil, entry.hasAbsoluteDestination, let made = request(entry) else {
                unresolved.append(entry)
                continue
            }
            let operation = DownloadOperation(request: made, destination: entry.destination)
            operation.expectedDigest = digest
            operation.whenSucceeded { self.leave(entry) }
            downloads.append((entry.identifier, operation))
        }
        return (downloads, unresolved)
    }

    // MARK: Writing

    private func makeEntry(identifier: String, request: URLRequest, destination: URL, digest: FileDigest?) -> Entry {
        let url = request.url
        let redacted = url.map(Redaction.redacted) ?? ""
        let urlHasSecret = url.map { Redaction.redacted($0) != $0.absoluteString } ?? false
        var headers: [String: String] = [:]
        var leftOut = urlHasSecret && !storesSecrets
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            if !storesSecrets && Redaction.isSensitiveHeaderName(name) {
                leftOut = true
            } else {
                headers[name] = value
            }
        }
        let method = request.httpMethod.flatMap { $0.uppercased() == "GET" ? nil : $0 }
        return Entry(identifier: identifier, url: leftOut && urlHasSecret ? nil : url, redactedURL: redacted,
                     destination: destination.standardizedFileURL, expectedDigest: digest?.description,
                     method: method, headers: headers, isComplete: !leftOut && url != nil)
    }

    /// Applies `body` to the entries and writes the journal, one write at a time; on a failed
    /// write the entries are as they were. The write holds no lock a succeeding download's
    /// ``leave(_:)`` waits for: `body` is applied again to the entries of that moment to commit.
    private func change(_ body: (inout [Entry]) throws(JournalError) -> Void) throws(JournalError) {
        let outcome = writer.sync { () -> Result<Void, JournalError> in
            let (current, unwritten) = state.withLock { ($0.entries, $0.unwritten) }
            var changed = current
            do throws(JournalError) {
                try body(&changed)
                guard changed != current || unwritten || LocalFile.status(fileURL) == nil else { return .success(()) }
                try write(changed)
            } catch {
                return .failure(error)
            }
            state.withLock { contents in
                // Only downloads leaving can have changed them since: what they took out stays
                // out (their own entries: not one that replaced theirs under its identifier).
                let left = Set(current).subtracting(contents.entries)
                contents.entries = changed.filter { !left.contains($0) }
                contents.unwritten = !left.isEmpty
            }
            return .success(())
        }
        try outcome.get()
    }

    /// A download that succeeded leaves: at once from ``entries``, and from the file by the next
    /// write, queued unless one is already queued (those that succeed together share it). Only
    /// its own entry leaves: one that replaced it under its identifier (`replacingExisting`) lists
    /// another download, which has not succeeded.
    private func leave(_ entry: Entry) {
        let queue = state.withLock { contents -> Bool in
            let before = contents.entries.count
            contents.entries.removeAll { $0 == entry }
            guard contents.entries.count != before else { return false }
            contents.unwritten = true
            guard !contents.catchUpQueued else { return false }
            contents.catchUpQueued = true
            return true
        }
        guard queue else { return }
        // On failure the file still lags: the next change or flush writes it. Weak: a journal
        // let go of writes what lags as it goes (deinit), and releases its lock then, not a
        // second later.
        writer.asyncAfter(deadline: .now() + leaveDelay.snapshot) { [weak self] in
            try? self?.catchUp(endingQueuedCatchUp: true)
        }
    }

    /// How long the file may lag behind downloads that succeeded: one second (tests set it
    /// longer, to count writes on a loaded machine). A success only takes an entry out (a crash
    /// before the write leaves it listed, and it is downloaded, or found complete, again), so
    /// it waits for others to share its write; a change that adds or replaces entries is
    /// written at once.
    let leaveDelay = Protected<DispatchTimeInterval>(.seconds(1))

    /// On ``writer``: writes the entries if the file lags behind them (on failure it still does).
    private func catchUp(endingQueuedCatchUp: Bool = false) throws(JournalError) {
        let pending = state.withLock { contents -> [Entry]? in
            if endingQueuedCatchUp { contents.catchUpQueued = false }
            guard contents.unwritten else { return nil }
            contents.unwritten = false
            return contents.entries
        }
        guard let pending else { return }
        do throws(JournalError) {
            try write(pending)
        } catch {
            state.withLock { $0.unwritten = true }
            throw error
        }
    }

    /// Writes `entries` to a new file beside the journal, flushes it, and renames it over the
    /// journal; then flushes the directory, so that the rename itself survives a crash.
    private func write(_ entries: [Entry]) throws(JournalError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(File(version: 1, entries: entries)), data.count <= Self.maximumSize else {
            throw JournalError(kind: .writeFailed(nil), path: fileURL.path)
        }
        let directory = fileURL.deletingLastPathComponent()
        let temporary = directory.appendingPathComponent(".\(fileURL.lastPathComponent).\(getpid()).new", isDirectory: false)
        guard LocalFile.replace(temporary, with: data, mode: 0o600, sync: true) else {
            throw JournalError(kind: .writeFailed(errno), path: fileURL.path)
        }
        let renamed = temporary.withUnsafeFileSystemRepresentation { from in
            fileURL.withUnsafeFileSystemRepresentation { to in
                guard let from, let to else { return false }
                return rename(from, to) == 0
            }
        }
        guard renamed else {
            let code = errno
            LocalFile.remove(temporary)
            throw JournalError(kind: .writeFailed(code), path: fileURL.path)
        }
        LocalFile.syncDirectory(directory)
        writeCount.withLock { $0 += 1 }
    }
}
