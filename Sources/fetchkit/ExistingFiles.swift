import FetchKit
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Files already in the output directory, the way wget's `--no-clobber` and `--timestamping`
/// treat them together: a file that is there is never replaced without `--force`, and the
/// server is asked whether its copy changed, by a `HEAD` with `If-Modified-Since` the file's
/// date. A finished download's date is the server's `Last-Modified` (as `wget` and `curl -R`
/// set it), so the next run asks about the copy it has: `304 Not Modified`, or the same date and
/// size, means unchanged.
enum ExistingFile {
    /// What the server says of a file that is already there.
    enum Verdict: Equatable {
        /// `304 Not Modified` to the file's date, or the same date and size.
        case unchanged
        /// The server's copy has another date or size.
        case differs
        /// The server could not say (no date or size, or no answer): kept all the same.
        case unknown
    }

    /// The size and modification date of the regular file at `url`; `nil` if there is none (a
    /// link or a directory there is not one: the download fails and says why).
    static func regularFile(at url: URL) -> (size: Int64, modified: Date)? {
        var status = stat()
        let found = url.withUnsafeFileSystemRepresentation { path in path.map { lstat($0, &status) == 0 } ?? false }
        guard found, status.st_mode & S_IFMT == S_IFREG else { return nil }
        #if canImport(Darwin)
        let seconds = status.st_mtimespec.tv_sec
        #else
        let seconds = status.st_mtim.tv_sec
        #endif
        return (Int64(status.st_size), Date(timeIntervalSince1970: TimeInterval(seconds)))
    }

    /// The conditional `HEAD` that asks whether the server's copy differs from `file`:
    /// `download` (its URL and headers) as a `HEAD`.
    static func check(_ download: URLRequest, against file: (size: Int64, modified: Date), timeout: TimeInterval,
                      connectTimeout: TimeInterval?) -> FetchOperation<Data> {
        var request = download
        request.setValue(httpDate(file.modified), forHTTPHeaderField: "If-Modified-Since")
        return head(request, timeout: timeout, connectTimeout: connectTimeout)
    }

    /// The plain `HEAD` that asks the server what it calls `download` (`--content-disposition`),
    /// and, if a file of that name is there, whether its copy differs (``verdict(of:for:)``).
    static func nameQuestion(_ download: URLRequest, timeout: TimeInterval, connectTimeout: TimeInterval?) -> FetchOperation<Data> {
        head(download, timeout: timeout, connectTimeout: connectTimeout)
    }

    /// `request` as a `HEAD` with the run's timeouts, asked again once after a transient failure.
    private static func head(_ request: URLRequest, timeout: TimeInterval, connectTimeout: TimeInterval?) -> FetchOperation<Data> {
        var request = request
        request.httpMethod = "HEAD"
        let head = FetchOperation<Data>(request: request)
        head.configuration.idleTimeout = timeout
        head.configuration.connectTimeout = connectTimeout
        head.configuration.retryPolicy = RetryPolicy(maximumRetries: 1)
        return head
    }

    /// What the finished `check` says of `file`.
    static func verdict(of check: FetchOperation<Data>, for file: (size: Int64, modified: Date)) -> Verdict {
        if check.error?.statusCode == 304 { return .unchanged }
        guard check.error == nil, let response = check.response else { return .unknown }
        let modified = response.value(forHTTPHeaderField: "Last-Modified").flatMap(parseHTTPDate)
        let length = response.value(forHTTPHeaderField: "Content-Length").flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
        guard modified != nil || length != nil else { return .unknown }
        if let modified, Int64(modified.timeIntervalSince1970) != Int64(file.modified.timeIntervalSince1970) { return .differs }
        if let length, length != file.size { return .differs }
        return modified == nil ? .unknown : .unchanged
    }

    /// Dates a finished download with the server's `Last-Modified`, if it sent one (access and
    /// modification times, as wget does; a symbolic link put in its place is not followed).
    static func stamp(_ url: URL, from response: HTTPURLResponse?) {
        guard let value = response?.value(forHTTPHeaderField: "Last-Modified"), let date = HTTPDate.parse(value) else { return }
        let second = timespec(tv_sec: Int(date.timeIntervalSince1970.rounded(.down)), tv_nsec: 0)
        var times = [second, second]
        _ = url.withUnsafeFileSystemRepresentation { path in
            path.map { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }
        }
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form HTTP sends.
    static func httpDate(_ date: Date) -> String {
        HTTPDate.format(date)
    }

    /// An HTTP date in any of its three forms; `nil` for anything else.
    static func parseHTTPDate(_ text: String) -> Date? {
        HTTPDate.parse(text)
    }
}
