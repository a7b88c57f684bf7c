import FetchKit
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `fetchkit -N URL` (`--no-buffer`, curl's `-N`): the body to standard output as it arrives,
/// through a ``DataStreamOperation``.
///
/// Each piece is written before the next is read, so a slow reader of the pipe slows the
/// reading, and through FetchKit's backpressure the server: memory stays bounded. A reader
/// that goes away (`| head`) makes a write fail with `EPIPE` (the tool ignores SIGPIPE): the
/// stream stops there, which cancels the fetch, and the tool exits 0 without a message — the
/// reader had what it wanted. A failed fetch prints one line on standard error and exits with
/// its class's status, as a download does.
enum NoBufferStream {
    static func run(_ options: Options) -> Int32 {
        guard let url = options.urls.first else { return ExitStatus.usage.rawValue }
        var trust = options.trust
        var session = FetchSession.shared
        do {
            if !options.pinnedKeys.isEmpty, let host = url.host { try trust.pinPublicKeys(options.pinnedKeys, forHost: host) }
            if !trust.isEmpty { session = try FetchSession(trust: trust) }
        } catch {
            Terminal.error("fetchkit: --cacert/--pinnedpubkey: \(Terminal.sanitized(error.description))")
            return ExitStatus.usage.rawValue
        }
        var request = URLRequest(url: url)
        request.setValue("fetchkit/\(Version.current)", forHTTPHeaderField: "User-Agent")
        for header in options.headers { request.setValue(header.value, forHTTPHeaderField: header.name) }
        let operation = DataStreamOperation(request: request)
        operation.configuration.session = session
        operation.configuration.idleTimeout = options.timeout
        operation.configuration.totalTimeout = options.maxTime
        operation.configuration.connectTimeout = options.connectTimeout
        operation.configuration.maximumResponseSize = options.maximumSize
        operation.configuration.retryPolicy = RetryPolicy(maximumRetries: options.retries)
        if let host = url.host?.lowercased() {
            if let given = options.credentials {
                operation.configuration.credentials = .perHost([host: URLCredential(user: given.user, password: given.password, persistence: .none)])
            } else if let login = options.netrc?.credentials(forHost: host) {
                operation.configuration.credentials = .perHost([host: URLCredential(user: login.login, password: login.password, persistence: .none)])
            }
        }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let queue = FetchQueue(maximumConcurrentTransfers: 1)
        Task {
            do throws(FetchError) {
                for try await chunk in queue.stream(operation) {
                    guard writeAll(chunk) else {
                        // The reader went away: it had what it wanted.
                        outcome.set(.readerGone)
                        break
                    }
                }
            } catch {
                outcome.set(.failed(error))
            }
            done.signal()
        }
        done.wait()
        switch outcome.value {
        case nil, .readerGone?:
            return ExitStatus.success.rawValue
        case .failed(let error)?:
            if options.verbosity != .quiet {
                Terminal.error("fetchkit: \(Terminal.sanitized(Redaction.redacted(url))): \(Terminal.sanitized(Downloader.reason(error)))")
            }
            return ExitStatus(error).rawValue
        }
    }

    /// Writes every byte of `data` to standard output; `false` once it cannot (the reader went
    /// away, or the output failed).
    private static func writeAll(_ data: Data) -> Bool {
        data.withUnsafeBytes { buffer -> Bool in
            guard var base = buffer.baseAddress else { return true }
            var left = buffer.count
            while left > 0 {
                let written = write(STDOUT_FILENO, base, left)
                if written < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                base += written
                left -= written
            }
            return true
        }
    }

    private enum Ending {
        case readerGone
        case failed(FetchError)
    }

    /// How the stream ended, set once by the reading task.
    private final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var ending: Ending?   // guarded by `lock`

        func set(_ ending: Ending) {
            lock.withLock { if self.ending == nil { self.ending = ending } }
        }

        var value: Ending? { lock.withLock { ending } }
    }
}
