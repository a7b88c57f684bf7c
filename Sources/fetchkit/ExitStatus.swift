import FetchKit

/// What the command's exit status says, one code per failure class, in the spirit of wget's
/// (1 generic, 2 usage, 3 file I/O, 4 network, 5 TLS, 7 protocol, 8 an HTTP error status) with
/// FetchKit's own classes after them, and 128 + the signal's number when a signal stopped the
/// run, as a shell reports it. ``Options/usage`` and the CommandLine article (Documentation.docc) list them: keep the three in step.
enum ExitStatus: Int32, CaseIterable {
    /// Every download succeeded, or was already there and kept.
    case success = 0
    /// A failure of no class below (a request FetchKit refused to send).
    case failure = 1
    /// Bad arguments, or a bad line in an `-i` list: nothing was downloaded.
    case usage = 2
    /// The output directory or a file in it could not be written, or another fetchkit is
    /// downloading the same file.
    case fileSystem = 3
    /// No connection, a connection lost, or a timeout (`--timeout`, `--max-time`, `--connect-timeout`).
    case network = 4
    /// The server's certificate was refused.
    case tls = 5
    /// The server's answer broke HTTP (a garbled response, a redirect loop or a downgrade).
    case `protocol` = 7
    /// The server answered with an error status (4xx, 5xx) after the retries.
    case httpStatus = 8
    /// The file's digest is not the one given (`--sha256`, `--checksum`, or a digest in an `-i` list).
    case checksum = 9
    /// The file is larger than `--max-size`.
    case sizeLimit = 10
    /// Downloads failed for different reasons, or some succeeded and some failed.
    case someFailed = 11

    /// The class of `error`.
    init(_ error: FetchError) {
        switch error {
        case .transport, .timedOut, .lengthMismatch, .streamOverflow: self = .network
        case .tls: self = .tls
        case .unacceptableStatus, .authenticationFailed: self = .httpStatus
        case .responseTooLarge: self = .sizeLimit
        case .digestMismatch: self = .checksum
        case .fileSystem: self = .fileSystem
        case .invalidResponse, .redirectFailed: self = .protocol
        case .invalidRequest, .parseFailed, .dependencyFailed, .cancelled: self = .failure
        }
    }

    /// The name of the class, as `--json` prints it in `"error"`.
    var kind: String {
        switch self {
        case .success: "none"
        case .failure: "other"
        case .usage: "usage"
        case .fileSystem: "file"
        case .network: "network"
        case .tls: "tls"
        case .protocol: "protocol"
        case .httpStatus: "http"
        case .checksum: "checksum"
        case .sizeLimit: "size"
        case .someFailed: "several"
        }
    }

    /// The status of a run whose failed downloads failed with `failures`, `succeeded` others
    /// having succeeded (or been kept), unless `signal` stopped it (128 + its number).
    ///
    /// When every download failed, and all for one class, that class's code; when some
    /// succeeded, or they failed for different classes, ``someFailed``.
    static func of(failures: [ExitStatus], succeeded: Int, signal: Int32?) -> Int32 {
        if let signal { return 128 + signal }
        guard let first = failures.first else { return success.rawValue }
        guard succeeded == 0, failures.allSatisfy({ $0 == first }) else { return someFailed.rawValue }
        return first.rawValue
    }

    /// The table `--help` prints.
    static let table = """
      0   every download succeeded, or was already there and kept
      1   another failure (a request FetchKit refused to send)
      2   bad arguments or a bad line in an -i list (nothing downloaded)
      3   a file or the output directory could not be written, or another
          fetchkit is downloading the same file
      4   network: no connection, a lost connection, or a timeout
          (--timeout, --max-time, --connect-timeout)
      5   TLS: the server's certificate was refused
      7   protocol: a garbled response, a redirect loop or downgrade
      8   HTTP: the server answered with an error status (after retries)
      9   checksum: the file's digest (--sha256, --checksum) is not the one expected
      10  size: the file is larger than --max-size
      11  several: downloads failed for different reasons, or some
          succeeded and some failed (each file's line, or --json, says which)
      130 interrupted by SIGINT (Ctrl-C); 143 by SIGTERM
    """
}

/// The command's version, printed by `--version` and sent in the default `User-Agent`.
enum Version {
    static let current = "0.1.0-dev"
}

extension FileDigest.Algorithm {
    /// The name as people write it: SHA-256, SHA-512, SHA-1, MD5.
    var shownName: String {
        switch self {
        case .sha512: return "SHA-512"
        case .sha1: return "SHA-1"
        case .md5: return "MD5"
        default: return "SHA-256"
        }
    }
}
