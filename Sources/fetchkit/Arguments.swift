import FetchKit
import Foundation

/// The command line: `fetchkit [URL ...] [-i FILE] [options]`, or `fetchkit demo` (see ``usage``).
struct Options: Equatable {
    /// The downloads, in the order given: the URLs on the command line and in `-i` lists.
    var entries: [InputList.Entry] = []
    var urls: [URL] { entries.map(\.url) }
    var outputDirectory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    /// The one download's file name in ``outputDirectory`` (`-o FILE`, as curl and aria2c
    /// take it: a relative path is in the `-d` directory, as aria2c reads it); `nil` to name it
    /// from its URL.
    var outputName: String?
    /// `fetchkit demo`: the offline demo.
    var runsDemo = false
    /// `-u user:password`: answers the server's HTTP Basic challenge (a 401), for the hosts of
    /// the URLs given only. Never printed (see ``Credentials/description``).
    var credentials: Credentials?
    /// `--netrc` (`~/.netrc`, if there is one), `--netrc-optional` (the same) or `--netrc-file
    /// FILE`: logins by host, used as `-u`'s are for each host the file names; `-u` wins.
    var netrc: Netrc?
    /// The netrc file named, and whether a missing one is no error; read once parsing ends.
    private var netrcSource: NetrcSource?
    private struct NetrcSource: Equatable {
        let path: String
        let optional: Bool
    }
    /// `--cacert FILE`: the CAs trusted besides the system's.
    var trust = TrustSettings()
    /// `--pinnedpubkey sha256//BASE64[;sha256//...]`: the keys the hosts of the URLs given must
    /// present one of over HTTPS (checked here; pinned per host by the downloader).
    var pinnedKeys: [String] = []
    var parallel = 4
    /// `--per-host N`; without it, one host may have all of `--parallel` (as curl's and
    /// aria2c's do): see ``perHostLimit``.
    var perHost: Int?
    /// At most this many downloads at once to one host.
    var perHostLimit: Int { min(perHost ?? parallel, parallel) }
    var retries = 2
    /// Seconds without data before an attempt fails (`--timeout`, `--read-timeout`).
    var timeout: TimeInterval = 30
    /// Seconds for each whole download, retries included (`--max-time`); `nil` for no limit.
    var maxTime: TimeInterval?
    /// Seconds to make each connection (`--connect-timeout`); `nil` for no limit of its own.
    var connectTimeout: TimeInterval?
    /// The largest file to download, in bytes (decoded, as written to disk); `Int64.max` for
    /// no limit.
    var maximumSize = DownloadOperation.defaultMaximumDownloadSize
    var showHelp = false
    var showVersion = false
    /// Replace files that are already there (otherwise they are kept, as wget --no-clobber does).
    var force = false
    /// The digest the one download must have (`--sha256`, `--checksum`); also in ``entries``.
    var digest: FileDigest?
    /// The option that gave ``digest``, for messages.
    var digestOption = "--checksum"

    /// Takes `given` from `option`; a second, different digest is a usage error.
    mutating func setDigest(_ given: FileDigest, option: String) throws(UsageError) {
        if let digest, digest != given {
            throw UsageError(description: "\(digestOption) and \(option) give the download two different digests")
        }
        digest = given
        digestOption = option
    }
    /// One JSON object per file on standard output (`--json`); human output goes to standard error.
    var json = false
    var verbosity = Verbosity.normal
    /// Request headers (`-H`, then `-A`), in order; a later one of the same name replaces an earlier one.
    var headers: [Header] = []
    /// Name each file as the response's `Content-Disposition` says (`--content-disposition`).
    var contentDisposition = false
    /// Seconds between the plain progress lines printed when the output is not a terminal
    /// (`--summary-interval`, as aria2c calls it); 0 for none.
    var summaryInterval: TimeInterval = 5
    /// The most bytes per second each download receives (`--limit-rate`), or `nil`.
    var limitRate: Int?
    /// The most bytes per second all downloads together receive (`--limit-rate-total`), or `nil`.
    var limitRateTotal: Int?
    /// Also download what the output directory's journal lists as unfinished (`-c`, `--continue`).
    var continues = false
    /// `-N`, `--no-buffer`: the one URL's body to standard output as it arrives (curl's `-N`).
    var noBuffer = false

