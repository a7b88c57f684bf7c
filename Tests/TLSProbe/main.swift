// A probe for FetchKitTests' TLS suites: fetches URLs through a FetchQueue and prints what came
// back. libcurl on Linux trusts only /etc/ssl/certs/ca-certificates.crt, so the tests run this
// in a private mount namespace with a bundle holding their test CA bind-mounted over that
// path; the test process itself has many threads and cannot enter a namespace of its own.
//
// Usage: TLSProbe [--per-host N] [--idle-timeout S] [--no-retry] [--limit-rate B] [--own-url-cache] [--stream] <url>...
// Fetches every URL at once through one FetchQueue (overall limit 64 with --per-host, else 8;
// per-host limit N, else the default; default retry policy unless --no-retry; an idle timeout
// of S seconds if given; a bandwidth limit of B bytes per second if given; through a session
// whose configuration has a URL cache of its own with --own-url-cache, else the shared one)
// and prints one line per URL, in the order given:
//   <index> ok status=<code> bytes=<count> pattern=<match|mismatch|none> attempts=<n> elapsed_ms=<ms> [enforced=<true|false>]
//   <index> error kind=<FetchError.Code> reason=<TLSFailure.Reason|none> urlerror=<code|none> attempts=<n> elapsed_ms=<ms> text=<libcurl's message> description=<FetchError's description>
// With --stream each URL is read as it arrives (a DataStreamOperation through
// FetchQueue.stream); its line adds reads=<elements read> first_read_ms=<ms to the first>.
// `pattern` compares the body of a `/bytes/<n>` or `/trickle/<n>/…` URL with the kit's byte
// pattern (FetchKitTesting's TestResponse.patternBytes); `elapsed_ms` runs from the enqueue to
// the result.
//
// Usage: TLSProbe cancel-resume <directory> <download-url> <url>...
// On one HTTP/2 connection: a DownloadOperation of <download-url> into <directory>/file, and
// once <n> bytes of its body arrived, <n> being the URL's last path component (its server then
// stalls; a `Range` request gets the rest), fetches of the other URLs
// (bodies that trickle); once each of them received part of its body, the download is
// cancelled while they carry on. Then a second download to the same file resumes. Prints:
//   cancel error kind=<code> elapsed_ms=<ms from cancel() to the result> received=<bytes> partial=<bytes kept>
//   <index> ok … (one line per other URL, as above)
//   resume ok bytes=<file size> resumed=<bytes from the partial file> pattern=<match|mismatch> attempts=<n>
//     (or `resume error kind=… description=…`)
// Exits 0 once every fetch ended (whatever its result), 2 on bad usage.
import FetchKit
import FetchKitTesting
import Foundation

/// One line without line breaks, for a message that may hold any text.
func oneLine(_ text: String) -> String {
    text.replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\r", with: " ")
}

func usageError(_ message: String) -> Never {
    FileHandle.standardError.write(Data("TLSProbe: \(message)\nusage: TLSProbe [--per-host N] [--idle-timeout S] [--no-retry] [--limit-rate B] [--own-url-cache] <url>... | TLSProbe cancel-resume <directory> <download-url> <url>...\n".utf8))
    exit(2)
}

/// The pattern bytes a `/bytes/<n>` or `/trickle/<n>/<chunk>/<ms>` URL serves, if it is one.
func expectedBody(_ url: URL) -> Data? {
    let parts = url.pathComponents
    if parts.count == 3, parts[1] == "bytes", let count = Int(parts[2]) { return TestResponse.patternBytes(count: count) }
    if parts.count == 5, parts[1] == "trickle", let count = Int(parts[2]) { return TestResponse.patternBytes(count: count) }
    return nil
}

func milliseconds(since start: ContinuousClock.Instant) -> Int {
    let elapsed = ContinuousClock.now - start
    return Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
}

