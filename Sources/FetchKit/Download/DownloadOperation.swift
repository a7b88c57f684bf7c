import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An operation that streams the body to a file, with flat memory, and moves it into
/// place only when it is complete.
///
/// ```swift
/// let image = DownloadOperation(url: imageURL, destination: folder.appendingPathComponent("big.iso"))
/// image.onProgress { progress in bar.doubleValue = progress.fractionCompleted ?? 0 }   // on the main actor
/// queue.enqueue(image) { result in model.show(result) }   // result: Result<URL, FetchError>
/// ```
///
/// The body is written, as it arrives, to a hidden partial file beside the destination
/// (``partialFileURL``), and renamed over the destination only after the whole body arrived
/// and matched its announced length: an existing destination file is untouched unless the new
/// download fully succeeds, and never half-written.
///
/// **Resuming.** When a transfer fails or is cancelled and the server allows resuming (it sent
/// an `ETag` or `Last-Modified`, and accepts ranges), the partial file is kept. The next
/// download to the same destination from the same URL asks for the rest with `Range` and
/// `If-Range`; a server that answers `206` continues the file, one that answers `200` (the
/// file changed, or it ignores ranges) starts it over. A `206` is appended only if it carries
/// the validator the partial file was made with and the same total length in `Content-Range`:
/// a server that ignored `If-Range` and sent a range of a new version never splices two files
/// (the partial is removed and the download starts over, ``restartsWhenSourceChanges``).
/// Otherwise the partial file is removed.
/// ``AnyFetchOperation/pause()`` keeps the partial file the same way, and
/// ``AnyFetchOperation/resume()`` continues it in the same operation, with the same completion.
///
/// **Safe files.** Nothing is written through a link, and nothing outside the destination's
/// directory is touched. A fresh partial file replaces whatever was at its path (a planted
/// link is removed, not followed) and is created exclusively with `O_NOFOLLOW`; a partial file
/// is resumed only if it is a regular file of this user's with no other name, its record is
/// one too, names the same URL and records the partial file's length. Anything else is
/// discarded, the download starts over, and ``partialFileNotices`` says why. A destination that
/// is a symbolic link, a directory or another non-regular file is refused before anything is
/// sent (``FetchError/FileFailure/Kind/unsafePath``), and checked again just before the final
/// `rename(2)`, which replaces only a regular file. When the destination's name is too long for
/// `.<name>.fetchkit-partial.json` to fit in 255 bytes, the partial files get a shortened name
/// (see ``SafeFileName``).
///
/// **Small bodies.** A body that arrives in one piece (up to 256 KiB) never makes a partial
/// file: it is written in one go to a new file of its own beside the destination
/// (`.<name>.fetchkit-partial.XXXX`, created exclusively) and renamed into place — no lock, no
/// record. A larger body gets its partial file, record and lock before its first byte is on
/// disk, so that a process killed mid-body leaves a partial file that resumes.
///
/// **One process per file.** A download that has a partial file holds an advisory lock
/// (`flock(2)`) on `.<name>.fetchkit-partial.lock` beside the destination until it ends; it
/// takes it before it makes the partial file, or at the start when one is already there. A
/// download in another process to the same destination fails with
/// ``FetchError/FileFailure/Kind/destinationInUse`` — at once, having sent nothing and touched
/// nothing, when the partial file is there; otherwise when it would make its own — and
/// ``otherProcessDownloading`` names the process that holds it. (Two whose bodies each arrive
/// in one piece both succeed, each renaming a whole file into place.) For a name taken from a
/// URL, use ``SafeFileName/name(for:)``.
///
/// **Content codings.** A download asks for the file as it is stored (`Accept-Encoding:
/// identity`) unless its request names codings: a compressed body cut short is decoded by
/// libcurl without an error, and could not be told from a whole file. A server that compresses
/// anyway is decoded.
///
/// **Size cap.** ``FetchConfiguration/maximumResponseSize`` bounds the file on disk: the decoded
/// bytes (a small gzip body can inflate a thousandfold), resumed bytes included. It defaults to
/// ``defaultMaximumDownloadSize`` (16 GiB) for a download; set `.max` for no limit. A download
/// that reaches it fails with ``FetchError/responseTooLarge(_:)`` having written at most the cap,
/// and its partial file is removed.
///
/// **Checksums.** Set ``expectedDigest`` (a SHA-256) and the file is hashed as it is written,
/// resumed bytes included, and moved into place only if it matches; otherwise the download fails
/// with ``FetchError/digestMismatch(_:)`` and its partial file is removed.
///
/// Errors specific to downloads are ``FetchError/fileSystem(_:)``: an unwritable destination
/// (checked before anything is sent), a full disk, a failed move, a link where a file should
/// be. A body shorter or longer than its `Content-Length` is ``FetchError/lengthMismatch(_:)``.
///
/// Downloads are never coalesced with other requests.
open class DownloadOperation: AnyFetchOperation, OutputProducing, @unchecked Sendable {
    /// A download's output: the file, at ``destination``, once it is complete and in place.
    public typealias Output = URL

