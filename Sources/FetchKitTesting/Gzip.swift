import Foundation

/// gzip streams written by hand, with no compressor: stored blocks for any bytes
/// (``stored(_:)``), and one dynamic-Huffman block for a run of zeros that inflates about
/// 1,000 times (``zeros(count:)``, the gzip bomb's body).
enum Gzip {
    /// The member header: deflate, no flags, no time, unknown operating system.
    private static let header: [UInt8] = [0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xFF]

    /// `data` as a gzip member of stored (uncompressed) deflate blocks.
    static func stored(_ data: Data) -> Data {
        var out = Data(header)
        let bytes = [UInt8](data)
        var offset = 0
        repeat {
            let count = min(65_535, bytes.count - offset)
            let last: UInt8 = offset + count >= bytes.count ? 1 : 0
            out.append(last)
            out.append(contentsOf: [UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF)])
            out.append(contentsOf: bytes[offset..<(offset + count)])
            offset += count
        } while offset < bytes.count
        appendTrailer(to: &out, crc: crc32(bytes), count: bytes.count)
        return out
    }

    /// `count` zero bytes as a gzip member of about `count / 1032` bytes: one dynamic-Huffman
    /// deflate block whose codes give the longest copy (258 bytes at distance 1) one bit and its
    /// distance one bit, so that every two bits of the body inflate to 258 zeros. The trailer's
    /// CRC-32 and length are those of the zeros: the member is valid to its end.
    static func zeros(count: Int) -> Data {
        var bits = BitWriter()
        bits.write(1, count: 1)                 // BFINAL: the last block
        bits.write(2, count: 2)                 // BTYPE: dynamic Huffman codes
        bits.write(286 - 257, count: 5)         // HLIT: literal/length codes 0...285
        bits.write(1 - 1, count: 5)             // HDIST: one distance code
        bits.write(18 - 4, count: 4)            // HCLEN: 18 code-length code lengths
        // The code-length code (RFC 1951, 3.2.7): 18 (a run of zeros) in 1 bit, 1 and 2 in 2.
        let codeLengthOrder = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1]
        for symbol in codeLengthOrder {
            bits.write(symbol == 18 ? 1 : symbol == 1 || symbol == 2 ? 2 : 0, count: 3)
        }
        // Canonical codes of that code: 18 → 0, 1 → 10, 2 → 11.
        func codeLength(_ value: Int) { bits.writeCode(value == 1 ? 0b10 : 0b11, length: 2) }
        func zeroRun(_ run: Int) {
            bits.writeCode(0, length: 1)
            bits.write(UInt32(run - 11), count: 7)
        }
        // Literal/length code lengths: 0 (the literal zero) 2, 256 (end of block) 2, 285 (a
        // copy of 258) 1, the others none; then the one distance code (distance 1): 1.
        codeLength(2)                             // 0
        zeroRun(138); zeroRun(117)              // 1...255
        codeLength(2)                             // 256
        zeroRun(28)                             // 257...284
        codeLength(1)                             // 285
        codeLength(1)                             // distance code 0
        // Canonical codes: 285 → 0, literal 0 → 10, end of block → 11; distance 0 → 0.
        if count > 0 {
            bits.writeCode(0b10, length: 2)     // the first zero, as a literal
            let copies = (count - 1) / 258
            bits.writeZeroBits(copies * 2)      // each copy: length code 285, distance code 0
            for _ in 0..<((count - 1) % 258) { bits.writeCode(0b10, length: 2) }
        }
        bits.writeCode(0b11, length: 2)         // end of block
        var out = Data(header)
        out.append(contentsOf: bits.bytes)
        appendTrailer(to: &out, crc: crc32OfZeros(count: count), count: count)
        return out
    }

    private static func appendTrailer(to out: inout Data, crc: UInt32, count: Int) {
        for value in [crc, UInt32(truncatingIfNeeded: count)] {
            out.append(contentsOf: [UInt8(value & 0xFF), UInt8((value >> 8) & 0xFF), UInt8((value >> 16) & 0xFF), UInt8(value >> 24)])
        }
    }

    /// The CRC-32 (IEEE, reflected) of `bytes`, bit by bit.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ polynomial : crc >> 1 }
        }
        return ~crc
    }

    /// The CRC-32 of `count` zero bytes, in about 64 steps whatever `count`: zero bytes
    /// multiply the register by x^(8·count) modulo the polynomial (zlib's `crc32_combine`).
    static func crc32OfZeros(count: Int) -> UInt32 {
        var power: UInt32 = 1 << 30             // x^1, reflected
        var shift: UInt32 = 1 << 31             // x^0
        var exponent = UInt64(max(0, count)) * 8
        while exponent > 0 {
            if exponent & 1 == 1 { shift = multiply(shift, power) }
            power = multiply(power, power)
            exponent >>= 1
        }
        return ~multiply(shift, 0xFFFF_FFFF)
    }

    private static let polynomial: UInt32 = 0xEDB8_8320

    /// `a · b` modulo the CRC polynomial, both reflected (zlib's `multmodp`).
    private static func multiply(_ a: UInt32, _ b: UInt32) -> UInt32 {
        var b = b
        var product: UInt32 = 0
        var bit: UInt32 = 1 << 31
        while bit != 0 {
            if a & bit != 0 { product ^= b }
            b = b & 1 == 1 ? (b >> 1) ^ polynomial : b >> 1
            bit >>= 1
        }
        return product
    }
}

/// Bits packed as deflate packs them: from each byte's least significant bit up.
private struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private var bitCount = 0

    /// The `count` low bits of `value`, least significant first (header fields, extra bits).
    mutating func write(_ value: UInt32, count: Int) {
        for index in 0..<count { append(bit: (value >> UInt32(index)) & 1 == 1) }
    }

    /// A Huffman code of `length` bits, most significant first.
    mutating func writeCode(_ code: UInt32, length: Int) {
        for index in (0..<length).reversed() { append(bit: (code >> UInt32(index)) & 1 == 1) }
    }

    /// `count` zero bits, a byte at a time.
    mutating func writeZeroBits(_ count: Int) {
        bitCount += count
        let needed = (bitCount + 7) / 8
        if needed > bytes.count { bytes.append(contentsOf: repeatElement(0, count: needed - bytes.count)) }
    }

    private mutating func append(bit: Bool) {
        if bitCount % 8 == 0 { bytes.append(0) }
        if bit { bytes[bitCount / 8] |= 1 << UInt8(bitCount % 8) }
        bitCount += 1
    }
}
