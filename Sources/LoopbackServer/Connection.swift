import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One accepted TCP connection, served on its own thread with blocking I/O: read a request,
/// answer it, repeat while the connection is kept alive.
///
/// The descriptor stays registered with the `ServerCore` until `run()` ends, so `stop()` can
/// `shutdown(2)` it at any moment, which makes every blocking call here return promptly.
final class Connection {
    private let core: ServerCore
    private let fd: Int32
    private let id: Int
    private var reader: RequestReader

    /// How the connection ends once the request loop is over.
    private enum Ending {
        /// Just close (the peer already closed, or is gone).
        case close
        /// Send a FIN, then read and discard until the peer closes (bounded), then close. This
        /// keeps a response that was just written from being destroyed by an RST, which
        /// closing with unread input would cause.
        case graceful
        /// Abort with an RST.
        case reset
    }

    /// What to do after a response was written.
    private enum Next {
        case keepAlive
        case end(Ending)
    }

    init(core: ServerCore, fd: Int32, id: Int) {
        self.core = core
        self.fd = fd
        self.id = id
        reader = RequestReader(fd: fd)
    }

    /// Serves requests until the connection ends, then closes it.
    func run() {
        let ending = serveRequests()
        switch ending {
        case .close:
            core.closeConnection(id: id, fd: fd, reset: false)
        case .graceful:
            Socket.shutdownWrite(fd)
            drain()
            core.closeConnection(id: id, fd: fd, reset: false)
        case .reset:
            core.closeConnection(id: id, fd: fd, reset: true)
        }
    }

    private func serveRequests() -> Ending {
        while true {
            let head: RequestHead
            switch reader.readHead() {
            case .closed:
                return .close
            case let .invalid(error):
                writeError(error)
                return .graceful
            case let .head(parsed):
                head = parsed
            }

            core.requestStarted()
            let token = InFlightToken(core: core)
            defer { token.finish() }

            if head.expectsContinue, head.framing != .none, reader.bufferedCount == 0 {
                let interim = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
                guard interim.withUnsafeBytes({ Socket.sendAll(fd, $0) }) else { return .close }
            }
            let body: Data
            switch head.framing {
            case .none:
                body = Data()
            case let .length(length):
                guard let data = reader.readBody(length: length) else { return .close }
                body = data
            case .chunked:
                switch reader.readChunkedBody() {
                case let .body(data): body = data
                case .closed: return .close
                case let .invalid(error):
                    token.finish()
                    writeError(error)
                    return .graceful
                }
            }

            let request = HTTPRequest(
                method: head.method, target: head.target, headers: head.headers,
                body: body, version: head.version, connectionID: id)
            core.record(request)
            let response = core.respond(to: request)
            switch write(response, for: request, token: token) {
            case .keepAlive:
                if request.wantsClose || core.isStopping { return .graceful }
            case let .end(ending):
                return ending
            }
        }
    }

    // MARK: Writing responses

    private func write(_ response: HTTPResponse, for request: HTTPRequest, token: InFlightToken) -> Next {
        if response.delayMilliseconds > 0, !pause(milliseconds: response.delayMilliseconds) {
            return .end(.close)
        }
        if let gate = response.holdGate, !await(gate) {
            return .end(.close)
        }
        if case let .script(actions) = response.body {
            return run(actions, token: token)
        }

        var headers = response.headers
        let isHead = request.method == "HEAD"
        let forbidsBody = ResponseHead.statusForbidsBody(response.status)
        let chunked: Bool
        switch response.body {
        case .chunkedPattern:
            headers.remove(name: "Content-Length")
            headers.replaceOrAdd(name: "Transfer-Encoding", value: "chunked")
            chunked = true
        default:
            chunked = headers.listContains("Transfer-Encoding", token: "chunked")
        }
        if !forbidsBody, !chunked, !headers.contains("Content-Length") {
            let length: Int
            switch response.body {
            case let .data(data): length = data.count
            case let .pattern(_, count): length = max(0, count)
            case .chunkedPattern, .script: length = 0
            }
            headers.add(name: "Content-Length", value: String(length))
        }
        if !headers.contains("Date") { headers.add(name: "Date", value: HTTPDate.now()) }
        let closeAfter = request.wantsClose || headers.listContains("Connection", token: "close") || core.isStopping
        if closeAfter {
            if !headers.listContains("Connection", token: "close") { headers.add(name: "Connection", value: "close") }
        } else if request.version == "HTTP/1.0", !headers.contains("Connection") {
            headers.add(name: "Connection", value: "keep-alive")
        }
        let head = ResponseHead.bytes(status: response.status, headers: headers)
        let next: Next = closeAfter ? .end(.graceful) : .keepAlive

        if isHead || forbidsBody {
            token.finish()
            return send(head) ? next : .end(.close)
        }
        let sent: Bool
        switch response.body {
        case let .data(data):
            sent = chunked ? sendChunked(head: head, data: data, token: token) : send(head, data, token: token)
        case let .pattern(offset, count):
            sent = sendPattern(head: head, offset: max(0, offset), count: max(0, count), token: token)
        case let .chunkedPattern(count, chunkSize, interval):
            sent = sendTrickle(head: head, count: max(0, count), chunkSize: chunkSize, interval: interval, token: token)
        case .script:
            sent = true // handled above
        }
        return sent ? next : .end(.close)
    }