    enum Verbosity: Equatable {
        /// `-q`: nothing but a line per failed file, on standard error.
        case quiet
        case normal
        /// `-v`: also each request's headers (secrets redacted), each redirect followed, and
        /// each response's status.
        case verbose
    }

    /// `-u user:password`. Its description never holds the password.
    struct Credentials: Equatable, CustomStringConvertible, CustomDebugStringConvertible {
        let user: String
        let password: String
        var description: String { "REDACTED" }
        var debugDescription: String { description }
    }

    /// A request header from `-H 'Name: value'` or `-A`.
    struct Header: Equatable {
        let name: String
        let value: String
    }

    /// The usage's first line, which follows a usage error.
    static let synopsis = "usage: fetchkit [URL ...] [-i FILE] [options] | fetchkit demo"

    static let usage = """
    \(synopsis)

    Downloads the URLs concurrently with FetchKit. fetchkit demo runs an offline demo: a
    local server on 127.0.0.1 serves sample RSS feeds, and FetchKit refreshes them all.
    No argument at all, or options without a URL (fetchkit -d DIR, as an empty xargs runs
    it), is a usage error, as in curl and wget. Options that take a value accept it as the
    next argument or after '=' (--retry=3); one-letter options bundle and take a value
    attached, as in wget and curl (-qJ, -dDIR, -sSL). A mistyped option names the closest.

    what to download:
      -i, --input-file FILE  read URLs from FILE ('-' for standard input): one a line,
                           optionally followed by the file's digest: 'sha256:' and its 64
                           hex digits (or sha512:, sha1:, md5: and theirs);
                           blank lines and lines starting with '#' are skipped. A bad line
                           stops the run before anything is downloaded (exit 2)
      -d, --directory DIR  directory to save into (default: the current directory;
                           also -P, --directory-prefix as in wget, --dir as in aria2c).
                           Each file is named after the last part of its URL's path, made
                           safe (no '/', control characters or leading dot); a URL whose
                           path ends in '/' is saved as index.html, as wget does (-O,
                           --remote-name, as curl says it: the default). A name given
                           twice in one run gets -1, -2... before its extension
      -o, --output FILE    save the one download as FILE, as curl and aria2c do (a
                           relative FILE is in the -d directory); only with exactly one
                           URL. It wins over --content-disposition. (Earlier versions
                           took -o as the directory: that is -d now)
      --content-disposition  name each file as the server's Content-Disposition header
                           says (filename*= or filename=), made safe as names from URLs
                           are; without one, the URL's name. A name already taken in DIR
                           gets -1, -2... unless --force (also -J)
      -c, --continue       also download what an earlier run into DIR left unfinished
                           (interrupted, killed, or failed): each run keeps the list of
                           its unfinished downloads in DIR/.fetchkit-journal.json, and
                           each resumes its partial file. A URL that holds a password or
                           token is not kept there: give it again. curl's -C - is
                           the same (any other -C offset is refused: each download
                           resumes its own partial file)
      --force              replace files that are already in DIR (default: a file
                           already there is kept, like wget --no-clobber, and the
                           server is asked whether its copy changed since the file's
                           date, like wget --timestamping, and the answer shown; a
                           partial download is resumed either way). While the answers
                           are awaited, a line says so (live on a terminal, every
                           --summary-interval elsewhere)

    how:
      --parallel N         downloads at once, overall (default 4; also -j,
                           --max-concurrent-downloads as in aria2c); at most what the
                           open-file limit (ulimit -n) has room for, which it says
      --per-host N         downloads at once to one host (default: as many as
                           --parallel)
      --retry N            retries per download after a transient failure (default 2)
      --timeout S          seconds without data before an attempt fails (default 30;
                           also --read-timeout)
      -m, --max-time S     seconds for each whole download, retries included (default:
                           no limit)
      --connect-timeout S  seconds to make a connection: name lookup, TCP and TLS
                           handshakes (default: no limit of its own; --timeout bounds it)
      --max-size SIZE      largest file to save, counted on the bytes written (after
                           decompression); K, M, G, T suffixes (powers of 1024); 0 for no
                           limit (default 16G). A larger download fails and leaves no file.
      --limit-rate RATE    receive at most RATE bytes per second in each download, as
                           curl and wget do (also aria2c's --max-download-limit); K, M,
                           G suffixes (powers of 1024), e.g. 500k or 2M. The server is
                           slowed, not only the writing: a download pauses reading from
                           its connection while over the limit, and keeps to HTTP/1.1
                           (a connection of its own, even where the server speaks HTTP/2)
      --limit-rate-total RATE
                           receive at most RATE bytes per second, all downloads
                           together (aria2c's --max-overall-download-limit); with
                           --limit-rate, both hold
      --sha256 HEX         the SHA-256 the file must have (64 hex digits, as sha256sum
                           prints it); only with exactly one download (an -i list gives
                           one per line). A file that does not match is not saved, its
                           partial download is removed, and the mismatch is one line.
                           A file already there is checked instead: kept if it matches,
                           a failure (exit 9, the file kept) if not, unless --force;
                           with --content-disposition, one under the server's name too
      --checksum TYPE=HEX  the same for another digest, in aria2's names: sha-256,
                           sha-512, sha-1 or md5 (--checksum=md5=d41d8cd9...). SHA-1 and
                           MD5 are broken for collisions: they show the file arrived
                           intact, not that it is the one its publisher meant
      -H, --header 'Name: value'  send this request header (repeatable; a later one of
                           the same name replaces an earlier one). Names are HTTP tokens;
                           values may not hold control characters
      -A, --user-agent TEXT  the User-Agent to send (default: fetchkit/\(Version.current))
      -u, --user USER:PASSWORD  answer a server's HTTP Basic challenge (a 401) with
                           these credentials, as wget does: only for the hosts of the
                           URLs given, never after a redirect to another host, never
                           printed, never kept in the journal (give -u again with -c).
                           Basic sends the password merely encoded: use HTTPS. (Not with
                           --cacert or --pinnedpubkey on Linux, where FoundationNetworking
                           answers a challenge on a connection FetchKit cannot set them on)
      -n, --netrc          the logins of ~/.netrc, for the hosts it names (a 'default'
                           entry: for any other), used as -u's are (so not with --cacert
                           or --pinnedpubkey on Linux); -u wins. No file: no logins. Also
                           --netrc-optional
      --netrc-file FILE    the same from FILE (a missing or malformed FILE: exit 2)
      --cacert FILE        also trust the CA certificates in this PEM file (a private CA),
                           besides the system's; verification always stays on
      --pinnedpubkey sha256//BASE64[;sha256//BASE64...]
                           over HTTPS, the hosts of the URLs given must present one of
                           these public keys (base64 SHA-256 of the key's DER, curl's
                           syntax; a key file is not taken), on top of a valid chain; a
                           mismatch fails before the request is sent. A host a redirect
                           leads to is not pinned
      -L, --location       accepted for curl's sake: redirects are always followed (at
                           most 10; HTTPS to HTTP is refused)
      -f, --fail, -S, --show-error  accepted for curl's sake: an HTTP error status is
                           always a failure, and always shown

    output:
      -N, --no-buffer      write the one URL's body to standard output as it arrives, as
                           curl -N does (server-sent events, a log tail, a long JSON Lines
                           feed), saving no file; the reading waits while standard output
                           does (a slow pipe slows the server, memory stays bounded), and
                           output that goes away (fetchkit -N URL | head) ends the
                           download quietly, exit 0
      --json               one JSON object per file on standard output, as it ends:
                           url (redacted), path, bytes, status (HTTP), sha256 (when
                           checked), seconds, result, error (a class below) and message;
                           the human output goes to standard error
      -q, --quiet          print nothing but one line per failed file (standard error;
                           also -s, --silent as in curl)
      -v, --verbose        also print each request's headers (secrets redacted), each
                           redirect followed (its status, the Location it leads to and
                           the request that follows, secrets redacted) and each
                           response's status
      --summary-interval S   seconds between plain progress lines (one per active
                           file: bytes, total, rate, and while the server is asked
                           about files already there, what is awaited) when the output
                           is not a terminal (default 5, at least 0.1; 0 for none).
                           A terminal gets a live display
      -V, --version        print the version, and which of FetchKit's workarounds for
                           FoundationNetworking are active here, and exit
      -h, --help           show this help

    A file that another fetchkit is downloading into the same directory is skipped (it
    counts as failed, exit 3), never written by both. Output that goes away (fetchkit … |
    head -1) stops the printing, not the downloads: the exit status is still theirs.

    exit status:
    \(ExitStatus.table)
    """

