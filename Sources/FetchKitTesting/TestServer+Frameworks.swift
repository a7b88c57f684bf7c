import Foundation
#if canImport(Testing)
import Testing
#endif
#if canImport(XCTest)
import XCTest
#endif

extension TestServer {
    /// The server the running test's ``TestServerTrait`` made (`@Test(.testServer)`), or `nil`
    /// outside such a test.
    @TaskLocal public static var current: TestServer?
}

#if compiler(>=6.1) && canImport(Testing)
/// Gives a Swift Testing test a ``TestServer`` of its own: made before the test runs,
/// ``TestServer/current`` while it runs, shut down and verified after it — unmet expectations
/// and requests no route matched fail the test.
///
/// ```swift
/// @Test(.testServer) func getUser() async throws {
///     let server = try #require(TestServer.current)
///     server.route("GET", "/users/:id") { _ in .json(#"{"id": 1, "name": "Ada"}"#) }
///     server.expect("GET", "/users/:id")
///     let user = try await FetchQueue().fetch(GetUser(url: server.url("/users/1")))
///     #expect(user.name == "Ada")
/// }
/// ```
///
/// Tests that run in parallel each get their own server, on a port of its own.
public struct TestServerTrait: TestTrait, TestScoping {
    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let server = try TestServer()
        defer { server.shutDown() }
        try await TestServer.$current.withValue(server) {
            try await function()
        }
    }
}

extension Trait where Self == TestServerTrait {
    /// A ``TestServer`` of the test's own, as ``TestServer/current`` (see ``TestServerTrait``).
    public static var testServer: Self { TestServerTrait() }
}
#endif

#if canImport(XCTest)
extension XCTestCase {
    /// A ``TestServer`` for this test, shut down and verified when the test ends: unmet
    /// expectations and requests no route matched fail it (`XCTFail`).
    ///
    /// - Throws: If the server's socket cannot be made.
    public func makeTestServer(file: StaticString = #filePath, line: UInt = #line) throws -> TestServer {
        let server = try TestServer()
        addTeardownBlock {
            if let failure = server.shutDown(recordingIssue: false) {
                XCTFail(failure.description, file: file, line: line)
            }
        }
        return server
    }
}
#endif
