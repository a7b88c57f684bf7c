#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How many downloads can run at once within the process's limit on open files (`ulimit -n`).
///
/// Each running download holds a socket, its partial file and that file's lock, and opens its
/// record and the journal now and then: about four descriptors. Past the limit, opening any of
/// them fails (`EMFILE`, "Too many open files") and the download with it, so `--parallel 10000`
/// on a long list would fail most of it. The soft limit is first raised to the hard one (as Go's
/// runtime does at start), then the downloads at once are capped to what fits, leaving some
/// descriptors for the process itself. curl caps `--parallel-max` at 300 for the same reason.
enum OpenFileLimit {
    /// The descriptors one running download may hold at a time.
    static let perDownload = 4
    /// The descriptors kept for the process: standard streams, the journal and its lock,
    /// libcurl's and libdispatch's own.
    static let reserved = 32

    /// Raises the soft limit on open files to the hard one, and returns how many downloads fit
    /// in it at once (at least 1; `Int.max` when there is no limit) and the limit.
    static func downloadsThatFit() -> (downloads: Int, openFiles: Int) {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return (.max, .max) }
        if limit.rlim_cur != unlimited, limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            // Refused on Darwin above OPEN_MAX: the soft limit stays as it was.
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        guard limit.rlim_cur != unlimited else { return (.max, .max) }
        let openFiles = Int(clamping: limit.rlim_cur)
        return (max(1, (openFiles - reserved) / perDownload), openFiles)
    }

    #if canImport(Glibc)
    private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    /// `RLIM_INFINITY`, all ones (a macro Swift does not import as an unsigned value).
    private static let unlimited = rlim_t.max
    #else
    private static let resource = RLIMIT_NOFILE
    private static let unlimited = RLIM_INFINITY
    #endif
}
