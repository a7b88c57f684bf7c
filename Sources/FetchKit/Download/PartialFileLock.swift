import Foundation

/// An advisory lock that one process at a time holds on a download's partial file, so that two
/// processes downloading into one directory never write the same partial file.
///
/// It is `flock(2)` on a small file beside the partial file, `.<name>.fetchkit-partial.lock`,
/// which holds the holder's process ID for a message ("being downloaded by another process
/// (pid N)"). The kernel drops the lock when the holder exits, even killed; a lock file left
/// behind then is taken over by the next download. The holder removes the file when it is done,
/// while still holding the lock; a process that locked the removed file sees that its path no
/// longer names it, and tries again.
///
/// A download takes it only once it has a partial file (``DownloadOperation``): a body that
/// arrives in one piece is written to a name of its own and needs none.
///
/// The lock is advisory: it keeps FetchKit processes apart, not other programs.
final class PartialFileLock: @unchecked Sendable {
    /// Why the lock could not be taken.
    enum Failure: Error, Equatable {
        /// Another process holds it; its ID, if it wrote one.
        case held(by: pid_t?)
        /// The lock file cannot be made or used (a link planted at its path, a read-only
        /// directory…): `errno`, or `nil` for a file that is not a private regular file.
        case unusable(Int32?)
    }

    let url: URL
    /// Only ``release()`` changes it, once.
    private let descriptor = Protected<Int32>(-1)

    private init(url: URL, descriptor fd: Int32) {
        self.url = url
        descriptor.withLock { $0 = fd }
    }

    /// Takes the lock at `url` without waiting.
    static func acquire(at url: URL) -> Result<PartialFileLock, Failure> {
        // A holder may remove the file between our open and our lock: a few tries settle it.
        for _ in 0..<8 {
            let fd = LocalFile.open(url, O_RDWR | O_CREAT, mode: 0o600)
            guard fd >= 0 else { return .failure(.unusable(errno)) }
            guard LocalFile.status(descriptor: fd)?.isPrivateRegularFile == true else {
                _ = close(fd)
                return .failure(.unusable(nil))
            }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                let code = errno
                let holder = code == EWOULDBLOCK ? readProcessID(fd) : nil
                _ = close(fd)
                return .failure(code == EWOULDBLOCK ? .held(by: holder) : .unusable(code))
            }
            // Locked — but is it still the file at the path? A holder that finished removed it.
            guard sameFile(fd, url) else {
                _ = close(fd)
                continue
            }
            let text = Array("\(getpid())\n".utf8)
            _ = ftruncate(fd, 0)
            _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
            return .success(PartialFileLock(url: url, descriptor: fd))
        }
        return .failure(.unusable(EAGAIN))
    }

    /// Removes the lock file and lets the lock go. Safe to call more than once.
    func release() {
        let fd = descriptor.withLock { fd in
            defer { fd = -1 }
            return fd
        }
        guard fd >= 0 else { return }
        // Removed while locked: nobody can lock this file and believe it still guards the path.
        if sameFile(fd, url) { LocalFile.remove(url) }
        _ = close(fd)
    }

    deinit {
        release()
    }

    /// Whether `url` still names the open file `fd` (same device and inode).
    private static func sameFile(_ fd: Int32, _ url: URL) -> Bool {
        var open = stat(), named = stat()
        guard fstat(fd, &open) == 0 else { return false }
        let found = url.withUnsafeFileSystemRepresentation { path in path.map { lstat($0, &named) == 0 } ?? false }
        return found && open.st_dev == named.st_dev && open.st_ino == named.st_ino
    }

    private func sameFile(_ fd: Int32, _ url: URL) -> Bool {
        Self.sameFile(fd, url)
    }

    /// The process ID written in the lock file, if it holds one.
    private static func readProcessID(_ fd: Int32) -> pid_t? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return pid_t(text).flatMap { $0 > 0 ? $0 : nil }
    }
}
