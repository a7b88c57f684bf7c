import Foundation

extension AsyncSequence where Element == Data {
    /// The chunks as UTF-8 text lines, each without its end (LF, CR or CRLF; a CRLF split
    /// between two chunks ends one line). Empty lines are kept; bytes after the last line end
    /// are the last line.
    ///
    /// Bytes that are not UTF-8 become U+FFFD. A line longer than `maximumLength` bytes ends
    /// the sequence with ``FetchError/InvalidResponse/Reason/lineTooLong(limit:)`` before it
    /// is held, so memory stays bounded whatever the source sends.
    ///
    /// ```swift
    /// let (chunks, source) = AsyncStream.makeStream(of: Data.self)
    /// source.yield(Data("first\r\nsec".utf8))
    /// source.yield(Data("ond\n".utf8))
    /// source.finish()
    /// for try await line in chunks.lines() {
    ///     print(line)             // "first", then "second"
    /// }
    /// ```
    ///
    /// - Parameter maximumLength: The longest line, in bytes, without its end. Default 1 MiB.
    public func lines(maximumLength: Int = 1 << 20) -> TextLines<Self> {
        TextLines(base: self, maximumLength: maximumLength)
    }

    /// The chunks as JSON Lines (NDJSON): each line one JSON value, decoded as `type`. Lines
    /// of only spaces and tabs are skipped; lines end as in ``lines(maximumLength:)``.
    ///
    /// A line that does not decode ends the sequence with ``FetchError/parseFailed(_:)`` (its
    /// underlying error is the decoder's); a line longer than `maximumLength` bytes ends it with
    /// ``FetchError/InvalidResponse/Reason/lineTooLong(limit:)``.
    ///
    /// ```swift
    /// struct Token: Decodable { let text: String }
    ///
    /// let (body, feed) = AsyncStream.makeStream(of: Data.self)
    /// feed.yield(Data("{\"text\":\"Hel\"}\n{\"text\":\"lo\"}\n".utf8))
    /// feed.finish()
    /// for try await token in body.jsonLines(of: Token.self) {
    ///     print(token.text)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - type: The type of each line's value.
    ///   - decoder: Decodes each line. Default a new `JSONDecoder`.
    ///   - maximumLength: The longest line, in bytes, without its end. Default 1 MiB.
    public func jsonLines<Value: Decodable>(of type: Value.Type, decoder: JSONDecoder = JSONDecoder(),
                                            maximumLength: Int = 1 << 20) -> JSONLines<Self, Value> {
        JSONLines(lines: RawLines(base: self, maximumLength: maximumLength), decoder: decoder)
    }
}

/// The lines of an asynchronous sequence of `Data` chunks, as bytes, for the sequences built on
/// them.
struct RawLines<Base: AsyncSequence> where Base.Element == Data {
    let base: Base
    let maximumLength: Int

    struct Iterator {
        var base: Base.AsyncIterator
        var splitter: LineSplitter
        var ready = ReadyElements<Data>()

        /// Takes what the base gave: a chunk, or its end (`nil`).
        mutating func take(_ chunk: Data?) throws(FetchError) {
            ready.refill([])
            if let chunk {
                ready.refill(try splitter.feed(chunk))
            } else {
                ready.refill(splitter.finish().map { [$0] } ?? [], ended: true)
            }
        }

        mutating func next() async throws -> Data? {
            while true {
                if let baseReadsOnce = ready.endIfCancelled() {
                    if baseReadsOnce { _ = try await base.next() }
                    throw FetchError.cancelled(.init(url: nil))
                }
                if let line = ready.next() { return line }
                if ready.baseEnded { return nil }
                try take(try await base.next())
            }
        }

        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
        mutating func next(isolation actor: isolated (any Actor)?) async throws -> Data? {
            while true {
                if let baseReadsOnce = ready.endIfCancelled() {
                    if baseReadsOnce { _ = try await base.next(isolation: actor) }
                    throw FetchError.cancelled(.init(url: nil))
                }
                if let line = ready.next() { return line }
                if ready.baseEnded { return nil }
                try take(try await base.next(isolation: actor))
            }
        }
    }

    func makeIterator() -> Iterator {
        Iterator(base: base.makeAsyncIterator(), splitter: LineSplitter(maximumLength: maximumLength))
    }
}

/// The UTF-8 text lines of an asynchronous sequence of `Data` chunks: see
/// `AsyncSequence.lines(maximumLength:)`.
public struct TextLines<Base: AsyncSequence>: AsyncSequence where Base.Element == Data {
    public typealias Element = String

    let lines: RawLines<Base>

    init(base: Base, maximumLength: Int) {
        lines = RawLines(base: base, maximumLength: maximumLength)
    }

    /// Reads the lines in order.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var lines: RawLines<Base>.Iterator

        /// The next line, or `nil` after the last.
        ///
        /// - Throws: The base sequence's error, or
        ///   ``FetchError/InvalidResponse/Reason/lineTooLong(limit:)``.
        public mutating func next() async throws -> String? {
            try await lines.next().map { String(decoding: $0, as: UTF8.self) }
        }

        /// The next line, or `nil` after the last, read in the caller's isolation.
        ///
        /// - Throws: The base sequence's error, or
        ///   ``FetchError/InvalidResponse/Reason/lineTooLong(limit:)``.
        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> String? {
            try await lines.next(isolation: actor).map { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Starts reading the base sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(lines: lines.makeIterator())
    }
}

extension TextLines: Sendable where Base: Sendable {}

/// The JSON Lines of an asynchronous sequence of `Data` chunks, decoded: see
/// `AsyncSequence.jsonLines(of:decoder:maximumLength:)`.
public struct JSONLines<Base: AsyncSequence, Value: Decodable>: AsyncSequence where Base.Element == Data {
    public typealias Element = Value

    let lines: RawLines<Base>
    let decoder: JSONDecoder

    /// Reads the values in order.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var lines: RawLines<Base>.Iterator
        let decoder: JSONDecoder

        /// The next value, or `nil` after the last.
        ///
        /// - Throws: The base sequence's error, ``FetchError/parseFailed(_:)`` for a line that
        ///   does not decode, or ``FetchError/InvalidResponse/Reason/lineTooLong(limit:)``.
        public mutating func next() async throws -> Value? {
            while let line = try await lines.next() {
                if let value = try decode(line) { return value }
            }
            return nil
        }

        /// The next value, or `nil` after the last, read in the caller's isolation.
        ///
        /// - Throws: As ``next()``.
        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> Value? {
            while let line = try await lines.next(isolation: actor) {
                if let value = try decode(line) { return value }
            }
            return nil
        }

        /// The line's value; `nil` for a blank line.
        private func decode(_ line: Data) throws(FetchError) -> Value? {
            guard line.contains(where: { $0 != 0x20 && $0 != 0x09 }) else { return nil }
            do {
                return try decoder.decode(Value.self, from: line)
            } catch {
                throw .parseFailed(.init(underlying: .init(error), url: nil))
            }
        }
    }

    /// Starts reading the base sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(lines: lines.makeIterator(), decoder: decoder)
    }
}

extension RawLines: Sendable where Base: Sendable {}
