import Foundation

/// Splits bytes that arrive in chunks into lines ended by LF, CR or CRLF — a CRLF split
/// between two chunks ends one line — and bounds how long a line may grow.
///
/// Lines are bytes, not text: a line end is ASCII, never part of a UTF-8 sequence, so a chunk
/// that splits a character splits no line, and each line is decoded whole.
struct LineSplitter {
    /// The longest line held, in bytes, without its end.
    let maximumLength: Int
    /// The bytes of the line not yet ended.
    private var partial = Data()
    /// The last byte seen was a CR: an LF that comes first in the next chunk is its CRLF's.
    private var afterCR = false

    init(maximumLength: Int) {
        self.maximumLength = maximumLength
    }

    /// Takes a chunk and returns the lines it ended, in order, without their ends.
    ///
    /// - Throws: ``FetchError/InvalidResponse/Reason/lineTooLong(limit:)`` as soon as a line
    ///   passes ``maximumLength``, ended or not: its bytes are not kept.
    mutating func feed(_ chunk: Data) throws(FetchError) -> [Data] {
        var ended: [Data] = []
        try feed(chunk, into: &ended)
        return ended
    }

    /// Takes a chunk and appends the lines it ended to `ended`, in order: those before a line
    /// that is too long are there when it throws.
    mutating func feed(_ chunk: Data, into ended: inout [Data]) throws(FetchError) {
        guard !chunk.isEmpty else { return }     // an empty chunk between a CR and its LF
        var start = chunk.startIndex
        if afterCR, start < chunk.endIndex, chunk[start] == 0x0A { start += 1 }
        afterCR = false
        while let end = chunk[start...].firstIndex(where: { $0 == 0x0A || $0 == 0x0D }) {
            try hold(chunk.distance(from: start, to: end))
            if partial.isEmpty {
                ended.append(Data(chunk[start..<end]))
            } else {
                partial.append(chunk[start..<end])
                ended.append(partial)
                partial = Data()
            }
            start = end + 1
            if chunk[end] == 0x0D {
                if start == chunk.endIndex {
                    afterCR = true
                } else if chunk[start] == 0x0A {
                    start += 1
                }
            }
        }
        try hold(chunk.distance(from: start, to: chunk.endIndex))
        partial.append(chunk[start...])
    }

    /// The stream ended: the last line, if bytes came after the last line end.
    mutating func finish() -> Data? {
        defer { partial = Data() }
        return partial.isEmpty ? nil : partial
    }

    /// Checks that `count` more bytes keep the current line within the bound.
    private func hold(_ count: Int) throws(FetchError) {
        guard partial.count + count <= maximumLength else {
            throw .invalidResponse(.init(reason: .lineTooLong(limit: maximumLength), url: nil))
        }
    }
}
