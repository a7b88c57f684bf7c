import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Attacks on a download's files, staged for real: links planted where FetchKit writes, forged
/// resume records, a destination that is a link, names too long for the file system, a gzip
/// bomb. What must hold: nothing outside the target directory changes, nothing is written
/// through a link, and the download either succeeds safely (refusing what was planted, and
/// saying so in ``DownloadOperation/partialFileNotices``) or fails with a clear error.
@Suite("Safe download files", .timeLimit(.minutes(3)))
struct SafeFilesTests {
    private func contents(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }
    private func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }
    private func isLink(_ url: URL) -> Bool { (try? FileManager.default.destinationOfSymbolicLink(atPath: url.path)) != nil }

    /// A file outside the download directory, which no download may touch.
    private struct Outside {
        let directory: TemporaryDirectory
        let secret: URL
        static let bytes = Data("precious bytes outside the download directory".utf8)

        init() throws {
            directory = try TemporaryDirectory()
            secret = directory.file("secret")
            try Self.bytes.write(to: secret)
        }
    }

    private func record(_ server: TestServer, _ path: String, etag: String = "v1", length: Int64? = nil) -> PartialDownloadRecord {
        var record = PartialDownloadRecord(url: server.url(path).absoluteString, entityTag: "\"\(etag)\"", lastModified: nil)
        record.length = length
        return record
    }

    // MARK: The partial file

    @Test func aLinkPlantedAtThePartialFileIsRefusedAndTheDownloadStartsOver() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        server.resumableRoute("/r", length: 50_000, etag: Locked("v1"), cutFull: Locked(false))
        let destination = directory.file("r.bin")
        let download = DownloadOperation(url: server.url("/r"), destination: destination)
        // The link looks like a resumable partial file, with a record that matches.
        try FileManager.default.createSymbolicLink(at: download.partialFileURL, withDestinationURL: outside.secret)
        record(server, "/r", length: Int64(Outside.bytes.count)).save(to: download.partialRecordURL)

        try await download.run()

        #expect(contents(outside.secret) == Outside.bytes, "nothing is written through the link")
        #expect(contents(destination) == TestResponse.patternBytes(count: 50_000))
        #expect(!isLink(destination), "the destination is the downloaded file, not the planted link")
        #expect(server.requests("/r").last?.header("Range") == nil, "not resumed")
        #expect(download.resumedBytes == 0)
        #expect(download.partialFileNotices.map(\.reason) == [.partialNotARegularFile])
        #expect(download.partialFileNotices.first?.description.contains("not a regular file") == true)
    }

    @Test func aLinkPlantedAtThePartialFileOfAFreshDownloadIsNotFollowed() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        let download = DownloadOperation(url: server.url("/bytes/20000"), destination: directory.file("fresh.bin"))
        try FileManager.default.createSymbolicLink(at: download.partialFileURL, withDestinationURL: outside.secret)

        try await download.run()

        #expect(contents(outside.secret) == Outside.bytes)
        #expect(contents(directory.file("fresh.bin")) == TestResponse.patternBytes(count: 20_000))
        #expect(!exists(download.partialFileURL))
        #expect(download.partialFileNotices.map(\.reason) == [.partialNotARegularFile])
    }

    @Test func aHardLinkPlantedAtThePartialFileIsRefused() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        server.resumableRoute("/h", length: 30_000, etag: Locked("v1"), cutFull: Locked(false))
        let download = DownloadOperation(url: server.url("/h"), destination: directory.file("h.bin"))
        try FileManager.default.linkItem(at: outside.secret, to: download.partialFileURL)
        record(server, "/h", length: Int64(Outside.bytes.count)).save(to: download.partialRecordURL)

        try await download.run()

        #expect(contents(outside.secret) == Outside.bytes, "a second name for an outside file is not written")
        #expect(contents(directory.file("h.bin")) == TestResponse.patternBytes(count: 30_000))
        #expect(server.requests("/h").last?.header("Range") == nil)
        #expect(download.partialFileNotices.map(\.reason) == [.partialNotARegularFile])
    }

    @Test func aLinkPlantedAtTheRecordIsRefused() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        server.resumableRoute("/rec", length: 40_000, etag: Locked("v1"), cutFull: Locked(false))
        let download = DownloadOperation(url: server.url("/rec"), destination: directory.file("rec.bin"))
        try TestResponse.patternBytes(count: 10_000).write(to: download.partialFileURL)
        let forged = outside.directory.file("record.json")
        record(server, "/rec", length: 10_000).save(to: forged)
        let forgedBytes = try #require(contents(forged))
        try FileManager.default.createSymbolicLink(at: download.partialRecordURL, withDestinationURL: forged)

        try await download.run()

        #expect(server.requests("/rec").last?.header("Range") == nil, "a linked record is not trusted")
        #expect(contents(forged) == forgedBytes, "nor written through")
        #expect(contents(directory.file("rec.bin")) == TestResponse.patternBytes(count: 40_000))
        #expect(download.partialFileNotices.map(\.reason) == [.recordNotARegularFile])
    }

    @Test func aLinkPlantedAtTheRecordIsNotWrittenThrough() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        let cut = Locked(true)
        server.resumableRoute("/w", length: 40_000, etag: Locked("v1"), cutFull: cut)
        let download = DownloadOperation(url: server.url("/w"), destination: directory.file("w.bin"))
        download.configuration.retryPolicy = .none
        try FileManager.default.createSymbolicLink(at: download.partialRecordURL, withDestinationURL: outside.secret)

        await #expect(throws: FetchError.self) { try await download.run() }

        #expect(contents(outside.secret) == Outside.bytes)
        #expect(!isLink(download.partialRecordURL), "the record FetchKit wrote replaced the link")
        let kept = try #require(PartialDownloadRecord.load(from: download.partialRecordURL))
        #expect(kept.length == 20_000, "the record carries the kept partial file's length")
        cut.withLock { $0 = false }
        let again = DownloadOperation(url: server.url("/w"), destination: directory.file("w.bin"))
        try await again.run()
        #expect(again.resumedBytes == 20_000, "a record FetchKit wrote itself resumes")
        #expect(again.partialFileNotices.isEmpty)
    }

    @Test func theRecordKeepsNoSecretOfTheURLYetResumes() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let cut = Locked(true)
        server.resumableRoute("/s", length: 40_000, etag: Locked("v1"), cutFull: cut)
        var parts = try #require(URLComponents(url: server.url("/s"), resolvingAgainstBaseURL: false))
        parts.user = "alice"
        parts.password = "pa55w0rd-secret"
        parts.queryItems = [URLQueryItem(name: "access_token", value: "tok-SECRET-123"), URLQueryItem(name: "page", value: "2")]
        let url = try #require(parts.url)
        let download = DownloadOperation(url: url, destination: directory.file("s.bin"))
        download.configuration.retryPolicy = .none

        await #expect(throws: FetchError.self) { try await download.run() }

        let text = try #require(contents(download.partialRecordURL).flatMap { String(data: $0, encoding: .utf8) })
        #expect(!text.contains("pa55w0rd-secret") && !text.contains("tok-SECRET-123"), "the record on disk holds no secret: \(text)")
        #expect(text.contains("page=2"), "the rest of the URL stays readable")
        cut.withLock { $0 = false }
        let again = DownloadOperation(url: url, destination: directory.file("s.bin"))
        try await again.run()
        #expect(again.resumedBytes == 20_000, "the fingerprint matches the same URL")
        #expect(again.partialFileNotices.isEmpty)
    }

    @Test func aRecordForTheSameURLWithAnotherTokenIsIgnored() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.resumableRoute("/t", length: 40_000, etag: Locked("v1"), cutFull: Locked(false))
        let destination = directory.file("t.bin")
        let download = DownloadOperation(url: server.url("/t?token=new"), destination: destination)
        try TestResponse.patternBytes(count: 1_000).write(to: download.partialFileURL)
        PartialDownloadRecord(source: server.url("/t?token=old"), entityTag: "\"v1\"", lastModified: nil, length: 1_000)
            .save(to: download.partialRecordURL)

        try await download.run()

        #expect(download.resumedBytes == 0, "the redacted URLs are equal; the fingerprints are not")
        #expect(download.partialFileNotices.map(\.reason) == [.recordForAnotherURL])
    }

    @Test func aRecordForAnotherURLIsIgnoredWithANotice() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.resumableRoute("/mine", length: 30_000, etag: Locked("v1"), cutFull: Locked(false))
        let download = DownloadOperation(url: server.url("/mine"), destination: directory.file("mine.bin"))
        try TestResponse.patternBytes(count: 10_000).write(to: download.partialFileURL)
        record(server, "/theirs", length: 10_000).save(to: download.partialRecordURL)

        try await download.run()

        #expect(server.requests("/mine").last?.header("Range") == nil)
        #expect(contents(directory.file("mine.bin")) == TestResponse.patternBytes(count: 30_000))
        #expect(download.partialFileNotices.map(\.reason) == [.recordForAnotherURL])
        #expect(download.partialFileNotices.first?.description.contains("another URL") == true)
    }

    @Test func aRecordWhoseLengthDoesNotMatchIsIgnoredWithANotice() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.resumableRoute("/size", length: 30_000, etag: Locked("v1"), cutFull: Locked(false))
        let download = DownloadOperation(url: server.url("/size"), destination: directory.file("size.bin"))
        try TestResponse.patternBytes(count: 5000).write(to: download.partialFileURL)
        // Written as raw JSON: the record says 100 bytes were kept, the file has 5,000.
        let json = #"{"url":"\#(server.url("/size").absoluteString)","entityTag":"\"v1\"","length":100}"#
        try Data(json.utf8).write(to: download.partialRecordURL)

        try await download.run()

        #expect(server.requests("/size").last?.header("Range") == nil)
        #expect(contents(directory.file("size.bin")) == TestResponse.patternBytes(count: 30_000))
        #expect(download.partialFileNotices.map(\.reason) == [.lengthMismatch])
    }

    @Test func aPartialFileWithoutARecordIsIgnoredWithANotice() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let download = DownloadOperation(url: server.url("/bytes/3000"), destination: directory.file("orphan.bin"))
        try Data("junk".utf8).write(to: download.partialFileURL)
        try await download.run()
        #expect(contents(directory.file("orphan.bin")) == TestResponse.patternBytes(count: 3000))
        #expect(download.partialFileNotices.map(\.reason) == [.recordMissing])
    }

    // MARK: The destination

    @Test func aDestinationThatIsALinkIsRefusedBeforeAnyRequest() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        let destination = directory.file("linked.bin")
        try FileManager.default.createSymbolicLink(at: destination, withDestinationURL: outside.secret)
        let download = DownloadOperation(url: server.url("/bytes/1000"), destination: destination)

        await #expect(throws: FetchError.self) { try await download.run() }

        guard case .fileSystem(let failure)? = download.error else {
            Issue.record("expected a file-system error, got \(String(describing: download.error))")
            return
        }
        #expect(failure.kind == .unsafePath)
        #expect(failure.description.contains("symbolic link"))
        #expect(contents(outside.secret) == Outside.bytes)
        #expect(isLink(destination), "the link is left as it was")
        #expect(server.counters.requestsReceived == 0)
    }

    @Test func aDestinationThatIsALinkToADirectoryIsRefused() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        let outside = try Outside()
        defer { server.shutDown(); directory.remove(); outside.directory.remove() }
        let destination = directory.file("dir-link")
        try FileManager.default.createSymbolicLink(at: destination, withDestinationURL: outside.directory.url)
        let download = DownloadOperation(url: server.url("/bytes/1000"), destination: destination)
        await #expect(throws: FetchError.self) { try await download.run() }
        guard case .fileSystem(let failure)? = download.error else {
            Issue.record("expected a file-system error, got \(String(describing: download.error))")
            return
        }
        #expect(failure.kind == .unsafePath)
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside.directory.url.path) == ["secret"])
    }

    @Test func aLongDestinationNameStillFits() async throws {
        let server = try TestServer.standard()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let name = String(repeating: "a", count: 246) + ".bin"      // 250 bytes: a valid name
        let destination = directory.file(name)
        let download = DownloadOperation(url: server.url("/bytes/1000"), destination: destination)
        #expect(download.partialFileURL.lastPathComponent.utf8.count <= 255 - ".json".count)
        try await download.run()
        #expect(contents(destination) == TestResponse.patternBytes(count: 1000))
    }

    // MARK: Content codings

    /// A file is fetched as it is stored (`Accept-Encoding: identity`, as curl, wget and aria2
    /// ask): libcurl decodes a compressed body that was cut short, with a truthful
    /// `Content-Length`, without a word, and a resume's range would count compressed bytes.
    /// Here a server that compresses when asked cuts its gzip body in half: the download is
    /// whole. (It asked for gzip, and put an empty file in place, reported as a success.)
    @Test func aDownloadAsksForTheFileAsStoredSoACutCompressedBodyCannotPassForIt() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let file = Data(String(repeating: "hostile input is the normal case. ", count: 2_000).utf8)
        let cut = Gzip.compress(file).prefix(Gzip.compress(file).count / 2)
        server.route("/report.txt") { request in
            if let accepted = request.header("Accept-Encoding"), accepted.contains("gzip") {
                return TestResponse(status: 200, headers: ["Content-Encoding": "gzip"], body: Data(cut))
            }
            return TestResponse(status: 200, body: file)
        }
        let destination = directory.file("report.txt")
        let download = DownloadOperation(url: server.url("/report.txt"), destination: destination)
        download.configuration.retryPolicy = .none
        try await download.run()
        #expect(contents(destination) == file)
        #expect(server.requests("/report.txt").map { $0.header("Accept-Encoding") } == ["identity"])

        // A request that names its codings keeps them.
        var request = URLRequest(url: server.url("/report.txt"))
        request.setValue("br", forHTTPHeaderField: "Accept-Encoding")
        try await DownloadOperation(request: request, destination: directory.file("again.txt")).run()
        #expect(server.requests("/report.txt").last?.header("Accept-Encoding") == "br")
    }

    // MARK: The size cap

    @Test func aGzipBombStopsAtTheCap() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        let bomb = Gzip.zeros(count: 64 << 20)                      // 64 MiB of zeros in ~64 KiB
        server.route("/bomb") { _ in
            TestResponse(status: 200, headers: ["Content-Encoding": "gzip", "Content-Type": "application/octet-stream"], body: bomb)
        }
        let cap: Int64 = 4 << 20
        let destination = directory.file("bomb.bin")
        let download = DownloadOperation(url: server.url("/bomb"), destination: destination)
        download.configuration.maximumResponseSize = cap
        download.configuration.retryPolicy = .none
        // Served with the encoded length, as a real server would: the announced size says nothing
        // of what the body inflates to.
        #expect(bomb.count < 256 << 10)
        let largest = Locked<Int64>(0)
        let largestOnDisk = Locked<Int64>(0)
        let partial = download.partialFileURL
        download.onProgress(on: .immediate) { progress in
            largest.withLock { $0 = max($0, progress.bytesReceived) }
            let size = DownloadOperation.fileSize(partial) ?? 0
            largestOnDisk.withLock { $0 = max($0, size) }
        }

        await #expect(throws: FetchError.self) { try await download.run() }

        let limit = try #require(download.error?.sizeLimit, "expected responseTooLarge, got \(String(describing: download.error))")
        #expect(limit.limit == cap)
        #expect(largest.current <= cap, "no more than the cap was accepted")
        #expect(largestOnDisk.current <= cap, "never more than the cap on disk: a chunk is counted before it is handed to the writer")
        // (What is on disk when progress is reported depends on the writer, a queue of its own.)
        #expect(largest.current > cap / 2, "the body was being received and written up to the cap")
        #expect(!exists(destination))
        #expect(!exists(download.partialFileURL), "the partial file of a download over the cap is removed")
    }

    @Test func aResumedDownloadCountsTheCapOnTheWholeFile() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        server.resumableRoute("/big", length: 200_000, etag: Locked("v1"), cutFull: Locked(false))
        let download = DownloadOperation(url: server.url("/big"), destination: directory.file("big.bin"))
        try TestResponse.patternBytes(count: 60_000).write(to: download.partialFileURL)
        record(server, "/big", length: 60_000).save(to: download.partialRecordURL)
        // 140,000 bytes remain: under the cap alone, over it with the 60,000 already on disk.
        download.configuration.maximumResponseSize = 150_000
        download.configuration.retryPolicy = .none

        await #expect(throws: FetchError.self) { try await download.run() }

        #expect(server.requests("/big").last?.header("Range") == "bytes=60000-")
        let limit = try #require(download.error?.sizeLimit, "expected responseTooLarge, got \(String(describing: download.error))")
        #expect(limit.limit == 150_000)
        #expect((DownloadOperation.fileSize(download.partialFileURL) ?? 0) <= 150_000)
    }

    @Test func aResumedBodyOfUnknownLengthStopsAtTheCap() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // A 206 with no Content-Length, and 120,000 bytes: under the cap alone, over it with the
        // 60,000 already on disk. Only the bytes written can tell when the cap is reached.
        server.route("/unsized") { _ in
            .steps([.head(status: 206, headers: [
                        "Content-Range": "bytes 60000-179999/180000", "ETag": "\"v1\"", "Connection": "close"]),
                    .patternBytes(offset: 60_000, count: 120_000), .close])
        }
        let download = DownloadOperation(url: server.url("/unsized"), destination: directory.file("unsized.bin"))
        try TestResponse.patternBytes(count: 60_000).write(to: download.partialFileURL)
        record(server, "/unsized", length: 60_000).save(to: download.partialRecordURL)
        download.configuration.maximumResponseSize = 150_000
        download.configuration.retryPolicy = .none

        await #expect(throws: FetchError.self) { try await download.run() }

        #expect(server.requests("/unsized").last?.header("Range") == "bytes=60000-")
        let limit = try #require(download.error?.sizeLimit, "expected responseTooLarge, got \(String(describing: download.error))")
        #expect(limit.limit == 150_000)
        #expect(!exists(directory.file("unsized.bin")))
        #expect(!exists(download.partialFileURL), "removed: resuming it cannot succeed under this cap")
    }

    @Test func downloadsHaveAFiniteDefaultCap() {
        let download = DownloadOperation(url: URL(string: "http://127.0.0.1:9/x")!, destination: URL(fileURLWithPath: "/tmp/x"))
        #expect(download.maximumResponseSize == DownloadOperation.defaultMaximumDownloadSize)
        #expect(DownloadOperation.defaultMaximumDownloadSize == 16 << 30)
    }
}
