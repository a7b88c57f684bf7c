import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Streams a body into the partial file beside a download's destination, through a
/// ``FileWriter`` on a queue of its own: what waits in memory does not grow with the size.
///
/// The router queue only hands each chunk to the writer. When the writer falls behind the
/// network by more than ``Backpressure/bound`` and the server allows continuing (a validator,
/// and ranges), ``shouldStopTransfer()`` says so: the transfer stops, and its task is
/// cancelled. Whatever the task still delivers — the chunks that had arrived before the cancel
/// landed — is written too (``writeLate(_:)``), so no byte that arrived is fetched twice. Once
/// the task has completed and the writer has finished, the partial file is kept, and the
/// download continues with `Range` from its end. (On Linux neither `suspend()` nor a slow
/// delegate slows libcurl; see ``DownloadBodySink``.) When the late chunks completed the body,
/// or its length is unknown, the file's last byte is left out, so that the continuation asks
/// for one byte instead of an empty range (a `416`).
///
/// A `206 Partial Content` that starts where the partial file ends is appended to it; any
/// other success rewrites it from the start. On failure or cancel the partial file is kept
/// when the server allows resuming it (a validator, and ranges), and removed otherwise.
///
/// **A body that arrives in one piece touches the disk once.** A fresh body (no `Range`) is
/// held in memory until ``FileWriter/wakeThreshold`` (256 KiB) of it has arrived — the writer
/// would not have written it before then either. Only then does the sink make the partial file:
/// it takes the download's lock (``DownloadOperation``'s `claim`), creates the file and writes
/// its record, before any byte is on disk, so that a process killed from then on leaves a
/// partial file that resumes. A body that ends before that point is written at
/// ``close()`` in one `writev(2)` to a new file of its own beside the destination
/// (`.<name>.fetchkit-partial.XXXX`, created exclusively, never through a link), which the
/// download renames into place: no lock file, no record, no name another process uses. A
/// transfer that fails or is cancelled before that point keeps its bytes as a partial file
/// (lock, file, record) only if the server allows resuming; a process killed before it loses
/// at most those 256 KiB, as it did when they waited for the writer. A process killed between
/// a whole body's write and its rename leaves that file behind; a ``DownloadJournal`` opened
/// in the directory (`fetchkit` opens one each run) removes such files once a minute old.
/// Used on the session router's serial queue only.
final class FileBodySink: DownloadBodySink {
    private let partialURL: URL
    private let recordURL: URL
    private let sourceURL: URL?
    /// The offset a `Range` request asked for (0: none).
    private let requestedOffset: Int64
    private let keepsResumablePartial: Bool

    private var descriptor: Int32 = -1
    /// The response was accepted (``open(response:expectedLength:)`` succeeded).
    private var opened = false
    /// The partial file exists, made by this sink: its bytes go through ``writer``.
    private var materialized = false
    /// A fresh body's first chunks, held until ``FileWriter/wakeThreshold`` of them arrived
    /// (see the type's comment); empty once the partial file is made.
    private var pending: [Data] = []
    private var pendingBytes: Int64 = 0
    /// The record to write once the partial file is made (`nil`: the body is not resumable).
    private var pendingRecord: PartialDownloadRecord?
    /// The record of the partial file a `Range` resumes: the one its download inspected a moment
    /// earlier (read from disk only if none was given).
    private let resumedRecord: PartialDownloadRecord?
    /// The record this sink wrote last (`nil` once it removed it): what its download knows
    /// without reading the file back.
    private var writtenRecord: PartialDownloadRecord?
    /// Tells the download of each record written or removed (``writtenRecord``).
    private let recordChanged: @Sendable (PartialDownloadRecord?) -> Void
    /// Takes the download's lock on its partial file before the sink makes one.
    private let claim: @Sendable () throws(FetchError) -> Void
    private var length: Int64 = 0
    private var resumable = false
    /// Writes the chunks off the router queue; made at the first chunk.
    private var writer: FileWriter?
    /// The file's length when the writer was made.
    private var writerBase: Int64 = 0
    /// When to stop the transfer because the writer fell behind (`nil`: never), and when to
    /// hold its reading (``Backpressure/pauseAbove``); set before the first chunk.
    var backpressure: Backpressure? {
        didSet { gate = BacklogGate(pauseAbove: backpressure?.pauseAbove ?? Backpressure.defaultPauseAbove) }
    }
    /// Holds the reading while the writer is behind; made anew when ``backpressure`` is set.
    private var gate = BacklogGate(pauseAbove: Backpressure.defaultPauseAbove)
    var backlogGate: BacklogGate? { gate }
    private let stoppedBehind = Protected(false)
    /// Stopped for the writer and not completed yet: the task's late chunks are written.
    private var takingLateChunks = false
    /// Whether the writer falling behind may stop this transfer. Not when a `Range` request
    /// was answered from byte 0: a server that ignores ranges, or whose validator changes each
    /// time, would otherwise be stopped and restarted for ever.
    private var mayStop = true
    /// What a continuation waits for: the writer, the stopped task, and someone to continue.
    private struct ContinuationGate {
        var stored = false
        var taskCompleted = false
        var body: (@Sendable () -> Void)?
    }
    private let continuation = Protected(ContinuationGate())
    /// Bytes handed to the writer.
    private var writerAppended: Int64 = 0
    /// Where the body ends in the file, when the response announced its length.
    private var expectedEnd: Int64?
    /// Where a resumed `206`'s range ends (one past its last byte); `nil` for a `200`.
    private var rangeEnd: Int64?
    /// The writer's backlog after the last chunk.
    private var lastBacklog: Int64 = 0
    /// The largest ``lastBacklog`` before a stop: what the bound holds to.
    private var peakBeforeStop: Int64 = 0

