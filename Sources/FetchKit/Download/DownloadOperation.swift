import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A ``FetchOperation`` that streams the body to a file, with flat memory, and moves it into
/// place only when it is complete.
///
/// ```swift
/// let download = DownloadOperation(url: imageURL, destination: folder.appendingPathComponent("big.iso"))
/// download.onProgress(on: .main) { progress in bar.doubleValue = progress.fractionCompleted ?? 0 }
/// queue.enqueue(download) { result in … }
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
/// file changed, or it ignores ranges) starts it over. Otherwise the partial file is removed.
///
/// Errors specific to downloads are ``FetchError/fileSystem(_:)``: an unwritable destination
/// (checked before anything is sent), a full disk, a failed move. A body shorter or longer than
/// its `Content-Length` is ``FetchError/lengthMismatch(_:)``.
///
/// A download's ``FetchOperation/maximumResponseSize`` defaults to no limit: the disk bounds it.
/// Downloads are never coalesced with other requests.
open class DownloadOperation: FetchOperation, @unchecked Sendable {
    /// Where the file goes.
    public let destination: URL

    private struct DownloadState {
        var resumesPartialDownloads = true
        var resumedBytes: Int64 = 0
        var downloadedFileURL: URL?
        var backpressure = Backpressure()
        /// The current attempt's sink: whether it stopped the transfer for the disk to catch up.
        var sink: FileBodySink?
        var continuations = 0
        /// The largest writer backlog of the attempts before the current one.
        var peakBacklog: Int64 = 0
        /// What the attempt that the continuations continue resumed from.
        var resumedBeforeContinuing: Int64?
    }

    private let downloadState = Protected(DownloadState())

    /// Creates a download of `request` to `destination`.
    ///
    /// - Parameters:
    ///   - request: The request (a GET, usually).
    ///   - destination: The file to create or replace. Its directory must exist.
    public init(request: URLRequest? = nil, destination: URL) {
        self.destination = destination.standardizedFileURL
        super.init(request: request)
        maximumResponseSize = .max
    }

    /// Creates a download of `url` to `destination`.
    public convenience init(url: URL, destination: URL) {
        self.init(request: URLRequest(url: url), destination: destination)
    }

    /// Whether to keep a partial file the server allows resuming, and resume from it. Default
    /// `true`. Settable until the operation starts.
    public var resumesPartialDownloads: Bool {
        get { downloadState.withLock { $0.resumesPartialDownloads } }
        set {
            guard core.withLock({ $0.machine.phase == .pending }) else { return }
            downloadState.withLock { $0.resumesPartialDownloads = newValue }
        }
    }

    /// The partial file beside the destination: `.<name>.fetchkit-partial`.
    public var partialFileURL: URL {
        destination.deletingLastPathComponent().appendingPathComponent(".\(destination.lastPathComponent).fetchkit-partial")
    }

    /// The record of the partial file's source and validator.
    var partialRecordURL: URL {
        destination.deletingLastPathComponent().appendingPathComponent(".\(destination.lastPathComponent).fetchkit-partial.json")
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
    /// Runs on ``FetchOperation/parseQueue``; a thrown error becomes
    /// ``FetchError/parseFailed(_:)`` (the file stays in place). The default does nothing.
    ///
    /// - Parameter url: The destination.
    open func parseDownloadedFile(at url: URL) throws {}

    // MARK: Hooks

    override func prepareTransferRequest(_ request: URLRequest) throws(FetchError) -> URLRequest {
        try checkDestination()
        guard ActiveDownloads.claim(destination) else {
            throw .fileSystem(.init(kind: .destinationInUse, path: destination.path, code: nil))
        }
        addCompletionHandler(on: .immediate) { [destination, partialFileURL, partialRecordURL] operation in
            // 416: the partial file no longer fits the resource (it shrank or changed): drop it
            // so that the next attempt starts over.
            if operation.error?.statusCode == 416 {
                FileBodySink.removePartial(partialFileURL, partialRecordURL)
            }
            ActiveDownloads.release(destination)
        }

        return request
    }

    /// Each attempt continues the partial file if it can: a retry resumes what the failed
    /// attempt wrote.
    override func prepareAttempt(_ request: URLRequest, attempt: Int) -> AttemptSetup {
        var request = request
        var offset: Int64 = 0
        let continuing = noteContinuation()
        if resumesPartialDownloads || continuing, request.isGET,
           let size = Self.fileSize(partialFileURL), size > 0,
           let record = PartialDownloadRecord.load(from: partialRecordURL),
           record.url == request.url?.absoluteString,
           let validator = record.validator {
            request.setValue("bytes=\(size)-", forHTTPHeaderField: "Range")
            request.setValue(validator, forHTTPHeaderField: "If-Range")
            offset = size
        } else {
            // A partial file that cannot be resumed (another URL, no validator) is stale.
            FileBodySink.removePartial(partialFileURL, partialRecordURL)
        }
        core.withLock { $0.rangeOffset = offset }
        recordAttempt(attempt, request: request, conditional: false)
        return AttemptSetup(request: request, acceptsNotModified: false)
    }

    override func makeBodySink() -> any ResponseBodySink {
        let (offset, source, isGET) = core.withLock { ($0.rangeOffset, $0.sentRequest?.url, $0.sentRequest?.isGET ?? false) }
        let sink = FileBodySink(
            partialURL: partialFileURL,
            recordURL: partialRecordURL,
            sourceURL: source,
            requestedOffset: offset,
            keepsResumablePartial: resumesPartialDownloads
        )
        downloadState.withLock { state in
            // Only a GET can be continued with `Range`.
            sink.backpressure = isGET ? state.backpressure : nil
            state.sink = sink
        }
        return sink
    }

    override func process(_ body: ResponseBody) throws(FetchError) {
        guard case .file(let partial) = body else { return }
        // rename(2) replaces the destination atomically: it is either the old file or the new.
        let moved = partial.withUnsafeFileSystemRepresentation { from in
            destination.withUnsafeFileSystemRepresentation { to in
                guard let from, let to else { return false }
                return rename(from, to) == 0
            }
        }
        guard moved else {
            throw .fileSystem(.init(kind: .moveFailed, path: destination.path, code: errno))
        }
        try? FileManager.default.removeItem(at: partialRecordURL)
        let resumed = core.withLock { $0.progressBase }     // what a 206 continued from
        downloadState.withLock { state in
            state.downloadedFileURL = destination
            state.resumedBytes = state.resumedBeforeContinuing ?? resumed
        }
        do {
            try parseDownloadedFile(at: destination)
        } catch {
            throw parseFailure(error)
        }
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
    /// ``FetchOperation/attempts``; progress goes on from the bytes on disk. Without ranges the
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
        let progressBase = core.withLock { $0.progressBase }
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
        if FileManager.default.fileExists(atPath: destination.path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw .fileSystem(.init(kind: .unwritableDestination, path: destination.path, code: EISDIR))
        }
    }

    static func fileSize(_ url: URL) -> Int64? {
        var info = stat()
        let found = url.withUnsafeFileSystemRepresentation { path in path.map { stat($0, &info) == 0 } ?? false }
        return found ? Int64(info.st_size) : nil
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
