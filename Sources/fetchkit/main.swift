// fetchkit: download URLs concurrently with FetchKit, or, with no URL, run an offline demo.
//
//   swift run fetchkit                                   the demo (no network needed)
//   swift run fetchkit URL... [-o DIR] [--parallel N] [--per-host N] [--retry N] [--timeout S] [--max-size SIZE] [--force] [--sha256 HEX]
//
// Exit status: 0 when every download succeeded, 1 when one failed, 2 for bad arguments, and
// 130 (SIGINT, Ctrl-C) or 143 (SIGTERM) when a signal stopped the run, whether or not its
// output could be printed to the end (a closed pipe stops the printing, not the downloads).
// Partial files that the server allows resuming are kept, and the same command resumes them
// with `Range` requests.
import FetchKit
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// A reader that goes away (`fetchkit URL… | head -1`) must not kill the downloads: writes to
// it fail with EPIPE instead, and the tool stops printing there (see `OutputStream`).
signal(SIGPIPE, SIG_IGN)

let options: Options
do {
    options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    Terminal.error("fetchkit: \(error.description)\n\n\(Options.usage)")
    exit(2)
}
if options.showHelp {
    print(Options.usage)
    exit(0)
}
exit(options.urls.isEmpty ? Demo.run() : Downloader(options: options).run())
