import Foundation
import FetchKit
import FetchKitTesting
import Testing

// Redirects over HTTP/2. libcurl 7.88 keeps a transfer's receive buffer when its HTTP/2
// connection still carries other streams (`multi_done` returns early), and FoundationNetworking
// follows a redirect by reconfiguring the same easy handle: its `try!` on CURLOPT_BUFFERSIZE
// then meets CURLE_BAD_FUNCTION_ARGUMENT (43) and the process dies. FetchKit follows redirects
// itself, in a task of its own, so no easy handle is ever reused.

@Suite("Redirects over HTTP/2 beside other streams", .timeLimit(.minutes(3)),
       .disabled(if: TLSTools.unavailable != nil, Comment(rawValue: TLSTools.unavailable ?? "")),
       .disabled(if: runsUnderSanitizer, "under a sanitizer: the fetches run in TLSProbe, a process of their own, and CI's time goes to openssl and nginx"))
struct TLSRedirectTests {
    @Test func redirectsFollowedWhileTheConnectionCarriesOtherStreamsDoNotCrash() async throws {
        let ((results, port), log) = try await withTLSServer { server, pki in
            // A large body keeps the connection busy while the redirected fetches hop along it.
            let urls = [server.url(.valid, "/bytes/8388608")]
                + (1...6).map { server.url(.valid, "/redirect/\($0 % 3 + 1)") }
            let results = try await runTLSProbe(urls, trusting: pki.trustBundle)
            return (results, server.ports[.valid])
        }
        #expect(results.count == 7)
        for result in results {
            #expect(result.succeeded, "\(result)")
            #expect(result.fields["status"] == "200", "\(result)")
        }
        #expect(results.first?.fields["pattern"] == "match", "\(results.first.map(String.init(describing:)) ?? "")")
        let served = log.filter { $0.hasPrefix("\(port ?? 0) ") }
        #expect(served.allSatisfy { $0.contains(" HTTP/2.0 ") }, "every request came over HTTP/2: \(served)")
        // 1 large body, and 6 chains of 2 to 4 requests.
        let requests = (1...6).map { (hops: Int) -> Int in hops % 3 + 2 }.reduce(1, +)
        #expect(served.count == requests, "\(served)")
    }
}
