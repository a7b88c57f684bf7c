import Foundation
import LoopbackServer
import Testing
@testable import FetchKit
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A JSON endpoint that builds its request just before sending, as the docs suggest for an
/// endpoint whose request depends on something known only then.
final class GetLateSample: JSONFetchOperation<Sample>, @unchecked Sendable {
    private let url: URL

    init(url: URL) {
        self.url = url
        super.init()
    }

    override func makeRequest() throws -> URLRequest? {
        var request = URLRequest(url: url)
        request.setValue("Bearer t", forHTTPHeaderField: "Authorization")
        return request
    }
}

/// Defects found reviewing the typed API (issue 10), each staged for real.
@Suite("API review")
struct APIReviewTests {
    // MARK: JSONFetchOperation sends Accept whatever way its request was made

    /// "It sends `Accept: application/json` unless the request sets another `Accept`": also
    /// when a subclass builds the request in `makeRequest()`, or the request is set after
    /// init; a request's own `Accept` is kept.
    @Test func aJSONOperationSendsAcceptHowEverItsRequestWasMade() async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let late = GetLateSample(url: server.url("/json?late"))
        #expect(try await late.run().result != nil)
        let replaced = JSONFetchOperation<Sample>(url: server.url("/json?placeholder"))
        replaced.request = URLRequest(url: server.url("/json?replaced"))
        #expect(try await replaced.run().value == Sample(ok: true, items: [1, 2, 3], name: "fetchkit"))
        var own = URLRequest(url: server.url("/json?own"))
        own.setValue("application/vnd.api+json", forHTTPHeaderField: "accept")
        try await JSONFetchOperation<Sample>(request: own).run()

        let accepts = Dictionary(server.requests(path: "/json").map { ($0.target, $0.headers["Accept"]) },
                                 uniquingKeysWith: { first, _ in first })
        #expect(accepts["/json?late"] == "application/json")
        #expect(accepts["/json?replaced"] == "application/json")
        #expect(accepts["/json?own"] == "application/vnd.api+json")
        #expect(late.sentRequest?.value(forHTTPHeaderField: "Authorization") == "Bearer t")
    }
}
