import FetchKit
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// Fetches one RSS 2.0 or Atom feed and parses its title and entries with `XMLParser`: the
/// classic RSS-reader refresh, as a ``FetchOperation`` subclass.
final class FeedOperation: FetchOperation<Feed>, @unchecked Sendable {
    struct FeedError: Error, CustomStringConvertible {
        let description: String
    }

    /// The feed's path on the server, for display.
    let path: String

    init(url: URL, path: String) {
        self.path = path
        super.init(request: URLRequest(url: url))
    }

    override func parseResponseBody(_ body: Data) throws -> Feed {
        let parser = XMLParser(data: body)
        let reader = FeedReader()
        parser.delegate = reader
        let succeeded = parser.parse()
        guard let kind = reader.kind else {
            throw FeedError(description: "not an RSS or Atom feed")
        }
        // On Linux, parse() returns true for a truncated document but sets parserError: check both.
        if !succeeded || parser.parserError != nil {
            // The error code is libxml2's (5: the document ends too early); FoundationXML's
            // ErrorCode names do not line up with it on Linux, so the number is reported as is.
            let code = (parser.parserError as NSError?)?.code ?? 0
            let detail = code == 5 ? "the document ends too early" : "XML error \(code)"
            throw FeedError(description: "malformed XML at line \(parser.lineNumber): \(detail)")
        }
        return Feed(title: reader.title ?? "(untitled \(kind))", itemCount: reader.items)
    }
}

/// A feed's title and how many entries it has.
struct Feed: Sendable {
    let title: String
    let itemCount: Int
}

/// Reads a feed's kind, title and entry count.
private final class FeedReader: NSObject, XMLParserDelegate {
    var kind: String?
    var title: String?
    var items = 0
    private var path: [String] = []
    private var text = ""

    func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]) {
        if path.isEmpty {
            switch elementName {
            case "rss": kind = "RSS"
            case "feed": kind = "Atom"
            default: parser.abortParsing()
            }
        }
        if elementName == "item" || elementName == "entry" { items += 1 }
        path.append(elementName)
        text = ""
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        text += string
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?) {
        // The feed's own title: rss/channel/title, or feed/title.
        if elementName == "title", title == nil, path == ["rss", "channel", "title"] || path == ["feed", "title"] {
            title = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        path.removeLast()
    }
}
