import Foundation
import FoundationNetworkingShims

/// An incremental hash of one ``FileDigest/Algorithm``: the system's implementation when the
/// process has one loaded, else FetchKit's own in Swift (``PortableSHA256`` and the
/// ``PortableDigest`` ones).
///
/// The system's (``SystemDigest``) links nothing new: on Linux it is libcrypto's
/// `SHA256_Init`/`_Update`/`_Final` (and `SHA512_`, `SHA1_`, `MD5_`), looked up at run time in the shims (libcurl, under
/// FoundationNetworking, has already loaded libcrypto into the process; it is used only if it
/// is loaded); on Apple platforms CommonCrypto's `CC_SHA256_*` and the rest (part of libSystem). libcrypto uses the CPU's SHA
/// instructions where there are any. Measured on two shared cores (KVM, x86-64 with SHA-NI):
/// libcrypto 1.8 GB/s (`openssl speed -evp sha256 -bytes 1048576`), the Swift one about
/// 0.2 GB/s of CPU time (`swiftc -O -wmo`, 1 MiB pieces) — below what a download writes to disk,
/// so that with it a download to disk is bound by the hash; with libcrypto it is not
/// (`fetchkit-bench throughput --only 256m-disk --digest`, the Benchmarks article).
///
/// ``ComparisonSwitches/usesSystemDigests`` off forces the Swift ones (the benchmark and the tests).
///
/// Not thread-safe: one owner at a time — a download's file writer, on its queue — and handed
/// from one to the next only after the first is drained (``DigestCarrier``).
final class DigestHasher: @unchecked Sendable {
    let algorithm: FileDigest.Algorithm
    private let backend: Backend
    /// Bytes hashed so far.
    private(set) var length: Int64 = 0
    /// Bytes read back from the file to hash them (``catchUp(to:descriptor:)``), over the
    /// hasher's life.
    private(set) var bytesReadBack: Int64 = 0
    /// The state at ``checkpointLength``: the start of the last batch written.
    private let checkpoint: Backend
    private var checkpointLength: Int64 = 0

    private enum Backend {
        case system(SystemDigest, context: UnsafeMutableRawPointer)
        case portable(any PortableDigest)
    }

    /// Which implementation hashes (diagnostics, tests and benchmarks).
    enum Implementation: String, Sendable {
        case system
        case portable
    }

    init(_ algorithm: FileDigest.Algorithm) {
        self.algorithm = algorithm
        if ComparisonSwitches.usesSystemDigests, let system = SystemDigest.loaded(algorithm.systemFunction) {
            let context = UnsafeMutableRawPointer.allocate(byteCount: SystemDigest.contextSize, alignment: 16)
            context.initializeMemory(as: UInt8.self, repeating: 0, count: SystemDigest.contextSize)
            _ = system.initialize(context)
            backend = .system(system, context: context)
            let saved = UnsafeMutableRawPointer.allocate(byteCount: SystemDigest.contextSize, alignment: 16)
            saved.copyMemory(from: context, byteCount: SystemDigest.contextSize)
            checkpoint = .system(system, context: saved)
        } else {
            backend = .portable(algorithm.makePortable())
            checkpoint = .portable(algorithm.makePortable())
        }
    }

    deinit {
        if case .system(_, let context) = backend { context.deallocate() }
        if case .system(_, let context) = checkpoint { context.deallocate() }
    }

    /// Remembers the state now, to come back to it (``catchUp(to:descriptor:)``) if the file is
    /// cut short after this point: the writer marks one before each batch. A copy of a few
    /// hundred bytes (both contexts are plain data: `SHA256_CTX`, `CC_SHA256_CTX`).
    func markCheckpoint() {
        Self.copy(backend, to: checkpoint)
        checkpointLength = length
    }

    private static func copy(_ from: Backend, to: Backend) {
        switch (from, to) {
        case (.system(_, let source), .system(_, let target)):
            target.copyMemory(from: source, byteCount: SystemDigest.contextSize)
        case (.portable(let source), .portable(let target)):
            target.assign(from: source)
        default:
            preconditionFailure("a hasher's checkpoint is of its own kind")
        }
    }

