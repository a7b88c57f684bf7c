import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// When a stream of server-sent events reconnects after it ended (``FetchQueue/events(from:reconnection:maximumEventSize:configuration:)``).
///
/// The wait before each reconnection is the stream's `retry` if it sent one (at most
/// ``maximumDelay``, and at least a second, or ``delay`` if that is shorter), else ``delay``; the reconnection sends `Last-Event-ID` with the last
/// event ID so far, so that the server can continue after it. Reconnections that bring no
/// event count up to ``maximumReconnects`` in a row; an event resets the count.
public struct EventStreamReconnection: Sendable, Equatable {
    /// Reconnections in a row that bring no event before the stream ends.
    public var maximumReconnects: Int
    /// The wait before a reconnection when the stream sent no `retry`, in seconds.
    public var delay: TimeInterval
    /// The longest wait before a reconnection, whatever `retry` asked, in seconds.
    public var maximumDelay: TimeInterval

    /// Creates a reconnection policy.
    ///
    /// - Parameters:
    ///   - maximumReconnects: Reconnections in a row without an event. Default 5.
    ///   - delay: The wait when the stream sent no `retry`. Default 3 s.
    ///   - maximumDelay: The longest wait (`.infinity` for no cap). Default 60 s.
    public init(maximumReconnects: Int = 5, delay: TimeInterval = 3, maximumDelay: TimeInterval = 60) {
        self.maximumReconnects = max(0, maximumReconnects)
        self.delay = delay.isNaN ? 0 : max(0, delay)
        self.maximumDelay = maximumDelay.isNaN ? 0 : max(0, maximumDelay)
    }

    /// Up to 5 reconnections in a row without an event, 3 s apart unless the stream asks otherwise.
    public static let `default` = EventStreamReconnection()
    /// No reconnection: the events of one response.
    public static let never = EventStreamReconnection(maximumReconnects: 0)

    /// The least wait a stream's `retry` can ask for, in seconds (less if ``delay`` is less): a
    /// server that sends `retry: 0` and one event per connection cannot make the client
    /// reconnect in a loop.
    static let shortestRequestedDelay: TimeInterval = 1

    /// The wait before the next reconnection, for a stream that asked for `requested` seconds.
    func wait(requested: TimeInterval?) -> TimeInterval {
        let asked = requested.map { max($0, min(delay, Self.shortestRequestedDelay)) } ?? delay
        return min(asked, maximumDelay)
    }
}

extension FetchQueue {
    /// The server-sent events of `request`, read as they arrive, reconnecting as an
    /// `EventSource` does when the stream ends.
    ///
    /// Each connection is a fetch of this queue (``StreamingFetchOperation``, with its slot,
    /// limits, monitors, and `configuration`) that asks for `text/event-stream` and, after the
    /// first, sends `Last-Event-ID`. When a connection ends — the server closed it, or it failed
    /// in transit (``FetchError/transport(_:)``, ``FetchError/timedOut(_:)``,
    /// ``FetchError/lengthMismatch(_:)``) — the sequence waits as `reconnection` says and
    /// connects again; events are never repeated or cut (an event the connection did not end is
    /// discarded). A `204 No Content` ends the sequence, as the standard says. A connection
    /// answered with another `Content-Type` than `text/event-stream` (an error page, a portal)
    /// ends it with ``FetchError/InvalidResponse/Reason/notAnEventStream(contentType:)``; any
    /// other error — a status the fetch does not accept, a parse limit, a cancel — ends it with
    /// that error. When the reconnections run out, a stream the server ended ends the sequence,
    /// and one that failed in transit throws that failure.
    ///
    /// ```swift
    /// for try await event in queue.events(from: URLRequest(url: url)) {
    ///     print(event.type, event.data)
    /// }
    /// ```
    ///
    /// Leaving the loop, or cancelling the reading task, cancels the connection of the moment
    /// and ends the sequence.
    ///
    /// - Parameters:
    ///   - request: The request of each connection (`Accept` and `Last-Event-ID` are set). Its
    ///     own `Last-Event-ID`, if any (a stream resumed from a stored id), is where the stream
    ///     starts: events carry it until the server sends another `id`, and an empty `id`
    ///     clears it, after which reconnections send none.
    ///   - reconnection: When to reconnect. Default ``EventStreamReconnection/default``.
    ///   - maximumEventSize: The most bytes of data one event may hold. Default 1 MiB.
    ///   - configuration: Each connection's configuration (timeouts, session…). Default:
    ///     a fetch's default.
    /// - Returns: The events, in order, across connections.
    public func events(from request: URLRequest, reconnection: EventStreamReconnection = .default, maximumEventSize: Int = 1 << 20,
                       configuration: FetchConfiguration? = nil) -> ServerSentEventSource {
        ServerSentEventSource(queue: self, request: request, reconnection: reconnection, maximumEventSize: maximumEventSize,
                              configuration: configuration)
    }
}

