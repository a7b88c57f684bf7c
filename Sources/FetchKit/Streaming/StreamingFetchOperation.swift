import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How a ``StreamingFetchOperation`` cuts its body before ``StreamingFetchOperation/parseElement(_:)``.
public enum StreamFraming: Sendable, Equatable {
    /// The chunks as they arrive (``StreamPiece/chunk(_:)``): every chunk that waited when the
    /// reader asked, as one `Data`.
    case chunks
    /// UTF-8 text lines (``StreamPiece/line(_:)``), as `AsyncSequence.lines(maximumLength:)` cuts them.
    case lines(maximumLength: Int = 1 << 20)
    /// Server-sent events (``StreamPiece/event(_:)``), as ``ServerSentEventParser`` reads them.
    case serverSentEvents(maximumEventSize: Int = 1 << 20)
}

/// One piece of a streamed body, cut as the operation's ``StreamFraming`` says.
public enum StreamPiece: Sendable, Equatable {
    /// Bytes of the body, in order.
    case chunk(Data)
    /// A text line, without its end.
    case line(String)
    /// A server-sent event.
    case event(ServerSentEvent)
}

/// An operation whose body is read as it arrives: server-sent events, JSON Lines, log tails,
/// a large body processed without holding it.
///
/// It is a fetch like any other — it waits for its ``FetchQueue``'s slot and holds it while it
/// streams, follows the queue's limits, timeouts, monitors and retries — whose body goes to
/// ``elements`` instead of memory. Subclass it once per streaming endpoint: name the element
/// type, choose the ``framing``, and override ``parseElement(_:)``:
///
/// ```swift
/// nonisolated struct Token: Decodable, Sendable {
///     let text: String
/// }
///
/// nonisolated final class CompletionTokens: StreamingFetchOperation<Token>, @unchecked Sendable {
///     override var framing: StreamFraming { .serverSentEvents() }
///
///     override func parseElement(_ piece: StreamPiece) throws -> Token? {
///         guard case .event(let event) = piece, event.data != "[DONE]" else { return nil }
///         return try JSONDecoder().decode(Token.self, from: Data(event.data.utf8))
///     }
/// }
///
/// func printTokens(from url: URL) async throws {
///     for try await token in FetchQueue.shared.stream(CompletionTokens(url: url)) {
///         print(token.text, terminator: "")
///     }
/// }
/// ```
///
/// For the bytes themselves you need no subclass: ``DataStreamOperation`` yields the chunks,
/// and `.lines()`, `.jsonLines(of:)` and `.serverSentEvents()` read them.
///
/// **The head first.** ``head`` gives the accepted response before any chunk; a status the
/// operation does not accept fails the fetch before anything is yielded
/// (``FetchError/unacceptableStatus(_:)``, with the start of the error body, as for any fetch).
///
/// **Backpressure.** Between the network and the reader FetchKit holds at most `bufferSize`
/// bytes: past that it stops reading (on Linux it pauses libcurl, and the kernel's receive
/// window closes, so the server waits), and it reads on when the reader has caught up. Memory
/// grows neither with the body nor with the reader's delay. While the reading waits for the
/// reader, the idle timeout does not run: a stream nobody reads waits, holding its slot, until
/// it is read, cancelled, or its ``FetchConfiguration/totalTimeout`` passes (the sequence that
/// ``FetchQueue/stream(_:)`` returns cancels the fetch if it goes away unread). Where the session cannot pause the reading (its
/// ``FetchSessionReport`` says so, entry `reader-pace`), a reader more than twice `bufferSize`
/// and 1 MiB behind ends the fetch with ``FetchError/streamOverflow(_:)`` rather than grow.
///
/// **The end, exactly once.** The operation finishes when the body ends (the sequence ends
/// after its last element), when the fetch fails (the sequence throws the error after the
/// elements that arrived), or when the reader stops: leaving the loop, a throwing
/// ``parseElement(_:)``, or cancelling the reading task cancels the fetch, which frees its slot
/// and closes its connection; it then finishes as ``FetchError/cancelled(_:)``. An attempt that
/// fails before any byte of the body arrived may be retried by the ``FetchConfiguration/retryPolicy``;
/// once a byte arrived, never (the reader has seen it). Read ``elements`` once: every chunk goes
/// to one reader.
open class StreamingFetchOperation<Element: Sendable>: AnyFetchOperation, OutputProducing, @unchecked Sendable {
    /// A streaming fetch produces its elements, not an output: ``OutputProducing/value``
    /// returns once the stream ended.
    public typealias Output = Void

