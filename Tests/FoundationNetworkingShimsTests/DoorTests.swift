import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif
import FoundationNetworkingShims
import Testing

#if canImport(FoundationNetworking) && os(Linux) && canImport(Glibc)
/// Each path of the door works on this toolchain: libcurl's functions are found, the reflection
/// path reaches a real session's multi handle and a real task's easy handle, FoundationNetworking's
/// callbacks are found, and the socket calls answer on a real connection. Each fails when its
/// path is gone (a toolchain that moved a field, renamed a closure, or stripped a library), so
/// that no workaround stops silently.
@Suite("The door into FoundationNetworking", .timeLimit(.minutes(3)))
struct DoorTests {
    @Test func libcurlsFunctionsAreFound() {
        #expect(Curl.isAvailable)
    }

    @Test func foundationNetworkingsCallbacksAreFound() {
        #expect(FoundationNetworkingCallbacks.header != nil, "the header callback (response-heads)")
        #expect(FoundationNetworkingCallbacks.socket != nil, "the socket callback (socket-wakeups)")
    }

    /// A session's multi handle, and an option set on it (the connection pool's).
    @Test func aSessionsMultiHandleIsReachedAndTakesAnOption() throws {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let multi = try #require(FoundationNetworkingLayout.multiHandle(of: session))
        #expect(Curl.set(multi: multi, .maximumConnections, 64))
    }

    /// A task's easy handle exists once the task has its protocol (after `resume()`), takes an
    /// option and answers an info; its work queue is found. The task goes to a socket on
    /// 127.0.0.1 that listens and never accepts: it connects and waits, so its handle lives
    /// until the test cancels it (a closed port failed the task, and freed its handle, before
    /// the test looked, on a loaded machine).
    @Test func aTasksEasyHandleIsReachedTakesAnOptionAndAnswers() throws {
        let (listener, port) = try listeningSocket()
        defer { close(listener) }
        // No URL cache: `resume()` makes the task's protocol, and its handle, before it returns.
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration)
        defer { session.invalidateAndCancel() }
        let url = try #require(URL(string: "http://127.0.0.1:\(port)/door-test"))
        let task = session.dataTask(with: url)
        #expect(FoundationNetworkingLayout.easyHandle(of: task) == nil, "no protocol before resume")
        task.resume()
        defer { task.cancel() }
        let queue = try #require(FoundationNetworkingLayout.workQueue(of: task))
        // Read and set on the session's work queue, as FetchKit does.
        let (found, set, version) = queue.sync { () -> (Bool, Bool, Int?) in
            guard let handle = FoundationNetworkingLayout.easyHandle(of: task) else { return (false, false, nil) }
            return (true, Curl.set(handle.raw, .connectTimeoutMS, 5_000), Curl.long(handle.raw, .httpVersion))
        }
        #expect(found, "the task's easy handle, found by reflection")
        #expect(set)
        #expect(version != nil)
    }

    /// `TCP_INFO`, `FIONREAD` and `SO_RCVBUF` on a real loopback connection.
    @Test func theSocketCallsAnswerOnARealConnection() throws {
        let (listener, port) = try listeningSocket()
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(client >= 0)
        defer { close(client) }
        #expect(Sockets.setReceiveBuffer(client, bytes: 4096))
        let connected = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) == 0 }
        }
        try #require(connected)
        let server = accept(listener, nil, nil)
        try #require(server >= 0)
        defer { close(server) }
        let bytes = [UInt8](repeating: 7, count: 1000)
        #expect(bytes.withUnsafeBytes { send(server, $0.baseAddress, $0.count, 0) } == 1000)
        // The bytes arrive on loopback at once; wait for them without sleeping.
        var poller = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
        #expect(poll(&poller, 1, 10_000) == 1)
        #expect(Sockets.unreadBytes(client) == 1000)
        #expect(Sockets.bytesReceived(client) == 1000)
    }

    /// A TCP socket on 127.0.0.1 that listens (and accepts only when asked), and its port.
    private func listeningSocket() throws -> (Int32, UInt16) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        guard bound, listen(listener, 8) == 0 else {
            close(listener)
            throw DoorTestError()
        }
        return (listener, UInt16(bigEndian: address.sin_port))
    }
}

private struct DoorTestError: Error {}
#endif
