import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Between a ``StreamingFetchOperation``'s transfers (the session router's queue) and its
/// reader (any task): the chunks that arrived and were not read yet, the response head, and
/// the end.
///
/// What it holds is bounded. Its ``BacklogGate`` pauses the reading past ``limit`` bytes (the
/// transfer's sink has it); past ``bound`` — where the pause is not in effect — ``append(_:)``
/// refuses, and the transfer fails with ``FetchError/streamOverflow(_:)``. A read takes every
/// chunk that waits, as one `Data`, so a slow reader gets larger pieces, not more of them.
///
/// The end comes from the operation, once it finished (``finish(_:)``): the reader sees every
/// chunk that arrived, then the end or the error.
final class StreamChannel: Sendable {
    private struct State {
        var chunks: [Data] = []
        var buffered = 0
        var response: HTTPURLResponse?
        var end: Result<Void, FetchError>?
        /// The reader waiting for a chunk or the end.
        var reader: CheckedContinuation<Void, Never>?
        /// Those waiting for the head (or the end).
        var headWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Numbers those waiters (a cancelled one is taken out by its number).
        var headWaiterNumbers: UInt64 = 0
        /// Whether any chunk arrived: the fetch is then never repeated.
        var delivered = false
        /// The reader's task was cancelled.
        var readerCancelled = false
        /// A reader claimed the stream (``claimReader()``).
        var claimed = false
        /// Numbers the backlog's readings, for the gate (``BacklogGate/noteBacklog(_:sequence:)``).
        var readings: UInt64 = 0
    }

    /// The bytes held for the reader past which the reading is paused.
    let limit: Int
    /// The most held for the reader, ever: twice ``limit`` (what waited for the router queue
    /// when the pause came goes to the reader too) and 1 MiB for what libcurl had read when it
    /// paused.
    var bound: Int { 2 * limit + (1 << 20) }
    /// Pauses the reading while the reader is behind.
    let gate: BacklogGate
    private let state = Protected(State())
    private let pauses = Protected(true)

    /// Whether its transfers may pause the reading (tests and `fetchkit-bench` turn it off to
    /// stand for a session where the pause is not in effect). Read as each transfer is made.
    var pausesReading: Bool {
        get { pauses.snapshot }
        set { pauses.withLock { $0 = newValue } }
    }

    /// The media type an accepted response must have (lowercased, without parameters), or
    /// `nil` for any: an event stream's connections require `text/event-stream`.
    let requiredMediaType: String?

    init(limit: Int, requiredMediaType: String? = nil) {
        self.limit = limit
        self.requiredMediaType = requiredMediaType
        gate = BacklogGate(pauseAbove: Int64(limit))
    }

    // MARK: The transfer's side (router queue)

    /// An attempt's response was accepted: its head is the stream's.
    func open(_ response: HTTPURLResponse) {
        let waiters = state.withLock { state in
            state.response = response
            defer { state.headWaiters = [:] }
            return Array(state.headWaiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Keeps `chunk` for the reader; `false` when that would hold more than ``bound`` (the
    /// reading was not paused: the transfer fails rather than hold more).
    func append(_ chunk: Data) -> Bool {
        guard !chunk.isEmpty else { return true }
        let (kept, reader, backlog, reading) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?, Int, UInt64) in
            guard state.end == nil else { return (true, nil, 0, 0) }   // nobody reads any more
            guard state.buffered + chunk.count <= bound else { return (false, nil, 0, 0) }
            state.chunks.append(chunk)
            state.buffered += chunk.count
            state.delivered = true
            state.readings += 1
            defer { state.reader = nil }
            return (true, state.reader, state.buffered, state.readings)
        }
        if reading != 0 { gate.noteBacklog(Int64(backlog), sequence: reading) }
        reader?.resume()
        return kept
    }

    /// Makes the caller the stream's one reader: `false` if another reader claimed it first.
    func claimReader() -> Bool {
        state.withLock { state in
            defer { state.claimed = true }
            return !state.claimed
        }
    }

    /// Whether any chunk of the body arrived (so the fetch must not be repeated). Any thread.
    var delivered: Bool {
        state.withLock { $0.delivered }
    }

    /// The operation finished (with its last `response`): the reader gets what waits, then
    /// this. Only the first call counts.
    func finish(_ end: Result<Void, FetchError>, response: HTTPURLResponse? = nil) {
        let (reader, waiters) = state.withLock { state -> (CheckedContinuation<Void, Never>?, [CheckedContinuation<Void, Never>]) in
            guard state.end == nil else { return (nil, []) }
            state.end = end
            if state.response == nil, case .success = end { state.response = response }
            defer {
                state.reader = nil
                state.headWaiters = [:]
            }
            return (state.reader, Array(state.headWaiters.values))
        }
        reader?.resume()
        for waiter in waiters { waiter.resume() }
        // Nothing reads any more: a paused reading goes on (to its end).
        gate.noteBacklog(0, sequence: .max)
    }

    // MARK: The reader's side

    /// The next piece of the body: every chunk that waits, as one; `nil` after the end.
    ///
    /// - Parameter onCancel: Runs once if the reader's task is cancelled while it waits (it
    ///   cancels the fetch).
    /// - Throws: The fetch's error once the chunks before it were read, or
    ///   ``FetchError/cancelled(_:)`` when the reader's task is cancelled.
    func read(url: URL?, onCancel: @escaping @Sendable () -> Void) async throws(FetchError) -> Data? {
        // A reader whose task is cancelled reads no more, even with chunks waiting (a loop
        // that never waits would otherwise never see its cancel).
        if Task.isCancelled {
            let first = state.withLock { state -> Bool in
                defer { state.readerCancelled = true }
                return !state.readerCancelled
            }
            if first { onCancel() }
        }
        while true {
            switch take() {
            case .chunks(let data): return data
            case .end(.success): return nil
            case .end(.failure(let error)): throw error
            case .cancelled: throw .cancelled(.init(url: url))
            case .wait: break
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { state -> Bool in
                        guard state.chunks.isEmpty, state.end == nil, !state.readerCancelled else { return true }
                        state.reader = waiter
                        return false
                    }
                    if resumeNow { waiter.resume() }
                }
            } onCancel: {
                let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                    state.readerCancelled = true
                    defer { state.reader = nil }
                    return state.reader
                }
                waiter?.resume()
                onCancel()
            }
        }
    }

