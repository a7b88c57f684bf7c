import Foundation
import Testing

/// The tests' gzip streams are real: zlib reads back what it wrote, and a cut stream is not whole.
@Suite(.timeLimit(.minutes(3))) struct GzipSupportTests {
    @Test func roundTripsAndCatchesTruncation() throws {
        let text = Data(String(repeating: "hostile input is the normal case. ", count: 2_000).utf8)
        let gzip = Gzip.compress(text)
        #expect(gzip.prefix(2) == Data([0x1f, 0x8b]))
        #expect(Gzip.decompress(gzip) == text)
        #expect(Gzip.decompress(gzip.prefix(gzip.count / 2)) == nil)
    }

    @Test func zerosCompressAbout1000To1() throws {
        let bomb = Gzip.zeros(count: 8 << 20)
        #expect(bomb.count < 16 << 10)
        #expect(Gzip.decompress(bomb) == Data(count: 8 << 20))
    }
}