/// The line for one fetch.
func report(_ url: URL, _ operation: FetchOperation<Data>, _ result: Result<Data, FetchError>, elapsed: Int) -> String {
    switch result {
    case .success(let body):
        let pattern = expectedBody(url).map { $0 == body ? "match" : "mismatch" } ?? "none"
        let status = operation.response?.statusCode ?? 0
        return "ok status=\(status) bytes=\(body.count) pattern=\(pattern) attempts=\(operation.attempts) elapsed_ms=\(elapsed)"
    case .failure(let error):
        var urlError = "none", reason = "none", text = ""
        if case .transport(let underlying) = error {
            urlError = "\(underlying.code.rawValue)"
            text = underlying.localizedDescription
        } else if case .tls(let failure) = error {
            reason = "\(failure.reason)"
            text = failure.message
        }
        return "error kind=\(error.code) reason=\(reason) urlerror=\(urlError) attempts=\(operation.attempts) elapsed_ms=\(elapsed) text=\(oneLine(text)) description=\(oneLine(error.description))"
    }
}

/// Fetches `operation` through `queue` and returns its line.
func fetchLine(_ queue: FetchQueue, _ operation: FetchOperation<Data>) async -> String {
    let start = ContinuousClock.now
    let result: Result<Data, FetchError>
    do throws(FetchError) {
        result = .success(try await queue.fetch(operation))
    } catch {
        result = .failure(error)
    }
    return report(operation.request?.url ?? URL(fileURLWithPath: "/"), operation, result, elapsed: milliseconds(since: start))
}

/// Streams `operation` through `queue` and returns its line.
func streamLine(_ queue: FetchQueue, _ operation: DataStreamOperation) async -> String {
    let start = ContinuousClock.now
    var body = Data(), reads = 0, firstRead = -1
    do throws(FetchError) {
        for try await chunk in queue.stream(operation) {
            if reads == 0 { firstRead = milliseconds(since: start) }
            reads += 1
            body.append(chunk)
        }
    } catch {
        let url = operation.request?.url ?? URL(fileURLWithPath: "/")
        return "error kind=\(error.code) reason=none urlerror=none attempts=\(operation.attempts) elapsed_ms=\(milliseconds(since: start)) text= description=\(oneLine(error.description)) \(url)"
    }
    let url = operation.request?.url ?? URL(fileURLWithPath: "/")
    let pattern = expectedBody(url).map { $0 == body ? "match" : "mismatch" } ?? "none"
    return "ok status=\(operation.response?.statusCode ?? 0) bytes=\(body.count) pattern=\(pattern) attempts=\(operation.attempts) "
        + "elapsed_ms=\(milliseconds(since: start)) reads=\(reads) first_read_ms=\(firstRead)"
}

/// Waits until `operation` received at least `bytes` of its body (or ended).
func waitForBody(_ operation: AnyFetchOperation, atLeast bytes: Int64) async {
    for await progress in operation.progressUpdates where progress.bytesReceived >= bytes { return }
}

/// The plain mode: every URL at once.
func fetchAll(_ arguments: [String]) async {
    var arguments = arguments[...]
    var perHost: Int?, idleTimeout: TimeInterval?, retries = true, limit: Int?, ownURLCache = false, streams = false
    while let first = arguments.first, first.hasPrefix("--") {
        arguments = arguments.dropFirst()
        switch first {
        case "--per-host":
            guard let value = arguments.first.flatMap(Int.init), value > 0 else { usageError("--per-host needs a number") }
            perHost = value
            arguments = arguments.dropFirst()
        case "--idle-timeout":
            guard let value = arguments.first.flatMap(TimeInterval.init), value > 0 else { usageError("--idle-timeout needs seconds") }
            idleTimeout = value
            arguments = arguments.dropFirst()
        case "--no-retry":
            retries = false
        case "--own-url-cache":
            ownURLCache = true
        case "--stream":
            streams = true
        case "--limit-rate":
            guard let value = arguments.first.flatMap(Int.init), value > 0 else { usageError("--limit-rate needs bytes per second") }
            limit = value
            arguments = arguments.dropFirst()
        default:
            usageError("unknown option \(first)")
        }
    }
    let urls = arguments.map { URL(string: $0) }
    let (timeout, retrying, streaming) = (idleTimeout, retries, streams)
    guard !urls.isEmpty, urls.allSatisfy({ $0 != nil }) else { usageError("no URLs") }
    let queue = perHost.map { FetchQueue(maximumConcurrentTransfers: 64, maximumTransfersPerHost: $0, bandwidthLimit: limit) }
        ?? FetchQueue(maximumConcurrentTransfers: 8, bandwidthLimit: limit)
    // A configuration with a URL cache of its own takes the slot FetchKit sets each task's
    // libcurl options from: its transfers run as FoundationNetworking makes them.
    let session: FetchSession = ownURLCache ? {
        let configuration = FetchSession.defaultConfiguration()
        configuration.urlCache = URLCache(memoryCapacity: 0, diskCapacity: 0, diskPath: nil)
        return FetchSession(configuration: configuration)
    }() : .shared
    let lines = await withTaskGroup(of: (Int, String).self) { group in
        for (index, url) in urls.compactMap({ $0 }).enumerated() {
            group.addTask {
                if streaming {
                    let operation = DataStreamOperation(url: url)
                    operation.configuration.session = session
                    operation.configuration.idleTimeout = timeout
                    if !retrying { operation.configuration.retryPolicy = .none }
                    return (index, await streamLine(queue, operation))
                }
                let operation = FetchOperation<Data>(url: url)
                operation.configuration.session = session
                operation.configuration.idleTimeout = timeout
                if !retrying { operation.configuration.retryPolicy = .none }
                return (index, await fetchLine(queue, operation))
            }
        }
        var lines = [String](repeating: "", count: urls.count)
        for await (index, line) in group { lines[index] = "\(index) \(line)" }
        return lines
    }.map { line in limit == nil || !line.contains(" ok ") ? line : line + " enforced=\(queue.isBandwidthLimitEnforced)" }
    print(lines.joined(separator: "\n"))
}

