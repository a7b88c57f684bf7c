import Foundation
import Testing
@testable import FetchKit

/// Names from URLs and headers, made safe: examples first, then thousands of generated inputs
/// checked against the properties every result must have.
@Suite("Safe file names", .timeLimit(.minutes(3)))
struct FileNameFuzzTests {
    // MARK: Examples

    @Test(arguments: [
        ("", "index.html"), (".", "index.html"), ("..", "index.html"), ("  ", "index.html"),
        (".bashrc", "_bashrc"), ("..hidden", "_.hidden"), ("-rf", "_rf"),
        ("a/b", "a_b"), ("a\\b", "a_b"), ("../../etc/passwd", "_._.._etc_passwd"),
        ("nul\u{0}.bin", "nul_.bin"), ("red\u{1B}[31m.txt", "red_[31m.txt"), ("del\u{7F}", "del_"),
        ("c1\u{85}\u{9B}x", "c1__x"), ("\u{202E}gpj.exe", "_gpj.exe"), ("a\u{2066}b\u{2069}", "a_b_"),
        ("  report.pdf  ", "report.pdf"), ("naïve café.txt", "naïve café.txt"), ("日本語.txt", "日本語.txt"),
        (".\u{301}x", "_\u{301}x"),
    ])
    func sanitisesExamples(_ input: String, _ expected: String) {
        #expect(SafeFileName.sanitize(input) == expected)
    }

    @Test(arguments: [
        ("http://h/", "index.html"), ("http://h", "index.html"), ("http://h/dir/", "dir"),
        ("http://h/a%2Fb", "a_b"), ("http://h/x/..%2F..%2Fescape", "_._.._escape"),
        ("http://h/file.tar.gz?x=1#top", "file.tar.gz"), ("http://h/%2e%2e", "index.html"),
        ("http://h/%E2%80%AEgpj.exe", "_gpj.exe"), ("http://h/caf%C3%A9", "café"),
        ("http://h/%FF%FEx", "\u{FFFD}\u{FFFD}x"), ("http://h/100%25", "100%"), ("http://h/50%zz", "50%zz"),
    ])
    func namesURLs(_ url: String, _ expected: String) throws {
        #expect(SafeFileName.name(for: try #require(URL(string: url))) == expected)
    }

    @Test func aLongNameIsCutKeepingItsExtensionAndGainsAHash() {
        let long = String(repeating: "a", count: 256) + ".bin"                 // 260 bytes
        let name = SafeFileName.sanitize(long, source: "http://h/one")
        #expect(name.utf8.count == SafeFileName.maximumByteCount)
        #expect(name.hasPrefix("aaaa") && name.hasSuffix("-\(SafeFileName.hash("http://h/one")).bin"))
        #expect(name != SafeFileName.sanitize(long, source: "http://h/two"), "another source, another name")
        #expect(SafeFileName.sanitize(long, source: "http://h/one") == name, "deterministic")
        // Multi-byte characters are never split.
        let wide = String(repeating: "語", count: 100)                          // 300 bytes
        let cut = SafeFileName.sanitize(wide)
        #expect(cut.utf8.count <= SafeFileName.maximumByteCount)
        #expect(cut.hasPrefix("語") && !cut.contains("\u{FFFD}"))
        // FNV-1a of "" is 0xcbf29ce484222325; its halves folded: 0x4fd0bfc1.
        #expect(SafeFileName.hash("") == "4fd0bfc1")
    }

