import FetchKit
import Foundation

/// The command line: `fetchkit URL... [-o DIR] [--parallel N] [--per-host N] [--retry N] [--timeout S] [--max-size SIZE] [--force] [--sha256 HEX]`.
struct Options: Equatable {
    var urls: [URL] = []
    var outputDirectory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    var parallel = 4
    var perHost = 2
    var retries = 2
    var timeout: TimeInterval = 30
    /// The largest file to download, in bytes (decoded, as written to disk); `Int64.max` for
    /// no limit.
    var maximumSize = DownloadOperation.defaultMaximumDownloadSize
    var showHelp = false
    /// Replace files that are already there (otherwise they are kept, as wget --no-clobber does).
    var force = false
    /// The SHA-256 the one download must have (`--sha256`).
    var sha256: FileDigest?
    /// The most bytes per second all downloads together receive (`--limit-rate`), or `nil`.
    var limitRate: Int?

    static let usage = """
    usage: fetchkit [URL ...] [options]

    Downloads the URLs concurrently with FetchKit. With no argument at all, runs an offline
    demo: a local server on 127.0.0.1 serves sample RSS feeds, and FetchKit refreshes them all.
    Options without a URL (fetchkit -o DIR, as an empty xargs runs it) are a usage error.

    options:
      -o, --output DIR     directory to save into (default: the current directory)
      --parallel N         downloads at once, overall (default 4)
      --per-host N         downloads at once to one host (default 2)
      --retry N            retries per download after a transient failure (default 2)
      --timeout S          seconds without data before a download fails (default 30)
      --max-size SIZE      largest file to save, counted on the bytes written (after
                           decompression); K, M, G, T suffixes (powers of 1024); 0 for no
                           limit (default 16G). A larger download fails and leaves no file.
      --force              replace files that are already in DIR (default: a file
                           already there is kept, like wget --no-clobber, and the
                           server is asked whether its copy changed since the file's
                           date, like wget --timestamping, and the answer shown; a
                           partial download is resumed either way)
      --sha256 HEX         the SHA-256 the file must have (64 hex digits, as sha256sum
                           prints it); only with exactly one URL. A file that does not
                           match is not saved, its partial download is removed, and the
                           mismatch is reported on one line (exit 1)
      --limit-rate RATE    receive at most RATE bytes per second, all downloads
                           together, as curl and wget do; K, M, G suffixes (powers of
                           1024), e.g. 500k or 2M. The server is slowed, not only the
                           writing: each download pauses reading from its connection
      -h, --help           show this help

    A file that another fetchkit is downloading into the same directory is skipped (it
    counts as failed), never written by both.

    Exits 0 when every download succeeded, 1 when any failed, 2 on bad arguments, 130
    (143) when Ctrl-C (SIGTERM) stopped it. Output that goes away (fetchkit … | head -1)
    stops the printing, not the downloads: the exit status is still theirs.
    """

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        var options = Options()
        var index = 0
        var onlyURLs = false

        func value(for option: String) throws(UsageError) -> String {
            index += 1
            guard index < arguments.count else { throw UsageError(description: "\(option) needs a value") }
            return arguments[index]
        }
        func count(for option: String, allowZero: Bool = false) throws(UsageError) -> Int {
            let text = try value(for: option)
            guard let number = Int(text), number > 0 || (allowZero && number == 0) else {
                throw UsageError(description: "\(option) needs a \(allowZero ? "non-negative" : "positive") whole number, not '\(text)'")
            }
            return number
        }

        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case _ where onlyURLs || !argument.hasPrefix("-"):
                guard let url = URL(string: argument), let scheme = url.scheme?.lowercased(),
                      scheme == "http" || scheme == "https", url.host?.isEmpty == false else {
                    // Echoed for the user, who may be reading a CI log: redacted and escaped.
                    throw UsageError(description: "not an http or https URL: '\(Terminal.sanitized(Redaction.redacted(argument)))'")
                }
                options.urls.append(url)
            case "--":
                onlyURLs = true
            case "-o", "--output":
                options.outputDirectory = URL(fileURLWithPath: try value(for: argument), isDirectory: true)
            case "--parallel":
                options.parallel = try count(for: argument)
            case "--per-host":
                options.perHost = try count(for: argument)
            case "--retry":
                options.retries = try count(for: argument, allowZero: true)
            case "--timeout":
                let text = try value(for: argument)
                guard let seconds = TimeInterval(text), seconds > 0, seconds.isFinite else {
                    throw UsageError(description: "--timeout needs a positive number of seconds, not '\(text)'")
                }
                options.timeout = seconds
            case "--max-size":
                let text = try value(for: argument)
                guard let size = Self.size(text) else {
                    throw UsageError(description: "--max-size needs a size such as 500M, 2G or 0 for no limit, not '\(text)'")
                }
                options.maximumSize = size == 0 ? .max : size
            case "--force":
                options.force = true
            case "--sha256":
                let text = try value(for: argument)
                guard let digest = FileDigest(.sha256, hex: text) else {
                    throw UsageError(description: "--sha256 needs 64 hexadecimal digits, not '\(Terminal.sanitized(String(text.prefix(80))))'")
                }
                options.sha256 = digest
            case "--limit-rate":
                let text = try value(for: argument)
                guard let rate = Self.size(text), rate > 0 else {
                    throw UsageError(description: "--limit-rate needs a rate such as 500k or 2M bytes per second, not '\(Terminal.sanitized(String(text.prefix(80))))'")
                }
                options.limitRate = Int(clamping: rate)
            case "-h", "--help":
                options.showHelp = true
            default:
                throw UsageError(description: "unknown option '\(argument)'")
            }
            index += 1
        }
        // `fetchkit -o dir` from an empty `xargs`, or a script whose URL list came out empty:
        // an error, not the demo (which runs with no argument at all).
        if options.urls.isEmpty, !arguments.isEmpty, !options.showHelp {
            throw UsageError(description: "no URL to download (fetchkit with no argument at all runs the offline demo)")
        }
        if options.sha256 != nil, options.urls.count != 1 {
            throw UsageError(description: "--sha256 checks one download: give exactly one URL, not \(options.urls.count)")
        }
        return options
    }

    /// A size in bytes: digits with an optional K, M, G or T suffix (powers of 1024, with or
    /// without a trailing `B` or `iB`); `nil` if it is not one or does not fit in 63 bits.
    static func size(_ text: String) -> Int64? {
        var digits = Substring(text.uppercased())
        for unit in ["IB", "B"] where digits.hasSuffix(unit) && digits.count > unit.count {
            digits = digits.dropLast(unit.count)
            break
        }
        var shift: Int64 = 0
        if let last = digits.last, let power = ["K": 10, "M": 20, "G": 30, "T": 40][String(last)] {
            shift = Int64(power)
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
              let number = Int64(digits), number <= Int64.max >> shift else { return nil }
        return number << shift
    }
}