    let channel: StreamChannel
    /// An event stream's last event ID and reconnection time, as its reader last left them
    /// (and where a reconnection starts them).
    let eventState = Protected(EventStreamState())

    /// Creates an operation for `request`.
    ///
    /// - Parameters:
    ///   - request: The request to send. It may be `nil` now and set later, or built just
    ///     before sending by overriding ``AnyFetchOperation/makeRequest()``.
    ///   - bufferSize: The most bytes held between the network and the reader before the
    ///     reading waits (at least 64 KiB). Default 1 MiB.
    ///
    /// A stream's ``FetchConfiguration/maximumResponseSize`` is `.max` (no limit): what it holds
    /// is bounded by `bufferSize`, and a long-lived stream may pass any size. Set one to end a
    /// stream that grows past it.
    public init(request: URLRequest? = nil, bufferSize: Int = 1 << 20) {
        channel = StreamChannel(limit: max(64 << 10, bufferSize))
        super.init(request: request)
        configuration.maximumResponseSize = .max
    }

    /// Creates an operation that GETs `url`.
    ///
    /// A designated initializer, like ``init(request:bufferSize:)``: a subclass's own
    /// initializer may call either through `super`.
    ///
    /// - Parameters:
    ///   - url: The URL to fetch.
    ///   - bufferSize: The most bytes held between the network and the reader (at least
    ///     64 KiB). Default 1 MiB.
    public init(url: URL, bufferSize: Int = 1 << 20) {
        channel = StreamChannel(limit: max(64 << 10, bufferSize))
        super.init(request: URLRequest(url: url))
        configuration.maximumResponseSize = .max
    }

    /// An operation whose accepted responses must have `mediaType` (an event stream's
    /// connections).
    init(request: URLRequest, bufferSize: Int = 1 << 20, requiredMediaType: String) {
        channel = StreamChannel(limit: max(64 << 10, bufferSize), requiredMediaType: requiredMediaType)
        super.init(request: request)
        configuration.maximumResponseSize = .max
    }

    /// How the body is cut into the pieces ``parseElement(_:)`` gets. Default ``StreamFraming/chunks``.
    ///
    /// Read once, when the reading starts. Override it in a subclass.
    open var framing: StreamFraming {
        .chunks
    }

    /// Turns one piece of the body into an element, or `nil` to skip it. Override it.
    ///
    /// Called in order, once per piece, by the task that reads ``elements``, as it reads: a slow
    /// parse slows the reading, never memory. A thrown error ends the sequence with
    /// ``FetchError/parseFailed(_:)`` (a thrown ``FetchError`` as it is) and cancels the fetch.
    ///
    /// The default returns the piece itself when `Element` is its payload's type (`Data` for
    /// chunks, `String` for lines, ``ServerSentEvent`` for events), and otherwise throws.
    ///
    /// - Parameter piece: The next piece, as ``framing`` cuts the body.
    /// - Returns: The element, or `nil` to yield none for this piece.
    open func parseElement(_ piece: StreamPiece) throws -> Element? {
        let payload: Any
        switch piece {
        case .chunk(let data): payload = data
        case .line(let line): payload = line
        case .event(let event): payload = event
        }
        if let element = payload as? Element { return element }
        throw MissingParser(operation: "\(type(of: self))", hook: "parseElement(_:)")
    }

    /// The elements, as the body arrives: read them with `for try await`.
    ///
    /// Reading them does not start the fetch: enqueue the operation (``FetchQueue/stream(_:)``
    /// does both). The sequence throws ``FetchError`` only.
    public var elements: Elements {
        Elements(operation: self, queue: nil, refusal: nil)
    }

