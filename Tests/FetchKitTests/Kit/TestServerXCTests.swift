import FetchKit
import FetchKitTesting
import Foundation
import XCTest

/// The kit's XCTest helper: `makeTestServer()` shuts the server down and verifies it when the
/// test ends.
final class TestServerXCTests: XCTestCase {
    func testAnEndpointAgainstTheServer() async throws {
        let server = try makeTestServer()
        server.route("GET", "/greeting") { _ in .text("hello") }
        server.expect("GET", "/greeting")
        let body = try await FetchQueue().fetch(DataFetchOperation(url: server.url("/greeting")))
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "hello")
    }
}

/// The kit's ordered and one-shot expectations under XCTest: a login before the profile, and
/// a token route that answers once.
final class TestServerOrderXCTests: XCTestCase {
    func testARefreshHappensOnceAndBeforeTheProfile() async throws {
        let server = try makeTestServer()
        server.route("POST", "/token", once: true) { _ in .text("fresh") }
        server.route("GET", "/profile") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
        server.expectInOrder(["POST /token", "GET /profile"])
        var token = URLRequest(url: server.url("/token"))
        token.httpMethod = "POST"
        token.httpBody = Data("{}".utf8)
        let queue = FetchQueue()
        let fresh = try await queue.fetch(DataFetchOperation(request: token))
        XCTAssertEqual(String(decoding: fresh, as: UTF8.self), "fresh")
        _ = try await queue.fetch(DataFetchOperation(url: server.url("/profile")))
        XCTAssertNil(server.shutDown())
    }
}
