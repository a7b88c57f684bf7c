import Foundation
import LoopbackServer

/// Runs `body` with a fresh server, stopping it afterwards.
func withServer<T>(recordRequests: Bool = true, _ body: (LoopbackServer) throws -> T) throws -> T {
    let server = try LoopbackServer(recordRequests: recordRequests)
    defer { server.stop() }
    return try body(server)
}

/// Runs `body` with a fresh server, stopping it afterwards.
func withServerAsync<T>(recordRequests: Bool = true, _ body: (LoopbackServer) async throws -> T) async throws -> T {
    let server = try LoopbackServer(recordRequests: recordRequests)
    defer { server.stop() }
    return try await body(server)
}

/// Seconds elapsed while running `body`.
func measure(_ body: () throws -> Void) rethrows -> TimeInterval {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

/// The bound a "prompt" `stop()` must beat: far above any scheduling delay (even under the
/// thread sanitizer on two cores), far below the 60 s the held endpoints in these tests would
/// take. Only a stop that waits out a handler exceeds it; it is not a speed measurement.
let promptStop: TimeInterval = 20

/// Decodes a JSON object body.
func jsonObject(_ data: Data) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
}
