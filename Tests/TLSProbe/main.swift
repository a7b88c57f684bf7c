// A probe for FetchKitTests' TLS suite: fetches URLs through a FetchQueue and prints what came
// back. libcurl on Linux trusts only /etc/ssl/certs/ca-certificates.crt, so the tests run this
// in a private mount namespace with a bundle holding their test CA bind-mounted over that
// path; the test process itself has many threads and cannot enter a namespace of its own.
//
// Usage: TLSProbe <url>...
// Fetches every URL at once through one FetchQueue (default retry policy) and prints one line
// per URL, in the order given:
//   <index> ok status=<code> bytes=<count> pattern=<match|mismatch|none> attempts=<n>
//   <index> error kind=<FetchError.Code> reason=<TLSFailure.Reason|none> urlerror=<code|none> attempts=<n> text=<libcurl's message> description=<FetchError's description>
// `pattern` compares the body of a `/bytes/<n>` URL with the LoopbackServer's byte pattern.
// Exits 0 once every fetch ended (whatever its result), 2 on bad usage.
import FetchKit
import Foundation
import LoopbackServer

let urls = CommandLine.arguments.dropFirst().map { URL(string: $0) }
guard !urls.isEmpty, urls.allSatisfy({ $0 != nil }) else {
    FileHandle.standardError.write(Data("usage: TLSProbe <url>...\n".utf8))
    exit(2)
}

/// One line without line breaks, for a message that may hold any text.
func oneLine(_ text: String) -> String {
    text.replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\r", with: " ")
}

/// The line for one fetch.
func report(_ url: URL, _ operation: FetchOperation<Data>, _ result: Result<Data, FetchError>) -> String {
    switch result {
    case .success(let body):
        var pattern = "none"
        if url.pathComponents.count == 3, url.pathComponents[1] == "bytes", let count = Int(url.pathComponents[2]) {
            pattern = body == BytePattern.data(offset: 0, count: count) ? "match" : "mismatch"
        }
        let status = operation.response?.statusCode ?? 0
        return "ok status=\(status) bytes=\(body.count) pattern=\(pattern) attempts=\(operation.attempts)"
    case .failure(let error):
        var urlError = "none", reason = "none", text = ""
        if case .transport(let underlying) = error {
            urlError = "\(underlying.code.rawValue)"
            text = underlying.localizedDescription
        } else if case .tls(let failure) = error {
            reason = "\(failure.reason)"
            text = failure.message
        }
        return "error kind=\(error.code) reason=\(reason) urlerror=\(urlError) attempts=\(operation.attempts) text=\(oneLine(text)) description=\(oneLine(error.description))"
    }
}

let queue = FetchQueue(maximumConcurrentTransfers: 8)
let lines = await withTaskGroup(of: (Int, String).self) { group in
    for (index, url) in urls.compactMap({ $0 }).enumerated() {
        group.addTask {
            let operation = FetchOperation<Data>(url: url)
            let result: Result<Data, FetchError>
            do throws(FetchError) {
                result = .success(try await queue.fetch(operation))
            } catch {
                result = .failure(error)
            }
            return (index, report(url, operation, result))
        }
    }
    var lines = [String](repeating: "", count: urls.count)
    for await (index, line) in group { lines[index] = "\(index) \(line)" }
    return lines
}
print(lines.joined(separator: "\n"))
