import Dispatch
import FetchKit
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Downloads the command line's URLs through a ``FetchQueue``, with a live display.
///
/// All display state lives on one serial queue, which is also the fetch queue's callback queue,
/// so completions and progress arrive there in order and need no lock. The main thread only
/// waits for the end.
///
/// SIGINT (Ctrl-C) and SIGTERM stop the run cleanly: see ``interrupt(by:)``.
final class Downloader: @unchecked Sendable {
    enum State {
        case waiting
        case active
        case retrying
        case done
        case failed(FetchError)
        /// Stopped by a signal before it finished.
        case stopped
        /// A file was already there, and `--force` was not given: kept, not downloaded.
        case skipped

        /// Settled before any download starts: kept, or (a file already there without the
        /// digest given) failed.
        var isSettled: Bool {
            switch self {
            case .skipped, .failed: true
            default: false
            }
        }
    }

    struct Item {
        let url: URL
        /// Where the file goes: named from its URL, then (``Options/contentDisposition``) as
        /// the server says once it is complete.
        var destination: URL
        /// The digest it must have (`--sha256`, `--checksum`, or its line in an `-i` list).
        var digest: FileDigest? = nil
        var name: String { destination.lastPathComponent }
        var state = State.waiting
        /// The bytes received, and those this run moved (for its rate).
        var meter = TransferMeter()
        var received: Int64 { meter.received }
        var expected: Int64?
        var startedAt: Date?
        var finishedAt: Date?
        /// When stopped: the bytes its partial file keeps for the next run to resume (`nil`: none),
        /// and whether it had started (had a response, or a retry).
        var kept: Int64?
        var started = false
        /// The process that was downloading the same file when this one was skipped.
        var otherProcess: Int32?
        /// When kept because it was already there: what the server said of it.
        var verdict: ExistingFile.Verdict?
        /// The status of the last response.
        var status: Int?
        /// The digest the finished file was checked against.
        var verifiedDigest: FileDigest?
        /// A file already there does not have the SHA-256 given (it is kept, not downloaded),
        /// or could not be read to check it (``unreadable``).
        var existingFileDiffers = false
        var unreadable = false

        /// The class of its failure, if it failed.
        var exitStatus: ExitStatus? {
            guard case .failed(let error) = state else { return nil }
            return otherProcess != nil ? .fileSystem : ExitStatus(error)
        }

        /// Why it failed, in a few words (see ``Downloader/reason(_:)``).
        func failureReason(_ error: FetchError) -> String {
            if existingFileDiffers, case .digestMismatch(let mismatch) = error {
                return unreadable
                    ? "already there, and could not be read to check its \(mismatch.expected.algorithm.shownName); kept (--force downloads it again)"
                    : "already there, but its \(mismatch.expected.algorithm.shownName) is \(mismatch.actual.hex), not the expected \(mismatch.expected.hex); "
                        + "kept (--force downloads it again)"
            }
            guard let otherProcess else { return Downloader.reason(error) }
            return "skipped: being downloaded by another fetchkit" + (otherProcess > 0 ? " (pid \(otherProcess))" : "")
        }
    }

    private let options: Options
    private let ui: DispatchQueue
    private let queue: FetchQueue
    /// `-v`: each download's redirects.
    private let redirects: RedirectRecorder?
    /// `-v`: the files whose end waits for their redirects (``RedirectRecorder``), and whether
    /// the batch ended meanwhile (the run ends after them).
    private var endsWaiting = 0
    private var batchEnded = false
    private let finished = DispatchSemaphore(value: 0)
    private var items: [Item] = []
    /// The signal that stopped the run.
    private var interruption: Int32?
    private var display: ProgressDisplay
    private let startedAt = Date()
    /// The output directory's list of unfinished downloads (``DownloadJournal``), if this run
    /// could take it (another fetchkit in the same directory may hold it).
    private var journal: DownloadJournal?
    /// The session with `--cacert` and `--pinnedpubkey`, if they were given.
    private var session: FetchSession?
    /// `-u`, for the hosts of this run's URLs.
    private var credentials: CredentialProvider?