    struct UsageError: Error, CustomStringConvertible {
        let description: String
        /// Whether the usage follows the message (not after a bad line in a list, which is
        /// its own one line).
        var showsUsage = true

        /// An error that is one line, without the usage after it.
        static func line(_ text: String) -> UsageError {
            UsageError(description: text, showsUsage: false)
        }
    }

    /// The one-letter options that take a value: in a bundle (`-qd DIR`) only the last may, and
    /// one may have its value attached (`-dDIR`, `-m30`), as getopt reads them for wget and curl.
    static let shortOptionsTakingValue: Set<Character> = ["i", "o", "P", "d", "m", "H", "A", "C", "j", "u"]

    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        // Bundles are taken apart in place: `-qcJ` is read as `-q`, then `-cJ`, then `-J`.
        var arguments = arguments
        var options = Options()
        // As curl and wget: a bare `fetchkit` (an empty `xargs`) is an error, not a demo.
        if arguments.isEmpty {
            throw UsageError.line("no URL to download; fetchkit demo runs the offline demo")
        }
        if arguments == ["demo"] {
            options.runsDemo = true
            return options
        }
        var index = 0
        var onlyURLs = false
        /// The value after `=` in `--name=value`.
        var inlineValue: String?

        func value(for option: String) throws(UsageError) -> String {
            if let inline = inlineValue {
                inlineValue = nil
                return inline
            }
            index += 1
            guard index < arguments.count else { throw UsageError(description: "\(option) needs a value") }
            return arguments[index]
        }
        func count(for option: String, allowZero: Bool = false) throws(UsageError) -> Int {
            let text = try value(for: option)
            guard let number = Int(text), number > 0 || (allowZero && number == 0) else {
                throw UsageError(description: "\(option) needs a \(allowZero ? "non-negative" : "positive") whole number, not '\(shown(text))'")
            }
            return number
        }
        func seconds(for option: String, allowZero: Bool = false) throws(UsageError) -> TimeInterval {
            let text = try value(for: option)
            guard let seconds = TimeInterval(text), seconds > 0 || (allowZero && seconds == 0), seconds.isFinite,
                  seconds <= 31_536_000 else {
                throw UsageError(description: "\(option) needs a \(allowZero ? "" : "positive ")number of seconds (at most a year), not '\(shown(text))'")
            }
            return seconds
        }

