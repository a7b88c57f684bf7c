import Foundation
import Testing
@testable import FetchKit

@Suite struct RedactionTests {
    @Test(arguments: [
        ("https://bob:hunter2@api.example.com/v1?page=2&access_token=abc#x", "https://bob:REDACTED@api.example.com/v1?page=2&access_token=REDACTED#x"),
        ("https://TOKEN@github.com/a.git", "https://REDACTED@github.com/a.git"),
        ("http://h/p#access_token=zz&state=1", "http://h/p#access_token=REDACTED&state=1"),
        ("http://h/p?X-Amz-Signature=1&x=2", "http://h/p?X-Amz-Signature=REDACTED&x=2"),
        ("http://h/p", "http://h/p"),
    ])
    func redactsSecrets(_ pair: (String, String)) {
        #expect(Redaction.redacted(pair.0) == pair.1)
    }

    /// The shapes a plain `&`-splitter and a first-`://` scheme finder get wrong.
    @Test(arguments: [
        // Percent-encoded and differently spelled names are the same name to a server.
        ("http://h/p?access%5Ftoken=S1&%74oken=S2", "http://h/p?access%5Ftoken=REDACTED&%74oken=REDACTED"),
        ("http://h/p?TOKEN=S1&Api-Key=S2&user%5Bpassword%5D=S3&page=2",
         "http://h/p?TOKEN=REDACTED&Api-Key=REDACTED&user%5Bpassword%5D=REDACTED&page=2"),
        ("http://h/p?session_token=S1&client-secret=S2", "http://h/p?session_token=REDACTED&client-secret=REDACTED"),
        // `;` separates pairs too, in the query and in path parameters.
        ("http://h/p?a=1;token=S1;b=2", "http://h/p?a=1;token=REDACTED;b=2"),
        ("http://h/shop;jsessionid=S1/cart?x=1", "http://h/shop;jsessionid=REDACTED/cart?x=1"),
        // IPv6 hosts, ports, `@` outside the authority.
        ("http://u:S1@[::1]:8080/p", "http://u:REDACTED@[::1]:8080/p"),
        ("http://[fe80::1%25eth0]/a@b/c?x=y@z#m@n", "http://[fe80::1%25eth0]/a@b/c?x=y@z#m@n"),
        ("http://h/p?email=a@b.example&token=S1", "http://h/p?email=a@b.example&token=REDACTED"),
        // `@` inside the userinfo, encoded or not; an empty password.
        ("http://u%40x:S1%40y@h/", "http://u%40x:REDACTED@h/"),
        ("http://u:S1@S2@h/", "http://u:REDACTED@h/"),
        ("http://u:@h/", "http://u:REDACTED@h/"),
        // No scheme: a network-path reference, a relative reference, user:password@host.
        ("//u:S1@h/p?token=S2", "//u:REDACTED@h/p?token=REDACTED"),
        ("/p?x=1&token=S1&next=https://h/", "/p?x=1&token=REDACTED&next=https://h/"),
        ("u:S1@h/p", "u:REDACTED@h/p"),
        ("h:8080/p?sig=S1", "h:8080/p?sig=REDACTED"),
        // A URL inside a query value, raw or encoded.
        ("http://h/login?next=https://u:S1@i/", "http://h/login?next=https://u:REDACTED@i/"),
        // An OAuth callback routed in the fragment.
        ("http://h/#/cb?access_token=S1&state=1", "http://h/#/cb?access_token=REDACTED&state=1"),
        // Names that only look like secrets stay.
        ("http://h/p?monkey=1&keys=2&tokens=3&sigma=4&keyboard=5&token", "http://h/p?monkey=1&keys=2&tokens=3&sigma=4&keyboard=5&token"),
    ])
    func hardenedShapes(_ pair: (String, String)) {
        #expect(Redaction.redacted(pair.0) == pair.1)
        #expect(Redaction.redacted(pair.1) == pair.1, "idempotent")
    }

    @Test func anEncodedURLInAQueryValueLosesItsSecrets() {
        let text = Redaction.redacted("http://h/login?next=https%3A%2F%2Fu%3AS1x%40i%2F%3Ftoken%3DS2x&page=2")
        #expect(!text.contains("S1x") && !text.contains("S2x"), "\(text)")
        #expect(text.hasPrefix("http://h/login?next=") && text.hasSuffix("&page=2"), "\(text)")
        #expect(Redaction.redacted(text) == text)
    }

    @Test func aURLIsShownByItsAbsoluteString() throws {
        // A relative URL's `description` is "p?token=… -- http://…"; its absoluteString is whole.
        let base = try #require(URL(string: "http://u:PW@h/a/"))
        let url = try #require(URL(string: "p?token=SEC", relativeTo: base))
        #expect(url.description != url.absoluteString)
        #expect(Redaction.redacted(url) == "http://u:REDACTED@h/a/p?token=REDACTED")
    }

    @Test func headerValues() {
        #expect(Redaction.redacted(headerValue: "Bearer abc", forName: "AUTHORIZATION") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "id=1", forName: "set-cookie") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "Basic xyz", forName: "Proxy-Authorization") == "REDACTED")
        #expect(Redaction.redacted(headerValue: "text/plain", forName: "Content-Type") == "text/plain")
        #expect(Redaction.redacted(headerValue: "https://h/next?token=S1", forName: "Location") == "https://h/next?token=REDACTED")
    }

    @Test func urlsInsideFreeText() throws {
        #expect(Redaction.redacted(text: "GET http://u:S1@h/p?token=S2. Then (https://h/?sig=S3), done")
                == "GET http://u:REDACTED@h/p?token=REDACTED. Then (https://h/?sig=REDACTED), done")
        // A message that shows the URL's secrets without the URL around them.
        let url = try #require(URL(string: "http://user:hunter22@h/p?access_token=tok%2Fen99"))
        let text = Redaction.redacted(text: "login user:hunter22 failed; token tok/en99 or tok%2Fen99 refused", mentioning: [url])
        #expect(!text.contains("hunter22") && !text.contains("tok/en99") && !text.contains("tok%2Fen99"), "\(text)")
        #expect(text.contains("login user:REDACTED failed"), "\(text)")
        #expect(Redaction.redacted(text: text, mentioning: [url]) == text)
        // Short values are not hunted in free text: they would wreck the message.
        let short = try #require(URL(string: "http://h/p?key=1"))
        #expect(Redaction.redacted(text: "1 of 1 failed", mentioning: [short]) == "1 of 1 failed")
    }
}
