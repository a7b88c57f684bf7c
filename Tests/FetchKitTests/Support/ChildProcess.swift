import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An executable built beside the test bundle, run as a child process with its output collected.
///
/// Started with `posix_spawn` rather than Foundation's `Process`: on Linux (Swift 6.3.1),
/// `Process.run()` over-reads `/proc/self/fd` entries and crashes now and then in a process
/// with many descriptors open — a test process full of loopback sockets
/// (swift-corelibs-foundation PR #5472). The child gets standard output and error on pipes of
/// its own and no other descriptor of the test process.
final class ChildProcess: Sendable {
    /// How a child ended.
    enum Ending: Equatable, CustomStringConvertible {
        case exit(Int32)
        case signal(Int32)

        var description: String {
            switch self {
            case .exit(let status): return "exit \(status)"
            case .signal(let signal): return "signal \(signal)"
            }
        }
    }

    struct SpawnError: Error, CustomStringConvertible {
        let description: String
    }

    /// Where the child's standard output goes.
    enum StandardOutput: Sendable {
        /// A pipe, read to its end.
        case pipe
        /// A pipe whose reading end the test closes after the first line, as `| head -1` does
        /// (``outputClosed`` then opens).
        case pipeClosedAfterFirstLine
        /// A pseudo-terminal `columns` wide, read to its end (what the child writes, after the
        /// terminal's own `\n` → `\r\n`).
        case terminal(columns: Int)
    }

    let pid: pid_t
    /// Opens once the test closed the child's standard output (``StandardOutput/pipeClosedAfterFirstLine``).
    let outputClosed = Countdown(1)
    /// Opens once the child's standard error holds the `errorMarker` given to `init` (a server
    /// that says it is ready there), or ended without it (see ``errorMarkerFound``).
    let errorMarkerSeen = Countdown(1)
    private let markerFound = Locked(false)
    /// Whether the child wrote the `errorMarker` given to `init` to its standard error.
    var errorMarkerFound: Bool { markerFound.current }
    /// The exit, and the end of each of the two pipes.
    private let ended = Countdown(3)
    private let output = Locked((stdout: Data(), stderr: Data()))
    private let ending = Locked<Ending?>(nil)
    private let cpuTime = Locked<Double?>(nil)
    /// The processor time (user and system) the child used, in seconds, once it exited: unlike
    /// the time it took, barely changed by other processes that share the machine.
    var cpuSeconds: Double? { cpuTime.current }