    /// The largest the file may grow, resumed bytes included (the download's
    /// ``FetchConfiguration/maximumResponseSize``).
    private let maximumLength: Int64
    /// The file's length counting every chunk handed to ``write(_:)``, written or pending.
    private var acceptedLength: Int64 = 0
    private let openFile: PartialFileOpener
    /// Hands the download's hasher from transfer to transfer (`nil`: no digest expected).
    private let digest: DigestCarrier?
    /// The hasher this transfer took, when the file was opened.
    private var hasher: DigestHasher?

    init(partialURL: URL, recordURL: URL, sourceURL: URL?, requestedOffset: Int64, keepsResumablePartial: Bool,
         maximumLength: Int64 = .max, openFile: PartialFileOpener = .safe, digest: DigestCarrier? = nil,
         resumedRecord: PartialDownloadRecord? = nil,
         recordChanged: @escaping @Sendable (PartialDownloadRecord?) -> Void = { _ in },
         claim: @escaping @Sendable () throws(FetchError) -> Void = {}) {
        self.resumedRecord = resumedRecord
        self.recordChanged = recordChanged
        self.claim = claim
        self.digest = digest
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
        let total: Int64?
        if response.statusCode == 206 {
            // Only a range of the same file: `If-Range` asks the server for that, and nothing
            // makes it so. A byte is appended only if the 206 carries the validator the partial
            // file was made with and the same total length. Checked first: a changed file's
            // partial is removed whatever range the answer names.
            let range = Self.contentRange(of: response)
            total = range?.total
            let record = resumedRecord ?? PartialDownloadRecord.load(from: recordURL)
            if let change = PartialFile.change(from: record, to: response, total: total) {
                // Nothing of the old file can be used with the new one.
                removePartial()
                throw .invalidResponse(.init(reason: .changedWhileResuming(change), url: response.url ?? sourceURL))
            }
            // Only a range that starts exactly where the partial file ends can be appended.
            guard let start = range?.first, start == requestedOffset else {
                let field = (response.value(forHTTPHeaderField: "Content-Range") ?? "").prefix(80)
                let problem = range?.first == nil ? "Content-Range \(field) cannot be read"
                    : "Content-Range \(field) does not start at byte \(requestedOffset), where the partial file ends"
                throw .invalidResponse(.init(reason: .rangeMismatch(problem), url: response.url ?? sourceURL))
            }
            // The same file, and the rest of it: the range the resume asked for (`bytes=N-`)
            // ends at the file's last byte, and the body is as long as the range. A total the
            // server does not give (`/*`) is the one the partial file's record knows.
            if let problem = Self.rangeProblem(of: response, last: range?.last, start: start, total: total ?? record?.total,
                                               expectedLength: expectedLength) {
                throw .invalidResponse(.init(reason: .rangeMismatch(problem), url: response.url ?? sourceURL))
            }
            rangeEnd = range?.last.map { $0 + 1 }
            offset = start
        } else {
            if requestedOffset > 0 {
                mayStop = false
                // The partial file asked to be continued is not: it is rewritten from the start.
                removePartial()
            }
            // A 200's length is the file's, unless a content coding was decoded on the way.
            let coding = response.value(forHTTPHeaderField: "Content-Encoding")?.lowercased() ?? "identity"
            total = coding == "identity" || coding.isEmpty ? expectedLength : nil
        }
        // The cap counts the whole file: what a resumed transfer appends, and what is there.
        if let expectedLength, offset > 0, offset > maximumLength - expectedLength {
            throw tooLarge(expectedLength: expectedLength)
        }
        length = offset
        acceptedLength = offset
        expectedEnd = expectedLength.map { offset + $0 }
        let acceptsRanges = response.statusCode == 206
            || (response.value(forHTTPHeaderField: "Accept-Ranges")?.lowercased().contains("bytes") ?? false)
        var record = PartialDownloadRecord(
            source: sourceURL,
            entityTag: response.value(forHTTPHeaderField: "ETag"),
            lastModified: response.value(forHTTPHeaderField: "Last-Modified")
        )
        record.total = total
        resumable = acceptsRanges && record.validator != nil
        pendingRecord = resumable ? record : nil
        opened = true
        // A resumed file is continued at once (its lock was taken when it was found).
        if offset > 0 { try materialize(offset: offset) }
    }

