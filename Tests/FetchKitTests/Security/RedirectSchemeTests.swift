import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

/// A redirect is followed only to `http` and `https`: a server must not send a fetch to FTP, to
/// a file on the client's disk, or anywhere else libcurl or FoundationNetworking can reach
/// (found by a docs-only review: a `302` to `ftp://` was followed).
@Suite("Redirects to other schemes", .timeLimit(.minutes(3)))
struct RedirectSchemeTests {
    @Test(arguments: ["ftp://127.0.0.1:9/file.bin", "file:///etc/hostname", "gopher://127.0.0.1:9/x", "dict://127.0.0.1:9/x"])
    func aRedirectToAnotherSchemeFailsAndNothingIsRead(_ target: String) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/away") { _ in TestResponse(status: 302).with(header: "Location", target) }
        let fetch = FetchOperation<Data>(url: server.url("/away"))
        fetch.configuration.retryPolicy = .none
        let error = await #expect(throws: FetchError.self) { try await fetch.run() }
        let scheme = try #require(URL(string: target)?.scheme)
        guard case .redirectFailed(let failure)? = error, case .unsupportedScheme(let refused) = failure.kind else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(refused == scheme)
        #expect(failure.chain.last?.absoluteString == target)
        #expect(failure.description.contains("only http and https"), "\(failure.description)")
    }

    @Test func aRedirectToHTTPOnTheSameServerIsStillFollowed() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        server.route("/away") { _ in TestResponse(status: 302).with(header: "Location", server.url("/bytes/10").absoluteString) }
        let fetch = FetchOperation<Data>(url: server.url("/away"))
        try await fetch.run()
        #expect(try fetch.result?.get().count == 10)
    }
}

/// A `206` is a part of the resource: for a request that asked for no range it is an error,
/// not a short body taken for the whole (found by a docs-only review: `DataFetchOperation`
/// returned the part).
@Suite("Partial content nobody asked for", .timeLimit(.minutes(3)))
struct UnsolicitedPartialContentTests {
    @Test func aPartialAnswerToAPlainGETFails() async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        server.route("/part") { _ in
            TestResponse(status: 206, headers: ["Content-Range": "bytes 0-99/1000"], body: TestResponse.patternBytes(count: 100))
        }
        for fetch in [FetchOperation<Data>(url: server.url("/part")), DataFetchOperation(url: server.url("/part"))] {
            fetch.configuration.retryPolicy = .none
            let error = await #expect(throws: FetchError.self) { try await fetch.run() }
            guard case .invalidResponse(let failure)? = error else {
                Issue.record("\(String(describing: error))")
                continue
            }
            #expect(failure.reason == .unsolicitedPartialContent)
        }
    }

    @Test func aPartialAnswerToARangeTheAppAskedForIsItsResult() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        var request = URLRequest(url: server.url("/bytes/1000"))
        request.setValue("bytes=0-99", forHTTPHeaderField: "Range")
        let fetch = FetchOperation<Data>(request: request)
        try await fetch.run()
        #expect(try fetch.result?.get() == TestResponse.patternBytes(count: 100))
        #expect(fetch.response?.statusCode == 206)
    }
}