    /// Starts `name` (an executable beside the test bundle, or an absolute path) with
    /// `arguments`, and `environment` added to the test process's. When `errorMarker` is given,
    /// ``errorMarkerSeen`` opens as soon as the child wrote it to its standard error. With
    /// `input`, the child's standard input is a pipe that gives it those bytes, then ends.
    init(_ name: String, _ arguments: [String], standardOutput: StandardOutput = .pipe,
         environment: [String: String] = [:], errorMarker: String? = nil, input: Data? = nil) throws {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let path = name.hasPrefix("/") ? name : directory.appendingPathComponent(name).path
        let outPipe = try Self.makeOutput(standardOutput)
        let errPipe = try Self.makePipe()
        let inPipe = try input.map { _ in try Self.makeInputSocket() }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let inPipe { posix_spawn_file_actions_adddup2(&actions, inPipe.read, 0) }
        posix_spawn_file_actions_adddup2(&actions, outPipe.write, 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe.write, 2)
        // Nothing else of the test process (sockets, other children's pipes) goes along.
        if let closeFrom = Self.closeFrom {
            _ = closeFrom(&actions, 3)
        }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var variables = ProcessInfo.processInfo.environment
        variables.merge(environment) { $1 }
        let envp = variables.map { strdup("\($0)=\($1)") } + [nil]
        defer { for pointer in envp { free(pointer) } }
        // As a shell starts it: no signal blocked, and the signals a user sends at their
        // defaults. (The test thread that spawns it blocks nearly every signal, as each of
        // libdispatch's threads does, and a child inherits that mask: run with it, the tool
        // never meets the one thread that can take a Ctrl-C before its handler does.)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var child: pid_t = 0
        let spawned = posix_spawn(&child, path, &actions, &attributes, argv, envp)
        close(outPipe.write)
        close(errPipe.write)
        if let inPipe {
            close(inPipe.read)
            let bytes = input ?? Data()
            // Written on a thread of its own (a full buffer blocks until the child reads), then
            // closed: the child reads to the end. A child that stops reading early fails the
            // send (MSG_NOSIGNAL), rather than kill the test process with SIGPIPE.
            #if canImport(Glibc)
            let noSignal = Int32(MSG_NOSIGNAL)
            #else
            let noSignal: Int32 = 0   // Darwin: SO_NOSIGPIPE would be the way; the tests run on Linux
            #endif
            Thread.detachNewThread {
                var rest = bytes[...]
                while !rest.isEmpty {
                    let count = rest.withUnsafeBytes { socketSend(inPipe.write, $0.baseAddress, $0.count, noSignal) }
                    if count > 0 { rest = rest.dropFirst(count) } else if errno != EINTR { break }
                }
                close(inPipe.write)
            }
        }
        guard spawned == 0 else {
            close(outPipe.read)
            close(errPipe.read)
            throw SpawnError(description: "posix_spawn \(path): error \(spawned)")
        }
        pid = child
        let (ended, output, ending, spawnedPID, outputClosed, errorMarkerSeen, markerFound) =
            (self.ended, self.output, self.ending, child, self.outputClosed, self.errorMarkerSeen, self.markerFound)
        // Both pipes are read to the end as the child writes (a full pipe would block it), and
        // the exit is awaited, on threads of their own: a blocking call on one of Swift
        // concurrency's few threads could starve the test itself.
        Thread.detachNewThread {
            let data: Data
            if case .pipeClosedAfterFirstLine = standardOutput {
                data = Self.readFirstLine(outPipe.read)
                outputClosed.signal()
            } else {
                data = Self.readToEnd(outPipe.read)
            }
            output.withLock { $0.stdout = data }
            ended.signal()
        }
        Thread.detachNewThread {
            var marker = errorMarker.map { Data($0.utf8) }
            let data = Self.readToEnd(errPipe.read) { soFar in
                if let seeking = marker, soFar.range(of: seeking) != nil {
                    marker = nil
                    markerFound.withLock { $0 = true }
                    errorMarkerSeen.signal()
                }
            }
            if marker != nil { errorMarkerSeen.signal() }
            output.withLock { $0.stderr = data }
            ended.signal()
        }
        let cpuTime = self.cpuTime
        Thread.detachNewThread {
            var status: Int32 = 0
            var usage = rusage()
            while wait4(spawnedPID, &status, 0, &usage) == -1 && errno == EINTR {}
            cpuTime.withLock {
                $0 = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
            }
            let signal = status & 0x7f
            ending.withLock { $0 = signal == 0 ? .exit((status >> 8) & 0xff) : .signal(signal) }
            ended.signal()
        }
    }

    /// A pipe whose ends other children never inherit: close-on-exec from the start where the
    /// C library offers `pipe2`, at once after `pipe` otherwise.
    private static func makePipe() throws -> (read: Int32, write: Int32) {
        var ends: [Int32] = [0, 0]
        if let pipe2 = pipe2Function {
            guard pipe2(&ends, O_CLOEXEC) == 0 else { throw SpawnError(description: "pipe2: errno \(errno)") }
        } else {
            guard pipe(&ends) == 0 else { throw SpawnError(description: "pipe: errno \(errno)") }
            _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        }
        return (ends[0], ends[1])
    }

    /// A connected pair of Unix sockets for the child's standard input (`read` its end): the
    /// test writes with `send(MSG_NOSIGNAL)`, which a pipe does not offer.
    private static func makeInputSocket() throws -> (read: Int32, write: Int32) {
        var ends: [Int32] = [0, 0]
        #if canImport(Glibc)
        let type = Int32(SOCK_STREAM.rawValue)
        #else
        let type = SOCK_STREAM
        #endif
        guard socketpair(AF_UNIX, type, 0, &ends) == 0 else { throw SpawnError(description: "socketpair: errno \(errno)") }
        _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        return (ends[0], ends[1])
    }

    /// The descriptors for the child's standard output: a pipe, or a pseudo-terminal's
    /// controller (`read`) and terminal (`write`) ends.
    private static func makeOutput(_ kind: StandardOutput) throws -> (read: Int32, write: Int32) {
        guard case .terminal(let columns) = kind else { return try makePipe() }
        guard let openpty = openptyFunction else { throw SpawnError(description: "openpty is not available") }
        var controller: Int32 = -1, terminal: Int32 = -1
        var size = winsize(ws_row: 24, ws_col: UInt16(columns), ws_xpixel: 0, ws_ypixel: 0)
        guard openpty(&controller, &terminal, nil, nil, &size) == 0 else { throw SpawnError(description: "openpty: errno \(errno)") }
        _ = fcntl(controller, F_SETFD, FD_CLOEXEC)
        _ = fcntl(terminal, F_SETFD, FD_CLOEXEC)
        return (controller, terminal)
    }