    /// The accepted response's head: suspends until it arrived, before any element.
    ///
    /// - Throws: The fetch's error, if it ended without an accepted response (an unacceptable
    ///   status among them); ``FetchError/cancelled(_:)`` if the waiting task is cancelled
    ///   (which does not cancel the fetch).
    public var head: HTTPURLResponse {
        get async throws(FetchError) {
            try await channel.head()
        }
    }

    /// The elements of a ``StreamingFetchOperation``, in order.
    public struct Elements: AsyncSequence, Sendable {
        public typealias Failure = FetchError

        let operation: StreamingFetchOperation<Element>
        /// The queue that runs it (``FetchQueue/stream(_:)``), kept alive while the elements are
        /// read: a queue that goes away cancels its fetches.
        let queue: FetchQueue?
        /// Why the queue refused the operation, if it did: the sequence throws it.
        let refusal: FetchError?
        /// For the sequence ``FetchQueue/stream(_:)`` returned: cancels the fetch when its last
        /// copy goes away with no iterator made from it (`nil` for ``elements``).
        let unread: UnreadStream?

        init(operation: StreamingFetchOperation<Element>, queue: FetchQueue?, refusal: FetchError?, cancelsUnread: Bool = false) {
            self.operation = operation
            self.queue = queue
            self.refusal = refusal
            unread = cancelsUnread && refusal == nil ? UnreadStream(cancel: { [operation] in operation.cancel() }) : nil
        }

        /// Reads the elements. Leaving the loop (this iterator's end) before the sequence
        /// ended cancels the fetch.
        public struct AsyncIterator: AsyncIteratorProtocol {
            let reader: StreamReader<Element>

            /// The next element, or `nil` after the last.
            ///
            /// - Throws: The fetch's ``FetchError``, after the elements that arrived before it.
            public mutating func next() async throws(FetchError) -> Element? {
                try await reader.next(isolation: nil)
            }

            /// The next element, or `nil` after the last, read in the caller's isolation.
            ///
            /// - Throws: The fetch's ``FetchError``, after the elements that arrived before it.
            @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
            public mutating func next(isolation actor: isolated (any Actor)?) async throws(FetchError) -> Element? {
                try await reader.next(isolation: actor)
            }
        }

        /// Starts reading.
        public func makeAsyncIterator() -> AsyncIterator {
            unread?.read()
            return AsyncIterator(reader: StreamReader(operation: operation, queue: queue, refusal: refusal))
        }
    }

    /// Whether its transfers may pause the reading while the reader is behind: `true` unless
    /// `fetchkit-bench` turns it off, to measure a session where the pause is not in effect.
    package var pausesReadingForComparison: Bool {
        get { channel.pausesReading }
        set { channel.pausesReading = newValue }
    }

    // MARK: The fetch's hooks

    override func makeBodySink() -> any ResponseBodySink {
        StreamBodySink(channel: channel, url: request?.url)
    }

    /// Made before the slot, so that no two streams share a transfer.
    override func makeBodySinkBeforeGrant() -> (any ResponseBodySink)? {
        makeBodySink()
    }