    /// Makes the partial file, with its lock and record, and hands it what arrived so far:
    /// from now on a process killed mid-body leaves a partial file that resumes.
    private func materialize(offset: Int64) throws(FetchError) {
        try claim()
        let fd = try openFile.open(partialURL, offset)
        descriptor = fd
        materialized = true
        if offset > 0 {
            // Drop anything past the resume point (a torn last write), then append.
            guard ftruncate(fd, off_t(offset)) == 0, lseek(fd, off_t(offset), SEEK_SET) == offset else {
                throw .fileSystem(.init(kind: .writeFailed, path: partialURL.path, code: errno))
            }
        }
        if let digest {
            startHashing(digest, descriptor: fd, offset: offset)
        }
        // The record is on disk before any byte of the body: a partial file with bytes always
        // has one.
        if let pendingRecord {
            pendingRecord.save(to: recordURL)
            noteRecord(pendingRecord)
        } else if offset > 0 {
            LocalFile.remove(recordURL)
            noteRecord(nil)
        }
        let held = pending
        pending = []
        pendingBytes = 0
        for chunk in held {
            try hand(chunk)
        }
    }

    /// Makes the writer now, with the download's hasher, and first brings the hasher to the
    /// resume point on the writer's queue (``DigestHasher/catchUp(to:descriptor:)``): a hasher
    /// that already hashed exactly the bytes before `offset` (the transfer before this one
    /// wrote them) goes on; a new one (a download resumed by another operation, or another
    /// process) reads them from the file, once.
    private func startHashing(_ digest: DigestCarrier, descriptor fd: Int32, offset: Int64) {
        let hasher = digest.take()
        self.hasher = hasher
        let writer = FileWriter(descriptor: fd, throttle: backpressure?.throttle, hasher: hasher, gate: gate)
        writerBase = offset
        self.writer = writer
        writer.perform { hasher.catchUp(to: offset, descriptor: fd) }
    }

    /// Gives the hasher back for the next transfer or the final check: the writer has drained.
    private func giveBackHasher() {
        if let digest, let hasher { digest.giveBack(hasher) }
    }

    func write(_ chunk: Data) throws(FetchError) {
        // A 206's body past its range (a chunked one can be any length): not a byte of it.
        if let rangeEnd, acceptedLength + Int64(chunk.count) > rangeEnd {
            throw .invalidResponse(.init(reason: .rangeMismatch("its body runs past the range's last byte, \(rangeEnd - 1)"),
                                         url: sourceURL))
        }
        try admit(chunk.count)
        guard materialized else {
            pending.append(chunk)
            pendingBytes += Int64(chunk.count)
            if pendingBytes >= FileWriter.wakeThreshold { try materialize(offset: 0) }
            return
        }
        try hand(chunk)
    }

