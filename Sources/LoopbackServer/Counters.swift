import Foundation

/// A consistent snapshot of a server's counters, taken under its lock.
public struct ServerCounters: Sendable, Equatable, CustomStringConvertible {
    /// TCP connections accepted since the server started or since the last
    /// ``LoopbackServer/resetCounters()``.
    public var connectionsAccepted: Int
    /// Connections open right now (accepted and not yet closed by the server).
    public var connectionsOpen: Int
    /// Requests whose head was read and whose response has not been completely handed to the
    /// kernel (or abandoned) yet. The count drops just before the last bytes of a response are
    /// sent, so a client that has read a whole response sees it already decremented.
    public var requestsInFlight: Int
    /// The highest ``requestsInFlight`` since the start or the last reset (a reset sets it
    /// to the current ``requestsInFlight``).
    public var peakRequestsInFlight: Int
    /// Request heads parsed since the start or the last reset.
    public var requestsReceived: Int
    /// Bytes of pattern bodies (``HTTPResponse/Body/pattern(offset:count:)``, scripts'
    /// `writePattern`, chunked patterns) handed to the kernel since the start or the last
    /// reset: what a client was sent of them, to within one slice of a response cut short.
    public var patternBytesSent: Int

    /// All zero.
    public init() {
        connectionsAccepted = 0
        connectionsOpen = 0
        requestsInFlight = 0
        peakRequestsInFlight = 0
        requestsReceived = 0
        patternBytesSent = 0
    }

    /// The counters on one line.
    public var description: String {
        "connectionsAccepted=\(connectionsAccepted) connectionsOpen=\(connectionsOpen) "
            + "requestsInFlight=\(requestsInFlight) peakRequestsInFlight=\(peakRequestsInFlight) "
            + "requestsReceived=\(requestsReceived) patternBytesSent=\(patternBytesSent)"
    }
}

/// A request the server received, as recorded when the server was created with
/// `recordRequests: true`.
public struct RecordedRequest: Sendable {
    /// The request method, e.g. `"GET"`.
    public let method: String
    /// The path without query, not percent-decoded, e.g. `"/bytes/10"`.
    public let path: String
    /// The query parameters, percent-decoded (first value wins).
    public let query: [String: String]
    /// The header fields in the order received.
    public let headers: HTTPHeaders
    /// The request body (de-chunked); empty when there was none.
    public let body: Data
    /// The raw request target, e.g. `"/bytes/10?x=1"`.
    public let target: String
    /// Which connection carried the request (see ``HTTPRequest/connectionID``).
    public let connectionID: Int

    /// Records `request`.
    public init(_ request: HTTPRequest) {
        method = request.method
        path = request.path
        query = request.query
        headers = request.headers
        body = request.body
        target = request.target
        connectionID = request.connectionID
    }
}
