import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// Heads libcurl refuses itself, before FetchKit's filter or FoundationNetworking see them, are
/// the documented ``FetchError/invalidResponse(_:)``, not a transport error (found by a docs-only
/// review: they were `transport`, and the command's exit status said "network").
@Suite("Heads libcurl refuses are invalid responses", .timeLimit(.minutes(2)))
struct LibcurlRefusedHeadTests {
    private func answer(_ head: String) async throws -> (FetchError?, Int) {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/x") { _ in .steps([.write(Data(head.utf8)), .write(Data("hello".utf8)), .close]) }
        let operation = FetchOperation<Data>(url: server.url("/x"))
        let error = await outcome(of: operation)
        return (error, server.requests("/x").count)
    }

    @Test(arguments: ["HTTP/1.1 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 -200 OK\r\n\r\n", "HTTP/1.1 000\r\n\r\n"])
    func aStatusLineWithoutAVersionOrACodeIsMalformed(_ head: String) async throws {
        let (error, requests) = try await answer(head)
        guard case .invalidResponse(let failure)? = error, case .malformedStatusLine = failure.reason else {
            Issue.record("\(head.debugDescription): \(String(describing: error))")
            return
        }
        #expect(requests == 1, "not retried")
    }

    @Test(arguments: ["-1", "abc", ""])
    func aContentLengthThatIsNotANumberIsInvalid(_ value: String) async throws {
        let (error, requests) = try await answer("HTTP/1.1 200 OK\r\nContent-Length: \(value)\r\n\r\n")
        guard case .invalidResponse(let failure)? = error, case .invalidContentLength = failure.reason else {
            Issue.record("\(value.debugDescription): \(String(describing: error))")
            return
        }
        #expect(requests == 1, "not retried")
    }

    @Test func otherMessagesAreNotHeads() {
        #expect(TransferStateMachine.refusedHead(message: "Failed to connect to 127.0.0.1 port 9") == nil)
        #expect(TransferStateMachine.refusedHead(message: "Unsupported HTTP version (2.0) in response") != nil)
    }
}