    /// Hands `chunk` to the writer of the partial file.
    private func hand(_ chunk: Data) throws(FetchError) {
        let writer: FileWriter
        if let existing = self.writer {
            writer = existing
        } else {
            writer = FileWriter(descriptor: descriptor, throttle: backpressure?.throttle, hasher: hasher, gate: gate)
            writerBase = length
            self.writer = writer
        }
        let (backlog, failure) = writer.append(chunk)
        if let failure {
            throw writeFailure(failure)
        }
        writerAppended += Int64(chunk.count)
        lastBacklog = backlog
        if !takingLateChunks { peakBeforeStop = max(peakBeforeStop, backlog) }
    }

    /// Whether to stop the transfer now and continue it with `Range` once the writer has
    /// caught up: the server allows continuing, and the writer's backlog passed the bound.
    ///
    /// Only the writer's backlog counts. Chunks waiting on the router queue are not made fewer
    /// by a stop: on Linux a cancelled task goes on delivering for a while (measured: the rest
    /// of a fast loopback body), so the router queue is kept cheap instead.
    func shouldStopTransfer() -> Bool {
        guard let backpressure, resumable, mayStop, lastBacklog > backpressure.bound else { return false }
        // Every byte has arrived: there is nothing to continue (a Range from the end is a 416).
        if let expectedEnd, writerBase + writerAppended >= expectedEnd { return false }
        stoppedBehind.withLock { $0 = true }
        return true
    }

    /// The transfer was stopped because the writer fell behind: the partial file is kept,
    /// consistent with its length, for a continuation. Safe from any thread.
    var stoppedForBackpressure: Bool {
        stoppedBehind.withLock { $0 }
    }

    /// The largest backlog seen (diagnostics and tests).
    ///
    /// Counted until the transfer is stopped: the bound holds to it. The stopped task's late
    /// chunks come on top — bytes that had already arrived, in memory whether written or
    /// dropped, and written so that they are not fetched again.
    var peakBacklog: Int64 {
        peakBeforeStop
    }

    /// Waits for the writer: every byte handed over is on disk (or a write failed).
    private func drainWriter() -> Int32? {
        guard let writer else { return nil }
        let status = writer.drain()
        length = writerBase + status.written
        return status.failure
    }

    private func writeFailure(_ code: Int32) -> FetchError {
        let kind: FetchError.FileFailure.Kind = (code == ENOSPC || code == EDQUOT || code == EFBIG) ? .diskFull : .writeFailed
        return .fileSystem(.init(kind: kind, path: partialURL.path, code: code))
    }

    func close() throws(FetchError) -> ResponseBody {
        guard materialized else { return try writeWhole() }
        // Every byte on disk before the file is handed over (and renamed).
        let failure = drainWriter()
        let fd = descriptor
        descriptor = -1
        if let failure {
            if fd >= 0 { _ = posixClose(fd) }
            throw writeFailure(failure)
        }
        giveBackHasher()
        if fd >= 0, posixClose(fd) != 0 {
            throw .fileSystem(.init(kind: errno == ENOSPC ? .diskFull : .writeFailed, path: partialURL.path, code: errno))
        }
        return .file(partialURL)
    }

    /// The whole body arrived before the partial file was needed: written in one go to a file
    /// of its own (see the type's comment), which the download renames into place.
    private func writeWhole() throws(FetchError) -> ResponseBody {
        let chunks = pending
        pending = []
        pendingBytes = 0
        var url = partialURL
        var fd: Int32 = -1
        for _ in 0..<8 {
            url = Self.wholeFileURL(beside: partialURL)
            fd = openFile.create(url)
            if fd >= 0 || errno != EEXIST { break }
        }
        guard fd >= 0 else { throw PartialFileOpener.failure(errno, path: url.path) }
        var hasher: DigestHasher?
        if let digest {
            let taken = digest.take()
            taken.catchUp(to: 0, descriptor: fd)
            hasher = taken
        }
        if let failure = FileWriter.write(chunks, to: fd) {
            _ = posixClose(fd)
            LocalFile.remove(url)
            if let digest, let hasher { digest.giveBack(hasher) }
            throw writeFailure(failure)
        }
        if let digest, let hasher {
            hasher.markCheckpoint()
            for chunk in chunks { hasher.update(chunk) }
            digest.giveBack(hasher)
        }
        guard posixClose(fd) == 0 else {
            let code = errno
            LocalFile.remove(url)
            throw .fileSystem(.init(kind: code == ENOSPC ? .diskFull : .writeFailed, path: url.path, code: code))
        }
        return .file(url)
    }

