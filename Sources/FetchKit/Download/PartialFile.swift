import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// The partial file's format, in one place: the partial file beside a download's destination
// (`.<name>.fetchkit-partial`), its record (`….json`: source, validator, lengths), and what
// makes them resumable — read by the download before each attempt, written by its sink. The
// lock (`….lock`) is `PartialFileLock`'s.

/// What FetchKit remembers beside a partial download, to resume it safely: the URL it came
/// from, the validator that `If-Range` sends back, and the partial file's length when it was
/// kept.
///
/// A record is trusted only if it is a regular file of FetchKit's (see
/// ``LocalFile/Status/isPrivateRegularFile``) and names the same URL, and its length (when it
/// has one) is the partial file's; ``DownloadOperation`` checks that before resuming. A record
/// from before lengths were kept decodes with `length == nil` and is checked without it.
///
/// The record lies in the download's directory, where others may read it: it holds the URL
/// redacted (``Redaction``) for a person, and a fingerprint of the whole URL to match it,
/// never a password or token.
struct PartialDownloadRecord: Codable, Equatable, Sendable {
    /// The source URL for a person to read, its secrets redacted.
    var url: String
    var entityTag: String?
    var lastModified: String?
    /// The partial file's length when the transfer stopped and kept it; `nil` while a transfer
    /// writes it (so a process that dies mid-transfer leaves a record without one).
    var length: Int64?
    /// ``fingerprint(of:)`` the whole source URL. (`nil` in a record from before fingerprints:
    /// its ``url`` then is the whole URL.)
    var source: String?
    /// The whole file's length as the server gave it (`Content-Length` of a `200`, the total of
    /// a `206`'s `Content-Range`), if known: a resume's `Content-Range` must give the same.
    var total: Int64?

    /// A record of a download from `sourceURL`.
    init(source sourceURL: URL?, entityTag: String?, lastModified: String?, length: Int64? = nil) {
        self.url = sourceURL.map(Redaction.redacted) ?? ""
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.length = length
        self.source = Self.fingerprint(of: sourceURL)
    }

    /// A record as an earlier FetchKit wrote it: the whole URL, no fingerprint.
    init(url: String, entityTag: String?, lastModified: String?, length: Int64? = nil) {
        self.url = url
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.length = length
        self.source = nil
    }

    /// Whether this record was written for a download from `sourceURL`.
    func belongs(to sourceURL: URL?) -> Bool {
        guard let source else { return url == (sourceURL?.absoluteString ?? "") }
        return source == Self.fingerprint(of: sourceURL) && url == (sourceURL.map(Redaction.redacted) ?? "")
    }

    /// Sixteen hex digits of the 64-bit FNV-1a hash of the URL's text: enough to tell one
    /// download's URL from another's, stable across runs and platforms.
    static func fingerprint(of sourceURL: URL?) -> String {
        FNV1a.hex(FNV1a.hash(sourceURL?.absoluteString ?? ""), digits: 16)
    }

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

/// A download's partial file and its record: whether they can be resumed, whether a resume's
/// answer is a range of the same file, and their removal.
enum PartialFile {
    /// What the download does with what it found beside its destination.
    enum Verdict {
        /// Resume it: `size` bytes are there, made from the file that `record` describes.
        case resume(size: Int64, record: PartialDownloadRecord)
        /// Start over; with a notice when something was there that the user should know of;
        /// `found`: a partial file or a record is there, to remove.
        case discard(DownloadOperation.PartialFileNotice?, found: Bool = true)
    }

    /// Whether the partial file at `file` can be resumed by `request`: it and its `record` file
    /// are private regular files (no link of either kind), the record names the same URL, has a
    /// validator and the partial file's length, and the file is under `maximumSize`.
    ///
    /// - Parameters:
    ///   - resumes: The download resumes partial files (a continuation — the transfer was
    ///     stopped for the disk to catch up — resumes whatever this says).
    ///   - known: The record this download's last sink wrote there, if any: used instead of
    ///     reading the file back (the download holds the lock; no other process wrote it).
    ///   - claim: Takes the partial file's lock, if the download does not hold it yet; `false`
    ///     if another process holds it (the file is then left alone).
    static func inspect(_ file: URL, record recordURL: URL, for request: URLRequest, resumes: Bool, continuing: Bool,
                        maximumSize: Int64, known: PartialDownloadRecord?, claim: () -> Bool) -> Verdict {
        let partial = LocalFile.status(file)
        let recordStatus = LocalFile.status(recordURL)
        // A lone record is just stale.
        guard let partial else { return .discard(nil, found: recordStatus != nil) }
        // A partial file that appeared since the download started is another process's until
        // this one holds the lock: left alone, and this download starts over beside it.
        guard claim() else { return .discard(nil, found: false) }
        func notice(_ reason: DownloadOperation.PartialFileNotice.Reason) -> Verdict {
            .discard(DownloadOperation.PartialFileNotice(reason: reason, path: file.path))
        }
        guard partial.isPrivateRegularFile else { return notice(.partialNotARegularFile) }
        guard resumes || continuing, request.isGET, partial.size > 0 else { return .discard(nil) }
        guard let recordStatus else { return notice(.recordMissing) }
        guard recordStatus.isPrivateRegularFile else { return notice(.recordNotARegularFile) }
        guard let record = known ?? PartialDownloadRecord.load(from: recordURL) else { return notice(.recordUnreadable) }
        guard record.belongs(to: request.url) else { return notice(.recordForAnotherURL) }
        guard record.length == nil || record.length == partial.size else { return notice(.lengthMismatch) }
        guard record.validator != nil else { return notice(.notResumable) }
        guard partial.size < maximumSize else { return notice(.overSizeLimit) }
        return .resume(size: partial.size, record: record)
    }

    /// Why a `206` answering a resume is not a range of the file the partial was made from, or
    /// `nil` if it is: its validator (the strong `ETag` the record holds, else its
    /// `Last-Modified`) must be the one the record holds, and its total length (`total`, when
    /// the server gives one) the one the record knows.
    static func change(from record: PartialDownloadRecord?, to response: HTTPURLResponse, total: Int64?) -> String? {
        guard let record, let validator = record.validator else { return "the partial file has no record of its validator" }
        if let entityTag = record.entityTag, validator == entityTag {
            let now = response.value(forHTTPHeaderField: "ETag")
            guard now == entityTag else {
                return "ETag \(entityTag.prefix(80)) became \(now.map { String($0.prefix(80)) } ?? "none")"
            }
        } else {
            let now = response.value(forHTTPHeaderField: "Last-Modified")
            guard now == validator else {
                return "Last-Modified \(validator.prefix(80)) became \(now.map { String($0.prefix(80)) } ?? "none")"
            }
        }
        if let known = record.total, let total, known != total {
            return "its length \(known) became \(total) (Content-Range)"
        }
        return nil
    }

    /// Removes the partial file and its record (links themselves, never their targets).
    static func remove(_ file: URL, _ record: URL) {
        LocalFile.remove(file)
        LocalFile.remove(record)
    }
}
