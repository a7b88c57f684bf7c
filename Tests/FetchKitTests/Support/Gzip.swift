import CZlib
import Foundation

/// Real gzip streams for the tests, made with zlib.
enum Gzip {
    /// `data` compressed as one gzip member.
    static func compress(_ data: Data, level: Int32 = Z_BEST_COMPRESSION) -> Data {
        data.withUnsafeBytes { input in
            compress(chunks: 1, level: level) { _ in input }
        }
    }

    /// A gzip member of `count` zero bytes, compressed as far as zlib goes (about 1,000:1):
    /// 1 GiB of zeros is about 1 MiB of gzip.
    static func zeros(count: Int) -> Data {
        let block = [UInt8](repeating: 0, count: 1 << 20)
        let full = count / block.count
        let rest = count % block.count
        return block.withUnsafeBytes { buffer in
            compress(chunks: full + (rest > 0 ? 1 : 0), level: Z_BEST_COMPRESSION) { index in
                index < full ? buffer : UnsafeRawBufferPointer(rebasing: buffer[..<rest])
            }
        }
    }

    /// Deflates `chunks` inputs, in order, into one gzip member.
    private static func compress(chunks: Int, level: Int32, chunk: (Int) -> UnsafeRawBufferPointer) -> Data {
        var stream = z_stream()
        // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
        let status = deflateInit2_(&stream, level, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        precondition(status == Z_OK, "deflateInit2 failed: \(status)")
        defer { deflateEnd(&stream) }
        var output = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        for index in 0..<max(chunks, 1) {
            let input = chunks == 0 ? UnsafeRawBufferPointer(start: nil, count: 0) : chunk(index)
            let last = index >= chunks - 1
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
            stream.avail_in = uInt(input.count)
            repeat {
                let produced: Int = buffer.withUnsafeMutableBytes { out in
                    stream.next_out = out.baseAddress?.assumingMemoryBound(to: Bytef.self)
                    stream.avail_out = uInt(out.count)
                    let result = deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH)
                    precondition(result != Z_STREAM_ERROR, "deflate failed")
                    return out.count - Int(stream.avail_out)
                }
                output.append(contentsOf: buffer[..<produced])
            } while stream.avail_out == 0 || (last && stream.avail_in > 0)
        }
        return output
    }

    /// `data` decompressed (a gzip member), or `nil` if it is not a complete one.
    static func decompress(_ data: Data) -> Data? {
        var stream = z_stream()
        guard inflateInit2_(&stream, 15 + 16, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else { return nil }
        defer { inflateEnd(&stream) }
        var output = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var result: Int32 = Z_OK
        data.withUnsafeBytes { input in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
            stream.avail_in = uInt(input.count)
            repeat {
                let produced: Int = buffer.withUnsafeMutableBytes { out in
                    stream.next_out = out.baseAddress?.assumingMemoryBound(to: Bytef.self)
                    stream.avail_out = uInt(out.count)
                    result = inflate(&stream, Z_NO_FLUSH)
                    return out.count - Int(stream.avail_out)
                }
                output.append(contentsOf: buffer[..<produced])
            } while result == Z_OK && (stream.avail_in > 0 || stream.avail_out == 0)
        }
        return result == Z_STREAM_END ? output : nil
    }
}