    /// A new name for a whole body beside the partial file: `.<name>.fetchkit-partial.XXXX`,
    /// four random letters and digits, as long as the record's `.json` (names were shortened
    /// to leave room for that, ``SafeFileName``).
    static func wholeFileURL(beside partialURL: URL) -> URL {
        let letters = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        var tail = "json"
        // Never the record's or the lock's name. One random number for the four letters: each
        // draw is a system call.
        while reservedTails.contains(tail) {
            var bits = UInt64.random(in: 0...UInt64.max)
            tail = String((0..<4).map { _ in
                defer { bits /= UInt64(letters.count) }
                return letters[Int(bits % UInt64(letters.count))]
            })
        }
        return partialURL.deletingLastPathComponent().appendingPathComponent(partialURL.lastPathComponent + "." + tail, isDirectory: false)
    }

    /// The partial file's record and lock: names a whole body's file never takes.
    static let reservedTails: Set<String> = ["json", "lock"]

    /// Whether `url` is a whole body's file beside `partialURL` (``wholeFileURL(beside:)``).
    static func isWholeFile(_ url: URL, beside partialURL: URL) -> Bool {
        url != partialURL && url.lastPathComponent.hasPrefix(partialURL.lastPathComponent + ".")
    }

    /// Whether `name` in `directory` is a whole body's file (``wholeFileURL(beside:)``) that
    /// no download will rename any more: a private regular file whose name ends in
    /// `.fetchkit-partial.` and four letters or digits (not `json` or `lock`: the record and the
    /// lock), last changed more than `age` seconds
    /// ago (such a file lives for the time of one write; a process killed in that time leaves
    /// it behind).
    static func isStaleWholeFile(named name: String, in directory: URL, age: TimeInterval = 60) -> Bool {
        let marker = ".fetchkit-partial."
        guard name.hasPrefix("."), let range = name.range(of: marker, options: .backwards), range.upperBound != name.endIndex,
              name[range.upperBound...].count == 4, !reservedTails.contains(String(name[range.upperBound...])),
              name[range.upperBound...].allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) }) else { return false }
        var info = stat()
        let url = directory.appendingPathComponent(name, isDirectory: false)
        guard url.withUnsafeFileSystemRepresentation({ $0.map { lstat($0, &info) == 0 } ?? false }),
              LocalFile.Status(info).isPrivateRegularFile else { return false }
        return Double(info.st_mtim.tv_sec) < Date().timeIntervalSince1970 - age
    }

    func abandon() {
        // A transfer that never opened the file (refused, cancelled while connecting, an error
        // status) leaves an earlier partial file as it was.
        guard opened else {
            closeAfterWriter(discarding: false)
            return
        }
        if !materialized {
            // Only what arrived is in memory. Kept as a partial file when the server allows
            // resuming it (and the lock can be had); dropped otherwise, with nothing on disk.
            guard keepsResumablePartial, resumable, pendingBytes > 0, (try? materialize(offset: 0)) != nil else {
                if materialized {
                    closeAfterWriter(discarding: true)
                    removePartial()
                }
                pending = []
                pendingBytes = 0
                return
            }
        }
        if stoppedForBackpressure {
            // Kept for the continuation. The stopped task's chunks keep coming for a while, and
            // are written: the file is closed once the task has completed.
            takingLateChunks = true
            return
        }
        if keepsResumablePartial && resumable && max(length, writerBase + writerAppended) > 0 {
            // Kept for resuming: the writer finishes first, so the partial file's length is what
            // a resume asks for. (A write that failed only shortened it.) The backlog is at most
            // the bound here: a resumable GET is stopped when it passes it.
            _ = drainWriter()
            giveBackHasher()
            if let expectedEnd, length >= expectedEnd, descriptor >= 0, ftruncate(descriptor, off_t(length - 1)) == 0 {
                // Every byte arrived before the cancel: a resume from the end would ask for an
                // empty range (a 416). It asks for the last byte again instead.
                length -= 1
            }
            if descriptor >= 0 {
                _ = posixClose(descriptor)
                descriptor = -1
            }
            keepRecord(length: length)
            return
        }
        // Removed: what waits for the writer is dropped, not waited for.
        closeAfterWriter(discarding: true)
        removePartial()
    }

    /// Closes the file once the writer is done with it, without waiting here.
    private func closeAfterWriter(discarding: Bool) {
        let fd = descriptor
        descriptor = -1
        guard let writer else {
            if fd >= 0 { _ = posixClose(fd) }
            return
        }
        if discarding { writer.discard() }
        writer.whenDrained {
            if fd >= 0 { _ = posixClose(fd) }
        }
    }

    func writeLate(_ chunk: Data) {
        guard takingLateChunks else { return }
        do {
            try write(chunk)
        } catch {
            // Over the cap, or a failed write: the file ends before this chunk, and the
            // continuation asks for the rest (and fails as the first transfer would have).
            takingLateChunks = false
        }
    }

    /// The stopped task has completed: nothing more arrives. The file is closed once the
    /// writer is done with it — its last byte left out first if the body may be complete —
    /// and then the continuation may start.
    func stoppedTaskDidComplete(bodyComplete: Bool) {
        let gate = continuation
        defer { Self.record(in: gate) { $0.taskCompleted = true } }
        guard stoppedForBackpressure, descriptor >= 0 else { return }
        takingLateChunks = false
        let fd = descriptor
        descriptor = -1
        let stored: @Sendable () -> Void = { Self.record(in: gate) { $0.stored = true } }
        guard let writer else {
            _ = posixClose(fd)
            stored()
            return
        }
        let (base, expectedEnd) = (writerBase, expectedEnd)
        let (digest, hasher) = (self.digest, self.hasher)
        writer.whenDrained { [writer] in
            // Before the continuation can start: it takes the hasher.
            if let digest, let hasher { digest.giveBack(hasher) }
            let status = writer.status
            let end = base + status.written
            // A `Range` from the end of a complete body asks for nothing, and gets a 416:
            // then the last byte is asked for again. Without a length, completeness is unknown.
            let mayBeComplete = bodyComplete || expectedEnd.map { end >= $0 } ?? true
            if status.failure == nil, mayBeComplete, end > 0 {
                _ = ftruncate(fd, off_t(end - 1))
            }
            _ = posixClose(fd)
            stored()
        }
    }

    func whenWritten(_ body: @escaping @Sendable () -> Void) {
        if let writer { writer.whenDrained(body) } else { body() }
    }

    var storesLater: Bool { writer != nil }

    func whenReadyToContinue(_ body: @escaping @Sendable () -> Void) {
        Self.record(in: continuation) { $0.body = body }
    }

    /// Records one of the three things a continuation waits for, and starts it after the
    /// last, outside the lock.
    private static func record(in gate: Protected<ContinuationGate>, _ change: (inout ContinuationGate) -> Void) {
        let body = gate.withLock { gate -> (@Sendable () -> Void)? in
            change(&gate)
            guard gate.stored, gate.taskCompleted, let body = gate.body else { return nil }
            gate.body = nil
            return body
        }
        body?()
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
        guard var record = writtenRecord else { return }
        record.length = length
        record.save(to: recordURL)
        noteRecord(record)
    }

    /// The record at ``recordURL`` is now `record` (`nil`: removed).
    private func noteRecord(_ record: PartialDownloadRecord?) {
        writtenRecord = record
        recordChanged(record)
    }

    /// Removes the partial file and its record.
    private func removePartial() {
        PartialFile.remove(partialURL, recordURL)
        noteRecord(nil)
    }

    /// `Content-Range: bytes a-b/n`, read once: each part `nil` where it cannot be read (the
    /// total also when it is `*`); `nil` without the field or the `bytes` unit.
    static func contentRange(of response: HTTPURLResponse) -> (first: Int64?, last: Int64?, total: Int64?)? {
        guard let value = response.value(forHTTPHeaderField: "Content-Range")?.lowercased(), value.hasPrefix("bytes ") else { return nil }
        let rest = value.dropFirst("bytes ".count)
        let range = rest.prefix { $0 != "/" }
        let total = rest.lastIndex(of: "/").flatMap { Int64(rest[rest.index(after: $0)...].trimmingCharacters(in: .whitespaces)) }
        guard let dash = range.firstIndex(of: "-") else { return (nil, nil, total) }
        return (Int64(range[..<dash].trimmingCharacters(in: .whitespaces)),
                Int64(range[range.index(after: dash)...].trimmingCharacters(in: .whitespaces)), total)
    }

    /// What is wrong with a resume's `206` that starts at `start`, or `nil`: its last byte must
    /// be readable, not before its first, the file's last when the total is known
    /// (`total - 1`), and the `Content-Length`, when there is one, the range's length.
    static func rangeProblem(of response: HTTPURLResponse, last: Int64?, start: Int64, total: Int64?, expectedLength: Int64?) -> String? {
        let field = (response.value(forHTTPHeaderField: "Content-Range") ?? "").prefix(80)
        guard let last, last >= start else { return "Content-Range \(field) cannot be read" }
        if let total {
            guard last < total else { return "Content-Range \(field) ends past the file's length" }
            guard last == total - 1 else { return "Content-Range \(field) ends before the file does" }
        }
        if let expectedLength, last < Int64.max, expectedLength != last - start + 1 {
            return "Content-Length \(expectedLength) is not the length of Content-Range \(field)"
        }
        return nil
    }
}