    /// Where the file goes.
    public let destination: URL

    /// The default ``FetchConfiguration/maximumResponseSize`` of a download: 16 GiB.
    ///
    /// Large enough for disk images and data sets; small enough that a hostile server (or a
    /// gzip bomb of 16 MiB) cannot fill most disks. Set `.max` for no limit.
    public static let defaultMaximumDownloadSize: Int64 = 16 << 30

    private struct DownloadState {
        var resumesPartialDownloads = true
        var expectedDigest: FileDigest?
        /// Hands the hasher from transfer to transfer, when a digest is expected.
        var digest: DigestCarrier?
        var resumedBytes: Int64 = 0
        var downloadedFileURL: URL?
        var notices: [PartialFileNotice] = []
        var restartsWhenSourceChanges = true
        var openFile = PartialFileOpener.safe
        var backpressure = Backpressure()
        /// The current attempt's sink: whether it stopped the transfer for the disk to catch up.
        var sink: FileBodySink?
        /// The partial file's record as this download's sinks last wrote it (`nil`: none, or
        /// removed): the next attempt reads it here, not from disk.
        var knownRecord: PartialDownloadRecord?
        /// The record of the partial file the current attempt resumes, as inspected.
        var resumedRecord: PartialDownloadRecord?
        var continuations = 0
        /// The largest writer backlog of the attempts before the current one.
        var peakBacklog: Int64 = 0
        /// What the attempt that the continuations continue resumed from.
        var resumedBeforeContinuing: Int64?
        /// The process holding the partial file's lock, when it was held (0: unknown).
        var lockHolder: Int32?
        /// The partial file's lock, once taken: when a partial file was found, or when this
        /// download makes one (``claimPartialFile()``).
        var lock: PartialFileLock?
        /// The destination was let go of: no lock is taken any more.
        var letGoOf = false
        /// Lets go of the destination once the download finished (``finishedBeforeCompletions()``).
        var letGo: (@Sendable (_ operation: AnyFetchOperation, _ holdsLock: Bool) -> Void)?
        /// Runs if it succeeded, before any completion handler: its journal forgets it.
        var succeeded: (@Sendable () -> Void)?
    }

    private let downloadState = Protected(DownloadState())
    /// `.<name>` of the partial file and its record, shortened when the name is long.
    private let partialStem: String

    /// Creates a download of `request` to `destination`.
    ///
    /// - Parameters:
    ///   - request: The request (a GET, usually).
    ///   - destination: The file to create or replace. Its directory must exist; it must not
    ///     be a symbolic link or a directory.
    public init(request: URLRequest? = nil, destination: URL) {
        self.destination = destination.standardizedFileURL
        partialStem = Self.partialStem(of: self.destination)
        super.init(request: request)
        configuration.maximumResponseSize = Self.defaultMaximumDownloadSize
    }

    /// Creates a download of `url` to `destination`.
    ///
    /// A designated initializer, like ``init(request:destination:)``: a subclass's own
    /// initializer may call either through `super`.
    public init(url: URL, destination: URL) {
        self.destination = destination.standardizedFileURL
        partialStem = Self.partialStem(of: self.destination)
        super.init(request: URLRequest(url: url))
        configuration.maximumResponseSize = Self.defaultMaximumDownloadSize
    }

