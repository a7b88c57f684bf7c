import FetchKit
import Foundation

/// A user of the sample API.
public struct User: Decodable, Sendable, Equatable {
    public let id: Int
    public let name: String

    public init(id: Int, name: String) {
        self.id = id
        self.name = name
    }
}

/// `GET /users/{id}`: one endpoint, one subclass.
public final class GetUser: FetchOperation<User>, @unchecked Sendable {
    /// The user `id` at `baseURL`.
    public init(id: Int, baseURL: URL) {
        super.init(url: baseURL.appendingPathComponent("users").appendingPathComponent(String(id)))
        configuration.maximumResponseSize = 64 << 10
    }

    public override func parseResponseBody(_ body: Data) throws -> User {
        try JSONDecoder().decode(User.self, from: body)
    }
}
