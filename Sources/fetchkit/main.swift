// fetchkit: download URLs concurrently with FetchKit, or run an offline demo.
//
//   swift run fetchkit demo                              the demo (no network needed)
//   swift run fetchkit URL... [-i FILE] [options]        see `fetchkit --help`
//
// Exit status (ExitStatus.swift, one code per failure class): 0 when every download succeeded,
// 2 for bad arguments, a failure class's code (3 file, 4 network, 5 TLS, 7 protocol, 8 HTTP,
// 9 checksum, 10 size, 1 other) when the downloads failed for one, 11 when some succeeded or
// they failed for several, and 130 (SIGINT, Ctrl-C) or 143 (SIGTERM) when a signal stopped the
// run, whether or not its output could be printed to the end (a closed pipe stops the printing,
// not the downloads). Partial files that the server allows resuming are kept, and the same
// command resumes them with `Range` requests.
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

var options: Options
do {
    options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    // A few lines, as curl, wget and aria2c print them: the whole --help would scroll the
    // message itself off the screen.
    Terminal.error("fetchkit: \(error.description)"
        + (error.showsUsage ? "\n\(Options.synopsis)\nfetchkit --help shows every option and the exit codes" : " (fetchkit --help shows the usage)"))
    exit(ExitStatus.usage.rawValue)
}
if options.showHelp {
    print(Options.usage)
    exit(ExitStatus.success.rawValue)
}
if options.showVersion {
    // As curl -V lists its features: what FetchKit does about FoundationNetworking here.
    print("fetchkit \(Version.current)")
    let session = FetchSession()
    for entry in session.workarounds.entries {
        print("  \(entry.id): \(entry.status)")
    }
    session.invalidate()
    exit(ExitStatus.success.rawValue)
}
if options.runsDemo { exit(Demo.run()) }
if options.noBuffer { exit(NoBufferStream.run(options)) }
// No more downloads at once than the open-file limit has room for: past it, each one more fails
// with "Too many open files" (see OpenFileLimit).
let fit = OpenFileLimit.downloadsThatFit()
if options.parallel > fit.downloads {
    if options.verbosity != .quiet {
        Terminal.error("fetchkit: --parallel \(options.parallel) needs more open files than this process may have "
            + "(ulimit -n \(fit.openFiles)): \(fit.downloads) at once")
    }
    options.parallel = fit.downloads
}
exit(Downloader(options: options).run())
