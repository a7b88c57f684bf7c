/// FetchKit's own SHA-512, SHA-1 and MD5 in Swift: the fallbacks, as ``PortableSHA256`` is
/// SHA-256's, when the system's implementation cannot be found (see ``DigestHasher``).
///
/// Each shares ``PortableBlockDigest``'s buffering: one allocation per hasher for the partial
/// block and the schedule, none per block; whole blocks are read straight from the caller's bytes.

/// What ``DigestHasher`` needs of a Swift implementation.
protocol PortableDigest: AnyObject {
    func update(_ bytes: UnsafeRawBufferPointer)
    /// The digest of everything given so far; the hasher is spent afterwards.
    func finish() -> [UInt8]
    /// Starts over.
    func reset()
    /// Takes on `other`'s state (of the same algorithm): the same bytes hashed so far.
    func assign(from other: any PortableDigest)
}

extension PortableSHA256: PortableDigest {
    func assign(from other: any PortableDigest) {
        guard let other = other as? PortableSHA256 else { preconditionFailure("a hasher's checkpoint is of its own kind") }
        assign(from: other)
    }
}

/// The Merkle–Damgård frame the three share: the pending partial block, the message length, and
/// the padding (a `0x80`, zeros, the length in bits in `lengthBytes` bytes, big- or little-endian).
class PortableBlockDigest: PortableDigest {
    final let blockSize: Int
    private let lengthBytes: Int
    private let bigEndian: Bool
    private let pending: UnsafeMutableRawPointer
    private var pendingCount = 0
    /// Message bytes so far.
    private var length: UInt64 = 0

    init(blockSize: Int, lengthBytes: Int, bigEndian: Bool) {
        self.blockSize = blockSize
        self.lengthBytes = lengthBytes
        self.bigEndian = bigEndian
        pending = UnsafeMutableRawPointer.allocate(byteCount: blockSize, alignment: 8)
    }

    deinit {
        pending.deallocate()
    }

    /// Hashes `blocks` whole blocks at `data` into the state.
    func compress(_ data: UnsafeRawPointer, blocks: Int) {
        preconditionFailure("a block digest compresses")
    }

    /// The state as the digest's bytes.
    func output() -> [UInt8] {
        preconditionFailure("a block digest has an output")
    }

    /// Sets the state to the algorithm's initial values.
    func resetState() {
        preconditionFailure("a block digest has an initial state")
    }

    /// Copies the state of `other`, of the same class.
    func copyState(from other: PortableBlockDigest) {
        preconditionFailure("a block digest copies its state")
    }

    final func reset() {
        resetState()
        pendingCount = 0
        length = 0
    }

    final func assign(from other: any PortableDigest) {
        guard let other = other as? PortableBlockDigest else { preconditionFailure("a hasher's checkpoint is of its own kind") }
        copyState(from: other)
        pendingCount = other.pendingCount
        length = other.length
        pending.copyMemory(from: other.pending, byteCount: blockSize)
    }

    final func update(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress, bytes.count > 0 else { return }
        var count = bytes.count
        length &+= UInt64(count)
        if pendingCount > 0 {
            let take = min(blockSize - pendingCount, count)
            (pending + pendingCount).copyMemory(from: base, byteCount: take)
            pendingCount += take
            base += take
            count -= take
            guard pendingCount == blockSize else { return }
            compress(UnsafeRawPointer(pending), blocks: 1)
            pendingCount = 0
        }
        let blocks = count / blockSize
        if blocks > 0 {
            compress(base, blocks: blocks)
            base += blocks * blockSize
            count -= blocks * blockSize
        }
        if count > 0 {
            pending.copyMemory(from: base, byteCount: count)
            pendingCount = count
        }
    }

    final func finish() -> [UInt8] {
        let room = blockSize - lengthBytes
        var padding = [UInt8](repeating: 0, count: pendingCount < room ? blockSize - pendingCount : 2 * blockSize - pendingCount)
        padding[0] = 0x80
        // The length in bits: 64 bits of it (a message under 2 EiB), the higher bytes zero.
        let bits = length &* 8
        for index in 0..<8 {
            let byte = UInt8(truncatingIfNeeded: bits >> (8 * UInt64(index)))
            padding[bigEndian ? padding.count - 1 - index : padding.count - lengthBytes + index] = byte
        }
        let saved = length
        padding.withUnsafeBytes { update($0) }
        length = saved
        precondition(pendingCount == 0)
        return output()
    }
}