    /// `.<name>` of the destination's partial file and its record, shortened when long.
    private static func partialStem(of destination: URL) -> String {
        let name = destination.lastPathComponent
        return "." + SafeFileName.fitted(name, source: name, limit: SafeFileName.maximumPartialStemByteCount)
    }

    /// Unavailable: a download needs a destination (``init(request:destination:)``).
    ///
    /// Declared so that your subclasses inherit ``init(url:destination:)``: a subclass in
    /// another module inherits no convenience initializer while a designated one of its
    /// superclasses is hidden from it, and ``AnyFetchOperation``'s is internal (this public
    /// override covers it).
    @available(*, unavailable, message: "a download needs a destination: use init(request:destination:)")
    public override init(request: URLRequest?) {
        preconditionFailure("unavailable: a download needs a destination")
    }

    /// Whether a download whose resume is answered with a range of another version of the file
    /// starts over from byte 0 at once (default `true`), or fails with
    /// ``FetchError/InvalidResponse/Reason/changedWhileResuming(_:)``. Either way the partial
    /// file is removed first, and not a byte of the new version is appended to it.
    ///
    /// A server may ignore `If-Range` (a CDN that replaced the object) and answer the resume
    /// with `206` and the new version's bytes: FetchKit appends only to a `206` that carries
    /// the partial file's validator (its strong `ETag`, else its `Last-Modified`) and the same
    /// total length in `Content-Range`. A start-over is an attempt of its own (``AnyFetchOperation/attempts``
    /// counts it, retry handlers hear it), not bounded by the retry policy: it asks for the
    /// whole file, which cannot be spliced. It is noted in ``partialFileNotices``
    /// (``PartialFileNotice/Reason/changedOnServer``). Set it before the operation starts;
    /// setting it later traps.
    public var restartsWhenSourceChanges: Bool {
        get { downloadState.withLock { $0.restartsWhenSourceChanges } }
        set { setBeforeStart("restartsWhenSourceChanges") { $0.restartsWhenSourceChanges = newValue } }
    }

    /// Whether to keep a partial file the server allows resuming, and resume from it. Default
    /// `true`. Like ``AnyFetchOperation/configuration``, set it before the operation starts;
    /// setting it later traps.
    public var resumesPartialDownloads: Bool {
        get { downloadState.withLock { $0.resumesPartialDownloads } }
        set { setBeforeStart("resumesPartialDownloads") { $0.resumesPartialDownloads = newValue } }
    }

    /// The digest the file must have, or `nil` (the default) not to check one.
    ///
    /// It is the digest of the file as written: the bytes after any `Content-Encoding` was
    /// decoded, as a published checksum of the file gives it.
    ///
    /// FetchKit hashes the bytes as they are written, on the thread that writes them, and
    /// compares before moving the file into place. A resumed download hashes the part already
    /// on disk once, when it resumes, and goes on from there; a transfer continued after the disk
    /// fell behind (``backpressureContinuations``) goes on from the hash it had. When the digest
    /// differs, the download fails with ``FetchError/digestMismatch(_:)`` (not retried): the
    /// file is not moved to ``destination`` — what was there is untouched — and the partial
    /// file is removed, so that no later download resumes the bad bytes.
    ///
    /// ```swift
    /// let disk = DownloadOperation(url: isoURL, destination: folder.appendingPathComponent("disk.iso"))
    /// disk.expectedDigest = FileDigest(.sha256, hex: publishedChecksum)
    /// ```
    ///
    /// Like ``AnyFetchOperation/configuration``, set it before the operation starts; setting
    /// it later traps.
    public var expectedDigest: FileDigest? {
        get { downloadState.withLock { $0.expectedDigest } }
        set { setBeforeStart("expectedDigest") { $0.expectedDigest = newValue } }
    }

    /// Changes a setting of the download's; after it started, traps (naming `setting`).
    private func setBeforeStart(_ setting: String, _ change: (inout DownloadState) -> Void) {
        guard core.withLock({ $0.machine.phase == .pending }) else {
            preconditionFailure("FetchKit: \(setting) of \(self) set after it started")
        }
        downloadState.withLock(change)
    }