    @Test func uniqueNamesNumberRepeatsIgnoringCase() throws {
        let urls = try ["http://h/10", "http://h/10?again=1", "http://h/A.txt", "http://h/a.txt", "http://h/10-1", "http://h/"]
            .map { try #require(URL(string: $0)) }
        #expect(SafeFileName.uniqueNames(for: urls) == ["10", "10-1", "A.txt", "a-1.txt", "10-1-1", "index.html"])
    }

    @Test func theDownloadOperationShortensItsPartialFileName() {
        let name = String(repeating: "b", count: 250)
        let download = DownloadOperation(url: URL(string: "http://127.0.0.1:9/x")!, destination: URL(fileURLWithPath: "/tmp/\(name)"))
        #expect(download.partialRecordURL.lastPathComponent.utf8.count <= 255)
        #expect(download.partialFileURL.lastPathComponent.hasPrefix(".bbbb"))
        let short = DownloadOperation(url: URL(string: "http://127.0.0.1:9/x")!, destination: URL(fileURLWithPath: "/tmp/short.bin"))
        #expect(short.partialFileURL.lastPathComponent == ".short.bin.fetchkit-partial", "short names are unchanged")
    }

    // MARK: Properties, over generated inputs

    /// What every name `SafeFileName` returns must satisfy.
    private func checkSafe(_ name: String, from input: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let shown = input.debugDescription
        #expect(!name.isEmpty, "empty for \(shown)", sourceLocation: sourceLocation)
        #expect(name != "." && name != "..", "\(shown)", sourceLocation: sourceLocation)
        #expect(name.utf8.first != UInt8(ascii: "."), "hidden: \(name.debugDescription) for \(shown)", sourceLocation: sourceLocation)
        #expect(name.utf8.first != UInt8(ascii: "-"), "option-like: \(name.debugDescription) for \(shown)", sourceLocation: sourceLocation)
        #expect(!name.unicodeScalars.contains { SafeFileName.isUnsafe($0) }, "unsafe: \(name.debugDescription) for \(shown)", sourceLocation: sourceLocation)
        #expect(name.utf8.count <= SafeFileName.maximumByteCount, "too long for \(shown)", sourceLocation: sourceLocation)
        // A download to it names its partial files so that they fit too.
        let download = DownloadOperation(url: URL(fileURLWithPath: "/x"), destination: URL(fileURLWithPath: "/tmp").appendingPathComponent(name))
        #expect(download.partialRecordURL.lastPathComponent.utf8.count <= 255, sourceLocation: sourceLocation)
        #expect(!name.utf8.contains(0), sourceLocation: sourceLocation)
    }

    /// A scalar drawn mostly from the troublesome ones.
    private func scalar(_ random: inout SplitMix64) -> Unicode.Scalar {
        let pools: [ClosedRange<UInt32>] = [
            0x20...0x7E, 0x20...0x7E, 0x00...0x1F, 0x7F...0x9F, 0x2E...0x2F, 0x5C...0x5C, 0x25...0x25, 0x2D...0x2D,
            0x202A...0x202E, 0x2066...0x2069, 0x200B...0x200F, 0x2028...0x2029, 0x0300...0x036F, 0x3040...0x30FF,
            0x1F300...0x1F6FF, 0xFEFF...0xFEFF, 0x0000...0x10FFFF,
        ]
        while true {
            let pool = pools[Int.random(in: 0..<pools.count, using: &random)]
            if let scalar = Unicode.Scalar(UInt32.random(in: pool, using: &random)) { return scalar }
        }
    }

    private func randomName(_ random: inout SplitMix64) -> String {
        let length = Int.random(in: 0..<10, using: &random) == 0 ? Int.random(in: 100...400, using: &random)
                                                                  : Int.random(in: 0...24, using: &random)
        var scalars = String.UnicodeScalarView()
        for _ in 0..<length { scalars.append(scalar(&random)) }
        var name = String(scalars)
        if Bool.random(using: &random) { name += [".bin", ".tar.gz", ".", "..", "/", ".\u{202E}exe"][Int.random(in: 0..<6, using: &random)] }
        if Int.random(in: 0..<8, using: &random) == 0 { name = [".", "..", "...", " . ", "-", ""][Int.random(in: 0..<6, using: &random)] + name }
        return name
    }

    /// A URL whose last segment is random bytes, percent-encoded (with some bare `%`).
    private func randomURL(_ random: inout SplitMix64) -> URL? {
        let count = Int.random(in: 0..<12, using: &random) == 0 ? Int.random(in: 80...200, using: &random)
                                                                : Int.random(in: 0...20, using: &random)
        var segment = ""
        for _ in 0..<count {
            let byte = UInt8.random(in: 0...255, using: &random)
            let scalar = Unicode.Scalar(byte)
            if scalar.isASCII, Character(scalar).isLetter || Character(scalar).isNumber, Bool.random(using: &random) {
                segment.append(Character(scalar))
            } else {
                segment += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: Bool.random(using: &random))
            }
        }
        if Int.random(in: 0..<6, using: &random) == 0 { segment += "%25zz" }
        let slash = Int.random(in: 0..<5, using: &random) == 0 ? "/" : ""
        return URL(string: "http://example.com/dir/\(segment)\(slash)?q=\(count)")
    }

    @Test func generatedNamesAreAlwaysSafe() async {
        var random = SplitMix64(seed: 0xF17E_5AFE)
        await forEachRound(4000) { _ in
            let input = randomName(&random)
            let name = SafeFileName.sanitize(input, source: input)
            checkSafe(name, from: input)
            #expect(SafeFileName.sanitize(input, source: input) == name, "deterministic")
            #expect(SafeFileName.sanitize(name, source: input) == name, "idempotent: \(input.debugDescription) → \(name.debugDescription)")
        }
    }

    @Test func generatedURLsAlwaysGiveSafeNames() async throws {
        var random = SplitMix64(seed: 0x0DD_BA11)
        var made = 0
        await forEachRound(2000) { _ in
            guard let url = randomURL(&random) else { return }
            made += 1
            let name = SafeFileName.name(for: url)
            checkSafe(name, from: url.absoluteString)
            #expect(SafeFileName.name(for: url) == name)
        }
        #expect(made > fuzzRounds(2000) * 95 / 100, "the generator makes valid URLs")
    }

    @Test func generatedSetsOfURLsStayUnique() async throws {
        var random = SplitMix64(seed: 0x5E7_0F_0A1)
        // Few distinct stems, so that many names collide: repeats, case variants, long names
        // that share their first 255 bytes, names that already end in -1.
        let stems = ["file", "FILE", "file-1", String(repeating: "x", count: 260), String(repeating: "x", count: 260) + "y",
                     ".hidden", "..", "", "a%2Fb", "a_b", "%E2%80%AE", "_"]
        let extensions = ["", ".txt", ".TXT", ".tar.gz"]
        try await forEachRound(150) { round in
            let count = Int.random(in: 2...40, using: &random)
            var urls: [URL] = []
            for index in 0..<count {
                let stem = stems[Int.random(in: 0..<stems.count, using: &random)]
                let ext = extensions[Int.random(in: 0..<extensions.count, using: &random)]
                let url = try #require(URL(string: "http://h\(round % 3).example/\(index % 4)/\(stem)\(ext)"))
                urls.append(url)
            }
            let names = SafeFileName.uniqueNames(for: urls)
            #expect(names.count == urls.count)
            #expect(Set(names.map { $0.lowercased() }).count == names.count, "not unique: \(names)")
            for (name, url) in zip(names, urls) { checkSafe(name, from: url.absoluteString) }
            #expect(SafeFileName.uniqueNames(for: urls) == names, "deterministic")
        }
    }
}
