// What the examples in FetchKit's symbol documentation (the /// comments of Sources/FetchKit) take
// for granted: the module SymbolDocStubs, which .ci/examples compiles and imports into each source
// file's page of examples (see "Symbol documentation" in .ci/examples). A one-line example on
// `enqueue` cannot declare the `queue`, `operation` and `model` it uses; they are declared here,
// once, the way a reader's app would have them. A type an example declares shadows the stub of
// that name; a variable does not (its uses become ambiguous): name an example's variables apart
// from these. Add a stub only for a name an example uses without declaring it.
import FetchKit

// MARK: Models and endpoints

public nonisolated struct User: Decodable, Sendable {
    public let id: Int
    public let name: String
}

public nonisolated struct Feed: Decodable, Sendable {
    public let title: String
}

/// GET /user: the user, decoded.
public nonisolated final class GetUser: FetchOperation<User>, @unchecked Sendable {
    public override func parseResponseBody(_ body: Data) throws -> User {
        try JSONDecoder().decode(User.self, from: body)
    }
}

/// GET a feed.
public nonisolated final class GetFeed: FetchOperation<Feed>, @unchecked Sendable {
    public override func parseResponseBody(_ body: Data) throws -> Feed {
        try JSONDecoder().decode(Feed.self, from: body)
    }
}

/// An app's view model, on the main actor.
@MainActor public final class Model {
    public var user: User?
    public var fraction = 0.0
    public var failures = 0
    public init() {}
    public func show<Value>(_ result: Result<Value, FetchError>) {}
    public func show<Value>(_ result: Result<Value, FetchError>, for url: URL?) {}
}

/// A progress bar, on the main actor.
@MainActor public final class ProgressBar {
    public var doubleValue = 0.0
    public init() {}
}

@MainActor public let model = Model()
@MainActor public let bar = ProgressBar()

// MARK: Places

private func address(_ text: String) -> URL {
    guard let url = URL(string: text) else { preconditionFailure("not a URL: \(text)") }
    return url
}

public let api = address("https://api.example.com/v1")
public let url = address("https://api.example.com/v1/items")
public let userURL = address("https://api.example.com/v1/user")
public let tagsURL = address("https://api.example.com/v1/tags")
public let imageURL = address("https://cdn.example.com/big.iso")
public let isoURL = address("https://mirror.example.com/disk.iso")
public let feedURLs = [address("https://example.com/a.xml"), address("https://example.com/b.xml")]
public let feeds = feedURLs
public let folder = URL(fileURLWithPath: "/tmp/downloads", isDirectory: true)
public let cachesFolder = URL(fileURLWithPath: "/tmp/caches", isDirectory: true)
public let publishedChecksum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
public let request = URLRequest(url: url)

// MARK: Queues and operations

public let queue = FetchQueue()
public let fetchQueue = queue
public let storeQueue = DispatchQueue(label: "store")
public let operation = GetUser(url: userURL)
public let getUser = operation
public let download = DownloadOperation(url: imageURL, destination: folder.appendingPathComponent("big.iso"))
// A journal for the examples that restore from one (nothing is written: the stub is never run).
public let journal: DownloadJournal = {
    do {
        return try DownloadJournal(contentsOf: folder.appendingPathComponent("downloads.json"))
    } catch {
        fatalError("the examples' stubs are compiled, never run")
    }
}()

// MARK: Errors and what an app does with them

public let error: FetchError = .cancelled(.init(url: url))
public let errors: [FetchError] = [error]

public struct Timeout: Error {
    public init() {}
}

public func log<Value>(_ value: Value) {}
public func store(_ feed: Feed) {}
public func show(_ user: User) {}
public func report(_ error: FetchError) {}
public func showNotFound() {}
public func showRetryLater() {}
public func showSlowNetworkHint() {}
public func logIn() {}