/// SHA-512 (FIPS 180-4).
final class PortableSHA512: PortableBlockDigest {
    private var h: [UInt64] = PortableSHA512.initial
    private let schedule = UnsafeMutablePointer<UInt64>.allocate(capacity: 80)

    init() {
        super.init(blockSize: 128, lengthBytes: 16, bigEndian: true)
    }

    deinit {
        schedule.deallocate()
    }

    override func resetState() { h = Self.initial }

    override func copyState(from other: PortableBlockDigest) {
        guard let other = other as? PortableSHA512 else { preconditionFailure("a hasher's checkpoint is of its own kind") }
        h = other.h
    }

    override func output() -> [UInt8] {
        h.flatMap { word in (0..<8).map { UInt8(truncatingIfNeeded: word >> (56 - 8 * UInt64($0))) } }
    }

    @inline(__always)
    private static func rotr(_ x: UInt64, _ n: UInt64) -> UInt64 {
        (x &>> n) | (x &<< (64 &- n))
    }

    override func compress(_ data: UnsafeRawPointer, blocks: Int) {
        let w = schedule
        var (h0, h1, h2, h3, h4, h5, h6, h7) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
        Self.k.withUnsafeBufferPointer { k in
            let k = k.baseAddress.unsafelyUnwrapped
            for block in 0..<blocks {
                let start = data + block * 128
                for t in 0..<16 {
                    w[t] = UInt64(bigEndian: start.loadUnaligned(fromByteOffset: t * 8, as: UInt64.self))
                }
                for t in 16..<80 {
                    let x = w[t - 15], y = w[t - 2]
                    let s0 = Self.rotr(x, 1) ^ Self.rotr(x, 8) ^ (x &>> 7)
                    let s1 = Self.rotr(y, 19) ^ Self.rotr(y, 61) ^ (y &>> 6)
                    w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
                }
                var (a, b, c, d, e, f, g, hh) = (h0, h1, h2, h3, h4, h5, h6, h7)
                for t in 0..<80 {
                    let s1 = Self.rotr(e, 14) ^ Self.rotr(e, 18) ^ Self.rotr(e, 41)
                    let choice = (e & f) ^ (~e & g)
                    let t1 = hh &+ s1 &+ choice &+ k[t] &+ w[t]
                    let s0 = Self.rotr(a, 28) ^ Self.rotr(a, 34) ^ Self.rotr(a, 39)
                    let majority = (a & b) ^ (a & c) ^ (b & c)
                    let t2 = s0 &+ majority
                    hh = g; g = f; f = e; e = d &+ t1
                    d = c; c = b; b = a; a = t1 &+ t2
                }
                h0 &+= a; h1 &+= b; h2 &+= c; h3 &+= d
                h4 &+= e; h5 &+= f; h6 &+= g; h7 &+= hh
            }
        }
        h = [h0, h1, h2, h3, h4, h5, h6, h7]
    }

    private static let initial: [UInt64] = [
        0x6a09_e667_f3bc_c908, 0xbb67_ae85_84ca_a73b, 0x3c6e_f372_fe94_f82b, 0xa54f_f53a_5f1d_36f1,
        0x510e_527f_ade6_82d1, 0x9b05_688c_2b3e_6c1f, 0x1f83_d9ab_fb41_bd6b, 0x5be0_cd19_137e_2179,
    ]

