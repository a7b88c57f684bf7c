import Dispatch
import FetchKit
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `-v`: the redirects each download followed, heard as a ``FetchEventMonitor`` of the
/// command's queue, so that the verbose lines of a file show every hop — the status, where it
/// led, the request that followed — as `curl -v` and wget show them.
///
/// Its events come on the display queue, but through the queue's monitor channel, not with the
/// download's completion: the completion can come first. A file's end therefore waits for the
/// monitor's last event of that download (``afterLastEvent(of:_:)``), which comes after all its
/// redirects. All its state is the display queue's.
final class RedirectRecorder: FetchEventMonitor, @unchecked Sendable {
    /// One redirect followed.
    struct Hop {
        /// The 3xx status.
        let status: Int
        /// The request that followed it: its method and URL (not yet redacted).
        let method: String
        let url: URL?
    }

    /// The display queue, where the monitor's methods run.
    let queue: DispatchQueue
    /// The downloads whose redirects are recorded (the questions about files already there are
    /// not), each held until its end is heard, so that its identifier is not reused.
    private var watched: [ObjectIdentifier: AnyFetchOperation] = [:]
    /// The current attempt's redirects, per download.
    private var hops: [ObjectIdentifier: [Hop]] = [:]
    /// Downloads whose last event came before anyone waited for it.
    private var ended: Set<ObjectIdentifier> = []
    /// Work waiting for a download's last event.
    private var waiting: [ObjectIdentifier: () -> Void] = [:]
    /// How long a file's end waits for its last event at most: it comes at once, but a file
    /// never waits for ever.
    private let longestWait: DispatchTimeInterval = .seconds(10)

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// Records `download`'s redirects from now on (on the display queue).
    func watch(_ download: AnyFetchOperation) {
        watched[ObjectIdentifier(download)] = download
    }

    /// The redirects the last attempt of `download` followed, first to last (on the display
    /// queue, once its last event was heard: see ``afterLastEvent(of:_:)``).
    func hops(of download: AnyFetchOperation) -> [Hop] {
        hops[ObjectIdentifier(download)] ?? []
    }

    /// Runs `work` on the display queue once `download`'s last event was heard (at once if it
    /// was), or after ``longestWait`` if it is not.
    func afterLastEvent(of download: AnyFetchOperation, _ work: @escaping () -> Void) {
        let id = ObjectIdentifier(download)
        if ended.remove(id) != nil {
            finish(id, work)
            return
        }
        waiting[id] = work
        queue.asyncAfter(deadline: .now() + longestWait) { [self] in
            if let work = waiting.removeValue(forKey: id) { finish(id, work) }
        }
    }

    private func finish(_ id: ObjectIdentifier, _ work: () -> Void) {
        work()
        hops[id] = nil
        watched[id] = nil
    }

    // MARK: FetchEventMonitor, on the display queue

    func fetch(_ fetch: MonitoredFetch, didRedirect response: HTTPURLResponse, to request: URLRequest) {
        let id = ObjectIdentifier(fetch.operation)
        guard watched[id] != nil else { return }
        hops[id, default: []].append(Hop(status: response.statusCode, method: request.httpMethod ?? "GET", url: request.url))
    }

    func fetch(_ fetch: MonitoredFetch, willRetry event: RetryEvent) {
        // Each attempt follows the redirects again: the lines show the last one's.
        let id = ObjectIdentifier(fetch.operation)
        if watched[id] != nil { hops[id] = [] }
    }

    func fetch(_ fetch: MonitoredFetch, didFinishWith error: FetchError?) {
        let id = ObjectIdentifier(fetch.operation)
        guard watched[id] != nil else { return }
        if let work = waiting.removeValue(forKey: id) {
            finish(id, work)
        } else {
            ended.insert(id)
        }
    }
}
