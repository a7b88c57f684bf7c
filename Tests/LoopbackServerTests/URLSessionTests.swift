import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import Testing

@Suite("URLSession against the server", .timeLimit(.minutes(3)))
struct URLSessionTests {
    @Test("URLSession downloads a pattern body and reuses the connection")
    func download() async throws {
        try await withServerAsync { server in
            let session = URLSession(configuration: .ephemeral)
            defer { session.finishTasksAndInvalidate() }
            for _ in 0..<3 {
                let (data, response) = try await session.data(from: server.url("/bytes/1048576"))
                #expect((response as? HTTPURLResponse)?.statusCode == 200)
                #expect(data.count == 1_048_576)
                #expect(BytePattern.matches(data, offset: 0))
            }
            #expect(server.connectionsAccepted == 1)
        }
    }

    @Test("URLSession follows /redirect/{n} and posts to /login")
    func redirectAndPost() async throws {
        try await withServerAsync { server in
            let session = URLSession(configuration: .ephemeral)
            defer { session.finishTasksAndInvalidate() }
            let (data, response) = try await session.data(from: server.url("/redirect/3"))
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            #expect(String(decoding: data, as: UTF8.self) == "redirected")
            #expect(server.requestCount(path: "/redirect/1") == 1)

            var request = URLRequest(url: server.url("/login"))
            request.httpMethod = "POST"
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"user":"bob","password":"secret"}"#.utf8)
            let (token, loginResponse) = try await session.data(for: request)
            #expect((loginResponse as? HTTPURLResponse)?.statusCode == 200)
            #expect(String(decoding: token, as: UTF8.self) == #"{"token":"token-bob"}"#)
        }
    }
}
