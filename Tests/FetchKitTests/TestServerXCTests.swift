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