    /// Brings the hasher to exactly the first `offset` bytes of the file `descriptor`, where a
    /// transfer resumes: nothing to do if it hashed those already; from the checkpoint, reading
    /// what lies between, if the file was cut back after it (a continuation that asks for the
    /// last byte again); else from the start, reading the file once.
    ///
    /// A read that fails leaves the hasher short of the file (the final check notices, and
    /// hashes the file whole).
    func catchUp(to offset: Int64, descriptor: Int32) {
        guard length != offset else { return }
        if checkpointLength <= offset, offset < length {
            Self.copy(checkpoint, to: backend)
            length = checkpointLength
        } else {
            reset()
        }
        let start = length
        _ = update(descriptor: descriptor, from: start, length: offset - start)
        bytesReadBack += length - start
    }

    /// Starts over, as if nothing had been hashed.
    func reset() {
        length = 0
        switch backend {
        case .system(let system, let context):
            context.initializeMemory(as: UInt8.self, repeating: 0, count: SystemDigest.contextSize)
            _ = system.initialize(context)
        case .portable(let portable):
            portable.reset()
        }
        markCheckpoint()
    }

    /// Hashes the first `length` bytes of the open file `descriptor` (read with `pread`, so its
    /// position is left as it is), after what was hashed already.
    ///
    /// - Returns: the `errno` of a failed read, or `EIO` if the file ends before `length`.
    func update(descriptor: Int32, from start: Int64 = 0, length: Int64) -> Int32? {
        let size = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        var offset = start
        let end = start + length
        while offset < end {
            let read = pread(descriptor, buffer, min(size, Int(end - offset)), off_t(offset))
            if read < 0 {
                if errno == EINTR { continue }
                return errno
            }
            if read == 0 { return EIO }
            update(UnsafeRawBufferPointer(start: buffer, count: read))
            offset += Int64(read)
        }
        return nil
    }

    var implementation: Implementation {
        switch backend {
        case .system: return .system
        case .portable: return .portable
        }
    }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        length += Int64(bytes.count)
        switch backend {
        case .system(let system, let context):
            system.update(context, base, bytes.count)
        case .portable(let portable):
            portable.update(bytes)
        }
    }

    func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// The digest of everything given so far. The hasher is spent afterwards.
    func finish() -> FileDigest {
        switch backend {
        case .system(let system, let context):
            var out = [UInt8](repeating: 0, count: algorithm.byteCount)
            out.withUnsafeMutableBytes { _ = system.finish($0.baseAddress.unsafelyUnwrapped, context) }
            return FileDigest(uncheckedAlgorithm: algorithm, bytes: out)
        case .portable(let portable):
            return FileDigest(uncheckedAlgorithm: algorithm, bytes: portable.finish())
        }
    }
}

/// Hands a download's hasher from one transfer to the next, so that a continuation or a retry
/// that resumes the partial file goes on from the hash of what is on disk instead of reading it
/// again.
///
/// A transfer's sink takes the hasher when it opens the file, and gives it back only once its
/// writer has drained (nothing more is hashed on its queue): after a complete body, after a
/// resumable stop, after the stopped task's last bytes. A sink whose writer is abandoned keeps
/// it, and the next transfer starts a new one. Whoever takes a hasher checks its ``DigestHasher/length``
/// against the file and hashes the file over if they differ (a last byte cut off, a file
/// started over).
final class DigestCarrier: Sendable {
    /// What the file must hash to.
    let expected: FileDigest
    private let hasher = Protected<DigestHasher?>(nil)

    init(expected: FileDigest) {
        self.expected = expected
    }

    /// The hasher given back last, if any; a new one otherwise.
    func take() -> DigestHasher {
        hasher.withLock { held in
            defer { held = nil }
            return held ?? DigestHasher(expected.algorithm)
        }
    }

    private let readBack = Protected<Int64>(0)

    /// What the download's hasher read back from disk, as of the final check.
    var bytesReadBack: Int64 { readBack.withLock { $0 } }

    func noteReadBack(_ bytes: Int64) {
        readBack.withLock { $0 = bytes }
    }

    /// Gives `hasher` back: no one hashes with it any more.
    func giveBack(_ given: DigestHasher) {
        hasher.withLock { $0 = given }
    }
}
