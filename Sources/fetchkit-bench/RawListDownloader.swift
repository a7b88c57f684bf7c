import Dispatch
import Foundation
import Measurements
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `fetchkit-bench url-list-child LIST DIR C`: the floor under any URLSession downloader for
/// `tools`' small-files job. Plain URLSession used as well as it can be: one session, a
/// delegate on a serial queue, C tasks in flight (the next starts as one completes), each body
/// written with POSIX writes to `DIR/<last path component>.part` and renamed when complete. No
/// resume record, no lock, no `fsync`: what a program that promises nothing after a crash does.
final class RawListDownloader: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let urls: [URL]
    private let directory: URL
    private let concurrency: Int
    private let delegateQueue = OperationQueue()
    private var session: URLSession!
    private let done = DispatchSemaphore(value: 0)

    // Delegate-queue state.
    private var next = 0
    private var completed = 0
    private var failures = 0
    private var files: [Int: (fd: Int32, name: String)] = [:]

    init(urls: [URL], directory: URL, concurrency: Int) {
        self.urls = urls
        self.directory = directory
        self.concurrency = concurrency
        super.init()
        delegateQueue.maxConcurrentOperationCount = 1
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = concurrency
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: delegateQueue)
    }

    /// Downloads every URL; the number that failed.
    func run() -> Int {
        guard !urls.isEmpty else { return 0 }
        delegateQueue.addOperation { [self] in
            for _ in 0..<min(concurrency, urls.count) { startNext() }
        }
        done.wait()
        session.finishTasksAndInvalidate()
        return failures
    }

    static func child(arguments: [String]) throws -> Never {
        guard arguments.count == 3, let concurrency = Int(arguments[2]), concurrency > 0 else {
            throw BenchError("url-list-child LIST DIR C")
        }
        let list = try String(contentsOfFile: arguments[0], encoding: .utf8)
        let urls = list.split(separator: "\n").compactMap { URL(string: String($0)) }
        let failures = RawListDownloader(urls: urls, directory: URL(fileURLWithPath: arguments[1]), concurrency: concurrency).run()
        exit(failures == 0 ? 0 : 1)
    }

    private func startNext() {
        guard next < urls.count else { return }
        let index = next
        next += 1
        session.dataTask(with: urls[index]).resume()
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let name = dataTask.originalRequest?.url?.lastPathComponent ?? "index.html"
        let path = directory.appendingPathComponent(name + ".part", isDirectory: false).path
        files[dataTask.taskIdentifier] = (open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644), name)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let fd = files[dataTask.taskIdentifier]?.fd, fd >= 0 else { return }
        data.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            var offset = 0
            while offset < buffer.count {
                let written = write(fd, base + offset, buffer.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if let file = files.removeValue(forKey: task.taskIdentifier), file.fd >= 0 {
            close(file.fd)
            let part = directory.appendingPathComponent(file.name + ".part", isDirectory: false).path
            rename(part, directory.appendingPathComponent(file.name, isDirectory: false).path)
        }
        if error != nil || (task.response as? HTTPURLResponse)?.statusCode != 200 { failures += 1 }
        completed += 1
        if completed == urls.count { done.signal() } else { startNext() }
    }
}