    private func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Socket.sendAll(fd, $0) }
    }

    private func send(_ head: [UInt8], _ body: Data, token: InFlightToken) -> Bool {
        token.finish()
        return head.withUnsafeBytes { headBytes in
            body.withUnsafeBytes { bodyBytes in Socket.sendAll(fd, [headBytes, bodyBytes]) }
        }
    }

    private func sendChunked(head: [UInt8], data: Data, token: InFlightToken) -> Bool {
        var framed = head
        if !data.isEmpty {
            framed.append(contentsOf: String(data.count, radix: 16).utf8)
            framed.append(contentsOf: [0x0D, 0x0A])
            framed.append(contentsOf: data)
            framed.append(contentsOf: [0x0D, 0x0A])
        }
        framed.append(contentsOf: Array("0\r\n\r\n".utf8))
        token.finish()
        return send(framed)
    }

    /// Sends `head` (if any) and `count` pattern bytes from `offset`, gathering the head with
    /// the first slice. `token` is finished just before the final slice is sent when
    /// `finishesToken` is set.
    /// How much of a pattern body is sent (and counted) at once: 64 KiB.
    static let countedPiece = 64 << 10

    private func sendPattern(head: [UInt8], offset: Int, count: Int, token: InFlightToken, finishesToken: Bool = true) -> Bool {
        if count == 0 {
            if finishesToken { token.finish() }
            return head.isEmpty || send(head)
        }
        var sentSoFar = 0
        var headPending = !head.isEmpty
        return head.withUnsafeBytes { headBytes in
            BytePattern.forEachSlice(offset: offset, count: count) { (slice: UnsafeRawBufferPointer) -> Bool in
                sentSoFar += slice.count
                if finishesToken, sentSoFar == count { token.finish() }
                // Counted a piece at a time (64 KiB), so that ``ServerCounters/patternBytesSent``
                // follows a client that reads slowly (a bandwidth limit, measured at the server).
                var start = 0
                while start < slice.count {
                    let piece = UnsafeRawBufferPointer(rebasing: slice[start..<min(slice.count, start + Self.countedPiece)])
                    let ok: Bool
                    if headPending {
                        headPending = false
                        ok = Socket.sendAll(fd, [headBytes, piece])
                    } else {
                        ok = Socket.sendAll(fd, piece)
                    }
                    guard ok else { return false }
                    core.patternSent(piece.count)
                    start += piece.count
                }
                return true
            }
        }
    }

    /// Sends a chunked pattern body: chunk after chunk, pausing between them.
    private func sendTrickle(head: [UInt8], count: Int, chunkSize: Int, interval: Int, token: InFlightToken) -> Bool {
        guard send(head) else { return false }
        let chunkSize = max(1, chunkSize)
        var offset = 0
        while offset < count {
            if offset > 0, interval > 0, !pause(milliseconds: interval) { return false }
            let length = min(chunkSize, count - offset)
            let sizeLine = Array((String(length, radix: 16) + "\r\n").utf8)
            guard send(sizeLine),
                  sendPattern(head: [], offset: offset, count: length, token: token, finishesToken: false),
                  send([0x0D, 0x0A])
            else { return false }
            offset += length
        }
        if count > 0, interval > 0, !pause(milliseconds: interval) { return false }
        token.finish()
        return send(Array("0\r\n\r\n".utf8))
    }

    /// Writes an error response (`Connection: close`) for a request that could not be read.
    private func writeError(_ error: RequestError) {
        let body = Array((error.message + "\n").utf8)
        let headers: HTTPHeaders = [
            "Content-Type": "text/plain; charset=utf-8",
            "Content-Length": String(body.count),
            "Date": HTTPDate.now(),
            "Connection": "close",
        ]
        _ = send(ResponseHead.bytes(status: error.status, headers: headers) + body)
    }

    // MARK: Scripts

    private func run(_ actions: [ScriptAction], token: InFlightToken) -> Next {
        // The request stops counting as in flight just before the last bytes go out: before
        // the last write that is followed by nothing but the end of the connection.
        var lastWrite: Int?
        scan: for index in actions.indices.reversed() {
            switch actions[index] {
            case .close, .reset: continue scan
            case .write, .writePattern: lastWrite = index
            case .sleep, .stall, .wait: break
            }
            break scan
        }
        for (index, action) in actions.enumerated() {
            switch action {
            case let .write(data):
                if index == lastWrite { token.finish() }
                let ok = data.withUnsafeBytes { Socket.sendAll(fd, $0) }
                if !ok { return .end(.close) }
            case let .writePattern(offset, count):
                let ok = sendPattern(head: [], offset: max(0, offset), count: max(0, count), token: token,
                                     finishesToken: index == lastWrite)
                if !ok { return .end(.close) }
            case let .sleep(milliseconds):
                if !pause(milliseconds: milliseconds) { return .end(.close) }
            case .close:
                token.finish()
                return .end(.graceful)
            case .reset:
                token.finish()
                return .end(.reset)
            case .stall:
                stall()
                token.finish()
                return .end(.close)
            case let .wait(gate):
                if !await(gate) { return .end(.close) }
            }
        }
        token.finish()
        return .keepAlive
    }

    /// Waits for `gate` to open. Returns `false` early if the server stops or the peer goes
    /// away. Sleeps in `poll(2)` on the socket and on a pipe the gate pokes when it opens, so a
    /// held answer costs nothing while it waits; `stop()` shuts the socket down, which wakes
    /// the poll too.
    private func await(_ gate: ServerGate) -> Bool {
        guard let pipe = try? Socket.makePipe() else { return awaitPolling(gate) }
        defer {
            gate.unregister(waker: pipe.write)
            Socket.close(pipe.read)
            Socket.close(pipe.write)
        }
        guard gate.register(waker: pipe.write) else { return true }
        var watchPeer = true
        while true {
            if core.isStopping { return false }
            // The socket is polled for data only until a pipelined request is seen (then only
            // for its end: POLLHUP and POLLERR come unasked); a second's slices are a safety net.
            var descriptors = [pollfd(fd: pipe.read, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: fd, events: watchPeer ? Int16(POLLIN) : 0, revents: 0)]
            let ready = poll(&descriptors, 2, 1000)
            if ready < 0, errno != EINTR { return gate.wait(timeout: 0) }
            if descriptors[0].revents != 0 { return true }
            if descriptors[1].revents != 0 {
                if Socket.peerIsGone(fd) || descriptors[1].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return false }
                watchPeer = false   // a pipelined request is waiting; keep holding
            }
        }
    }

    /// ``await(_:)`` by looking every 20 ms, for when no pipe can be made.
    private func awaitPolling(_ gate: ServerGate) -> Bool {
        var watchPeer = true
        while !gate.wait(timeout: 0.02) {
            if core.isStopping { return false }
            if watchPeer && Socket.waitReadable(fd, milliseconds: 0) {
                if Socket.peerIsGone(fd) { return false }
                watchPeer = false   // a pipelined request is waiting; keep holding
            }
        }
        return true
    }

    // MARK: Waiting

    /// Waits `milliseconds`. Returns `false` early if the server stops or the peer goes away.
    ///
    /// While nothing is pending on the socket it polls the socket, so the peer closing (and
    /// `stop()`, which shuts the socket down) ends the wait at once. Once the peer has sent
    /// more bytes (a pipelined request), it waits on the server's condition variable instead,
    /// which `stop()` signals.
    private func pause(milliseconds: Int) -> Bool {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, milliseconds)) * 1_000_000
        var watchPeer = true
        while true {
            if core.isStopping { return false }
            let now = DispatchTime.now().uptimeNanoseconds
            if now >= deadline { return true }
            let remaining = Int((deadline - now + 999_999) / 1_000_000)
            if watchPeer {
                // Bounded slices: a safety net should a platform not wake poll on shutdown.
                if Socket.waitReadable(fd, milliseconds: Int32(min(remaining, 100))) {
                    if Socket.peerIsGone(fd) { return false }
                    watchPeer = false
                }
            } else {
                return core.sleep(milliseconds: remaining)
            }
        }
    }

    /// Blocks until the peer closes or `stop()` shuts the socket down, discarding input.
    private func stall() {
        var scratch = [UInt8](repeating: 0, count: 4096)
        while !core.isStopping {
            let n = scratch.withUnsafeMutableBytes { Socket.receive(fd, into: $0.baseAddress!, count: $0.count) }
            if n <= 0 { return }
        }
    }

    /// After a FIN was sent: reads and discards until the peer closes, the server stops, or a
    /// short deadline passes.
    private func drain() {
        let deadline = DispatchTime.now().uptimeNanoseconds + 1_000_000_000
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)
        var discarded = 0
        while discarded < 4 * 1024 * 1024, !core.isStopping {
            let now = DispatchTime.now().uptimeNanoseconds
            if now >= deadline { return }
            let slice = Int32(min(100, (deadline - now) / 1_000_000 + 1))
            guard Socket.waitReadable(fd, milliseconds: slice) else { continue }
            let n = scratch.withUnsafeMutableBytes {
                Socket.receive(fd, into: $0.baseAddress!, count: $0.count, flags: Int32(MSG_DONTWAIT))
            }
            if n == 0 { return }
            if n < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK { continue }
                return
            }
            discarded += n
        }
    }
}

/// Counts one request out of `requestsInFlight` exactly once, however its handling ends.
private final class InFlightToken {
    private let core: ServerCore
    private var finished = false

    init(core: ServerCore) {
        self.core = core
    }

    func finish() {
        guard !finished else { return }
        finished = true
        core.requestFinished()
    }
}
