import Foundation

/// One event of a `text/event-stream` body (server-sent events, the WHATWG HTML standard's
/// event stream format).
public struct ServerSentEvent: Sendable, Hashable {
    /// The event's type: its `event` field, or `"message"` when it had none.
    public var type: String
    /// The event's data: its `data` fields' values joined with line feeds.
    public var data: String
    /// The stream's last event ID when the event was dispatched: the value of the last `id`
    /// field so far, in this event or an earlier one (`""` if none, or after an empty `id`).
    /// A reconnect sends it as `Last-Event-ID`.
    public var lastEventID: String
    /// The reconnection time the stream asked for last (`retry`, in seconds), if it did.
    public var reconnectionTime: TimeInterval?

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - type: The event's type. Default `"message"`.
    ///   - data: The event's data.
    ///   - lastEventID: The stream's last event ID. Default none (`""`).
    ///   - reconnectionTime: The reconnection time the stream asked for, in seconds. Default
    ///     `nil`.
    public init(type: String = "message", data: String, lastEventID: String = "", reconnectionTime: TimeInterval? = nil) {
        self.type = type
        self.data = data
        self.lastEventID = lastEventID
        self.reconnectionTime = reconnectionTime
    }
}

/// Parses a `text/event-stream` body, chunk by chunk, into ``ServerSentEvent`` values, as the
/// WHATWG HTML standard's "interpreting an event stream" does: lines end with LF, CR or CRLF
/// (also when split between chunks); a blank line dispatches the event; `event`, `data`, `id`
/// (ignored if it holds U+0000) and `retry` (digits only) are read, other fields and comments
/// (`:` first) ignored; one space after a field's colon is dropped; a byte order mark that
/// starts the stream is dropped; an event not ended by a blank line when the stream ends is
/// discarded. Bytes that are not UTF-8 become U+FFFD.
///
/// Use it where you hold the chunks yourself, or where you need the stream's state between
/// events (an `id` or a `retry` sent with no event after it); otherwise read
/// `AsyncSequence.serverSentEvents(maximumEventSize:)`.
///
/// ```swift
/// var parser = ServerSentEventParser()
/// for event in try parser.feed(Data("id: 7\ndata: hello\n\n".utf8)) {
///     print(event.data, event.lastEventID)      // hello 7
/// }
/// ```
public struct ServerSentEventParser: Sendable {
    /// The most bytes of data one event may hold (its `data` values, with the line feeds
    /// between them); a line longer than this and its field's name is refused too.
    public let maximumEventSize: Int
    /// The stream's last event ID so far (see ``ServerSentEvent/lastEventID``).
    public private(set) var lastEventID = ""
    /// The reconnection time the stream asked for last, in seconds (see
    /// ``ServerSentEvent/reconnectionTime``).
    public private(set) var reconnectionTime: TimeInterval?

    private var splitter: LineSplitter
    private var startsStream = true
    private var data: [UInt8] = []
    private var hasData = false
    private var type = ""
    private var idBuffer = ""

    /// Creates a parser at the start of a stream — or of a reconnection, which keeps the
    /// last stream's event ID and reconnection time until the new one sends its own.
    ///
    /// - Parameters:
    ///   - maximumEventSize: The most bytes of data one event may hold. Default 1 MiB.
    ///   - lastEventID: The last event ID so far (a reconnection's `Last-Event-ID`). Default none.
    ///   - reconnectionTime: The reconnection time asked for so far, in seconds. Default none.
    public init(maximumEventSize: Int = 1 << 20, lastEventID: String = "", reconnectionTime: TimeInterval? = nil) {
        self.maximumEventSize = maximumEventSize
        self.lastEventID = lastEventID
        self.reconnectionTime = reconnectionTime
        idBuffer = lastEventID
        splitter = LineSplitter(maximumLength: maximumEventSize + 8)   // "retry: " and more
    }