        while index < arguments.count {
            var argument = arguments[index]
            inlineValue = nil
            /// The rest of a bundle of one-letter options (`-cJ` after `-q` of `-qcJ`).
            var bundleRest: String?
            if !onlyURLs, argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                inlineValue = String(argument[argument.index(after: equals)...])
                argument = String(argument[..<equals])
            } else if !onlyURLs, argument.count > 2, argument.hasPrefix("-"), !argument.hasPrefix("--") {
                let letter = argument[argument.index(after: argument.startIndex)]
                let rest = String(argument.dropFirst(2))
                if Self.shortOptionsTakingValue.contains(letter) {
                    inlineValue = rest
                } else {
                    bundleRest = "-" + rest
                }
                argument = "-" + String(letter)
            }
            switch argument {
            case _ where onlyURLs || !argument.hasPrefix("-") || argument == "-":
                guard let url = httpURL(argument) else {
                    // Echoed for the user, who may be reading a CI log: redacted and escaped.
                    throw UsageError(description: "not an http or https URL: '\(Terminal.sanitized(Redaction.redacted(argument)))'")
                }
                options.entries.append(InputList.Entry(url: url, digest: nil))
            case "--":
                onlyURLs = true
            case "-i", "--input-file":
                options.entries += try InputList.read(try value(for: argument))
            case "-o", "--output":
                let name = try value(for: argument)
                guard name != "-" else {
                    throw UsageError(description: "\(argument) -: writing to standard output is not supported; give a file name")
                }
                let last = name.split(separator: "/").last.map(String.init) ?? ""
                guard !name.hasSuffix("/"), !last.isEmpty, last != ".", last != ".." else {
                    throw UsageError(description: "\(argument) names the file to save; the directory is -d DIR")
                }
                options.outputName = name
            case "-d", "--directory", "--dir", "-P", "--directory-prefix":
                options.outputDirectory = URL(fileURLWithPath: try value(for: argument), isDirectory: true)
            case "-O", "--remote-name", "-L", "--location", "-f", "--fail", "-S", "--show-error":
                // curl's habits: the remote name is the default, redirects are followed, an
                // HTTP error is a failure and is shown, all without being asked.
                break
            case "-C", "--continue-at":
                guard try value(for: argument) == "-" else {
                    throw UsageError(description: "\(argument) takes only '-' (-C -, the same as -c): each download resumes its own partial file")
                }
                options.continues = true
            case "-u", "--user":
                options.credentials = try credentials(try value(for: argument), option: argument)
            case "--netrc", "--netrc-optional", "-n":
                let home = ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()
                options.netrcSource = NetrcSource(path: (home as NSString).appendingPathComponent(".netrc"), optional: true)
            case "--netrc-file":
                options.netrcSource = NetrcSource(path: try value(for: argument), optional: false)
            case "--cacert":
                let path = try value(for: argument)
                do {
                    try options.trust.addCertificateAuthorities(contentsOf: URL(fileURLWithPath: path))
                } catch {
                    throw UsageError(description: "\(argument): \(Terminal.sanitized(error.description))")
                }
            case "--pinnedpubkey":
                options.pinnedKeys += try pins(try value(for: argument))
            case "--parallel", "-j", "--max-concurrent-downloads":
                options.parallel = try count(for: argument)
            case "--per-host":
                options.perHost = try count(for: argument)
            case "--retry":
                options.retries = try count(for: argument, allowZero: true)
            case "--timeout", "--read-timeout":
                options.timeout = try seconds(for: argument)
            case "-m", "--max-time":
                options.maxTime = try seconds(for: argument)
            case "--connect-timeout":
                options.connectTimeout = try seconds(for: argument)
            case "--max-size":
                let text = try value(for: argument)
                guard let size = Self.size(text) else {
                    throw UsageError(description: "--max-size needs a size such as 500M, 2G or 0 for no limit, not '\(shown(text))'")
                }
                options.maximumSize = size == 0 ? .max : size
            case "--force":
                options.force = true
            case "--sha256":
                let text = try value(for: argument)
                guard let digest = FileDigest(.sha256, hex: text) else {
                    throw UsageError(description: "--sha256 needs 64 hexadecimal digits, not '\(shown(text))'")
                }
                try options.setDigest(digest, option: "--sha256")
            case "--checksum":
                try options.setDigest(try Self.checksum(try value(for: argument)), option: "--checksum")
            case "-H", "--header":
                options.headers.append(try header(try value(for: argument)))
            case "-A", "--user-agent":
                let text = try value(for: argument)
                guard !text.isEmpty, isValidHeaderValue(text) else {
                    throw UsageError(description: "\(argument) needs text without control characters (CR, LF, NUL...)")
                }
                options.headers.append(Header(name: "User-Agent", value: text))
            case "--content-disposition", "-J":
                options.contentDisposition = true
            case "--json":
                options.json = true
            case "-N", "--no-buffer":
                options.noBuffer = true
            case "-q", "--quiet", "-s", "--silent":
                options.verbosity = .quiet
            case "-v", "--verbose":
                options.verbosity = .verbose
            case "--summary-interval":
                options.summaryInterval = try seconds(for: argument, allowZero: true)
            case "-V", "--version":
                options.showVersion = true
            case "-c", "--continue":
                options.continues = true
            case "--limit-rate", "--limit-rate-total", "--max-overall-download-limit", "--max-download-limit":
                let text = try value(for: argument)
                guard let rate = Self.size(text), rate > 0 else {
                    throw UsageError(description: "\(argument) needs a rate such as 500k or 2M bytes per second, not '\(shown(text))'")
                }
                if argument == "--limit-rate" || argument == "--max-download-limit" {
                    options.limitRate = Int(clamping: rate)
                } else {
                    options.limitRateTotal = Int(clamping: rate)
                }
            case "-h", "--help":
                options.showHelp = true
            default:
                let closest = OptionSuggestion.closest(to: argument, among: Self.longOptions).map { "; did you mean \($0)?" } ?? ""
                throw UsageError(description: "unknown option \(shown(argument))\(closest)")
            }
            if inlineValue != nil {
                throw UsageError(description: "\(argument) takes no value")
            }
            if let bundleRest {
                arguments[index] = bundleRest
            } else {
                index += 1
            }
        }
        if options.showHelp || options.showVersion { return options }
        // `fetchkit -d dir` from an empty `xargs`, or a script whose URL list came out empty.
        if options.entries.isEmpty, !options.continues {
            throw UsageError(description: "no URL to download (fetchkit demo runs the offline demo)")
        }
        if let name = options.outputName {
            guard options.entries.count == 1 else {
                throw UsageError(description: "-o names the file of one download: give exactly one URL, not \(options.entries.count) "
                    + "(-d DIR saves several into a directory)")
            }
            // As aria2c reads `-d DIR -o NAME`: a relative name is in the directory.
            let file = name.hasPrefix("/") ? URL(fileURLWithPath: name) : options.outputDirectory.appendingPathComponent(name, isDirectory: false)
            options.outputDirectory = file.deletingLastPathComponent()
            options.outputName = file.lastPathComponent
            // The name given wins over the server's.
            options.contentDisposition = false
        }
        if let source = options.netrcSource {
            do {
                options.netrc = try Netrc.read(path: source.path, missingIsEmpty: source.optional)
            } catch {
                throw UsageError(description: error.description)
            }
        }
        #if canImport(FoundationNetworking)
        if options.netrc?.entries.isEmpty == false, options.credentials == nil, !options.trust.isEmpty || !options.pinnedKeys.isEmpty {
            throw UsageError(description: "--netrc cannot go with --cacert or --pinnedpubkey on Linux: FoundationNetworking answers "
                + "the server's challenge on a connection FetchKit cannot set them on (send -H 'Authorization: ...' instead)")
        }
        if options.credentials != nil, !options.trust.isEmpty || !options.pinnedKeys.isEmpty {
            throw UsageError(description: "-u cannot go with --cacert or --pinnedpubkey on Linux: FoundationNetworking answers "
                + "the server's challenge on a connection FetchKit cannot set them on (send -H 'Authorization: ...' instead)")
        }
        #endif
        if options.noBuffer {
            guard options.entries.count == 1 else {
                throw UsageError(description: "-N (--no-buffer) writes one URL's body to standard output as it arrives: give exactly one URL, not \(options.entries.count)")
            }
            let conflicting = [(options.outputName != nil, "-o"), (options.json, "--json"), (options.continues, "-c"),
                               (options.digest != nil || options.entries[0].digest != nil, "--sha256 or --checksum"), (options.contentDisposition, "--content-disposition")]
                .filter(\.0).map(\.1)
            if let first = conflicting.first {
                throw UsageError(description: "-N (--no-buffer) writes to standard output and saves no file: it does not go with \(first)")
            }
        }
        if let digest = options.digest {
            let option = options.digestOption
            guard options.entries.count == 1 else {
                throw UsageError(description: "\(option) checks one download: give exactly one URL, not \(options.entries.count) (an -i list takes a sha256: on each line)")
            }
            if let listed = options.entries[0].digest, listed != digest {
                throw UsageError(description: "\(option) and the list give the download two different digests")
            }
            options.entries[0] = InputList.Entry(url: options.entries[0].url, digest: digest)
        }
        return options
    }

    /// The digest of `--checksum TYPE=HEX`, in aria2's names: `sha-256`, `sha-512`, `sha-1`,
    /// `md5` (any case, the hyphen optional).
    static func checksum(_ text: String) throws(UsageError) -> FileDigest {
        let names = "sha-256, sha-512, sha-1 or md5"
        guard let equals = text.firstIndex(of: "=") else {
            throw UsageError(description: "--checksum needs TYPE=HEX (TYPE \(names)), not '\(shown(text))'")
        }
        let name = String(text[..<equals])
        guard let algorithm = FileDigest.Algorithm(named: name) else {
            throw UsageError(description: "--checksum: '\(shown(name))' is not a digest FetchKit checks (\(names))")
        }
        let hex = String(text[text.index(after: equals)...])
        guard let digest = FileDigest(algorithm, hex: hex) else {
            throw UsageError(description: "--checksum \(name)= needs \(algorithm.byteCount * 2) hexadecimal digits, not '\(shown(hex))'")
        }
        return digest
    }

    /// The credentials of `-u user:password`. Neither part is ever echoed: a message names
    /// what is missing, not what was given.
    static func credentials(_ text: String, option: String) throws(UsageError) -> Credentials {
        guard let colon = text.firstIndex(of: ":") else {
            throw UsageError(description: "\(option) needs user:password (fetchkit does not ask for the password)")
        }
        let user = String(text[..<colon])
        let password = String(text[text.index(after: colon)...])
        guard !user.isEmpty, !password.isEmpty else {
            throw UsageError(description: "\(option) needs user:password, both not empty")
        }
        guard isValidHeaderValue(text) else {
            throw UsageError(description: "\(option): the credentials hold a control character (CR, LF, NUL...)")
        }
        return Credentials(user: user, password: password)
    }

    /// The pins of `--pinnedpubkey sha256//BASE64[;sha256//BASE64...]`, as curl writes them,
    /// each checked to be the base64 of 32 bytes.
    static func pins(_ text: String) throws(UsageError) -> [String] {
        let pins = text.split(separator: ";", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard pins.allSatisfy({ $0.lowercased().hasPrefix("sha256//") }) else {
            throw UsageError(description: "--pinnedpubkey takes sha256//BASE64 pins separated by ';', not a key file")
        }
        do {
            var check = TrustSettings()
            try check.pinPublicKeys(pins, forHost: "pinned.invalid")
        } catch {
            throw UsageError(description: "--pinnedpubkey: " + (pins.count == 1 ? "the pin" : "a pin")
                + " is not sha256// and the base64 of a SHA-256 digest (44 characters, 32 bytes)")
        }
        return pins
    }

    /// Every long option, for ``OptionSuggestion`` to find the one meant.
    static let longOptions = [
        "--input-file", "--output", "--directory", "--directory-prefix", "--dir", "--remote-name", "--content-disposition",
        "--continue", "--continue-at", "--force", "--parallel", "--max-concurrent-downloads", "--per-host", "--retry",
        "--timeout", "--read-timeout", "--max-time", "--connect-timeout", "--max-size", "--limit-rate", "--limit-rate-total", "--max-overall-download-limit", "--max-download-limit", "--sha256", "--checksum", "--header",
        "--user-agent", "--user", "--netrc", "--netrc-file", "--netrc-optional", "--cacert", "--pinnedpubkey", "--location", "--fail", "--show-error", "--json", "--quiet",
        "--silent", "--verbose", "--summary-interval", "--version", "--help", "--no-buffer",
    ]

    /// `text` as a URL to download: `http` or `https`, with a host; `nil` otherwise.
    static func httpURL(_ text: String) -> URL? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
              scheme == "http" || scheme == "https", url.host?.isEmpty == false else { return nil }
        return url
    }

    /// A header from `-H 'Name: value'`. The value is never echoed: it may be a credential.
    static func header(_ text: String) throws(UsageError) -> Header {
        guard let colon = text.firstIndex(of: ":") else {
            throw UsageError(description: "-H needs 'Name: value', with a colon after the name")
        }
        let name = String(text[..<colon])
        let value = text[text.index(after: colon)...].trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        guard !name.isEmpty, name.unicodeScalars.allSatisfy(isTokenCharacter) else {
            throw UsageError(description: "-H: '\(shown(name))' is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)")
        }
        guard !value.isEmpty else {
            throw UsageError(description: "-H \(name): needs a value")
        }
        guard isValidHeaderValue(value) else {
            throw UsageError(description: "-H \(name): the value holds a control character (CR, LF, NUL...), which could forge a header")
        }
        return Header(name: name, value: value)
    }

    /// A `tchar` of RFC 9110.
    static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9": true
        case "!", "#", "$", "%", "&", "'", "*", "+", "-", ".", "^", "_", "`", "|", "~": true
        default: false
        }
    }

    /// A field value of RFC 9110: no control characters but the horizontal tab, no C1 controls.
    static func isValidHeaderValue(_ text: String) -> Bool {
        text.unicodeScalars.allSatisfy { scalar in
            scalar == "\t" || !(scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value))
        }
    }

    /// An argument echoed in a message: at most 80 characters, escaped for the terminal.
    static func shown(_ text: String) -> String {
        Terminal.sanitized(String(text.prefix(80)))
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
