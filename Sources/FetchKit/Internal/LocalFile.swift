import Foundation

/// The few file operations a download needs, done so that a link is never followed: a
/// symbolic link is refused by `O_NOFOLLOW` (or seen by `lstat`), a hard link by its link count,
/// and new files are created exclusively (`O_CREAT | O_EXCL`), the way git makes its `.lock`
/// files.
enum LocalFile {
    /// What `lstat(2)` says about a path (the link itself, never its target).
    struct Status {
        let mode: mode_t
        let links: Int
        let size: Int64
        let owner: uid_t

        var isRegular: Bool { mode & S_IFMT == S_IFREG }
        var isDirectory: Bool { mode & S_IFMT == S_IFDIR }

        /// A regular file with no other name, owned by this process's user: one that only
        /// FetchKit (or its user) can have made, and that writing cannot reach beyond.
        var isPrivateRegularFile: Bool { isRegular && links == 1 && owner == geteuid() }

        init(_ info: stat) {
            mode = info.st_mode
            links = Int(info.st_nlink)
            size = Int64(info.st_size)
            owner = info.st_uid
        }
    }

    /// The path's status, without following a final link; `nil` if nothing is there.
    static func status(_ url: URL) -> Status? {
        var info = stat()
        let found = url.withUnsafeFileSystemRepresentation { path in path.map { lstat($0, &info) == 0 } ?? false }
        return found ? Status(info) : nil
    }

    /// The status of an open file.
    static func status(descriptor: Int32) -> Status? {
        var info = stat()
        return fstat(descriptor, &info) == 0 ? Status(info) : nil
    }

    /// Opens `url` with `flags | O_NOFOLLOW | O_CLOEXEC`.
    ///
    /// - Returns: The descriptor, or -1 with `errno` set (`ELOOP` for a symbolic link on Linux,
    ///   `EMLINK` on some BSDs).
    static func open(_ url: URL, _ flags: Int32, mode: mode_t = 0o644) -> Int32 {
        url.withUnsafeFileSystemRepresentation { path in
            // O_NONBLOCK: a FIFO planted at the path must not block the open (the router queue
            // would wait for ever); the status check then refuses it. Regular files ignore it.
            path.map { posixOpen($0, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode) } ?? -1
        }
    }

    /// Removes whatever is at `url` (a link itself, never its target); a directory stays.
    static func remove(_ url: URL) {
        _ = url.withUnsafeFileSystemRepresentation { $0.map { unlink($0) } }
    }

    /// The contents of a private regular file (see ``Status/isPrivateRegularFile``) of at most
    /// `limit` bytes; `nil` for anything else.
    static func read(_ url: URL, limit: Int) -> Data? {
        let fd = open(url, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { _ = close(fd) }
        guard let status = status(descriptor: fd), status.isPrivateRegularFile, status.size <= Int64(limit) else { return nil }
        var data = Data(count: Int(status.size))
        let complete = data.withUnsafeMutableBytes { buffer in
            whole(UnsafeRawBufferPointer(buffer)) { base, remaining in posixRead(fd, UnsafeMutableRawPointer(mutating: base), remaining) }
        }
        return complete ? data : nil
    }

    /// Runs `step` (a `read(2)` or `write(2)`) over all of `buffer`, again after `EINTR` and after
    /// short counts; whether it got through.
    private static func whole(_ buffer: UnsafeRawBufferPointer, _ step: (UnsafeRawPointer, Int) -> Int) -> Bool {
        guard var base = buffer.baseAddress else { return true }
        var remaining = buffer.count
        while remaining > 0 {
            let count = step(base, remaining)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            remaining -= count
            base += count
        }
        return true
    }

    /// Replaces whatever is at `url` (a link is removed, not followed) with a new file holding
    /// `data`, created exclusively.
    ///
    /// - Returns: Whether the file was written in full. If another process planted something at
    ///   `url` in between, the exclusive create fails and nothing is written.
    ///
    /// - Parameters:
    ///   - mode: The new file's permissions.
    ///   - sync: Whether to flush the file to disk (`fsync`) before closing it.
    @discardableResult
    static func replace(_ url: URL, with data: Data, mode: mode_t = 0o644, sync: Bool = false) -> Bool {
        remove(url)
        let fd = open(url, O_WRONLY | O_CREAT | O_EXCL, mode: mode)
        guard fd >= 0 else { return false }
        let written = data.withUnsafeBytes { buffer in
            whole(buffer) { base, remaining in posixWrite(fd, base, remaining) }
        }
        let synced = !sync || fsync(fd) == 0
        let closed = close(fd) == 0
        let complete = written && synced && closed
        if !complete { remove(url) }
        return complete
    }

    /// Flushes `directory`'s entries to disk (after a `rename(2)` into it), as far as the file
    /// system allows.
    static func syncDirectory(_ directory: URL) {
        let fd = directory.withUnsafeFileSystemRepresentation { path in
            path.map { posixOpen($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0) } ?? -1
        }
        guard fd >= 0 else { return }
        _ = fsync(fd)
        _ = close(fd)
    }
}

// The C library's functions, named apart from `LocalFile`'s own.
@inline(__always) private func posixOpen(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}

@inline(__always) private func posixRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(fd, buffer, count)
}

@inline(__always) private func posixWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buffer, count)
}
