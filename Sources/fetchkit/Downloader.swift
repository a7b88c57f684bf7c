import Dispatch
import FetchKit
import Foundation

/// Downloads the command line's URLs through a ``FetchQueue``, with a live display.
///
/// All display state lives on one serial queue, which is also the fetch queue's callback queue,
/// so completions and progress arrive there in order and need no lock. The main thread only
/// waits for the end.
final class Downloader: @unchecked Sendable {
    enum State {
        case waiting
        case active
        case retrying
        case done
        case failed(FetchError)
    }

    struct Item {
        let url: URL
        let destination: URL
        var name: String { destination.lastPathComponent }
        var state = State.waiting
        var received: Int64 = 0
        var expected: Int64?
        var startedAt: Date?
        var finishedAt: Date?
    }

    private let options: Options
    private let ui = DispatchQueue(label: "fetchkit.display")
    private let queue: FetchQueue
    private let finished = DispatchSemaphore(value: 0)
    private var items: [Item] = []
    private var anyFailed = false
    private var display: ProgressDisplay
    private let startedAt = Date()

    init(options: Options) {
        self.options = options
        queue = FetchQueue(
            name: "fetchkit",
            maximumConcurrentTransfers: options.parallel,
            maximumTransfersPerHost: options.perHost,
            callbackQueue: .dispatch(ui)
        )
        display = ProgressDisplay(interactive: Terminal.isInteractive)
    }

    /// Runs every download and returns the exit status: 0 if all succeeded, 1 otherwise.
    func run() -> Int32 {
        let directory = options.outputDirectory.standardizedFileURL
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            Terminal.error("fetchkit: cannot use \(directory.path) as the output directory: \(error.localizedDescription)")
            return 1
        }
        let names = Self.fileNames(for: options.urls)
        items = zip(options.urls, names).map { Item(url: $0, destination: directory.appendingPathComponent($1)) }
        display.header("Downloading \(items.count) file\(items.count == 1 ? "" : "s") to \(directory.path) "
            + "(\(options.parallel) at once, \(options.perHost) per host)")

        // The live display redraws ten times a second, on a terminal only. (A dispatch source
        // must never be released while suspended, so it exists only when it runs.)
        var timer: DispatchSourceTimer?
        ui.sync {
            startAll()
            if display.interactive {
                let source = DispatchSource.makeTimerSource(queue: ui)
                source.schedule(deadline: .now(), repeating: .milliseconds(100))
                source.setEventHandler { [self] in display.render(items, startedAt: startedAt) }
                source.resume()
                timer = source
            }
        }
        finished.wait()
        return ui.sync {
            timer?.cancel()
            display.render(items, startedAt: startedAt, final: true)
            display.summary(items, directory: directory, elapsed: Date().timeIntervalSince(startedAt))
            return anyFailed ? 1 : 0
        }
    }

    // MARK: On the display queue

    /// Enqueues every item as one batch; its completion, after the last item's, ends the run.
    private func startAll() {
        let downloads = items.indices.map(makeDownload)
        queue.enqueue(batch: downloads, completion: { [self] status in
            anyFailed = status.failed > 0
            finished.signal()
        })
    }

    private func makeDownload(_ index: Int) -> DownloadOperation {
        let download = DownloadOperation(url: items[index].url, destination: items[index].destination)
        download.idleTimeout = options.timeout
        download.maximumResponseSize = options.maximumSize
        // FetchKit retries transient failures itself, with backoff (and Retry-After); a retry
        // resumes the partial file.
        download.retryPolicy = RetryPolicy(maximumRetries: options.retries)
        download.onRetry(on: .dispatch(ui)) { [self] event in
            items[index].state = .retrying
            display.retrying(items[index], attempt: event.attempt, of: options.retries + 1, reason: Self.reason(event.error))
        }
        download.onProgress(on: .dispatch(ui)) { [self] progress in
            if items[index].startedAt == nil { items[index].startedAt = Date() }
            if case .done = items[index].state { return }
            items[index].state = .active
            items[index].received = progress.bytesReceived
            items[index].expected = progress.bytesExpected
        }
        download.onCompletion(on: .dispatch(ui)) { [self] download in
            for notice in download.partialFileNotices {
                display.note(items[index], notice.description)
            }
            if let error = download.error {
                items[index].state = .failed(error)
            } else {
                items[index].state = .done
                items[index].received = DownloadOperation.sizeOfFile(at: download.destination) ?? items[index].received
                items[index].expected = items[index].received
            }
            items[index].finishedAt = Date()
            display.finished(items[index])
        }
        return download
    }

    // MARK: Helpers

    static func reason(_ error: FetchError) -> String {
        switch error {
        case .unacceptableStatus(let failure):
            return "HTTP \(failure.statusCode) \(HTTPURLResponse.localizedString(forStatusCode: failure.statusCode))"
        case .transport(let urlError):
            return urlError.localizedDescription
        case .timedOut(let timeout):
            return "no data for \(Format.duration(timeout.interval))"
        default:
            return error.description
        }
    }

    /// A file name per URL: its last path component (or `index.html`), made safe (no path
    /// separators, controls or leading dot; at most 232 bytes) and unique.
    static func fileNames(for urls: [URL]) -> [String] {
        SafeFileName.uniqueNames(for: urls)
    }
}

extension DownloadOperation {
    static func sizeOfFile(at url: URL) -> Int64? {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value
    }
}
