/// SHA-256 (FIPS 180-4) in Swift: the fallback when the system's implementation cannot be
/// found (see ``DigestHasher``).
///
/// One allocation per hasher, none per block: the message schedule and the partial block live
/// in buffers allocated once. Whole blocks are read straight from the caller's bytes.
final class PortableSHA256 {
    private static let initial: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19)
    private var h = PortableSHA256.initial
    /// The bytes of a block not yet complete.
    private let pending = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 8)
    private var pendingCount = 0
    /// The message schedule.
    private let schedule = UnsafeMutablePointer<UInt32>.allocate(capacity: 64)
    /// Message bytes so far.
    private var length: UInt64 = 0

    init() {}

    deinit {
        pending.deallocate()
        schedule.deallocate()
    }

    /// Takes on `other`'s state: the same bytes hashed so far.
    func assign(from other: PortableSHA256) {
        h = other.h
        pendingCount = other.pendingCount
        length = other.length
        pending.copyMemory(from: other.pending, byteCount: 64)
    }

    /// Starts over.
    func reset() {
        h = Self.initial
        pendingCount = 0
        length = 0
    }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress, bytes.count > 0 else { return }
        var count = bytes.count
        length &+= UInt64(count)
        if pendingCount > 0 {
            let take = min(64 - pendingCount, count)
            (pending + pendingCount).copyMemory(from: base, byteCount: take)
            pendingCount += take
            base += take
            count -= take
            guard pendingCount == 64 else { return }
            compress(UnsafeRawPointer(pending), blocks: 1)
            pendingCount = 0
        }
        let blocks = count / 64
        if blocks > 0 {
            compress(base, blocks: blocks)
            base += blocks * 64
            count -= blocks * 64
        }
        if count > 0 {
            pending.copyMemory(from: base, byteCount: count)
            pendingCount = count
        }
    }

    /// The digest of everything given so far; the hasher is spent afterwards.
    func finish() -> [UInt8] {
        let bits = length &* 8
        var padding = [UInt8](repeating: 0, count: pendingCount < 56 ? 64 - pendingCount : 128 - pendingCount)
        padding[0] = 0x80
        for index in 0..<8 {
            padding[padding.count - 1 - index] = UInt8(truncatingIfNeeded: bits >> (8 * UInt64(index)))
        }
        let saved = length
        padding.withUnsafeBytes { update($0) }
        length = saved
        precondition(pendingCount == 0)
        var out = [UInt8]()
        out.reserveCapacity(32)
        for word in [h.0, h.1, h.2, h.3, h.4, h.5, h.6, h.7] {
            out.append(UInt8(truncatingIfNeeded: word >> 24))
            out.append(UInt8(truncatingIfNeeded: word >> 16))
            out.append(UInt8(truncatingIfNeeded: word >> 8))
            out.append(UInt8(truncatingIfNeeded: word))
        }
        return out
    }

    @inline(__always)
    private static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 {
        (x &>> n) | (x &<< (32 &- n))
    }

    private func compress(_ data: UnsafeRawPointer, blocks: Int) {
        let w = schedule
        var (h0, h1, h2, h3, h4, h5, h6, h7) = h
        Self.k.withUnsafeBufferPointer { k in
            let k = k.baseAddress.unsafelyUnwrapped
            for block in 0..<blocks {
                let start = data + block * 64
                for t in 0..<16 {
                    w[t] = UInt32(bigEndian: start.loadUnaligned(fromByteOffset: t * 4, as: UInt32.self))
                }
                for t in 16..<64 {
                    let x = w[t - 15], y = w[t - 2]
                    let s0 = Self.rotr(x, 7) ^ Self.rotr(x, 18) ^ (x &>> 3)
                    let s1 = Self.rotr(y, 17) ^ Self.rotr(y, 19) ^ (y &>> 10)
                    w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
                }
                var (a, b, c, d, e, f, g, hh) = (h0, h1, h2, h3, h4, h5, h6, h7)
                for t in 0..<64 {
                    let s1 = Self.rotr(e, 6) ^ Self.rotr(e, 11) ^ Self.rotr(e, 25)
                    let choice = (e & f) ^ (~e & g)
                    let t1 = hh &+ s1 &+ choice &+ k[t] &+ w[t]
                    let s0 = Self.rotr(a, 2) ^ Self.rotr(a, 13) ^ Self.rotr(a, 22)
                    let majority = (a & b) ^ (a & c) ^ (b & c)
                    let t2 = s0 &+ majority
                    hh = g; g = f; f = e; e = d &+ t1
                    d = c; c = b; b = a; a = t1 &+ t2
                }
                h0 &+= a; h1 &+= b; h2 &+= c; h3 &+= d
                h4 &+= e; h5 &+= f; h6 &+= g; h7 &+= hh
            }
        }
        h = (h0, h1, h2, h3, h4, h5, h6, h7)
    }

    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]
}
