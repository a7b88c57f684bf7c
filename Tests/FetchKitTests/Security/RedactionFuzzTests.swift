import Foundation
import Testing
@testable import FetchKit

/// Property tests of ``Redaction`` over thousands of generated URLs, from fixed seeds.
///
/// The generator builds each URL and, beside it, the redaction it expects: every secret it
/// puts in (a password, a lone userinfo, the value of a sensitive name) is drawn from a marker
/// alphabet that nothing else uses (`Q` and `V`, also percent-encoded, even twice), so "no
/// secret survives" is checked as "no marker survives, even after percent-decoding".
@Suite("Redaction fuzz", .timeLimit(.minutes(3)))
struct RedactionFuzzTests {
    static let seeds: [UInt64] = [1, 0xFE7C_4B17, 20_261_124]

    @Test(arguments: seeds)
    func generatedURLsLoseExactlyTheirSecrets(seed: UInt64) async throws {
        var random = SplitMix64(seed: seed)
        var parsedByFoundation = 0
        await forEachRound(2500) { round in
            let sample = URLSample.make(&random)
            let context = Comment(rawValue: "seed \(seed) round \(round): \(sample.input)")
            let output = Redaction.redacted(sample.input)
            // Non-secret parts survive, in place: the output is exactly the expected one.
            #expect(output == sample.expected, context)
            // No secret survives, however it was encoded.
            #expect(!Self.hasMarker(output), context)
            // A fixed point.
            #expect(Redaction.redacted(output) == output, context)
            // The same through a URL, when Foundation reads the text as it is.
            if let url = URL(string: sample.input), url.absoluteString == sample.input {
                parsedByFoundation += 1
                #expect(Redaction.redacted(url) == sample.expected, context)
                // Where Foundation sees the host and a user beside a password, they survive.
                if var host = url.host(percentEncoded: true), !host.isEmpty {
                    if host.contains(":") { host = "[\(host)]" }   // IPv6, shown without its brackets
                    #expect(output.contains("@" + host) || output.contains("//" + host), "\(context): host \(host)")
                }
                if url.password(percentEncoded: true) != nil, let user = url.user(percentEncoded: true) {
                    #expect(output.contains(user + ":" + Redaction.placeholder + "@"), context)
                }
                // Its secrets hunted in free text that shows them without the URL.
                let loose = "user \(url.user ?? "") pw \(url.password ?? "") values \(sample.secrets.joined(separator: " "))"
                #expect(!Self.hasMarker(Redaction.redacted(text: loose, mentioning: [url]), huntedOnly: true), context)
            }
            // Inside a sentence, as a URL in a system message is.
            if sample.input.contains("://"), sample.input.last.map({ $0.isLetter || $0.isNumber }) == true {
                #expect(Redaction.redacted(text: "GET \(sample.input) failed") == "GET \(sample.expected) failed", context)
            }
        }
        #expect(parsedByFoundation > fuzzRounds(2500) / 5, "the generator should mostly make URLs Foundation accepts")
    }

    /// Any text at all: no crash, and a fixed point after one pass.
    @Test(arguments: seeds)
    func arbitraryTextNeverCrashesAndSettles(seed: UInt64) async {
        var random = SplitMix64(seed: seed)
        let alphabet: [String] = ["%", "@", ":", "/", "?", "#", "&", ";", "=", "[", "]", "+", "a", "Q", "token",
                                  "key", "http", "://", "%2", "%4", "%25", "%5F", "\u{1B}", "\n", " ", "é", "👩‍💻", "\u{0}",
                                  "REDACTED", "REDA", ".", ")", "\u{85}", "V"]
        await forEachRound(3000) { round in
            let text = (0..<random.below(24)).map { _ in alphabet[random.below(alphabet.count)] }.joined()
            let context = Comment(rawValue: "seed \(seed) round \(round): \(text.debugDescription)")
            let once = Redaction.redacted(text)
            #expect(Redaction.redacted(once) == once, context)
            let free = Redaction.redacted(text: text)
            #expect(Redaction.redacted(text: free) == free, context)
            if let url = URL(string: text) {
                _ = Redaction.redacted(text: text + " " + text, mentioning: [url])
            }
        }
    }

    static let markers: Set<Character> = ["Q", "V"]

    /// Whether `text`, or any percent-decoding of it, shows a marker. With `huntedOnly`, only
    /// runs of at least ``Redaction/shortestHuntedSecret`` markers count (shorter values are not
    /// hunted in free text).
    static func hasMarker(_ text: String, huntedOnly: Bool = false) -> Bool {
        let forms = [text, Redaction.fullyDecoded(text), Redaction.fullyDecoded(text.replacingOccurrences(of: "+", with: " "))]
        if !huntedOnly { return forms.contains { $0.contains(where: markers.contains) } }
        return forms.contains { form in
            form.split(whereSeparator: { !markers.contains($0) }).contains { $0.count >= Redaction.shortestHuntedSecret }
        }
    }
}

/// One generated URL, the redaction it must get, and the secrets in it.
private struct URLSample {
    var input = ""
    var expected = ""
    var secrets: [String] = []