    private static let k: [UInt64] = [
        0x428a_2f98_d728_ae22, 0x7137_4491_23ef_65cd, 0xb5c0_fbcf_ec4d_3b2f, 0xe9b5_dba5_8189_dbbc,
        0x3956_c25b_f348_b538, 0x59f1_11f1_b605_d019, 0x923f_82a4_af19_4f9b, 0xab1c_5ed5_da6d_8118,
        0xd807_aa98_a303_0242, 0x1283_5b01_4570_6fbe, 0x2431_85be_4ee4_b28c, 0x550c_7dc3_d5ff_b4e2,
        0x72be_5d74_f27b_896f, 0x80de_b1fe_3b16_96b1, 0x9bdc_06a7_25c7_1235, 0xc19b_f174_cf69_2694,
        0xe49b_69c1_9ef1_4ad2, 0xefbe_4786_384f_25e3, 0x0fc1_9dc6_8b8c_d5b5, 0x240c_a1cc_77ac_9c65,
        0x2de9_2c6f_592b_0275, 0x4a74_84aa_6ea6_e483, 0x5cb0_a9dc_bd41_fbd4, 0x76f9_88da_8311_53b5,
        0x983e_5152_ee66_dfab, 0xa831_c66d_2db4_3210, 0xb003_27c8_98fb_213f, 0xbf59_7fc7_beef_0ee4,
        0xc6e0_0bf3_3da8_8fc2, 0xd5a7_9147_930a_a725, 0x06ca_6351_e003_826f, 0x1429_2967_0a0e_6e70,
        0x27b7_0a85_46d2_2ffc, 0x2e1b_2138_5c26_c926, 0x4d2c_6dfc_5ac4_2aed, 0x5338_0d13_9d95_b3df,
        0x650a_7354_8baf_63de, 0x766a_0abb_3c77_b2a8, 0x81c2_c92e_47ed_aee6, 0x9272_2c85_1482_353b,
        0xa2bf_e8a1_4cf1_0364, 0xa81a_664b_bc42_3001, 0xc24b_8b70_d0f8_9791, 0xc76c_51a3_0654_be30,
        0xd192_e819_d6ef_5218, 0xd699_0624_5565_a910, 0xf40e_3585_5771_202a, 0x106a_a070_32bb_d1b8,
        0x19a4_c116_b8d2_d0c8, 0x1e37_6c08_5141_ab53, 0x2748_774c_df8e_eb99, 0x34b0_bcb5_e19b_48a8,
        0x391c_0cb3_c5c9_5a63, 0x4ed8_aa4a_e341_8acb, 0x5b9c_ca4f_7763_e373, 0x682e_6ff3_d6b2_b8a3,
        0x748f_82ee_5def_b2fc, 0x78a5_636f_4317_2f60, 0x84c8_7814_a1f0_ab72, 0x8cc7_0208_1a64_39ec,
        0x90be_fffa_2363_1e28, 0xa450_6ceb_de82_bde9, 0xbef9_a3f7_b2c6_7915, 0xc671_78f2_e372_532b,
        0xca27_3ece_ea26_619c, 0xd186_b8c7_21c0_c207, 0xeada_7dd6_cde0_eb1e, 0xf57d_4f7f_ee6e_d178,
        0x06f0_67aa_7217_6fba, 0x0a63_7dc5_a2c8_98a6, 0x113f_9804_bef9_0dae, 0x1b71_0b35_131c_471b,
        0x28db_77f5_2304_7d84, 0x32ca_ab7b_40c7_2493, 0x3c9e_be0a_15c9_bebc, 0x431d_67c4_9c10_0d4c,
        0x4cc5_d4be_cb3e_42b6, 0x597f_299c_fc65_7e2a, 0x5fcb_6fab_3ad6_faec, 0x6c44_198c_4a47_5817,
    ]
}

/// SHA-1 (FIPS 180-4). Broken for collisions: FetchKit offers it only to check a file against a
/// published checksum (an integrity check, not a security one).
final class PortableSHA1: PortableBlockDigest {
    private var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = PortableSHA1.initial
    private let schedule = UnsafeMutablePointer<UInt32>.allocate(capacity: 80)

    init() {
        super.init(blockSize: 64, lengthBytes: 8, bigEndian: true)
    }

    deinit {
        schedule.deallocate()
    }

    private static let initial: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476, 0xc3d2_e1f0)

    override func resetState() { h = Self.initial }

    override func copyState(from other: PortableBlockDigest) {
        guard let other = other as? PortableSHA1 else { preconditionFailure("a hasher's checkpoint is of its own kind") }
        h = other.h
    }

    override func output() -> [UInt8] {
        [h.0, h.1, h.2, h.3, h.4].flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> (24 - 8 * UInt32($0))) } }
    }

    @inline(__always)
    private static func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 {
        (x &<< n) | (x &>> (32 &- n))
    }

    override func compress(_ data: UnsafeRawPointer, blocks: Int) {
        let w = schedule
        var (h0, h1, h2, h3, h4) = h
        for block in 0..<blocks {
            let start = data + block * 64
            for t in 0..<16 {
                w[t] = UInt32(bigEndian: start.loadUnaligned(fromByteOffset: t * 4, as: UInt32.self))
            }
            for t in 16..<80 {
                w[t] = Self.rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1)
            }
            var (a, b, c, d, e) = (h0, h1, h2, h3, h4)
            for t in 0..<80 {
                let f: UInt32, k: UInt32
                switch t {
                case 0..<20: f = (b & c) | (~b & d); k = 0x5a82_7999
                case 20..<40: f = b ^ c ^ d; k = 0x6ed9_eba1
                case 40..<60: f = (b & c) | (b & d) | (c & d); k = 0x8f1b_bcdc
                default: f = b ^ c ^ d; k = 0xca62_c1d6
                }
                let temp = Self.rotl(a, 5) &+ f &+ e &+ k &+ w[t]
                e = d; d = c; c = Self.rotl(b, 30); b = a; a = temp
            }
            h0 &+= a; h1 &+= b; h2 &+= c; h3 &+= d; h4 &+= e
        }
        h = (h0, h1, h2, h3, h4)
    }
}