    /// A stream is never answered from a validator store's body.
    /// Asks for the body as it is (`Accept-Encoding: identity`), unless the request names
    /// codings: a compressing server holds events back until its compressor flushes, and a
    /// compressed body is decoded a whole network read at a time, past the reader's pause.
    override func prepareTransferRequest(_ request: URLRequest) throws(FetchError) -> URLRequest {
        var request = try super.prepareTransferRequest(request)
        if request.value(forHTTPHeaderField: "Accept-Encoding") == nil {
            request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        return request
    }

    override var revalidatesWithoutStoredBody: Bool {
        false
    }

    override var repeatsAttempts: Bool {
        !channel.delivered
    }

    override func makeOutput(from body: ResponseBody?, notModified: Bool) throws -> any Sendable {
        ()
    }

    override func finishedBeforeCompletions() {
        channel.finish(error.map { .failure($0) } ?? .success(()), response: response)
    }

}

/// A ``StreamingFetchOperation`` whose elements are the body's chunks, as they arrive: a
/// streamed GET, with no subclass.
///
/// ```swift
/// func printLines(of url: URL) async throws {
///     for try await line in FetchQueue.shared.stream(DataStreamOperation(url: url)).lines() {
///         print(line)
///     }
/// }
/// ```
public typealias DataStreamOperation = StreamingFetchOperation<Data>

/// Reads one ``StreamingFetchOperation``'s channel, cuts the pieces and parses them; cancels
/// the fetch when the reading stops before the end (its last copy goes away).
final class StreamReader<Element: Sendable> {
    private let operation: StreamingFetchOperation<Element>
    /// Kept until the reading ends (see ``StreamingFetchOperation/Elements/queue``).
    private var queue: FetchQueue?
    private var framing: Framing?
    private var ready: [StreamPiece] = []
    private var taken = 0
    private var ended = false
    private var refusal: FetchError?
    /// Whether this reader is the stream's one reader (claimed at its first read).
    private var claimed = false
    /// The rest of the last chunk read, not cut yet: lines and events are cut a slice at a
    /// time, so that the pieces of a large read (a reader far behind takes everything that
    /// waited) never all exist at once.
    private var uncut = Data()
    /// A framing error met in the middle of a slice: thrown once the pieces cut before it
    /// were read.
    private var pendingError: FetchError?
    /// The most bytes cut into lines or events at once.
    static var sliceSize: Int { 64 << 10 }

    private enum Framing {
        case chunks
        case lines(LineSplitter)
        case events(ServerSentEventParser)
    }

    init(operation: StreamingFetchOperation<Element>, queue: FetchQueue?, refusal: FetchError?) {
        self.operation = operation
        self.queue = queue
        self.refusal = refusal
        // A refused operation is not this reader's to cancel.
        ended = refusal != nil
    }

    deinit {
        if !ended { operation.cancel() }
    }

    func next(isolation actor: isolated (any Actor)? = #isolation) async throws(FetchError) -> Element? {
        if let refusal {
            self.refusal = nil
            throw refusal
        }
        if !claimed {
            // One reader: a second one (another iteration, another task) is refused, and
            // leaves the first one's fetch alone.
            guard operation.channel.claimReader() else {
                ended = true
                throw .invalidRequest(.init(reason: .streamAlreadyRead, url: operation.request?.url))
            }
            claimed = true
        }
        // A cancelled reader gets no more elements, even those already cut and waiting (a
        // loop that never waits would otherwise run through them all).
        if Task.isCancelled, !(ended && ready.count == taken && uncut.isEmpty && pendingError == nil) {
            ready.removeAll()
            taken = 0
            uncut = Data()
            pendingError = nil
            ended = true
            queue = nil
            operation.cancel()
            throw .cancelled(.init(url: operation.request?.url))
        }
        while true {
            while taken < ready.count {
                let piece = ready[taken]
                taken += 1
                if let element = try parse(piece) { return element }
            }
            ready.removeAll(keepingCapacity: true)
            taken = 0
            if let pendingError {
                self.pendingError = nil
                stop()
                throw pendingError
            }
            if !uncut.isEmpty {
                let slice = uncut.prefix(Self.sliceSize)
                uncut = uncut.count > slice.count ? uncut.dropFirst(slice.count) : Data()
                cut(slice)
                continue
            }
            if ended {
                queue = nil
                return nil
            }
            let chunk: Data?
            do {
                let operation = self.operation
                chunk = try await operation.channel.read(url: operation.request?.url) { operation.cancel() }
            } catch {
                ended = true
                queue = nil
                throw error
            }
            startFraming()
            if let chunk, case .chunks? = framing {
                ready = [.chunk(chunk)]     // a chunk is its own piece, however large
            } else if let chunk {
                uncut = chunk
            } else {
                cut(nil)
            }
        }
    }

    /// Reads the operation's framing, once, when the first chunk (or the end) comes.
    private func startFraming() {
        guard framing == nil else { return }
        switch operation.framing {
        case .chunks: framing = .chunks
        case .lines(let maximumLength): framing = .lines(LineSplitter(maximumLength: maximumLength))
        case .serverSentEvents(let maximumEventSize):
            let start = operation.eventState.snapshot
            framing = .events(ServerSentEventParser(maximumEventSize: maximumEventSize, lastEventID: start.lastEventID,
                                                    reconnectionTime: start.reconnectionTime))
        }
    }

