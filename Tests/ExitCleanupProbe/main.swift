// A probe for FetchKitTests' exit-cleanup test: whether OpenSSL's exit handler ran before this
// process's own `atexit` handler, which is registered first thing (before any URLSession, so
// before libcurl initialises OpenSSL). `atexit` handlers run in the reverse order of their
// registration: one OpenSSL registered at its initialisation runs before this one, and leaves
// OpenSSL cleaned up (it cannot be initialised again). FetchKit turns that handler off as the
// process loads (`Sources/CFetchKitShims/exit_cleanup.c`): then OpenSSL is still there.
//
// Usage: ExitCleanupProbe
// Fetches 100 bytes from a TestServer of its own through a FetchSession (libcurl initialises
// OpenSSL for any URLSession, HTTPS or not), then exits 0. Prints, in any order:
//   state=<OpenSSLExitCleanup.current>
//   cleaned-before-exit-handler=<true|false|none>     (from the exit handler, the last line written)
import FetchKit
import Foundation
import FoundationNetworkingShims
import FetchKitTesting
#if canImport(Glibc)
import Glibc
#endif

atexit {
    let cleaned = OpenSSLExitCleanup.openSSLWasCleanedUp.map { String($0) } ?? "none"
    let line = "cleaned-before-exit-handler=\(cleaned)\n"
    line.withCString { _ = write(1, $0, strlen($0)) }
}
func say(_ line: String) {
    (line + "\n").withCString { _ = write(1, $0, strlen($0)) }
}
say("state=\(OpenSSLExitCleanup.current)")
let server = try TestServer()
server.route("GET", "/bytes/100") { _ in .pattern(count: 100) }
let session = FetchSession()
let fetch = FetchOperation<Data>(url: server.url("/bytes/100"))
fetch.configuration.session = session
fetch.start()
let data = try await fetch.value
say("fetched=\(data.count)")
exit(0)