    /// The partial file beside the destination: `.<name>.fetchkit-partial`.
    ///
    /// When the destination's name is longer than 232 bytes, `<name>` is its start and a
    /// hash, so that the partial files' names fit in 255 bytes.
    public var partialFileURL: URL {
        destination.deletingLastPathComponent().appendingPathComponent("\(partialStem).fetchkit-partial", isDirectory: false)
    }

    /// The lock file that keeps other processes off the partial file (see `PartialFileLock`).
    var partialLockURL: URL {
        destination.deletingLastPathComponent().appendingPathComponent("\(partialStem).fetchkit-partial.lock", isDirectory: false)
    }

    /// When another process was downloading to the same destination — the download then
    /// failed with ``FetchError/FileFailure/Kind/destinationInUse`` and wrote nothing —
    /// that process's ID (0 if it did not say). `nil` otherwise.
    ///
    /// FetchKit keeps processes apart with an advisory lock (`flock(2)`) on
    /// `.<name>.fetchkit-partial.lock` beside the destination, held while a download has a
    /// partial file and removed after it.
    public var otherProcessDownloading: Int32? {
        downloadState.withLock { $0.lockHolder }
    }

    /// The record of the partial file's source, validator and length.
    var partialRecordURL: URL {
        destination.deletingLastPathComponent().appendingPathComponent("\(partialStem).fetchkit-partial.json", isDirectory: false)
    }

    /// What was found beside the destination and discarded instead of resumed (a link, a
    /// record for another URL or of another length…), in the order found. Empty when there was
    /// nothing, or when what was there was resumed or was this download's own.
    ///
    /// Read it once the operation finished (or from a completion handler); a command-line tool
    /// shows it so that its user knows why a download started over.
    public var partialFileNotices: [PartialFileNotice] {
        downloadState.withLock { $0.notices }
    }

    /// How the sink opens the partial file (tests stage a full disk with it).
    var openPartialFile: PartialFileOpener {
        get { downloadState.withLock { $0.openFile } }
        set { downloadState.withLock { $0.openFile = newValue } }
    }

    /// The destination, once the download succeeded and the file is in place.
    public var downloadedFileURL: URL? {
        downloadState.withLock { $0.downloadedFileURL }
    }

    /// How many bytes of the file came from an earlier, partial download (0 if none).
    public var resumedBytes: Int64 {
        downloadState.withLock { $0.resumedBytes }
    }

    /// Called once the complete file is at ``destination``; override it to read or process it.
    ///
    /// Runs on ``FetchConfiguration/parseQueue``; a thrown error becomes
    /// ``FetchError/parseFailed(_:)`` (a thrown ``FetchError`` is kept as it is), and the file
    /// stays in place. A cancel that arrives while it runs finishes the download as
    /// ``FetchError/cancelled(_:)``, the file also in place. The default does nothing.
    ///
    /// - Parameter url: The destination.
    open func parseDownloadedFile(at url: URL) throws {}

    // MARK: Hooks