    /// Cuts a slice of a chunk (or, for `nil`, the end) into pieces, as the operation's
    /// framing says. A framing error waits in ``pendingError`` behind the pieces cut before it.
    private func cut(_ chunk: Data?) {
        guard let chunk else {
            ended = true
            switch framing {
            case .lines(var splitter): ready = splitter.finish().map { [.line(String(decoding: $0, as: UTF8.self))] } ?? []
            case .events(var parser):
                parser.finish()     // an event not ended is discarded
                operation.eventState.withLock { $0 = EventStreamState(parser) }
            case .chunks, nil: break
            }
            return
        }
        switch framing {
        case .chunks, nil:
            ready = [.chunk(chunk)]
        case .lines(var splitter):
            var lines: [Data] = []
            do {
                try splitter.feed(chunk, into: &lines)
            } catch {
                pendingError = error
            }
            ready = lines.map { .line(String(decoding: $0, as: UTF8.self)) }
            framing = .lines(splitter)
        case .events(var parser):
            var events: [ServerSentEvent] = []
            do {
                try parser.feed(chunk, into: &events)
            } catch {
                pendingError = error
            }
            ready = events.map(StreamPiece.event)
            framing = .events(parser)
            operation.eventState.withLock { $0 = EventStreamState(parser) }
        }
    }

    private func parse(_ piece: StreamPiece) throws(FetchError) -> Element? {
        do {
            return try operation.parseElement(piece)
        } catch let error as FetchError {
            stop()
            throw error
        } catch {
            stop()
            throw .parseFailed(.init(underlying: .init(error), url: operation.request?.url))
        }
    }

    /// The reader stops before the end: the fetch is cancelled.
    private func stop() {
        ended = true
        operation.cancel()
    }
}

/// Where an event stream stands between events: what a reconnection continues from.
struct EventStreamState: Sendable {
    var lastEventID = ""
    var reconnectionTime: TimeInterval?

    init() {}

    init(_ parser: ServerSentEventParser) {
        lastEventID = parser.lastEventID
        reconnectionTime = parser.reconnectionTime
    }
}

extension FetchQueue {
    /// Enqueues a streaming operation and returns its elements, to read as they arrive.
    ///
    /// ```swift
    /// for try await chunk in queue.stream(DataStreamOperation(url: url)) {
    ///     log(chunk)
    /// }
    /// ```
    ///
    /// The fetch waits for its slot like any other and holds it while it streams; the queue
    /// stays alive while the elements are read. An operation the queue refuses (see ``enqueue(_:completion:)``) gives a sequence that
    /// throws why.
    ///
    /// The sequence is the stream's reader: one that goes away unread — its last copy dropped
    /// before any loop over it began — cancels the fetch, which frees its slot. (To enqueue now
    /// and read later, keep the sequence, or enqueue the operation with ``enqueue(_:completion:)``
    /// and read its ``StreamingFetchOperation/elements``.)
    ///
    /// - Parameter operation: The operation to run.
    /// - Returns: Its ``StreamingFetchOperation/elements``.
    public func stream<Element>(_ operation: StreamingFetchOperation<Element>) -> StreamingFetchOperation<Element>.Elements {
        let (_, refusal) = register(operation, completion: nil)
        return StreamingFetchOperation<Element>.Elements(operation: operation, queue: self, refusal: refusal, cancelsUnread: true)
    }
}

/// Cancels a streamed fetch whose sequence went away unread (see ``FetchQueue/stream(_:)``):
/// shared by the copies of one sequence, it goes away with the last of them.
final class UnreadStream: Sendable {
    private let cancel: @Sendable () -> Void
    private let iterated = Protected(false)

    init(cancel: @escaping @Sendable () -> Void) {
        self.cancel = cancel
    }

    /// An iterator was made: its reader ends the fetch if it stops early.
    func read() {
        iterated.withLock { $0 = true }
    }

    deinit {
        if !iterated.snapshot { cancel() }
    }
}
