import Foundation
import LoopbackServer
import Testing

@Suite("BytePattern", .timeLimit(.minutes(3)))
struct BytePatternTests {
    @Test("byte(at:) is the offset modulo 251")
    func byteAtOffset() {
        #expect(BytePattern.byte(at: 0) == 0)
        #expect(BytePattern.byte(at: 250) == 250)
        #expect(BytePattern.byte(at: 251) == 0)
        #expect(BytePattern.byte(at: 252) == 1)
        #expect(BytePattern.byte(at: 1_000_000) == UInt8(1_000_000 % 251))
    }

    @Test("data(offset:count:) matches byte(at:), across the shared buffer's end")
    func dataMatchesBytes() {
        for (offset, count) in [(0, 0), (0, 600), (123, 1000), (1_028_000, 5000), (7_777_777, 1_100_000)] {
            let data = BytePattern.data(offset: offset, count: count)
            #expect(data.count == count)
            var allMatch = true
            for (i, byte) in data.enumerated() where byte != BytePattern.byte(at: offset + i) {
                allMatch = false
                break
            }
            #expect(allMatch, "offset \(offset) count \(count)")
            #expect(BytePattern.matches(data, offset: offset))
        }
    }

    @Test("firstMismatch finds the first wrong byte")
    func firstMismatch() {
        var data = BytePattern.data(offset: 500, count: 2_000_000)
        #expect(BytePattern.firstMismatch(in: data, offset: 500) == nil)
        #expect(BytePattern.firstMismatch(in: data, offset: 501) == 0)
        data[1_500_000] ^= 0xFF
        #expect(BytePattern.firstMismatch(in: data, offset: 500) == 1_500_000)
        #expect(!BytePattern.matches(data, offset: 500))
        #expect(BytePattern.matches(Data(), offset: 42))
    }
}
