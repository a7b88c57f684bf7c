// Subclasses as an endpoint author writes them in another module: each initializer of
// FetchOperation, JSONFetchOperation, DownloadOperation and StreamingFetchOperation called
// through `super`. A call to a
// convenience initializer through `super` compiled across modules for a generic superclass and
// then failed to link (an undefined initializing entry point); this target is built with the
// tests, so such a break fails the build. FetchKitTests also runs it.
import FetchKit
import Foundation

final class GetUserByRequest: FetchOperation<Data>, @unchecked Sendable {
    init(id: Int, base: URL) {
        super.init(request: URLRequest(url: base.appendingPathComponent("users/\(id)")))
    }
}

final class GetUser: FetchOperation<Data>, @unchecked Sendable {
    init(id: Int, base: URL) {
        super.init(url: base.appendingPathComponent("users/\(id)"))
    }
}

struct Feed: Decodable, Sendable { let items: [String] }

final class GetFeed: JSONFetchOperation<Feed>, @unchecked Sendable {
    init(base: URL) {
        super.init(url: base.appendingPathComponent("feed"))
    }
}

final class GetFeedByRequest: JSONFetchOperation<Feed>, @unchecked Sendable {
    init(base: URL) {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        super.init(request: URLRequest(url: base.appendingPathComponent("feed")), decoder: decoder)
    }
}

final class GetArchive: DownloadOperation, @unchecked Sendable {
    init(base: URL, into directory: URL) {
        super.init(url: base.appendingPathComponent("archive.zip"), destination: directory.appendingPathComponent("archive.zip"))
    }
}

final class GetArchiveByRequest: DownloadOperation, @unchecked Sendable {
    init(base: URL, into directory: URL) {
        super.init(request: URLRequest(url: base.appendingPathComponent("archive.zip")),
                   destination: directory.appendingPathComponent("archive.zip"))
    }
}

struct Token: Decodable, Sendable { let text: String }

final class StreamTokens: StreamingFetchOperation<Token>, @unchecked Sendable {
    init(base: URL) {
        super.init(url: base.appendingPathComponent("tokens"), bufferSize: 256 << 10)
    }

    override var framing: StreamFraming { .serverSentEvents() }

    override func parseElement(_ piece: StreamPiece) throws -> Token? {
        guard case .event(let event) = piece else { return nil }
        return try JSONDecoder().decode(Token.self, from: Data(event.data.utf8))
    }
}

final class StreamTokensByRequest: StreamingFetchOperation<Token>, @unchecked Sendable {
    init(base: URL) {
        super.init(request: URLRequest(url: base.appendingPathComponent("tokens")))
    }
}

let base = URL(string: "https://api.example.com/v1")!
let directory = URL(fileURLWithPath: "/tmp")
let operations: [AnyFetchOperation] = [
    GetUserByRequest(id: 1, base: base), GetUser(id: 2, base: base), GetFeed(base: base), GetFeedByRequest(base: base),
    GetArchive(base: base, into: directory), GetArchiveByRequest(base: base, into: directory),
    StreamTokens(base: base), StreamTokensByRequest(base: base),
]
for operation in operations {
    print("\(type(of: operation)) \(operation.request?.url?.absoluteString ?? "none")")
}