// The C library's close, named apart from the sink's own methods.
@inline(__always) private func posixClose(_ fd: Int32) -> Int32 {
    close(fd)
}

/// How a download opens its partial file: never through a link.
///
/// A fresh file (offset 0) replaces whatever is at the path — a planted link is removed, not
/// followed — and is created exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`): if something is
/// planted again in between, the open fails instead of writing through it. A resumed file is
/// opened with `O_NOFOLLOW` and must be a private regular file (one name, this user's).
/// ``create`` makes a whole body's file under a new name, exclusively, removing nothing.
/// Tests swap the opener to stage failures, such as a full disk, that cannot be planted.
struct PartialFileOpener: Sendable {
    let open: @Sendable (_ url: URL, _ offset: Int64) throws(FetchError) -> Int32
    /// Creates a new file at `url` exclusively: its descriptor, or -1 with `errno` set
    /// (`EEXIST`: the name is taken; try another).
    let create: @Sendable (_ url: URL) -> Int32

    init(open: @escaping @Sendable (_ url: URL, _ offset: Int64) throws(FetchError) -> Int32,
         create: (@Sendable (_ url: URL) -> Int32)? = nil) {
        self.open = open
        self.create = create ?? { url in
            do {
                return try open(url, 0)
            } catch {
                errno = EIO
                return -1
            }
        }
    }

