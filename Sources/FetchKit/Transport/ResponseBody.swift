import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A response body, once the transfer is complete.
enum ResponseBody: Sendable {
    /// Held in memory.
    case data(Data)
    /// Written to a file.
    case file(URL)

    var data: Data? {
        if case .data(let data) = self { return data }
        return nil
    }
}

/// Where a ``Transfer`` puts the body of an accepted response.
///
/// A sink is used on the session router's serial queue only: opened once, written in order,
/// then either closed (the transfer succeeded) or abandoned (it failed or was cancelled).
protocol ResponseBodySink: AnyObject {
    /// The response was accepted; `expectedLength` is its `Content-Length`, if any.
    func open(response: HTTPURLResponse, expectedLength: Int64?) throws(FetchError)
    /// The next chunk of the body, in order.
    func write(_ chunk: Data) throws(FetchError)
    /// The transfer completed: hand over the body.
    func close() throws(FetchError) -> ResponseBody
    /// The transfer failed or was cancelled: release or clean up what was written.
    func abandon()
    /// Asked after each chunk: whether to stop the transfer because the body is arriving
    /// faster than the sink can store it, to continue it later from what is stored.
    func shouldStopTransfer() -> Bool
    /// Whether ``shouldStopTransfer()`` stopped the transfer. Safe from any thread.
    var stoppedForBackpressure: Bool { get }
    /// The task that ``shouldStopTransfer()`` stopped has completed: nothing more arrives.
    func stoppedTaskDidComplete()
    /// Runs `body`, on any thread, once a transfer stopped by ``shouldStopTransfer()`` can be
    /// continued: everything written is stored, and the stopped task has completed.
    func whenReadyToContinue(_ body: @escaping @Sendable () -> Void)
}

extension ResponseBodySink {
    func shouldStopTransfer() -> Bool { false }
    var stoppedForBackpressure: Bool { false }
    func stoppedTaskDidComplete() {}
    func whenReadyToContinue(_ body: @escaping @Sendable () -> Void) { body() }
}

/// Keeps the body in memory, in one buffer reserved from `Content-Length` up front so that a
/// large body is not copied again and again as it grows.
final class MemoryBodySink: ResponseBodySink {
    private var buffer = Data()

    /// The transfer has already refused a `Content-Length` above the maximum response size.
    func open(response: HTTPURLResponse, expectedLength: Int64?) throws(FetchError) {
        if let expectedLength, expectedLength > 0 {
            buffer.reserveCapacity(Int(expectedLength))
        }
    }

    func write(_ chunk: Data) throws(FetchError) {
        buffer.append(chunk)
    }

    func close() throws(FetchError) -> ResponseBody {
        defer { buffer = Data() }
        return .data(buffer)
    }

    func abandon() {
        buffer = Data()
    }
}