    /// How many of the questions about files already there the server answered (on the display
    /// queue; see ``awaitAnswers(_:files:names:)``).
    private var headsAnswered = 0

    /// The journal's name in the output directory.
    static let journalName = ".fetchkit-journal.json"

    init(options: Options) {
        self.options = options
        let ui = DispatchQueue(label: "fetchkit.display")
        self.ui = ui
        let redirects = options.verbosity == .verbose ? RedirectRecorder(queue: ui) : nil
        self.redirects = redirects
        queue = FetchQueue(
            name: "fetchkit",
            maximumConcurrentTransfers: options.parallel,
            maximumTransfersPerHost: options.perHostLimit,
            monitors: redirects.map { [$0] } ?? [],
            bandwidthLimit: options.limitRateTotal
        )
        // With --json, standard output carries the JSON lines only; people read standard error.
        let human = options.json ? Terminal.errors : Terminal.output
        display = ProgressDisplay(out: human, interactive: Terminal.isInteractive(human.descriptor), verbosity: options.verbosity)
    }

    /// Runs every download and returns the exit status (``ExitStatus``): 0 if all succeeded, a
    /// failure class's code otherwise, and 128 + the signal's number (130 for SIGINT, 143 for
    /// SIGTERM) if a signal stopped it.
    func run() -> Int32 {
        let directory = options.outputDirectory.standardizedFileURL
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            Terminal.error("fetchkit: cannot use \(Terminal.sanitized(directory.path)) as the output directory: "
                + Terminal.sanitized(error.localizedDescription))
            return ExitStatus.fileSystem.rawValue
        }
        var names = Self.fileNames(for: options.urls)
        // `-o FILE`: the one download's name, as given.
        if let name = options.outputName, names.count == 1 { names = [name] }
        items = zip(options.entries, names).map { Item(url: $0.url, destination: directory.appendingPathComponent($1, isDirectory: false), digest: $0.digest) }
        guard let restored = openJournal(in: directory) else { return ExitStatus.fileSystem.rawValue }
        items += restored
        if items.isEmpty {
            display.header("Nothing to continue in \(Terminal.sanitized(directory.path))")
            return ExitStatus.success.rawValue
        }
        guard makeSession() else {
            closeJournal(directory)
            return ExitStatus.usage.rawValue
        }
        let hosts = Set(items.compactMap { $0.url.host?.lowercased() })
        if let given = options.credentials {
            let credential = URLCredential(user: given.user, password: given.password, persistence: .none)
            credentials = .perHost(Dictionary(uniqueKeysWithValues: hosts.map { ($0, credential) }))
        } else if let netrc = options.netrc {
            // Each host its own entry's login, as curl reads the file; a host it names not (and
            // no default) gets none.
            let logins = hosts.compactMap { host in
                netrc.credentials(forHost: host).map { (host, URLCredential(user: $0.login, password: $0.password, persistence: .none)) }
            }
            if !logins.isEmpty { credentials = .perHost(Dictionary(uniqueKeysWithValues: logins)) }
        }
        // Like wget --no-clobber: a file already there is kept, not replaced, unless --force;
        // the server is asked whether its copy changed (see ExistingFile).
        if !options.force { checkExistingFiles() }
        // A file already there and kept is no longer unfinished; nor is one that fails its
        // digest (--force replaces it).
        try? journal?.remove(items.filter(\.state.isSettled).map(\.name))
        display.header("Downloading \(items.count) file\(items.count == 1 ? "" : "s") to \(Terminal.sanitized(directory.path)) "
            + "(\(options.parallel) at once, \(options.perHostLimit) per host)")

