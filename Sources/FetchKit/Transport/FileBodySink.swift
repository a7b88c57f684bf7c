import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What FetchKit remembers beside a partial download, to resume it safely: the URL it came
/// from, the validator that `If-Range` sends back, and the partial file's length when it was
/// kept.
///
/// A record is trusted only if it is a regular file of FetchKit's (see
/// ``LocalFile/Status/isPrivateRegularFile``) and names the same URL, and its length (when it
/// has one) is the partial file's; ``DownloadOperation`` checks that before resuming. A record
/// from before lengths were kept decodes with `length == nil` and is checked without it.
struct PartialDownloadRecord: Codable, Equatable, Sendable {
    var url: String
    var entityTag: String?
    var lastModified: String?
    /// The partial file's length when the transfer stopped and kept it; `nil` while a transfer
    /// writes it (so a process that dies mid-transfer leaves a record without one).
    var length: Int64?

    /// A record is a few hundred bytes; anything far larger is not one.
    static let sizeLimit = 64 << 10

    /// The `If-Range` value: a strong entity tag, else the last-modified date.
    var validator: String? {
        if let entityTag, !entityTag.hasPrefix("W/") { return entityTag }
        return lastModified
    }

    /// The record at `url`, if that is a private regular file (never through a link) holding
    /// one.
    static func load(from url: URL) -> PartialDownloadRecord? {
        guard let data = LocalFile.read(url, limit: sizeLimit) else { return nil }
        return try? JSONDecoder().decode(PartialDownloadRecord.self, from: data)
    }

    /// Writes the record to a new file at `url`, replacing (never following) what is there.
    func save(to url: URL) {
        guard let data = try? JSONEncoder().encode(self) else { return }
        LocalFile.replace(url, with: data)
    }
}

/// Streams a body into the partial file beside a download's destination, with POSIX writes:
/// memory stays flat whatever the size.
///
/// A `206 Partial Content` that starts where the partial file ends is appended to it; any
/// other success rewrites it from the start. On failure or cancel the partial file is kept
/// when the server allows resuming it (a validator, and ranges), and removed otherwise.
/// Used on the session router's serial queue only.
final class FileBodySink: ResponseBodySink {
    private let partialURL: URL
    private let recordURL: URL
    private let sourceURL: URL?
    /// The offset a `Range` request asked for (0: none).
    private let requestedOffset: Int64
    private let keepsResumablePartial: Bool

    private var descriptor: Int32 = -1
    private var opened = false
    private var length: Int64 = 0
    private var resumable = false
    /// Chunks gathered into one `write(2)`: URLSession hands over 16 KiB at a time, and a
    /// system call per chunk slows the queue that drains them (see ``ResponseBodySink``).
    private var pending = Data()
    static let writeBatch = 256 << 10

    /// The largest the file may grow, resumed bytes included (the download's
    /// ``FetchOperation/maximumResponseSize``).
    private let maximumLength: Int64
    /// The file's length counting every chunk handed to ``write(_:)``, written or pending.
    private var acceptedLength: Int64 = 0
    private let openFile: PartialFileOpener

    init(partialURL: URL, recordURL: URL, sourceURL: URL?, requestedOffset: Int64, keepsResumablePartial: Bool,
         maximumLength: Int64 = .max, openFile: PartialFileOpener = .safe) {
        self.partialURL = partialURL
        self.recordURL = recordURL
        self.sourceURL = sourceURL
        self.requestedOffset = requestedOffset
        self.keepsResumablePartial = keepsResumablePartial
        self.maximumLength = maximumLength
        self.openFile = openFile
    }

    func open(response: HTTPURLResponse, expectedLength: Int64?) throws(FetchError) {
        var offset: Int64 = 0
        if response.statusCode == 206 {
            // Only a range that starts exactly where the partial file ends can be appended.
            guard let start = Self.rangeStart(of: response), start == requestedOffset else {
                throw .transport(URLError(.cannotParseResponse, userInfo: [
                    NSURLErrorFailingURLErrorKey: response.url as Any,
                    NSLocalizedDescriptionKey: "a 206 response whose Content-Range does not continue the partial download",
                ]))
            }
            offset = start
        }
        // The cap counts the whole file: what a resumed transfer appends, and what is there.
        if let expectedLength, offset > 0, offset > maximumLength - expectedLength {
            throw tooLarge(expectedLength: expectedLength)
        }
        let fd = try openFile.open(partialURL, offset)
        descriptor = fd
        opened = true
        if offset > 0 {
            // Drop anything past the resume point (a torn last write), then append.
            guard ftruncate(fd, off_t(offset)) == 0, lseek(fd, off_t(offset), SEEK_SET) == offset else {
                throw .fileSystem(.init(kind: .writeFailed, path: partialURL.path, code: errno))
            }
        }
        length = offset
        acceptedLength = offset
        let acceptsRanges = response.statusCode == 206
            || (response.value(forHTTPHeaderField: "Accept-Ranges")?.lowercased().contains("bytes") ?? false)
        let record = PartialDownloadRecord(
            url: sourceURL?.absoluteString ?? "",
            entityTag: response.value(forHTTPHeaderField: "ETag"),
            lastModified: response.value(forHTTPHeaderField: "Last-Modified")
        )
        resumable = acceptsRanges && record.validator != nil
        if resumable {
            record.save(to: recordURL)
        } else {
            LocalFile.remove(recordURL)
        }
    }

