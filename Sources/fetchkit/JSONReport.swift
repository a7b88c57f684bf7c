import FetchKit
import Foundation

/// `--json`: one JSON object per file on standard output, a line each, written as the file
/// ends (JSON Lines). Every string in it went through `JSONEncoder`, so a hostile name or URL
/// is escaped, never able to break a line or the object; URLs are redacted as everywhere.
///
/// ```
/// {"bytes":5000,"checksum":null,"error":null,"message":null,"path":"/tmp/d/5000","result":"downloaded","seconds":0.012,"sha256":null,"status":200,"url":"http://127.0.0.1:8080/bytes/5000"}
/// ```
struct JSONReport: Encodable {
    /// The URL, its secrets redacted.
    let url: String
    /// Where the file is (or would have been), absolute.
    let path: String
    /// The bytes in the file (0 when none was saved).
    let bytes: Int64
    /// The HTTP status of the last response, if there was one.
    let status: Int?
    /// The file's SHA-256, in lowercase hex, when it was checked against one (`--sha256` or a
    /// list's).
    let sha256: String?
    /// The digest the file was checked against, as `algorithm:hex` (`md5:d41d8c…`), whichever
    /// the algorithm, or `null`.
    let checksum: String?
    /// Seconds from the download's start to its end.
    let seconds: Double
    /// `downloaded`, `kept` (already there), `failed` or `stopped` (by a signal).
    let result: String
    /// The failure's class (the names of the exit codes: `network`, `http`, `checksum`…),
    /// `interrupted` for a file a signal stopped, or `null`.
    let error: String?
    /// Why it failed, in words (redacted), or `null`.
    let message: String?

    /// Encodes every field, `null`s included (written with their keys sorted, as above).
    enum CodingKeys: String, CodingKey {
        case url, path, bytes, status, sha256, checksum, seconds, result, error, message
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(url, forKey: .url)
        try container.encode(path, forKey: .path)
        try container.encode(bytes, forKey: .bytes)
        try container.encode(status, forKey: .status)
        try container.encode(sha256, forKey: .sha256)
        try container.encode(checksum, forKey: .checksum)
        try container.encode((seconds * 1000).rounded() / 1000, forKey: .seconds)
        try container.encode(result, forKey: .result)
        try container.encode(error, forKey: .error)
        try container.encode(message, forKey: .message)
    }

    /// The line for `item`, newline included.
    static func line(for item: Downloader.Item) -> String {
        let seconds = item.finishedAt.flatMap { end in item.startedAt.map { end.timeIntervalSince($0) } } ?? 0
        var result = "downloaded", error: String?, message: String?
        var bytes = item.received
        switch item.state {
        case .done: break
        case .skipped:
            result = "kept"
            bytes = ExistingFile.regularFile(at: item.destination)?.size ?? 0
        case .failed(let failure):
            result = "failed"
            error = item.exitStatus?.kind
            message = item.failureReason(failure)
            bytes = 0
        case .stopped:
            result = "stopped"
            error = "interrupted"
            bytes = 0
        case .waiting, .active, .retrying:
            result = "stopped"
        }
        let report = JSONReport(
            url: Redaction.redacted(item.url), path: item.destination.path, bytes: bytes, status: item.status,
            sha256: item.verifiedDigest.flatMap { $0.algorithm == .sha256 ? $0.hex : nil },
            checksum: item.verifiedDigest?.description, seconds: max(0, seconds), result: result, error: error, message: message)
        let encoder = JSONEncoder()
        // Sorted: corelibs' JSONEncoder otherwise writes the keys in a dictionary's order,
        // which changes from run to run, and lines from two runs would not compare as text.
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(report) else { return "{}\n" }
        return String(decoding: data, as: UTF8.self) + "\n"
    }
}