    override func prepareTransferRequest(_ request: URLRequest) throws(FetchError) -> URLRequest {
        try checkDestination()
        guard ActiveDownloads.claim(destination) else {
            throw .fileSystem(.init(kind: .destinationInUse, path: destination.path, code: nil))
        }
        // Another process (a second fetchkit into the same directory) must not write the same
        // partial file: whoever holds its lock downloads it, the other skips it. The lock is
        // taken now only if there is a partial file (one that another process may be writing,
        // or that this download resumes); otherwise when this download makes one
        // (``claimPartialFile()``). A body that arrives in one piece never needs it.
        if LocalFile.status(partialFileURL) != nil {
            do {
                try claimPartialFile()
            } catch {
                ActiveDownloads.release(destination)
                throw error
            }
        }
        // Before any completion handler runs: a program that exits when it hears the download
        // ended (fetchkit does) must find the lock file gone and the partial file dropped.
        // As a completion handler of its own it ran after the queue's, which could end the
        // process first and leave the lock file behind.
        downloadState.withLock { $0.letGo = { [destination, partialFileURL, partialRecordURL] operation, holdsLock in
            // 416: the partial file no longer fits the resource (it shrank or changed); over
            // the size cap: resuming it cannot succeed. Drop it so that the next attempt starts
            // over. (Only this download's own: without the lock, a partial file there is
            // another process's.)
            switch holdsLock ? operation.error : nil {
            case .unacceptableStatus(416)?, .responseTooLarge?:
                PartialFile.remove(partialFileURL, partialRecordURL)
            default:
                break
            }
            ActiveDownloads.release(destination)
        } }

        // The file as it is stored, unless the request names its codings (as curl, wget and
        // aria2 ask): libcurl decodes a compressed body cut short under a truthful
        // `Content-Length` without a word, which would put a truncated file in place as a
        // success, and a resume's range would count compressed bytes.
        var request = request
        if request.value(forHTTPHeaderField: "Accept-Encoding") == nil {
            request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        return request
    }

    /// The destination is free before Foundation hears that the download finished: a
    /// dependent download to the same file starts then.
    override func willAnnounceFinished() {
        letGoOfDestination()
    }

    override func finishedBeforeCompletions() {
        // Already let go of, unless the operation finished without announcing it.
        letGoOfDestination()
        let succeeded = downloadState.withLock { state in
            defer { state.succeeded = nil }
            return state.succeeded
        }
        if error == nil { succeeded?() }
    }

    private func letGoOfDestination() {
        let (letGo, lock) = downloadState.withLock { state in
            defer {
                state.letGo = nil
                state.lock = nil
                state.letGoOf = true
            }
            return (state.letGo, state.lock)
        }
        letGo?(self, lock != nil)
        lock?.release()
    }

    /// Takes the lock that keeps other processes off the partial file (see `PartialFileLock`),
    /// if this download does not hold it yet: before it resumes a partial file it found, or
    /// makes one.
    ///
    /// - Throws: ``FetchError/FileFailure/Kind/destinationInUse`` when another process holds
    ///   it (``otherProcessDownloading`` names it), or when the download has ended.
    func claimPartialFile() throws(FetchError) {
        let inUse = FetchError.fileSystem(.init(kind: .destinationInUse, path: destination.path, code: nil))
        let (held, over) = downloadState.withLock { ($0.lock != nil, $0.letGoOf) }
        if held { return }
        if over { throw inUse }
        switch PartialFileLock.acquire(at: partialLockURL) {
        case .success(let acquired):
            let kept = downloadState.withLock { state -> Bool in
                guard state.lock == nil, !state.letGoOf else { return false }
                state.lock = acquired
                return true
            }
            if !kept {
                acquired.release()
                if downloadState.withLock({ $0.lock == nil }) { throw inUse }
            }
        case .failure(.held(let holder)):
            downloadState.withLock { $0.lockHolder = holder ?? 0 }
            throw inUse
        case .failure(.unusable(let code)):
            throw .fileSystem(.init(kind: code == nil || code == ELOOP || code == EMLINK ? .unsafePath : .unwritableDestination,
                                    path: partialLockURL.path, code: code == ELOOP || code == EMLINK ? nil : code))
        }
    }

    /// Whether this download holds the partial file's lock.
    private var holdsPartialLock: Bool {
        downloadState.withLock { $0.lock != nil }
    }

    /// Runs `body` when the download succeeds, before any completion handler (a
    /// ``DownloadJournal`` forgets it then). Call it before the download starts.
    func whenSucceeded(_ body: @escaping @Sendable () -> Void) {
        downloadState.withLock { state in
            let earlier = state.succeeded
            state.succeeded = { earlier?(); body() }
        }
    }

    /// Each attempt continues the partial file if it can: a retry resumes what the failed
    /// attempt wrote.
    override func prepareAttempt(_ prepared: URLRequest, attempt: Int) -> AttemptSetup {
        var request = prepared
        var offset: Int64 = 0
        let continuing = noteContinuation()
        let known = downloadState.withLock { $0.knownRecord }
        let verdict = PartialFile.inspect(partialFileURL, record: partialRecordURL, for: request,
                                          resumes: resumesPartialDownloads, continuing: continuing,
                                          maximumSize: maximumResponseSize, known: known) {
            holdsPartialLock || (try? claimPartialFile()) != nil
        }
        switch verdict {
        case .resume(let size, let record):
            request.setValue("bytes=\(size)-", forHTTPHeaderField: "Range")
            request.setValue(record.validator, forHTTPHeaderField: "If-Range")
            offset = size
            downloadState.withLock { $0.resumedRecord = record }
        case .discard(let notice, let found):
            // A partial file that cannot be resumed is stale, or not ours: removed (a link
            // itself, never its target), and the download starts over. (Nothing to remove when
            // nothing was found.)
            if found { PartialFile.remove(partialFileURL, partialRecordURL) }
            downloadState.withLock { state in
                if found { state.knownRecord = nil }
                state.resumedRecord = nil
                if let notice { state.notices.append(notice) }
            }
        }
        core.withLock { $0.attempt.resume(from: offset) }
        recordAttempt(attempt, request: request, conditional: false, prepared: offset > 0 ? prepared : nil)
        return AttemptSetup(request: request, acceptsNotModified: false, resumedFrom: offset)
    }

    override func makeBodySinkBeforeGrant() -> (any ResponseBodySink)? {
        makeBodySink()
    }

    override func startsOver(after error: FetchError) -> Bool {
        guard case .invalidResponse(let failure) = error, case .changedWhileResuming = failure.reason else { return false }
        return downloadState.withLock { state in
            state.notices.append(PartialFileNotice(reason: .changedOnServer, path: partialFileURL.path))
            return state.restartsWhenSourceChanges
        }
    }

    override func sinkThatFellBehind() -> (any DownloadBodySink)? {
        downloadState.withLock { state in
            state.sink.flatMap { $0.stoppedForBackpressure ? $0 : nil }
        }
    }

    override func makeBodySink() -> any ResponseBodySink {
        let (offset, source, isGET) = core.withLock { ($0.attempt.rangeOffset, $0.sentRequest?.url, $0.sentRequest?.isGET ?? false) }
        let resumed = offset > 0 ? downloadState.withLock { $0.resumedRecord } : nil
        let sink = FileBodySink(
            partialURL: partialFileURL,
            recordURL: partialRecordURL,
            sourceURL: source,
            requestedOffset: offset,
            keepsResumablePartial: resumesPartialDownloads,
            maximumLength: maximumResponseSize,
            openFile: openPartialFile,
            digest: digestCarrier(),
            resumedRecord: resumed,
            recordChanged: { [weak self] record in self?.downloadState.withLock { $0.knownRecord = record } },
            claim: { [weak self] () throws(FetchError) in
                guard let self else { throw .cancelled(.init(url: source)) }
                try self.claimPartialFile()
            }
        )
        downloadState.withLock { state in
            // Only a GET can be continued with `Range`.
            sink.backpressure = isGET ? state.backpressure : nil
            state.sink = sink
        }
        return sink
    }

    /// Bytes of the file read back from disk to hash them (tests: 0 unless the download
    /// resumed a partial file it did not write itself, or a transfer cut its file back).
    var digestBytesReadBack: Int64 {
        downloadState.withLock { $0.digest }?.bytesReadBack ?? 0
    }

    /// The download's ``DigestCarrier``, made at the first transfer; `nil` without an expected digest.
    private func digestCarrier() -> DigestCarrier? {
        downloadState.withLock { state in
            guard let expected = state.expectedDigest else { return nil }
            if let carrier = state.digest { return carrier }
            let carrier = DigestCarrier(expected: expected)
            state.digest = carrier
            return carrier
        }
    }

    /// Checks the complete partial file against ``expectedDigest``; on a mismatch removes it
    /// (a corrupt partial file must not be resumed) and throws.
    ///
    /// The hash is the one the writers kept while they wrote; if it did not cover exactly the
    /// file (a read that failed when resuming, a last byte cut off and fetched again), the
    /// file is hashed whole here.
    private func verifyDigest(of partial: URL, size: Int64) throws(FetchError) {
        guard let carrier = downloadState.withLock({ $0.digest }) else { return }
        let hasher = carrier.take()
        if hasher.length != size {
            let fd = LocalFile.open(partial, O_RDONLY)
            guard fd >= 0 else {
                throw .fileSystem(.init(kind: .writeFailed, path: partial.path, code: errno))
            }
            hasher.catchUp(to: size, descriptor: fd)
            _ = close(fd)
            guard hasher.length == size else {
                throw .fileSystem(.init(kind: .writeFailed, path: partial.path, code: EIO))
            }
        }
        carrier.noteReadBack(hasher.bytesReadBack)
        let actual = hasher.finish()
        guard actual != carrier.expected else { return }
        if FileBodySink.isWholeFile(partial, beside: partialFileURL) {
            LocalFile.remove(partial)
        } else {
            PartialFile.remove(partialFileURL, partialRecordURL)
            downloadState.withLock { $0.knownRecord = nil }
        }
        throw .digestMismatch(.init(expected: carrier.expected, actual: actual, byteCount: size,
                                    url: core.withLock { $0.sentRequest?.url }, path: destination.path))
    }

    override func makeOutput(from body: ResponseBody?, notModified: Bool) throws -> any Sendable {
        guard case .file(let partial)? = body else { throw FetchError.fileSystem(.init(kind: .writeFailed, path: partialFileURL.path, code: nil)) }
        // A body that arrived in one piece is in a file of its own (see `FileBodySink`): no
        // record to remove, and nothing to keep if it does not go into place.
        let whole = FileBodySink.isWholeFile(partial, beside: partialFileURL)
        do {
            try moveIntoPlace(partial, whole: whole)
        } catch {
            if whole { LocalFile.remove(partial) }
            throw error
        }
        let resumed = core.withLock { $0.attempt.progressBase }     // what a 206 continued from
        downloadState.withLock { state in
            state.downloadedFileURL = destination
            state.resumedBytes = state.resumedBeforeContinuing ?? resumed
        }
        try parseDownloadedFile(at: destination)
        return destination
    }

    /// Checks the complete file `partial` and renames it over the destination.
    private func moveIntoPlace(_ partial: URL, whole: Bool) throws {
        // The file written is still the partial file (nothing was swapped in since), and the
        // destination is still a regular file or nothing. (rename(2) replaces a link itself,
        // never its target, so even a link planted after this check is not written through.)
        guard let status = LocalFile.status(partial), status.isPrivateRegularFile else {
            throw FetchError.fileSystem(.init(kind: .unsafePath, path: partial.path, code: nil))
        }
        try verifyDigest(of: partial, size: status.size)
        try checkDestinationFile()
        // rename(2) replaces the destination atomically: it is either the old file or the new.
        let moved = partial.withUnsafeFileSystemRepresentation { from in
            destination.withUnsafeFileSystemRepresentation { to in
                guard let from, let to else { return false }
                return rename(from, to) == 0
            }
        }
        guard moved else {
            throw FetchError.fileSystem(.init(kind: .moveFailed, path: destination.path, code: errno))
        }
        if !whole { LocalFile.remove(partialRecordURL) }
    }

    // MARK: Backpressure

    /// How many times the transfer was stopped because the disk fell behind the network, and
    /// continued with `Range` from what was on disk (diagnostics; 0 usually).
    ///
    /// URLSession on Linux cannot slow the network down to the disk's pace: it hands over every
    /// chunk as fast as it arrives. FetchKit writes on a thread of its own, so that the
    /// session's queue keeps up, and when more than 32 MiB waits for the disk and the server
    /// allows resuming (an `ETag` or `Last-Modified`, and `Accept-Ranges: bytes`), it stops the
    /// transfer, waits until the disk has caught up and the stopped task has ended, and
    /// continues with `Range` and `If-Range`. A continuation is neither a retry nor counted in
    /// ``AnyFetchOperation/attempts``; progress goes on from the bytes on disk. Without ranges the
    /// transfer is not stopped, and what waits for the disk is not bounded.
    public var backpressureContinuations: Int {
        downloadState.withLock { $0.continuations }
    }

    /// When the transfer is stopped for the disk to catch up (tests tighten it, and slow the
    /// disk down). Set before the operation starts.
    var backpressure: Backpressure {
        get { downloadState.withLock { $0.backpressure } }
        set { downloadState.withLock { $0.backpressure = newValue } }
    }

    /// The most bytes that waited for the disk at any moment (tests and diagnostics). Read it
    /// once the operation has finished.
    var peakBacklog: Int64 {
        downloadState.withLock { max($0.peakBacklog, $0.sink?.peakBacklog ?? 0) }
    }

    /// Whether the last attempt stopped for the disk to catch up; if so, counts the
    /// continuation and remembers what the attempt it continues resumed from.
    private func noteContinuation() -> Bool {
        let progressBase = core.withLock { $0.attempt.progressBase }
        return downloadState.withLock { state in
            let continuing = state.sink?.stoppedForBackpressure ?? false
            state.peakBacklog = max(state.peakBacklog, state.sink?.peakBacklog ?? 0)
            state.sink = nil
            if continuing {
                state.continuations += 1
                if state.resumedBeforeContinuing == nil { state.resumedBeforeContinuing = progressBase }
            } else {
                state.resumedBeforeContinuing = nil
            }
            return continuing
        }
    }

    // MARK: Helpers

    /// The destination's directory must exist and be writable, and the destination must not be
    /// a directory: checked before anything is sent.
    private func checkDestination() throws(FetchError) {
        let directory = destination.deletingLastPathComponent()
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw .fileSystem(.init(kind: .unwritableDestination, path: destination.path, code: ENOENT))
        }
        guard access(directory.path, W_OK) == 0 else {
            throw .fileSystem(.init(kind: .unwritableDestination, path: destination.path, code: errno))
        }
        try checkDestinationFile()
    }