    // glibc has these (2.9, 2.34, and openpty in libc since 2.34), but its headers declare
    // them for _GNU_SOURCE only, or in headers that Swift's Glibc module leaves out: they are
    // looked up at run time.
    private typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias OpenPTY = @convention(c) (UnsafeMutablePointer<Int32>, UnsafeMutablePointer<Int32>,
                                                UnsafeMutablePointer<CChar>?, UnsafeRawPointer?, UnsafeRawPointer?) -> Int32
    private static let pipe2Function: Pipe2? = symbol("pipe2")
    private static let closeFrom: CloseFrom? = symbol("posix_spawn_file_actions_addclosefrom_np")
    private static let openptyFunction: OpenPTY? = symbol("openpty")

    private static func symbol<Function>(_ name: String) -> Function? {
        #if canImport(Darwin)
        let everywhere = UnsafeMutableRawPointer(bitPattern: -2)   // RTLD_DEFAULT
        #else
        let everywhere: UnsafeMutableRawPointer? = nil             // RTLD_DEFAULT
        #endif
        guard let address = dlsym(everywhere, name) else { return nil }
        return unsafeBitCast(address, to: Function.self)
    }

    /// Reads up to the first newline (or the end), then closes the descriptor.
    private static func readFirstLine(_ descriptor: Int32) -> Data {
        defer { close(descriptor) }
        var data = Data()
        var byte: UInt8 = 0
        while true {
            let count = read(descriptor, &byte, 1)
            if count == 1 {
                data.append(byte)
                if byte == UInt8(ascii: "\n") { return data }
            } else if count == 0 || errno != EINTR {
                return data
            }
        }
    }

    /// Reads to the end: end of file, or `EIO` from a pseudo-terminal whose other end closed.
    /// `onRead` sees what was read so far after each read.
    private static func readToEnd(_ descriptor: Int32, onRead: (Data) -> Void = { _ in }) -> Data {
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                data.append(contentsOf: buffer[0..<count])
                onRead(data)
            } else if count == 0 || errno != EINTR {
                return data
            }
        }
    }

    /// Sends `signal` to the child.
    func send(_ signal: Int32) {
        kill(pid, signal)
    }

    /// Waits for the child to exit and its output to end; one that does not within `timeout`
    /// is killed, and this throws.
    func finish(timeout: TimeInterval = 120) async throws -> (ending: Ending, stdout: String, stderr: String) {
        guard await ended.wait(timeout: timeout), let ending = ending.current else {
            kill(pid, SIGKILL)
            throw SpawnError(description: "the child \(pid) did not exit within \(timeout) s")
        }
        let (out, err) = output.current
        return (ending, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    /// For a test that failed before the child exited.
    func stop() {
        if ending.current == nil { kill(pid, SIGKILL) }
    }
}

/// send(2), by a name that ``ChildProcess/send(_:)`` does not hide.
private func socketSend(_ socket: Int32, _ bytes: UnsafeRawPointer?, _ count: Int, _ flags: Int32) -> Int {
    send(socket, bytes, count, flags)
}

/// Runs an executable built beside the test bundle and collects its output.
func runTool(_ name: String, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
    let child = try ChildProcess(name, arguments)
    let (ending, stdout, stderr) = try await child.finish()
    guard case .exit(let status) = ending else {
        throw ParseTestError(reason: "\(name) ended by \(ending)\n\(stdout)\(stderr)")
    }
    return (status, stdout, stderr)
}

/// Runs fetchkit with `input` on its standard input.
func runTool(_ name: String, _ arguments: [String], input: Data) async throws -> (status: Int32, stdout: String, stderr: String) {
    let child = try ChildProcess(name, arguments, input: input)
    let (ending, stdout, stderr) = try await child.finish()
    guard case .exit(let status) = ending else {
        throw ParseTestError(reason: "\(name) ended by \(ending)\n\(stdout)\(stderr)")
    }
    return (status, stdout, stderr)
}

/// The SHA-256 of `data` in hex, from `sha256sum` (an implementation that is not FetchKit's).
func sha256sum(_ data: Data) async throws -> String {
    let result = try await runTool("/usr/bin/sha256sum", ["-"], input: data)
    return String(result.stdout.prefix { $0 != " " })
}