/// MD5 (RFC 1321). Broken for collisions: FetchKit offers it only to check a file against a
/// published checksum (an integrity check, not a security one).
final class PortableMD5: PortableBlockDigest {
    private var h: (UInt32, UInt32, UInt32, UInt32) = PortableMD5.initial

    init() {
        super.init(blockSize: 64, lengthBytes: 8, bigEndian: false)
    }

    private static let initial: (UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476)

    override func resetState() { h = Self.initial }

    override func copyState(from other: PortableBlockDigest) {
        guard let other = other as? PortableMD5 else { preconditionFailure("a hasher's checkpoint is of its own kind") }
        h = other.h
    }

    override func output() -> [UInt8] {
        [h.0, h.1, h.2, h.3].flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> (8 * UInt32($0))) } }
    }

    @inline(__always)
    private static func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 {
        (x &<< n) | (x &>> (32 &- n))
    }

    override func compress(_ data: UnsafeRawPointer, blocks: Int) {
        var (h0, h1, h2, h3) = h
        Self.t.withUnsafeBufferPointer { t in
            let t = t.baseAddress.unsafelyUnwrapped
            for block in 0..<blocks {
                let start = data + block * 64
                @inline(__always) func word(_ index: Int) -> UInt32 {
                    UInt32(littleEndian: start.loadUnaligned(fromByteOffset: index * 4, as: UInt32.self))
                }
                var (a, b, c, d) = (h0, h1, h2, h3)
                for i in 0..<64 {
                    let f: UInt32, g: Int
                    switch i {
                    case 0..<16: f = (b & c) | (~b & d); g = i
                    case 16..<32: f = (d & b) | (~d & c); g = (5 * i + 1) & 15
                    case 32..<48: f = b ^ c ^ d; g = (3 * i + 5) & 15
                    default: f = c ^ (b | ~d); g = (7 * i) & 15
                    }
                    let sum = a &+ f &+ t[i] &+ word(g)
                    a = d; d = c; c = b
                    b = b &+ Self.rotl(sum, Self.shifts[i])
                }
                h0 &+= a; h1 &+= b; h2 &+= c; h3 &+= d
            }
        }
        h = (h0, h1, h2, h3)
    }

    private static let shifts: [UInt32] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
        5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
        4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
        6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ]

    private static let t: [UInt32] = [
        0xd76a_a478, 0xe8c7_b756, 0x2420_70db, 0xc1bd_ceee, 0xf57c_0faf, 0x4787_c62a, 0xa830_4613, 0xfd46_9501,
        0x6980_98d8, 0x8b44_f7af, 0xffff_5bb1, 0x895c_d7be, 0x6b90_1122, 0xfd98_7193, 0xa679_438e, 0x49b4_0821,
        0xf61e_2562, 0xc040_b340, 0x265e_5a51, 0xe9b6_c7aa, 0xd62f_105d, 0x0244_1453, 0xd8a1_e681, 0xe7d3_fbc8,
        0x21e1_cde6, 0xc337_07d6, 0xf4d5_0d87, 0x455a_14ed, 0xa9e3_e905, 0xfcef_a3f8, 0x676f_02d9, 0x8d2a_4c8a,
        0xfffa_3942, 0x8771_f681, 0x6d9d_6122, 0xfde5_380c, 0xa4be_ea44, 0x4bde_cfa9, 0xf6bb_4b60, 0xbebf_bc70,
        0x289b_7ec6, 0xeaa1_27fa, 0xd4ef_3085, 0x0488_1d05, 0xd9d4_d039, 0xe6db_99e5, 0x1fa2_7cf8, 0xc4ac_5665,
        0xf429_2244, 0x432a_ff97, 0xab94_23a7, 0xfc93_a039, 0x655b_59c3, 0x8f0c_cc92, 0xffef_f47d, 0x8584_5dd1,
        0x6fa8_7e4f, 0xfe2c_e6e0, 0xa301_4314, 0x4e08_11a1, 0xf753_7e82, 0xbd3a_f235, 0x2ad7_d2bb, 0xeb86_d391,
    ]
}
