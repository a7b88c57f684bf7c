import Foundation
import Testing
@testable import FetchKit

/// The decoders over a body read in chunks: text lines, JSON Lines and server-sent events
/// (the WHATWG event stream format), fed whole and cut at seeded random places.
@Suite("Stream decoders: lines, JSON Lines, server-sent events", .timeLimit(.minutes(1)))
struct StreamDecoderTests {
    /// `bytes` cut into chunks at random places (some empty), the same for a seed.
    static func chunks(_ bytes: [UInt8], seed: UInt64) -> [Data] {
        var random = SplitMix64(seed: seed)
        var chunks: [Data] = []
        var start = 0
        while start < bytes.count {
            let length = random.chance(10) ? 0 : 1 + random.below(min(7, bytes.count - start))
            chunks.append(Data(bytes[start..<(start + length)]))
            start += length
        }
        return chunks
    }

    static func stream(_ chunks: [Data]) -> AsyncStream<Data> {
        AsyncStream { continuation in
            for chunk in chunks { continuation.yield(chunk) }
            continuation.finish()
        }
    }

    /// What `parser` makes of `chunks`, the stream ended after them.
    static func events(_ chunks: [Data], maximumEventSize: Int = 1 << 20) throws -> [ServerSentEvent] {
        var parser = ServerSentEventParser(maximumEventSize: maximumEventSize)
        var events: [ServerSentEvent] = []
        for chunk in chunks { events += try parser.feed(chunk) }
        parser.finish()
        return events
    }

    // MARK: Lines

    @Test func linesEndAtLFCROrCRLFAndACRLFSplitBetweenChunksEndsOneLine() throws {
        var splitter = LineSplitter(maximumLength: 100)
        var lines = try splitter.feed(Data("a\nb\rc\r\nd\r".utf8))
        lines += try splitter.feed(Data("\ne\r".utf8))
        lines += try splitter.feed(Data("f\n\n".utf8))
        #expect(lines.map { String(decoding: $0, as: UTF8.self) } == ["a", "b", "c", "d", "e", "f", ""])
        #expect(splitter.finish() == nil)
    }

    @Test func bytesAfterTheLastLineEndAreTheLastLine() async throws {
        var lines: [String] = []
        for try await line in Self.stream([Data("one\ntw".utf8), Data("o".utf8)]).lines() { lines.append(line) }
        #expect(lines == ["one", "two"])
    }

    @Test func linesCutAnywhereAreTheSameLinesAndACharacterSplitBetweenChunksStaysWhole() async throws {
        let text = "first\r\nsecond\rthird\n\nfourth: ü€𝄞\r\n\r\r\nlast"
        let expected = ["first", "second", "third", "", "fourth: ü€𝄞", "", "", "last"]
        for seed in UInt64(0)..<200 {
            var lines: [String] = []
            for try await line in Self.stream(Self.chunks(Array(text.utf8), seed: seed)).lines() { lines.append(line) }
            #expect(lines == expected, "seed \(seed)")
        }
    }