    /// The error for a failed open of `path` with `errno` `code`.
    static func failure(_ code: Int32, path: String) -> FetchError {
        switch code {
        case ELOOP, EEXIST, EMLINK:
            .fileSystem(.init(kind: .unsafePath, path: path, code: nil))
        case ENOSPC, EDQUOT:
            .fileSystem(.init(kind: .diskFull, path: path, code: code))
        default:
            .fileSystem(.init(kind: .unwritableDestination, path: path, code: code))
        }
    }

    static let safe = PartialFileOpener(open: { url, offset throws(FetchError) in
        if offset == 0 { LocalFile.remove(url) }
        // A resumed file is opened for reading too: an expected digest hashes what is there.
        let fd = LocalFile.open(url, offset == 0 ? O_WRONLY | O_CREAT | O_EXCL : O_RDWR)
        guard fd >= 0 else { throw failure(errno, path: url.path) }
        guard LocalFile.status(descriptor: fd)?.isPrivateRegularFile == true else {
            _ = posixClose(fd)
            throw .fileSystem(.init(kind: .unsafePath, path: url.path, code: nil))
        }
        return fd
    }, create: { url in
        // O_EXCL with O_NOFOLLOW: nothing planted at the new name is opened, a link included.
        LocalFile.open(url, O_WRONLY | O_CREAT | O_EXCL)
    })
}