    func write(_ chunk: Data) throws(FetchError) {
        try admit(chunk.count)
        if pending.isEmpty && chunk.count >= Self.writeBatch {
            try writeNow(chunk)
            return
        }
        if pending.isEmpty { pending.reserveCapacity(Self.writeBatch) }
        pending.append(chunk)
        if pending.count >= Self.writeBatch {
            try flush()
        }
    }

    private func flush() throws(FetchError) {
        guard !pending.isEmpty else { return }
        let batch = pending
        pending.removeAll(keepingCapacity: true)
        try writeNow(batch)
    }

    private func writeNow(_ chunk: Data) throws(FetchError) {
        let fd = descriptor
        let failure: Int32? = chunk.withUnsafeBytes { buffer in
            guard var base = buffer.baseAddress else { return nil }
            var remaining = buffer.count
            while remaining > 0 {
                let written = posixWrite(fd, base, remaining)
                if written < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                remaining -= written
                base += written
            }
            return nil
        }
        if let failure {
            let kind: FetchError.FileFailure.Kind = (failure == ENOSPC || failure == EDQUOT || failure == EFBIG) ? .diskFull : .writeFailed
            throw .fileSystem(.init(kind: kind, path: partialURL.path, code: failure))
        }
        length += Int64(chunk.count)
    }

    func close() throws(FetchError) -> ResponseBody {
        try flush()
        pending = Data()
        let fd = descriptor
        descriptor = -1
        if fd >= 0, posixClose(fd) != 0 {
            throw .fileSystem(.init(kind: errno == ENOSPC ? .diskFull : .writeFailed, path: partialURL.path, code: errno))
        }
        return .file(partialURL)
    }

    func abandon() {
        // What arrived is kept for resuming; a write that fails here only shortens it, and the
        // partial file's length is what a resume asks for.
        try? flush()
        pending = Data()
        if descriptor >= 0 {
            _ = posixClose(descriptor)
            descriptor = -1
        }
        // A transfer that never opened the file (refused, cancelled while connecting, an error
        // status) leaves an earlier partial file as it was.
        guard opened else { return }
        if !(keepsResumablePartial && resumable && length > 0) {
            Self.removePartial(partialURL, recordURL)
        } else {
            keepRecord(length: length)
        }
    }

    /// Removes the partial file and its record (links themselves, never their targets).
    static func removePartial(_ partialURL: URL, _ recordURL: URL) {
        LocalFile.remove(partialURL)
        LocalFile.remove(recordURL)
    }

    /// Counts a chunk against the size cap before it is written: the file never grows past
    /// ``maximumLength``.
    private func admit(_ count: Int) throws(FetchError) {
        guard acceptedLength <= maximumLength - Int64(count) else {
            throw tooLarge(expectedLength: nil)
        }
        acceptedLength += Int64(count)
    }

    private func tooLarge(expectedLength: Int64?) -> FetchError {
        .responseTooLarge(.init(limit: maximumLength, expectedLength: expectedLength, url: sourceURL))
    }

    /// Records the length of a partial file kept for resuming, so that a later download can
    /// tell it is the file this record describes.
    private func keepRecord(length: Int64) {
        guard var record = PartialDownloadRecord.load(from: recordURL), record.url == (sourceURL?.absoluteString ?? "") else { return }
        record.length = length
        record.save(to: recordURL)
    }

    /// The first byte of `Content-Range: bytes a-b/n`.
    static func rangeStart(of response: HTTPURLResponse) -> Int64? {
        guard let value = response.value(forHTTPHeaderField: "Content-Range")?.lowercased(),
              value.hasPrefix("bytes ")
        else { return nil }
        let range = value.dropFirst("bytes ".count).prefix { $0 != "/" }
        guard let dash = range.firstIndex(of: "-") else { return nil }
        return Int64(range[..<dash].trimmingCharacters(in: .whitespaces))
    }
}

// The C library's write and close, named apart from the sink's own methods.
@inline(__always) private func posixWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buffer, count)
}

@inline(__always) private func posixClose(_ fd: Int32) -> Int32 {
    close(fd)
}

/// How a download opens its partial file: never through a link.
///
/// A fresh file (offset 0) replaces whatever is at the path — a planted link is removed, not
/// followed — and is created exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`): if something is
/// planted again in between, the open fails instead of writing through it. A resumed file is
/// opened with `O_NOFOLLOW` and must be a private regular file (one name, this user's).
/// Tests swap the opener to stage failures, such as a full disk, that cannot be planted.
struct PartialFileOpener: Sendable {
    let open: @Sendable (_ url: URL, _ offset: Int64) throws(FetchError) -> Int32

    static let safe = PartialFileOpener { url, offset throws(FetchError) in
        if offset == 0 { LocalFile.remove(url) }
        let fd = LocalFile.open(url, O_WRONLY | (offset == 0 ? O_CREAT | O_EXCL : 0))
        guard fd >= 0 else {
            let code = errno
            switch code {
            case ELOOP, EEXIST, EMLINK:
                throw .fileSystem(.init(kind: .unsafePath, path: url.path, code: nil))
            case ENOSPC, EDQUOT:
                throw .fileSystem(.init(kind: .diskFull, path: url.path, code: code))
            default:
                throw .fileSystem(.init(kind: .unwritableDestination, path: url.path, code: code))
            }
        }
        guard LocalFile.status(descriptor: fd)?.isPrivateRegularFile == true else {
            _ = posixClose(fd)
            throw .fileSystem(.init(kind: .unsafePath, path: url.path, code: nil))
        }
        return fd
    }
}