    @Test func aLineLongerThanTheLimitEndsTheSequenceBeforeItIsHeldEndedOrNot() async throws {
        let refused = FetchError.invalidResponse(.init(reason: .lineTooLong(limit: 8), url: nil))
        var splitter = LineSplitter(maximumLength: 8)
        let held = try splitter.feed(Data("12345678\n".utf8))
        #expect(held.count == 1, "a line of the limit is held")
        #expect(throws: refused) { _ = try splitter.feed(Data("123456789\n".utf8)) }
        var unended = LineSplitter(maximumLength: 8)
        _ = try unended.feed(Data("12345".utf8))
        #expect(throws: refused, "a line that has not ended yet is refused once it passes the limit") {
            _ = try unended.feed(Data("6789".utf8))
        }
        // An endless line from the source: the sequence ends at the limit, never holding more.
        let endless = AsyncStream<Data> { continuation in
            for _ in 0..<1_000 { continuation.yield(Data(repeating: 0x61, count: 1_024)) }
            continuation.finish()
        }
        await #expect(throws: FetchError.invalidResponse(.init(reason: .lineTooLong(limit: 4_096), url: nil))) {
            for try await _ in endless.lines(maximumLength: 4_096) {}
        }
    }

    @Test func bytesThatAreNotUTF8BecomeReplacementCharacters() async throws {
        var lines: [String] = []
        for try await line in Self.stream([Data([0x61, 0xFF, 0x62, 0x0A])]).lines() { lines.append(line) }
        #expect(lines == ["a\u{FFFD}b"])
    }

    @Test func theBaseSequencesErrorEndsTheLines() async throws {
        struct Cut: Error, Equatable {}
        let base = AsyncThrowingStream<Data, any Error> { continuation in
            continuation.yield(Data("kept\npartial".utf8))
            continuation.finish(throwing: Cut())
        }
        var lines: [String] = []
        await #expect(throws: Cut()) {
            for try await line in base.lines() { lines.append(line) }
        }
        #expect(lines == ["kept"], "the line the error cut is not given as a whole one")
    }

    // MARK: JSON Lines

    struct Token: Decodable, Equatable {
        let n: Int
    }

    @Test func jsonLinesDecodeEachLineAndSkipBlankOnes() async throws {
        let body = "{\"n\":1}\n\n  \t\r\n{\"n\":2}\r\n{\"n\":3}"
        for seed in UInt64(0)..<50 {
            var tokens: [Token] = []
            for try await token in Self.stream(Self.chunks(Array(body.utf8), seed: seed)).jsonLines(of: Token.self) {
                tokens.append(token)
            }
            #expect(tokens == [Token(n: 1), Token(n: 2), Token(n: 3)], "seed \(seed)")
        }
    }

    @Test func aJSONLineThatDoesNotDecodeEndsTheSequenceWithAParseFailure() async throws {
        var tokens: [Token] = []
        do {
            for try await token in Self.stream([Data("{\"n\":1}\n{\"n\":\"two\"}\n{\"n\":3}\n".utf8)]).jsonLines(of: Token.self) {
                tokens.append(token)
            }
            Issue.record("the bad line decoded")
        } catch let error as FetchError {
            #expect(error.code == .parseFailed)
            guard case .parseFailed(let failure) = error else { return }
            #expect(failure.underlying.error is DecodingError)
        }
        #expect(tokens == [Token(n: 1)])
    }

    // MARK: Server-sent events (WHATWG HTML, "event stream format", its examples first)

    @Test func dataOnSeveralLinesIsJoinedWithLineFeeds() throws {
        let events = try Self.events([Data("data: YHOO\ndata: +2\ndata: 10\n\n".utf8)])
        #expect(events == [ServerSentEvent(data: "YHOO\n+2\n10")])
    }

    @Test func commentsAreIgnoredAndAnEmptyIDResetsTheLastEventID() throws {
        let stream = ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
        let events = try Self.events([Data(stream.utf8)])
        #expect(events == [
            ServerSentEvent(data: "first event", lastEventID: "1"),
            ServerSentEvent(data: "second event", lastEventID: ""),
            ServerSentEvent(data: " third event", lastEventID: ""),     // one space is dropped, not two
        ])
    }

    @Test func emptyDataFieldsDispatchAndAnEventTheStreamDidNotEndIsDiscarded() throws {
        let events = try Self.events([Data("data\n\ndata\ndata\n\ndata:".utf8)])
        #expect(events == [ServerSentEvent(data: ""), ServerSentEvent(data: "\n")])
    }

    @Test func aSpaceAfterTheColonIsOptional() throws {
        let events = try Self.events([Data("data:test\n\ndata: test\n\n".utf8)])
        #expect(events == [ServerSentEvent(data: "test"), ServerSentEvent(data: "test")])
    }

    @Test func theEventFieldNamesTheTypeForOneEvent() throws {
        let events = try Self.events([Data("event: add\ndata: 73857293\n\ndata: next\n\nevent\ndata: x\n\n".utf8)])
        #expect(events.map(\.type) == ["add", "message", "message"])
    }

    @Test func retryTakesDigitsOnlyAndStaysForLaterEvents() throws {
        var parser = ServerSentEventParser()
        let alone = try parser.feed(Data("retry: 1500\n\n".utf8))
        #expect(alone.isEmpty, "a retry alone dispatches nothing")
        #expect(parser.reconnectionTime == 1.5)
        let events = try parser.feed(Data("retry: 15x\nretry: -1\nretry:\ndata: a\n\n".utf8))
        #expect(events == [ServerSentEvent(data: "a", reconnectionTime: 1.5)])
        // More digits than any integer holds: a very long time, which the reconnection caps
        // (it was ignored, and the policy's shorter delay used).
        _ = try parser.feed(Data("retry: 99999999999999999999999\n".utf8))
        let huge = try #require(parser.reconnectionTime)
        #expect(huge > 1e15)
        #expect(EventStreamReconnection(maximumReconnects: 1, delay: 0.5, maximumDelay: 2).wait(requested: huge) == 2)
    }

    @Test func anIDWithNoDataChangesTheLastEventIDWithoutAnEvent() throws {
        var parser = ServerSentEventParser()
        let none = try parser.feed(Data("id: 41\n\n".utf8))
        #expect(none.isEmpty)
        #expect(parser.lastEventID == "41", "what a reconnect sends as Last-Event-ID")
        let after = try parser.feed(Data("data: after\n\n".utf8))
        #expect(after == [ServerSentEvent(data: "after", lastEventID: "41")])
        let nul = try parser.feed(Data("id: a\u{0}b\ndata: x\n\n".utf8))
        #expect(nul == [ServerSentEvent(data: "x", lastEventID: "41")], "an id holding U+0000 is ignored")
    }

    @Test func aByteOrderMarkIsDroppedOnlyAtTheStreamsStart() throws {
        let events = try Self.events([Data([0xEF, 0xBB, 0xBF] + Array("data: a\n\n".utf8) + [0xEF, 0xBB, 0xBF] + Array("data: b\n\n".utf8))])
        #expect(events == [ServerSentEvent(data: "a")], "the second mark starts a field of another name, ignored")
    }

    @Test func unknownFieldsAreIgnored() throws {
        let events = try Self.events([Data("foo: bar\ndata: kept\nDATA: not data\n\n".utf8)])
        #expect(events == [ServerSentEvent(data: "kept")])
    }

    @Test func eventsCutAnywhereAreTheSameEvents() throws {
        let stream = "\u{FEFF}: hello\r\nevent: update\r\ndata: {\"a\": \"ü€\"}\r\nid: 7\r\n\r\n"
            + "data: line one\rdata: line two\r\rretry: 2500\ndata:\n\n: keep-alive\n\nid\ndata: last\n\ndata: cut"
        let expected = [
            ServerSentEvent(type: "update", data: "{\"a\": \"ü€\"}", lastEventID: "7"),
            ServerSentEvent(data: "line one\nline two", lastEventID: "7"),
            ServerSentEvent(data: "", lastEventID: "7", reconnectionTime: 2.5),
            ServerSentEvent(data: "last", lastEventID: "", reconnectionTime: 2.5),
        ]
        #expect(try Self.events([Data(stream.utf8)]) == expected)
        for seed in UInt64(0)..<300 {
            #expect(try Self.events(Self.chunks(Array(stream.utf8), seed: seed)) == expected, "seed \(seed)")
        }
    }

    @Test func anEventLargerThanTheLimitIsRefusedBeforeItIsHeld() throws {
        let refused = FetchError.invalidResponse(.init(reason: .eventTooLarge(limit: 10), url: nil))
        let refused100 = FetchError.invalidResponse(.init(reason: .eventTooLarge(limit: 100), url: nil))
        #expect(try Self.events([Data("data: 12345\ndata: 6789\n\n".utf8)], maximumEventSize: 10).map(\.data) == ["12345\n6789"],
                "10 bytes with the line feed between: held")
        #expect(throws: refused) { _ = try Self.events([Data("data: 12345\ndata: 67890\n\n".utf8)], maximumEventSize: 10) }
        // One data line longer than the limit, never ended: the event is too large (it was
        // lineTooLong, with the line's own limit).
        var long = ServerSentEventParser(maximumEventSize: 100)
        #expect(throws: refused100) {
            for _ in 0..<10 { _ = try long.feed(Data("data: ".utf8) + Data(repeating: 0x61, count: 50)) }
        }
        var longComment = ServerSentEventParser(maximumEventSize: 100)
        #expect(throws: refused100) { _ = try longComment.feed(Data(": ".utf8) + Data(repeating: 0x61, count: 500)) }
        // Many small data lines that never end the event: refused at the limit.
        var parser = ServerSentEventParser(maximumEventSize: 1_000)
        #expect(throws: FetchError.invalidResponse(.init(reason: .eventTooLarge(limit: 1_000), url: nil))) {
            for _ in 0..<1_000 { _ = try parser.feed(Data("data: x\n".utf8)) }
        }
    }

    @Test func theSequenceGivesTheEventsAsTheyComeAndEndsWithTheStream() async throws {
        let (stream, source) = AsyncStream.makeStream(of: Data.self)
        var iterator = stream.serverSentEvents().makeAsyncIterator()
        source.yield(Data("data: one\n".utf8))
        source.yield(Data("\n".utf8))
        let one = try await iterator.next()
        #expect(one == ServerSentEvent(data: "one"), "given once its blank line came, before the stream ended")
        source.yield(Data("data: two\n\ndata: unended".utf8))
        let two = try await iterator.next()
        #expect(two == ServerSentEvent(data: "two"))
        source.finish()
        let end = try await iterator.next()
        let afterEnd = try await iterator.next()
        #expect(end == nil)
        #expect(afterEnd == nil)
    }

    @Test func theErrorsSayWhatWasTooLarge() {
        let line = FetchError.invalidResponse(.init(reason: .lineTooLong(limit: 4_096), url: nil))
        let event = FetchError.invalidResponse(.init(reason: .eventTooLarge(limit: 1_024), url: URL(string: "https://user:secret@example.com/events")))
        #expect(line.description.contains("line longer than 4096 bytes"))
        #expect(event.description.contains("more than 1024 bytes of data"))
        #expect(!event.description.contains("secret"))
    }
}
