// fetchkit: download URLs concurrently with FetchKit, or, with no URL, run an offline demo.
//
//   swift run fetchkit                                   the demo (no network needed)
//   swift run fetchkit URL... [-o DIR] [--parallel N] [--per-host N] [--retry N] [--timeout S] [--max-size SIZE]
import FetchKit
import Foundation

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
