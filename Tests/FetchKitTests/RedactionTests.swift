import FetchKit
import Testing

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
}