/// The `cancel-resume` mode (see the usage above).
func cancelAndResume(directory: URL, download downloadURL: URL, others: [URL]) async {
    let queue = FetchQueue(maximumConcurrentTransfers: 16, maximumTransfersPerHost: 16)
    let destination = directory.appendingPathComponent("file")
    guard let stalledAt = downloadURL.pathComponents.last.flatMap(Int64.init) else { usageError("the download URL ends with the bytes it sends before it stalls") }

    let download = DownloadOperation(url: downloadURL, destination: destination)
    let downloading = Task { () -> Result<URL, FetchError> in
        do throws(FetchError) { return .success(try await queue.fetch(download)) } catch { return .failure(error) }
    }
    await waitForBody(download, atLeast: stalledAt)
    let operations = others.map { FetchOperation<Data>(url: $0) }
    let fetching = operations.map { operation in Task { await fetchLine(queue, operation) } }
    for operation in operations { await waitForBody(operation, atLeast: 1) }
    let cancelled = ContinuousClock.now
    download.cancel()
    let result = await downloading.value
    let elapsed = milliseconds(since: cancelled)
    let partial = (try? FileManager.default.attributesOfItem(atPath: download.partialFileURL.path)[.size] as? Int) ?? -1
    var received: Int64 = -1
    for await progress in download.progressUpdates { received = progress.bytesReceived }
    switch result {
    case .success: print("cancel ok elapsed_ms=\(elapsed) received=\(received) partial=\(partial)")
    case .failure(let error): print("cancel error kind=\(error.code) elapsed_ms=\(elapsed) received=\(received) partial=\(partial)")
    }
    for (index, task) in fetching.enumerated() { print("\(index) \(await task.value)") }

    let resumed = DownloadOperation(url: downloadURL, destination: destination)
    do throws(FetchError) {
        let file = try await queue.fetch(resumed)
        let body = (try? Data(contentsOf: file)) ?? Data()
        let total = resumed.response?.expectedContentLength ?? 0
        let expected = TestResponse.patternBytes(count: body.count)
        print("resume ok status=\(resumed.response?.statusCode ?? 0) bytes=\(body.count) resumed=\(resumed.resumedBytes) pattern=\(body == expected ? "match" : "mismatch") attempts=\(resumed.attempts) content_length=\(total)")
    } catch {
        print("resume error kind=\(error.code) attempts=\(resumed.attempts) description=\(oneLine(error.description))")
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "cancel-resume" {
    guard arguments.count >= 4, let download = URL(string: arguments[2]) else { usageError("cancel-resume needs a directory and URLs") }
    let others = arguments.dropFirst(3).compactMap { URL(string: $0) }
    await cancelAndResume(directory: URL(fileURLWithPath: arguments[1]), download: download, others: others)
} else {
    await fetchAll(arguments)
}
