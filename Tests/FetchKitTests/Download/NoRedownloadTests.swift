import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit
#if canImport(Glibc)
import Glibc
#endif

/// Issue 20, point 3.4: a download stopped for the disk to catch up keeps every byte that had
/// arrived, so the server sends each byte about once, however often the transfer stops.
@Suite("Backpressure: no byte that arrived is fetched again", .timeLimit(.minutes(3)))
struct NoRedownloadTests {
    /// A disk slower than the network (the writer sleeps in proportion to what it writes) under
    /// a small bound: the transfer is stopped and continued several times. The chunks that
    /// arrived after each stop are written, not dropped, so the server sends the body once,
    /// plus what was in the sockets' buffers at each stop.
    @Test func aDownloadStoppedForTheDiskIsSentAboutOnce() async throws {
        let server = try TestServer()
        let directory = try TemporaryDirectory()
        defer { server.shutDown(); directory.remove() }
        // 4 MiB under a sanitizer, whose writer is 25 times slower: still several stops.
        let length = runsUnderSanitizer ? 4 << 20 : 16 << 20
        server.resumableRoute("/big", length: length, etag: Locked("v1"), cutFull: Locked(false))
        let destination = directory.file("big.bin")
        let download = DownloadOperation(url: server.url("/big"), destination: destination)
        // 25 bytes a microsecond (~25 MB/s; 1 byte under a sanitizer): far slower than loopback.
        let rate = runsUnderSanitizer ? 1 : 25
        download.backpressure = Backpressure(bound: 1 << 20, throttle: { size in usleep(useconds_t(size / rate)) })
        download.configuration.totalTimeout = 150

        try await download.run()

        #expect(FileManager.default.contents(atPath: destination.path) == TestResponse.patternBytes(count: length),
                "every byte, in order, once")
        #expect(download.backpressureContinuations >= 1, "the disk fell behind and the transfer was stopped")
        let sent = server.counters.patternBytesSent
        let continuations = download.backpressureContinuations
        // Each stop may lose what the two sockets' buffers held when the connection closed: a few
        // MiB on loopback (beside a CPU hog, 9.2 MB over 4 stops; the old code re-sent hundreds).
        let allowance = max(8 << 20, continuations * (4 << 20))
        #expect(sent <= length + allowance,
                "the server sent \(sent) bytes (\(sent - length) more than the body) over \(continuations) continuations")
        let requests = server.requests("/big")
        #expect(requests.count == 1 + continuations, "\(requests.map { $0.header("Range") ?? "(whole)" })")
    }
}