    private enum Taken {
        case chunks(Data), end(Result<Void, FetchError>), cancelled, wait
    }

    private func take() -> Taken {
        let (taken, reading) = state.withLock { state -> (Taken, UInt64) in
            if state.readerCancelled { return (.cancelled, 0) }
            if !state.chunks.isEmpty {
                let chunks = state.chunks
                state.chunks.removeAll(keepingCapacity: true)
                state.buffered = 0
                state.readings += 1
                return (.chunks(chunks.count == 1 ? chunks[0] : Self.joined(chunks)), state.readings)
            }
            return (state.end.map(Taken.end) ?? .wait, 0)
        }
        if reading != 0 { gate.noteBacklog(0, sequence: reading) }
        return taken
    }

    private static func joined(_ chunks: [Data]) -> Data {
        var data = Data(capacity: chunks.reduce(0) { $0 + $1.count })
        for chunk in chunks { data.append(chunk) }
        return data
    }

    /// The accepted response's head, once it arrived.
    ///
    /// - Throws: The fetch's error if it ended without one.
    func head() async throws(FetchError) -> HTTPURLResponse {
        while true {
            let known = state.withLock { state -> Result<HTTPURLResponse, FetchError>? in
                if let response = state.response { return .success(response) }
                if case .failure(let error)? = state.end { return .failure(error) }
                return nil
            }
            if let known { return try known.get() }
            if state.withLock({ $0.end != nil }) {
                // Ended with no response at all: only a fetch that sent nothing does.
                throw .cancelled(.init(url: nil))
            }
            // A waiter whose task is cancelled stops waiting (the fetch goes on).
            if Task.isCancelled { throw .cancelled(.init(url: nil)) }
            let number = state.withLock { state -> UInt64 in
                state.headWaiterNumbers += 1
                return state.headWaiterNumbers
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { state -> Bool in
                        guard state.response == nil, state.end == nil, !Task.isCancelled else { return true }
                        state.headWaiters[number] = waiter
                        return false
                    }
                    if resumeNow { waiter.resume() }
                }
            } onCancel: {
                state.withLock { $0.headWaiters.removeValue(forKey: number) }?.resume()
            }
        }
    }
}

/// The body sink of one attempt of a ``StreamingFetchOperation``: hands each chunk to the
/// operation's ``StreamChannel``. Used on the router queue.
final class StreamBodySink: ResponseBodySink {
    private let channel: StreamChannel
    private let url: URL?

    init(channel: StreamChannel, url: URL?) {
        self.channel = channel
        self.url = url
    }

    func open(response: HTTPURLResponse, expectedLength: Int64?) throws(FetchError) {
        // (A 204 has no body to type: it ends an event stream.)
        if let required = channel.requiredMediaType, response.statusCode != 204 {
            let contentType = response.value(forHTTPHeaderField: "Content-Type") ?? ""
            let mediaType = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard mediaType == required else {
                let shown = String(contentType.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "?" : Character($0) }.prefix(80))
                throw .invalidResponse(.init(reason: .notAnEventStream(contentType: shown), url: url))
            }
        }
        channel.open(response)
    }

    func write(_ chunk: Data) throws(FetchError) {
        guard channel.append(chunk) else {
            throw .streamOverflow(.init(limit: channel.bound, url: url))
        }
    }

    /// The chunks went to the reader: nothing is kept here.
    func close() throws(FetchError) -> ResponseBody {
        .data(Data())
    }

    func abandon() {}

    var backlogGate: BacklogGate? { channel.pausesReading ? channel.gate : nil }
}
