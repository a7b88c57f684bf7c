import Foundation

/// The demo's feeds, compiled into the tool so that the demo needs nothing but itself.
enum SampleFeeds {
    struct Sample {
        let path: String
        let title: String
        let items: [String]
        var atom = false
    }

    static let feeds: [Sample] = [
        Sample(path: "swift-server.xml", title: "Swift on Server", items: [
            "Structured concurrency in a service", "Graceful shutdown, revisited", "Connection pools that do not leak",
            "Backpressure for streaming bodies", "Tracing a request end to end", "Tuning the event loop count",
        ]),
        Sample(path: "foundation-notes.xml", title: "Foundation Notes", items: [
            "OperationQueue on Linux", "Why there is no KVO here", "Run loops without sources", "URLSession's one serial queue",
        ]),
        Sample(path: "networking-weekly.xml", title: "Networking Weekly", items: [
            "HTTP/1.1 keep-alive in practice", "Retry-After is a date, too", "ETags and conditional GET", "Ranges and resuming",
            "The 429 you should respect", "Timeouts are not one thing", "Per-host limits", "Coalescing identical requests",
        ]),
        Sample(path: "feed-reader-dev.xml", title: "Feed Reader Development", items: [
            "Refreshing 200 feeds politely", "Parsing Atom and RSS side by side", "An activity indicator that does not flicker",
        ]),
        Sample(path: "linux-desk.xml", title: "The Linux Desk", items: [
            "libcurl under the hood", "epoll, briefly", "Where did my thread go?", "Page cache and big downloads", "fsync or not",
        ]),
        Sample(path: "atom-example.xml", title: "An Atom Feed", items: [
            "Atom entries count too", "Titles live in the feed element", "Dates in RFC 3339",
        ], atom: true),
        Sample(path: "testing-journal.xml", title: "Testing Journal", items: [
            "No sleeps in tests", "Loopback servers beat mocks", "Stress tests that finish in seconds", "ThreadSanitizer, every run",
            "Gates instead of delays",
        ]),
        Sample(path: "release-notes.xml", title: "Release Notes", items: [
            "0.1: operations", "0.2: the queue", "0.3: downloads",
        ]),
        Sample(path: "slow.xml", title: "A Slow Server", items: [
            "This feed took a while", "But it arrived",
        ]),
        Sample(path: "relocated.xml", title: "A Relocated Feed", items: [
            "Reached through a 301", "Redirects are followed",
        ]),
    ]

    /// A feed cut off in the middle, as when a server drops the connection mid-file.
    static let broken = """
    <?xml version="1.0" encoding="UTF-8"?>
    <rss version="2.0">
      <channel>
        <title>Broken Feed</title>
        <item><title>The last item was cut o
    """

    /// A page that is not a feed at all.
    static let notAFeed = """
    <html><head><title>Welcome</title></head><body><p>Nothing to see here.</p></body></html>
    """

    static func document(for sample: Sample) -> String {
        if sample.atom {
            let entries = sample.items.enumerated().map { index, title in
                "  <entry><title>\(escape(title))</title><id>urn:fetchkit:demo:\(sample.path):\(index)</id>"
                    + "<updated>2026-11-0\(index % 9 + 1)T09:00:00Z</updated></entry>"
            }
            return """
            <?xml version="1.0" encoding="UTF-8"?>
            <feed xmlns="http://www.w3.org/2005/Atom">
              <title>\(escape(sample.title))</title>
              <id>urn:fetchkit:demo:\(sample.path)</id>
              <updated>2026-11-20T09:00:00Z</updated>
            \(entries.joined(separator: "\n"))
            </feed>
            """
        }
        let items = sample.items.enumerated().map { index, title in
            "    <item><title>\(escape(title))</title><link>http://127.0.0.1/\(sample.path)#\(index)</link>"
                + "<description>\(escape(title)), in a few paragraphs.</description></item>"
        }
        return """
        <?xml version="1.0" encoding="UTF-8"?>
        <rss version="2.0">
          <channel>
            <title>\(escape(sample.title))</title>
            <link>http://127.0.0.1/\(sample.path)</link>
            <description>A sample feed for the FetchKit demo.</description>
        \(items.joined(separator: "\n"))
          </channel>
        </rss>
        """
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}