    /// The destination must be a regular file or nothing: never a link, a directory or a
    /// device.
    private func checkDestinationFile() throws(FetchError) {
        guard let status = LocalFile.status(destination) else { return }
        if status.isDirectory {
            throw .fileSystem(.init(kind: .unwritableDestination, path: destination.path, code: EISDIR))
        }
        guard status.isRegular else {
            throw .fileSystem(.init(kind: .unsafePath, path: destination.path, code: nil))
        }
    }
}

extension DownloadOperation {
    /// Why a partial download found beside the destination was discarded instead of resumed.
    ///
    /// The download itself goes on, from the start; see ``DownloadOperation/partialFileNotices``.
    public struct PartialFileNotice: Sendable, Equatable, CustomStringConvertible {
        /// What was wrong with it.
        public enum Reason: Sendable, Equatable {
            /// The partial file is a symbolic link, a hard link (it has another name), not a
            /// regular file, or another user's. It was removed (the link, not its target).
            case partialNotARegularFile
            /// There is no record of where the partial file came from.
            case recordMissing
            /// The record is a link or not a regular file.
            case recordNotARegularFile
            /// The record cannot be read or decoded.
            case recordUnreadable
            /// The record names another URL.
            case recordForAnotherURL
            /// The record's length is not the partial file's.
            case lengthMismatch
            /// The record has no validator (`ETag` or `Last-Modified`) to resume with.
            case notResumable
            /// The partial file already reaches ``FetchConfiguration/maximumResponseSize``.
            case overSizeLimit
            /// The server answered the resume with a range of another version of the file (see
            /// ``FetchError/InvalidResponse/Reason/changedWhileResuming(_:)``): the partial file
            /// was removed and the download started over.
            case changedOnServer
        }

        /// What was wrong with it.
        public let reason: Reason
        /// The partial file's path.
        public let path: String

        public var description: String {
            let why: String
            switch reason {
            case .partialNotARegularFile: why = "it is a link or not a regular file of this user's"
            case .recordMissing: why = "there is no record of where it came from"
            case .recordNotARegularFile: why = "its record is a link or not a regular file of this user's"
            case .recordUnreadable: why = "its record cannot be read"
            case .recordForAnotherURL: why = "its record is for another URL"
            case .lengthMismatch: why = "its length is not the one its record gives"
            case .notResumable: why = "the server gave no validator to resume it with"
            case .overSizeLimit: why = "it already reaches the size limit"
            case .changedOnServer: why = "the file changed on the server"
            }
            return "Ignored the partial download \(path): \(why); starting over."
        }
    }
}

/// The destinations being downloaded in this process: two downloads must not share a partial
/// file.
enum ActiveDownloads {
    private static let paths = Protected(Set<String>())

    static func claim(_ destination: URL) -> Bool {
        paths.withLock { $0.insert(destination.path).inserted }
    }

    static func release(_ destination: URL) {
        _ = paths.withLock { $0.remove(destination.path) }
    }
}