    /// Appends text that is not secret to both sides.
    mutating func plain(_ text: String) {
        input += text
        expected += text
    }

    /// Appends a secret: `REDACTED` on the expected side.
    mutating func secret(_ text: String) {
        input += text
        expected += Redaction.placeholder
        secrets.append(text)
    }

    static let secretPieces = ["Q", "V", "QVQV", "VVQQ", "%51", "%56", "%2551", "%40", "%26", "%3D",
                               "%3B", "%23", "%2F", "%3F", "%25", "%20", "+", "!", "*", "~", ".", "-", "_", "0", "9"]
    static let sensitiveNames = ["token", "access_token", "id_token", "refresh_token", "api_key", "apikey", "key",
                                 "password", "secret", "signature", "sig", "X-Amz-Signature", "X-Amz-Credential",
                                 "X-Goog-Signature", "session_token", "client_secret", "user[password]", "jsessionid"]
    static let plainNames = ["page", "q", "lang", "monkey", "keys", "tokens", "sigma", "keyboard", "utm_source",
                             "passage", "tokenizer", "signal", "codec", "a", "x-amz-date"]
    static let plainValues = ["1", "abc", "a@b", "a/b", "a:b", "a%20b", "a+b", "", "2026-11-24", "%E2%9C%93", "y=z"]

    static func secretText(_ random: inout SplitMix64) -> String {
        // Starts with a marker so that even a one-piece secret has one.
        random.pick(["Q", "V", "QQVV", "%51", "%56"]) + (0..<random.below(8)).map { _ in random.pick(secretPieces) }.joined()
    }

    /// A sensitive name in any case, with some characters percent-encoded or `-` for `_`.
    static func spelled(_ name: String, _ random: inout SplitMix64) -> String {
        name.map { character -> String in
            var text = String(character)
            if random.chance(30) { text = random.chance(50) ? text.uppercased() : text.lowercased() }
            if text == "_", random.chance(30) { text = "-" }
            if random.chance(10), let byte = text.utf8.first, text.utf8.count == 1 {
                text = String(format: "%%%02X", byte)
            }
            if text == "[" || text == "]" { text = text == "[" ? "%5B" : "%5D" }
            return text
        }.joined()
    }

    /// `name=value` pairs joined by `&` or `;`, some sensitive, some bare.
    mutating func pairs(_ random: inout SplitMix64, separators: [String]) {
        for index in 0..<(1 + random.below(5)) {
            if index > 0 { plain(random.pick(separators)) }
            switch random.below(10) {
            case 0..<4:
                plain(Self.spelled(random.pick(Self.sensitiveNames), &random) + "=")
                secret(Self.secretText(&random))
            case 4:
                plain(random.pick(Self.sensitiveNames))   // a name with no value
            case 5:
                plain("")                                   // an empty pair
            default:
                plain(random.pick(Self.plainNames) + "=" + random.pick(Self.plainValues))
            }
        }
    }

    static func make(_ random: inout SplitMix64) -> URLSample {
        var sample = URLSample()
        let scheme = random.pick(["http://", "https://", "HTTP://", "ftp://", "//", "", "rel"])
        if scheme != "rel" {
            sample.plain(scheme)
            switch random.below(6) {
            case 0:
                sample.plain(random.pick(["bob", "u%40x", "a.b", "bob%3Ax"]) + ":")
                sample.secret(secretText(&random))
                sample.plain("@")
            case 1:
                sample.secret(secretText(&random))
                sample.plain("@")
            case 2 where !scheme.isEmpty:
                sample.plain("bob:")
                sample.secret("")
                sample.plain("@")
            default:
                break
            }
            if !scheme.isEmpty || sample.input.contains("@") {
                sample.plain(random.pick(["example.com", "127.0.0.1", "[::1]", "[2001:db8::7]", "xn--bcher-kva.example", "h"]))
                if random.chance(30) { sample.plain(":\(random.below(65536))") }
            }
        }
        // A path right after nothing must not start with "//" (that would begin an authority).
        if sample.input.isEmpty || sample.input == "//" { sample.plain("/p") }
        for _ in 0..<random.below(4) {
            sample.plain("/" + random.pick(["a", "v1", "a@b", "%20x", "file.txt", "", "@", "k=v", "Z%zz".lowercased()]))
            if random.chance(15) {
                sample.plain(";" + (random.chance(50) ? "v=1" : "jsessionid="))
                if sample.input.hasSuffix("=") { sample.secret(secretText(&random)) }
            }
        }
        if random.chance(80) {
            sample.plain("?")
            sample.pairs(&random, separators: ["&", "&", ";"])
        }
        switch random.below(4) {
        case 0:
            sample.plain("#")
            sample.pairs(&random, separators: ["&", ";"])
        case 1:
            sample.plain("#/callback?")
            sample.pairs(&random, separators: ["&"])
        case 2:
            sample.plain("#" + random.pick(["top", "a@b", "", "x:y"]))
        default:
            break
        }
        return sample
    }
}