    /// Takes the next chunk of the stream and returns the events it completed, in order.
    ///
    /// - Throws: ``FetchError/InvalidResponse/Reason/eventTooLarge(limit:)`` when an event's
    ///   data, or any one line of the stream, passes ``maximumEventSize``; nothing of it is
    ///   held. The parser should not be fed after it threw.
    public mutating func feed(_ chunk: Data) throws(FetchError) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        try feed(chunk, into: &events)
        return events
    }

    /// Takes a chunk and appends the events it completed to `events`: those before a line or
    /// an event past the limit are there when it throws.
    mutating func feed(_ chunk: Data, into events: inout [ServerSentEvent]) throws(FetchError) {
        var lines: [Data] = []
        var failure: FetchError?
        do {
            try splitter.feed(chunk, into: &lines)
        } catch {
            // A line longer than any event may be (one `data:` line, or any other field): the
            // event is too large, whatever the line held.
            if case .invalidResponse(let details) = error, case .lineTooLong = details.reason {
                failure = .invalidResponse(.init(reason: .eventTooLarge(limit: maximumEventSize), url: nil))
            } else {
                failure = error
            }
        }
        for line in lines {
            if let event = try take(line) { events.append(event) }
        }
        if let failure { throw failure }
    }

    /// The stream ended: an event it had not ended with a blank line is discarded, and the
    /// parser starts a new stream (the last event ID and reconnection time stay).
    public mutating func finish() {
        _ = splitter.finish()
        startsStream = true
        data = []
        hasData = false
        type = ""
    }

    /// Interprets one line.
    private mutating func take(_ bytes: Data) throws(FetchError) -> ServerSentEvent? {
        var line = bytes[...]
        if startsStream {
            startsStream = false
            if line.starts(with: [0xEF, 0xBB, 0xBF]) { line = line.dropFirst(3) }
        }
        guard let first = line.first else { return dispatch() }
        guard first != UInt8(ascii: ":") else { return nil }
        let colon = line.firstIndex(of: UInt8(ascii: ":"))
        let name = line[..<(colon ?? line.endIndex)]
        var value = colon.map { line[($0 + 1)...] } ?? line[line.endIndex...]
        if value.first == 0x20 { value = value.dropFirst() }
        switch String(decoding: name, as: UTF8.self) {
        case "event":
            type = String(decoding: value, as: UTF8.self)
        case "data":
            let added = (hasData ? 1 : 0) + value.count
            guard data.count + added <= maximumEventSize else {
                throw .invalidResponse(.init(reason: .eventTooLarge(limit: maximumEventSize), url: nil))
            }
            if hasData { data.append(0x0A) }
            data.append(contentsOf: value)
            hasData = true
        case "id":
            if !value.contains(0) { idBuffer = String(decoding: value, as: UTF8.self) }
        case "retry":
            // Digits only, however many: a value past any integer is a very long time (the
            // reconnection caps it), not an invalid one.
            if !value.isEmpty, value.allSatisfy({ (0x30...0x39).contains($0) }) {
                let milliseconds = Int(String(decoding: value, as: UTF8.self)).map(TimeInterval.init) ?? .greatestFiniteMagnitude
                reconnectionTime = milliseconds / 1000
            }
        default:
            break
        }
        return nil
    }

    /// A blank line: the event so far is dispatched, if it has data.
    private mutating func dispatch() -> ServerSentEvent? {
        lastEventID = idBuffer
        defer {
            data = []
            hasData = false
            type = ""
        }
        guard hasData else { return nil }
        return ServerSentEvent(type: type.isEmpty ? "message" : type, data: String(decoding: data, as: UTF8.self),
                               lastEventID: lastEventID, reconnectionTime: reconnectionTime)
    }
}

extension AsyncSequence where Element == Data {
    /// The chunks as a `text/event-stream` body's events, parsed as
    /// ``ServerSentEventParser`` does.
    ///
    /// An event whose data passes `maximumEventSize` bytes ends the sequence with
    /// ``FetchError/InvalidResponse/Reason/eventTooLarge(limit:)`` before it is held.
    ///
    /// ```swift
    /// let (stream, server) = AsyncStream.makeStream(of: Data.self)
    /// server.yield(Data("event: update\ndata: {\"n\": 1}\n\n: keep-alive\n\n".utf8))
    /// server.finish()
    /// for try await event in stream.serverSentEvents() where event.type == "update" {
    ///     print(event.data)
    /// }
    /// ```
    ///
    /// - Parameter maximumEventSize: The most bytes of data one event may hold. Default 1 MiB.
    public func serverSentEvents(maximumEventSize: Int = 1 << 20) -> ServerSentEvents<Self> {
        ServerSentEvents(base: self, maximumEventSize: maximumEventSize)
    }
}

/// The server-sent events of an asynchronous sequence of `Data` chunks: see
/// `AsyncSequence.serverSentEvents(maximumEventSize:)`.
public struct ServerSentEvents<Base: AsyncSequence>: AsyncSequence where Base.Element == Data {
    public typealias Element = ServerSentEvent

    let base: Base
    let maximumEventSize: Int

    /// Reads the events in order.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        var parser: ServerSentEventParser
        var ready = ReadyElements<ServerSentEvent>()

        /// The next event, or `nil` after the last.
        ///
        /// - Throws: The base sequence's error, or
        ///   ``FetchError/InvalidResponse/Reason/eventTooLarge(limit:)`` for an event, or a
        ///   line, past the limit.
        public mutating func next() async throws -> ServerSentEvent? {
            while true {
                if let baseReadsOnce = ready.endIfCancelled() {
                    if baseReadsOnce { _ = try await base.next() }
                    throw FetchError.cancelled(.init(url: nil))
                }
                if let event = ready.next() { return event }
                if ready.baseEnded { return nil }
                try take(try await base.next())
            }
        }

        /// The next event, or `nil` after the last, read in the caller's isolation.
        ///
        /// - Throws: As ``next()``.
        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> ServerSentEvent? {
            while true {
                if let baseReadsOnce = ready.endIfCancelled() {
                    if baseReadsOnce { _ = try await base.next(isolation: actor) }
                    throw FetchError.cancelled(.init(url: nil))
                }
                if let event = ready.next() { return event }
                if ready.baseEnded { return nil }
                try take(try await base.next(isolation: actor))
            }
        }

        private mutating func take(_ chunk: Data?) throws(FetchError) {
            ready.refill([])
            guard let chunk else {
                parser.finish()
                ready.refill([], ended: true)
                return
            }
            ready.refill(try parser.feed(chunk))
        }
    }

    /// Starts reading the base sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), parser: ServerSentEventParser(maximumEventSize: maximumEventSize))
    }
}

extension ServerSentEvents: Sendable where Base: Sendable {}