        // The live display redraws ten times a second, on a terminal only; elsewhere (a CI
        // log), a plain line per active file every --summary-interval. (A dispatch source
        // must never be released while suspended, so it exists only when it runs.)
        var timer: DispatchSourceTimer?
        let signals = watchSignals()
        ui.sync {
            for index in items.indices where items[index].state.isSettled {
                ended(index)
            }
            startAll()
            timer = ticker(first: .now(), interactive: { [self] in display.render(items, startedAt: startedAt) },
                           plain: { [self] in display.plainProgress(items) })
        }
        finished.wait()
        return ui.sync {
            // A signal from here on goes unhandled (it stays pending): the run is ending anyway.
            for source in signals { source.cancel() }
            timer?.cancel()
            closeJournal(directory)
            display.render(items, startedAt: startedAt, final: true)
            display.summary(items, directory: directory, elapsed: Date().timeIntervalSince(startedAt),
                            interruptedBy: interruption.map(Self.signalName))
            let succeeded = items.filter { switch $0.state { case .done, .skipped: true; default: false } }.count
            return ExitStatus.of(failures: items.compactMap(\.exitStatus), succeeded: succeeded, signal: interruption)
        }
    }

    /// The session for `--cacert` and `--pinnedpubkey` (each pin for every host of this run's
    /// URLs), if they were given; `false`, having said why, when it cannot be made.
    private func makeSession() -> Bool {
        var trust = options.trust
        do {
            if !options.pinnedKeys.isEmpty {
                for host in Set(items.compactMap { $0.url.host }) {
                    try trust.pinPublicKeys(options.pinnedKeys, forHost: host)
                }
            }
            if !trust.isEmpty { session = try FetchSession(trust: trust) }
            return true
        } catch {
            Terminal.error("fetchkit: --cacert/--pinnedpubkey: \(Terminal.sanitized(error.description))")
            return false
        }
    }

    /// What every fetch of this run shares: the session of `--cacert` and `--pinnedpubkey`,
    /// and the credentials of `-u`.
    private func configure(_ configuration: inout FetchConfiguration) {
        if let session { configuration.session = session }
        configuration.credentials = credentials
    }

    /// Marks every file already there as kept, and asks the server of each, at once (bounded
    /// by the queue), whether its copy differs: a conditional `HEAD` (``ExistingFile``).
    ///
    /// With `--content-disposition` the server names the file, so a download with no file (and
    /// no partial file) under its URL's name first asks the server for that name, with a plain
    /// `HEAD`, as wget does: a file already there under the server's name is kept just the same,
    /// rather than downloaded again beside it as `NAME-1.ext`.
    private func checkExistingFiles() {
        var checks: [(index: Int, check: FetchOperation<Data>, file: (size: Int64, modified: Date))] = []
        var nameQuestions: [(index: Int, question: FetchOperation<Data>)] = []
        for index in items.indices {
            guard let file = ExistingFile.regularFile(at: items[index].destination) else {
                if options.contentDisposition, !hasPartialFile(items[index]) {
                    nameQuestions.append((index, ExistingFile.nameQuestion(request(for: items[index].url), timeout: options.timeout,
                                                                            connectTimeout: options.connectTimeout)))
                }
                continue
            }
            if settleByDigest(index, size: file.size) { continue }
            items[index].state = .skipped
            checks.append((index, ExistingFile.check(request(for: items[index].url), against: file,
                                                           timeout: options.timeout, connectTimeout: options.connectTimeout), file))
        }
        for head in checks.map(\.check) + nameQuestions.map(\.question) { configure(&head.configuration) }
        awaitAnswers(checks.map(\.check) + nameQuestions.map(\.question), files: checks.count, names: nameQuestions.count)
        for entry in checks {
            items[entry.index].verdict = ExistingFile.verdict(of: entry.check, for: entry.file)
        }
        for (index, question) in nameQuestions {
            guard question.error == nil,
                  let name = ContentDisposition.safeName(in: question.response?.value(forHTTPHeaderField: "Content-Disposition"),
                                                         for: items[index].url),
                  name != items[index].name else { continue }
            let destination = items[index].destination.deletingLastPathComponent().appendingPathComponent(name, isDirectory: false)
            guard let file = ExistingFile.regularFile(at: destination) else { continue }
            // Listed in the journal under the URL's name: unlisted before it takes the server's.
            try? journal?.remove(items[index].name)
            items[index].destination = destination
            // With a digest, the file under the server's name is checked as one under the URL's.
            if settleByDigest(index, size: file.size) { continue }
            items[index].state = .skipped
            items[index].verdict = ExistingFile.verdict(of: question, for: file)
        }
    }

    /// A file already at `items[index]`'s destination, when a digest was given: the file is
    /// what is checked, not the server's date — one that matches is the file asked for; one
    /// that does not is kept for --force to replace, and fails the run, rather than pass as
    /// "already there". Returns `false`, settling nothing, when no digest was given.
    private func settleByDigest(_ index: Int, size: Int64) -> Bool {
        guard let expected = items[index].digest else { return false }
        let actual = FileDigest(expected.algorithm, of: items[index].destination)
        if actual == expected {
            items[index].state = .skipped
            items[index].verifiedDigest = expected
        } else {
            items[index].existingFileDiffers = true
            items[index].state = .failed(.digestMismatch(FetchError.DigestMismatch(
                expected: expected, actual: actual ?? expected, byteCount: size, url: items[index].url,
                path: items[index].destination.path)))
            items[index].unreadable = actual == nil
        }
        return true
    }

    /// A timer on the UI queue (call it there): on a terminal, `interactive` ten times a
    /// second from `first`; elsewhere `plain` every `--summary-interval`; none with `-q` off a
    /// terminal or a zero interval. Cancel it when done.
    private func ticker(first: DispatchTime, interactive: @escaping () -> Void, plain: @escaping () -> Void) -> DispatchSourceTimer? {
        let source: DispatchSourceTimer
        if display.interactive {
            source = DispatchSource.makeTimerSource(queue: ui)
            source.schedule(deadline: first, repeating: .milliseconds(100))
            source.setEventHandler(handler: interactive)
        } else if options.summaryInterval > 0, options.verbosity != .quiet {
            source = DispatchSource.makeTimerSource(queue: ui)
            let interval = DispatchTimeInterval.milliseconds(max(100, Int(options.summaryInterval * 1000)))
            source.schedule(deadline: .now() + interval, repeating: interval)
            source.setEventHandler(handler: plain)
        } else {
            return nil
        }
        source.resume()
        return source
    }

    /// Sends `heads` (the questions about `files` files already there and `names` names) at
    /// once, bounded by the queue, and waits for their answers, saying what it waits for, as
    /// progress is shown: on a terminal a live line from the start, redrawn with the answers and
    /// the time and gone once they are in; elsewhere a plain line every `--summary-interval`
    /// while it waits; nothing with `-q`. A slow server does not leave the command looking hung.
    private func awaitAnswers(_ heads: [FetchOperation<Data>], files: Int, names: Int) {
        guard !heads.isEmpty else { return }
        let group = DispatchGroup()
        let began = Date()
        var questions: [String] = []
        if files > 0 { questions.append("whether \(files) file\(files == 1 ? "" : "s") already there changed") }
        if names > 0 { questions.append("the name\(names == 1 ? "" : "s") of \(names) file\(names == 1 ? "" : "s") (--content-disposition)") }
        let asking = "asking the server " + questions.joined(separator: ", and ")
        let total = heads.count
        var timer: DispatchSourceTimer?
        ui.sync {
            headsAnswered = 0
            let line = { [self] in
                "  … \(asking): \(headsAnswered) of \(total) answered, \(Format.duration(Date().timeIntervalSince(began)))"
            }
            // On a terminal, drawn before the first question goes out, then redrawn.
            if display.interactive { display.status(line()) }
            timer = ticker(first: .now() + .milliseconds(100), interactive: { [self] in display.status(line()) },
                           plain: { [self] in display.header(line()) })
        }
        for operation in heads {
            group.enter()
            queue.enqueue(operation, on: .dispatch(ui)) { [self] _ in
                headsAnswered += 1
                group.leave()
            }
        }
        group.wait()
        ui.sync {
            timer?.cancel()
            display.clearStatus()
        }
    }

    /// Whether `item` has a partial file under its URL's name: an interrupted download that
    /// resumes, whatever the server calls it.
    private func hasPartialFile(_ item: Item) -> Bool {
        let partial = DownloadOperation(request: URLRequest(url: item.url), destination: item.destination).partialFileURL
        return FileManager.default.fileExists(atPath: partial.path)
    }

    /// Has the display queue receive SIGINT and SIGTERM, through dispatch sources rather than
    /// a C signal handler (which could safely do almost nothing). The default action, dying at
    /// once, is turned off first; this returns once the sources are installed.
    private func watchSignals() -> [any DispatchSourceSignal] {
        let installed = DispatchGroup()
        let sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: ui)
            installed.enter()
            source.setRegistrationHandler { installed.leave() }
            source.setEventHandler { [self] in interrupt(by: number) }
            source.resume()
            return source
        }
        _ = installed.wait(timeout: .now() + 10)
        return sources
    }

    // MARK: On the display queue

    /// The first signal stops every download. Each completes as cancelled, and a download
    /// whose server allows resuming keeps its partial file and its record (see
    /// `DownloadOperation`): the same command later resumes it with a `Range` request. The
    /// batch's completion then ends the run as usual, with the summary, and the exit status
    /// says which signal stopped it.
    ///
    /// A second signal while stopping exits at once, without a summary: each partial file
    /// keeps what was written of it and its record, so it still resumes (what a download had
    /// buffered in memory, at most 256 KiB, is lost).
    private func interrupt(by number: Int32) {
        guard interruption == nil else {
            Terminal.error("fetchkit: \(Self.signalName(number)) while stopping; exiting at once")
            _exit(128 + number)
        }
        interruption = number
        display.note("Interrupted by \(Self.signalName(number)): stopping, and keeping partial files to resume "
            + "(\(number == SIGINT ? "Ctrl-C" : "the signal") again exits at once)")
        // Suspended while cancelling: a cancelled transfer frees its slot, which must not start
        // a waiting download. (Resumed after, so that the cancelled downloads that never
        // started run to their completions.)
        queue.isSuspended = true
        queue.cancelAll()
        queue.isSuspended = false
    }

    /// Enqueues every item as one batch; its completion, after the last item's, ends the run.
    private func startAll() {
        let indices = items.indices.filter { !items[$0].state.isSettled }
        let downloads = indices.map(makeDownload)
        guard !downloads.isEmpty else {
            finished.signal()
            return
        }
        if let journal {
            // Listed until each succeeds, in one write: a run killed at any moment leaves them
            // for `--continue`.
            do {
                try journal.track(zip(downloads, indices).map { ($0, items[$1].name) }, replacingExisting: true)
            } catch {
                for index in indices { display.note(items[index], "not listed for --continue: \(error.description)") }
            }
        }
        for download in downloads { redirects?.watch(download) }
        queue.enqueue(batch: downloads, on: .dispatch(ui), completion: { [self] _ in
            batchEnded = true
            if endsWaiting == 0 { finished.signal() }
        })
    }

    private func makeDownload(_ index: Int) -> DownloadOperation {
        let download = DownloadOperation(request: request(for: items[index].url), destination: items[index].destination)
        configure(&download.configuration)
        download.configuration.idleTimeout = options.timeout
        download.configuration.totalTimeout = options.maxTime
        download.configuration.connectTimeout = options.connectTimeout
        download.configuration.maximumResponseSize = options.maximumSize
        download.configuration.bandwidthLimit = options.limitRate
        download.expectedDigest = items[index].digest
        // FetchKit retries transient failures itself, with backoff (and Retry-After); a retry
        // resumes the partial file.
        download.configuration.retryPolicy = RetryPolicy(maximumRetries: options.retries)
        download.onRetry(on: .dispatch(ui)) { [self] event in
            items[index].state = .retrying
            items[index].meter.attemptEnded()
            display.retrying(items[index], attempt: event.attempt, of: options.retries + 1, reason: Self.reason(event.error))
        }
        download.onProgress(on: .dispatch(ui)) { [self, weak download] progress in
            // A report can reach this queue after the completion: a finished item stays as it ended.
            switch items[index].state {
            case .done, .failed, .stopped, .skipped: return
            case .waiting, .active, .retrying: break
            }
            if items[index].startedAt == nil { items[index].startedAt = Date() }
            items[index].state = .active
            items[index].meter.report(progress.bytesReceived, requestedOffset: TransferMeter.requestedOffset(of: download?.sentRequest))
            items[index].expected = progress.bytesExpected
        }
        download.onCompletion(on: .dispatch(ui)) { [self, download] _ in
            guard let redirects else { return end(index, download) }
            // -v: after the download's redirects were heard, to show them.
            endsWaiting += 1
            redirects.afterLastEvent(of: download) { [self] in
                end(index, download)
                endsWaiting -= 1
                if endsWaiting == 0, batchEnded { finished.signal() }
            }
        }
        return download
    }

    /// A download's end: its state, its lines, its place in the journal.
    private func end(_ index: Int, _ download: DownloadOperation) {
        for notice in download.partialFileNotices {
            display.note(items[index], notice.description)
        }
        items[index].status = download.response?.statusCode ?? download.error?.statusCode
        if let redirects {
            display.exchange(items[index], request: download.sentRequest, hops: redirects.hops(of: download), response: download.response)
        }
        if let error = download.error {
            if case .cancelled = error, interruption != nil {
                if case .waiting = items[index].state {} else { items[index].started = true }
                items[index].state = .stopped
                items[index].kept = DownloadOperation.sizeOfFile(at: download.partialFileURL)
            } else {
                items[index].otherProcess = download.otherProcessDownloading
                items[index].state = .failed(error)
                // Listed for `-c` only if asking again may succeed: not a wrong digest, a size
                // cap, a 404 or a file in the way.
                if !Self.mayContinue(after: error) { try? journal?.remove(items[index].name) }
            }
        } else {
            ExistingFile.stamp(download.destination, from: download.response)
            items[index].state = .done
            items[index].verifiedDigest = download.expectedDigest
            let size = DownloadOperation.sizeOfFile(at: download.destination) ?? items[index].received
            items[index].meter.completed(size: size, resumedBytes: download.resumedBytes)
            items[index].expected = items[index].received
            if options.contentDisposition { rename(index, as: download.response?.value(forHTTPHeaderField: "Content-Disposition")) }
        }
        items[index].finishedAt = Date()
        ended(index)
    }

    /// Opens the output directory's journal, and with `--continue` returns what it lists as
    /// unfinished and this run was not given again. Without `--continue`, a journal another
    /// fetchkit holds is simply not kept by this run; with it, that is a file error (`nil`).
    private func openJournal(in directory: URL) -> [Item]? {
        do {
            journal = try DownloadJournal(contentsOf: directory.appendingPathComponent(Self.journalName, isDirectory: false))
        } catch {
            guard options.continues else { return [] }
            Terminal.error("fetchkit: --continue: \(Terminal.sanitized(error.description))")
            return nil
        }
        guard options.continues, let journal else { return [] }
        let given = Set(items.map { $0.destination.standardizedFileURL.path })
        var restored: [Item] = []
        for entry in journal.entries where !given.contains(entry.destination.standardizedFileURL.path) {
            // Only into this directory, under a name fetchkit gives: the journal is this user's,
            // but what it names is checked as any name is.
            let name = entry.destination.lastPathComponent
            guard let url = entry.url, entry.isComplete,
                  entry.destination.deletingLastPathComponent().standardizedFileURL.path == directory.path,
                  SafeFileName.sanitize(name) == name
            else {
                Terminal.error("fetchkit: --continue: cannot continue \(Terminal.sanitized(entry.redactedURL)): "
                    + "its URL or headers hold a secret the journal does not keep; give it again")
                continue
            }
            restored.append(Item(url: url, destination: entry.destination.standardizedFileURL, digest: entry.digest))
        }
        return restored
    }

    /// Whether a download that failed with `error` is worth another try by `-c`: a network
    /// failure, a timeout, a body cut short, a server error (5xx, 408, 429), a cancel.
    static func mayContinue(after error: FetchError) -> Bool {
        switch error {
        case .transport, .timedOut, .lengthMismatch, .cancelled: true
        case .unacceptableStatus(let failure): failure.statusCode >= 500 || [408, 429].contains(failure.statusCode)
        default: false
        }
    }

    /// Removes the journal when nothing is left unfinished; otherwise says how to continue.
    private func closeJournal(_ directory: URL) {
        guard let journal else { return }
        // The file may lag behind the downloads that just succeeded: written before it goes.
        try? journal.flush()
        let left = journal.entries.count
        if left == 0 {
            try? FileManager.default.removeItem(at: journal.fileURL)
        } else if options.verbosity != .quiet {
            display.header("\(left) unfinished download\(left == 1 ? "" : "s") listed in \(Terminal.sanitized(journal.fileURL.path)): "
                + "fetchkit -c -d \(Terminal.sanitized(directory.path)) continues \(left == 1 ? "it" : "them")")
        }
        self.journal = nil
    }

    /// A file's end: its line, and its JSON line.
    private func ended(_ index: Int) {
        display.finished(items[index])
        if options.json { Terminal.output.write(JSONReport.line(for: items[index])) }
    }

    /// `--content-disposition`: names the finished file as the server's header says, made
    /// safe, never onto a name another download of this run takes, nor (without `--force`)
    /// onto a file already there.
    private func rename(_ index: Int, as header: String?) {
        guard let name = ContentDisposition.safeName(in: header, for: items[index].url) else { return }
        let reserved = Set(items.indices.filter { $0 != index }.map { items[$0].destination.lastPathComponent })
        do {
            items[index].destination = try ContentDisposition.place(items[index].destination, as: name, replacing: options.force, reserved: reserved)
        } catch {
            display.note(items[index], "kept under this name: \(error.localizedDescription)")
        }
    }

    /// The request for `url`: the `-H` headers in order, then the `User-Agent`.
    private func request(for url: URL) -> URLRequest {
        var request = URLRequest(url: url)
        request.setValue("fetchkit/\(Version.current)", forHTTPHeaderField: "User-Agent")
        for header in options.headers {
            request.setValue(header.value, forHTTPHeaderField: header.name)
        }
        return request
    }

    // MARK: Helpers

    static func signalName(_ number: Int32) -> String {
        switch number {
        case SIGINT: return "SIGINT"
        case SIGTERM: return "SIGTERM"
        default: return "signal \(number)"
        }
    }

    /// Why a download failed, in a few words, with its secrets redacted: a clause, without a
    /// final full stop, for lines such as "reason; retrying" and "reason (URL)". Not yet
    /// escaped for the terminal: the display does that (``Terminal/sanitized(_:)``).
    static func reason(_ error: FetchError) -> String {
        switch error {
        case .unacceptableStatus(let failure):
            // Only a registered reason phrase: none rather than a class name for 418.
            return "HTTP \(failure.statusCode)" + (failure.reasonPhrase.map { " \($0)" } ?? "")
        case .transport(let urlError):
            // The system's message may quote the URL.
            return clause(Redaction.redacted(text: urlError.localizedDescription, mentioning: [urlError.failingURL]))
        case .timedOut(let timeout):
            switch timeout.kind {
            case .idle: return "no data for \(Format.duration(timeout.interval))"
            case .connect: return "no connection within \(Format.duration(timeout.interval)) (--connect-timeout)"
            case .total: return "not complete within \(Format.duration(timeout.interval)) (--max-time)"
            }
        case .responseTooLarge(let limit):
            // The cap counts decoded bytes: the length a gzip response announces is the
            // compressed one, and says nothing about the cap unless it is over it.
            let announced = limit.expectedLength.flatMap { $0 > limit.limit ? "; the server announced \(Format.bytes($0))" : nil } ?? ""
            return "larger than the \(Format.size(limit.limit)) limit (--max-size, counted after decompression)\(announced)"
        case .lengthMismatch(let mismatch):
            return "the server announced \(mismatch.expected) bytes but \(mismatch.received) arrived"
        case .cancelled:
            return "cancelled"
        case .digestMismatch(let mismatch):
            return "\(mismatch.expected.algorithm.shownName) mismatch: expected \(mismatch.expected.hex), got \(mismatch.actual.hex); the file was not saved"
        case .tls(let failure):
            // The same sentence without the URL, which the summary prints beside it.
            return clause(FetchError.TLSFailure(reason: failure.reason, message: failure.message, url: nil).description)
        default:
            // The summary prints the URL beside the reason: the reason does not repeat it.
            return clause(withoutURL(error.description, url(of: error)))
        }
    }

    /// The URL an error names, if it names one.
    static func url(of error: FetchError) -> URL? {
        switch error {
        case .invalidRequest(let details): details.url
        case .cancelled(let details): details.url
        case .timedOut(let details): details.url
        case .transport(let urlError): urlError.failingURL
        case .tls(let details): details.url
        case .unacceptableStatus(let details): details.url
        case .responseTooLarge(let details): details.url
        case .lengthMismatch(let details): details.url
        case .parseFailed(let details): details.url
        case .invalidResponse(let details): details.url
        case .digestMismatch(let details): details.url
        case .authenticationFailed(let details): details.url
        case .streamOverflow(let details): details.url
        case .dependencyFailed, .fileSystem, .redirectFailed: nil
        }
    }

    /// `text` without the redacted `url` it names: " (URL)" is dropped, and a sentence that
    /// starts with the URL starts with what follows it.
    static func withoutURL(_ text: String, _ url: URL?) -> String {
        guard let url else { return text }
        let shown = Redaction.redacted(url)
        var text = text.replacingOccurrences(of: " (\(shown))", with: "")
        if text.hasPrefix(shown + " ") { text = String(text.dropFirst(shown.count + 1)) }
        return text
    }

    /// `text` without its final full stops, to go inside a longer line.
    static func clause(_ text: String) -> String {
        var text = Substring(text.trimmingCharacters(in: .whitespacesAndNewlines))
        while text.last == "." { text = text.dropLast() }
        return String(text)
    }

    /// A file name per URL: its last path component, made safe (no path separators, controls
    /// or leading dot; kept as given up to 255 bytes) and unique; `index.html` for a URL with no
    /// path or whose path ends in `/` (a directory's index), as wget names it.
    static func fileNames(for urls: [URL]) -> [String] {
        SafeFileName.uniqueNames(for: urls.map(namingURL))
    }

    /// The URL a file's name is taken from: `url`, or, when its path ends in `/`, `url` with
    /// ``SafeFileName/fallback`` (`index.html`) after the slash. (`SafeFileName` alone names
    /// `http://host/dir/` `dir`, its last non-empty segment, which is the directory's name, not
    /// the file's; wget saves it as `index.html`.)
    static func namingURL(_ url: URL) -> URL {
        guard let path = URLComponents(url: url, resolvingAgainstBaseURL: true)?.percentEncodedPath,
              path.hasSuffix("/") else { return url }
        return url.appendingPathComponent(SafeFileName.fallback, isDirectory: false)
    }
}

extension DownloadOperation {
    /// The size of the regular file at `url` (not followed if a symbolic link): one `lstat`.
    /// (`FileManager.attributesOfItem` also reads the owner's and group's names from
    /// `/etc/passwd` and `/etc/group` and lists extended attributes: eight system calls a file.)
    static func sizeOfFile(at url: URL) -> Int64? {
        ExistingFile.regularFile(at: url)?.size
    }
}