/// The server-sent events of a request across reconnections: see
/// ``FetchQueue/events(from:reconnection:maximumEventSize:configuration:)``.
public struct ServerSentEventSource: AsyncSequence, Sendable {
    public typealias Element = ServerSentEvent
    public typealias Failure = FetchError

    let queue: FetchQueue
    let request: URLRequest
    let reconnection: EventStreamReconnection
    let maximumEventSize: Int
    let configuration: FetchConfiguration?

    /// Reads the events.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let reader: EventSourceReader

        /// The next event, or `nil` once the stream ended for good.
        ///
        /// - Throws: The ``FetchError`` that ended the stream.
        public mutating func next() async throws(FetchError) -> ServerSentEvent? {
            try await reader.next(isolation: nil)
        }

        /// The next event, or `nil` once the stream ended for good, read in the caller's isolation.
        ///
        /// - Throws: The ``FetchError`` that ended the stream.
        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(FetchError) -> ServerSentEvent? {
            try await reader.next(isolation: actor)
        }
    }

    /// Starts reading: the first connection is made now.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(reader: EventSourceReader(self))
    }
}

/// One connection of an event stream.
final class EventStreamOperation: StreamingFetchOperation<ServerSentEvent>, @unchecked Sendable {
    private let maximumEventSize: Int

    init(request: URLRequest, maximumEventSize: Int) {
        self.maximumEventSize = maximumEventSize
        super.init(request: request, requiredMediaType: "text/event-stream")
    }

    override var framing: StreamFraming { .serverSentEvents(maximumEventSize: maximumEventSize) }
}

/// Reads an event stream's connections in turn.
final class EventSourceReader {
    private let source: ServerSentEventSource
    private var state = EventStreamState()
    private var connection: StreamingFetchOperation<ServerSentEvent>.Elements.AsyncIterator?
    private var operation: EventStreamOperation?
    /// Reconnections in a row that brought no event.
    private var fruitless = 0
    private var ended = false

    init(_ source: ServerSentEventSource) {
        self.source = source
        // A request's own Last-Event-ID (a stream resumed from a stored id) is where it starts.
        state.lastEventID = source.request.value(forHTTPHeaderField: "Last-Event-ID") ?? ""
    }

    func next(isolation actor: isolated (any Actor)? = #isolation) async throws(FetchError) -> ServerSentEvent? {
        while !ended {
            if connection == nil { connect() }
            // The failure in transit that ended the connection, if one did.
            var failure: FetchError?
            do throws(FetchError) {
                if let event = try await connection?.next(isolation: actor) {
                    fruitless = 0
                    return event
                }
                // The server ended the body: a 204 says not to come back.
                if operation?.response?.statusCode == 204 { ended = true }
            } catch {
                guard Self.reconnects(after: error) else {
                    ended = true
                    disconnect()
                    throw error
                }
                failure = error
            }
            disconnect()
            guard !ended, fruitless < source.reconnection.maximumReconnects else {
                ended = true
                // Out of reconnections: a body the server ended is the stream's end, a failure
                // is its error.
                if let failure { throw failure }
                return nil
            }
            fruitless += 1
            let wait = source.reconnection.wait(requested: state.reconnectionTime)
            if wait > 0 {
                do {
                    try await Task.sleep(nanoseconds: UInt64(min(wait, 1e9) * 1e9))
                } catch {
                    ended = true
                    throw .cancelled(.init(url: source.request.url))
                }
            }
        }
        return nil
    }

    private func connect() {
        var request = source.request
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        request.setValue("no-cache", forHTTPHeaderField: "Cache-Control")
        // None once an empty `id` reset it (the WHATWG rule), whatever the request had.
        request.setValue(state.lastEventID.isEmpty ? nil : state.lastEventID, forHTTPHeaderField: "Last-Event-ID")
        let operation = EventStreamOperation(request: request, maximumEventSize: source.maximumEventSize)
        if let configuration = source.configuration { operation.configuration = configuration }
        let start = state
        operation.eventState.withLock { $0 = start }
        self.operation = operation
        connection = source.queue.stream(operation).makeAsyncIterator()
    }

    /// The connection ended: what it left is where the next starts.
    private func disconnect() {
        if let operation { state = operation.eventState.snapshot }
        connection = nil    // a connection not at its end is cancelled
        operation = nil
    }

    /// Whether a connection that failed with `error` is followed by another: a failure in
    /// transit, not an answer.
    static func reconnects(after error: FetchError) -> Bool {
        switch error.code {
        case .transport, .timedOut, .lengthMismatch: return true
        default: return false
        }
    }
}
