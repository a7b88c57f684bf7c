import Foundation
import FoundationNetworkingShims

/// What FetchKit does about FoundationNetworking for one ``FetchSession``: each workaround, and
/// whether it is in effect, off, or not needed, and why.
///
/// On Linux, FetchKit reaches into FoundationNetworking and libcurl to fix what they do wrong
/// (see <doc:KnownIssuesOnLinux>). Each fix is found and checked when the session is made; one
/// that cannot be (a stripped or statically linked library, a FoundationNetworking laid out
/// otherwise) leaves the session as a plain `URLSession` would be in that respect, and says so
/// here, with its reason. A fix that another depends on names it in ``Entry/dependsOn``; a
/// dependent whose fix is missing is itself unavailable, naming it. A security setting never
/// falls back: a session whose ``FetchSession/trust`` cannot be enforced is not made.
///
/// ```swift
/// let session = FetchSession()
/// for entry in session.workarounds.entries where !entry.status.isActive {
///     print(entry.id, entry.status)
/// }
/// ```
///
/// ``FetchEventLogger`` prints it once per session it sees; `fetchkit --version` prints it.
public struct FetchSessionReport: Sendable, Equatable, CustomStringConvertible {
    /// Whether a workaround is in effect.
    public enum Status: Sendable, Equatable, CustomStringConvertible {
        /// In effect.
        case active
        /// Not in effect, and needed: why (what is missing, or which fix it depends on).
        case unavailable(String)
        /// Not needed here: why (another platform, nothing asked for it).
        case notNeeded(String)

        /// Whether the workaround is in effect.
        public var isActive: Bool { self == .active }

        public var description: String {
            switch self {
            case .active: return "active"
            case .unavailable(let reason): return "unavailable: \(reason)"
            case .notNeeded(let reason): return "not needed: \(reason)"
            }
        }
    }

    /// One workaround.
    public struct Entry: Sendable, Equatable, Identifiable {
        /// A stable name, e.g. `"response-heads"`.
        public let id: String
        /// What it does, in a line.
        public let summary: String
        /// The upstream issue or behaviour it works around.
        public let upstream: String
        /// The ``id``s of the workarounds it needs.
        public let dependsOn: [String]
        /// Whether it is in effect.
        public let status: Status
    }

    /// Every workaround, in a fixed order.
    public let entries: [Entry]

    /// The entry named `id`, if there is one.
    public subscript(id: String) -> Entry? {
        entries.first { $0.id == id }
    }

    /// One line per workaround: its status, its name and what it does.
    public var description: String {
        entries.map { "\($0.id): \($0.status) — \($0.summary)" }.joined(separator: "\n")
    }

    /// The report in one line: the active workarounds by name, then each other one with its
    /// reason. ``FetchEventLogger`` writes it.
    public var summary: String {
        let active = entries.filter(\.status.isActive).map(\.id)
        let others = entries.filter { !$0.status.isActive }.map { "\($0.id) (\($0.status))" }
        return (["active: " + (active.isEmpty ? "none" : active.joined(separator: ", "))] + others).joined(separator: "; ")
    }

    /// Makes the report from each workaround's own status, turning a dependent unavailable when
    /// a workaround it depends on is not active.
    init(_ entries: [Entry]) {
        var resolved: [Entry] = []
        for entry in entries {
            var status = entry.status
            if status.isActive,
               let missing = entry.dependsOn.first(where: { id in resolved.first { $0.id == id }?.status.isActive != true }) {
                status = .unavailable("needs \(missing), which is not active")
            }
            resolved.append(Entry(id: entry.id, summary: entry.summary, upstream: entry.upstream,
                                  dependsOn: entry.dependsOn, status: status))
        }
        self.entries = resolved
    }
}

extension FetchSession {
    /// What FetchKit does about FoundationNetworking for this session (see ``FetchSessionReport``).
    public var workarounds: FetchSessionReport {
        #if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
        let unavailableLibrary = "FoundationNetworking's callback was not found where FetchKit looks "
            + "(a stripped or statically linked library, or another layout)"
        let taskOptionsStatus: FetchSessionReport.Status
        if let taskOptions {
            taskOptionsStatus = taskOptions.probeFailure.map { .unavailable($0) } ?? .active
        } else {
            taskOptionsStatus = .unavailable("the session's configuration has a urlCache of its own: FetchKit needs that slot")
        }
        let exitCleanup: FetchSessionReport.Status
        switch OpenSSLExitCleanup.current {
        case _ where ToolchainFixes.turnsOffOpenSSLExitHandler:
            exitCleanup = .notNeeded("this toolchain's FoundationNetworking turns the handler off itself (Swift 6.4, #5474)")
        case .disabled: exitCleanup = .active
        case .unavailable(let reason): exitCleanup = .unavailable(reason)
        }
        return FetchSessionReport([
            .init(id: "socket-wakeups", summary: "transfers that wait use no processor time",
                  upstream: "FoundationNetworking's socket callback re-arms every socket for writing (MultiHandle.swift)",
                  dependsOn: [],
                  status: quietsWaitingSockets ? .active
                      : (ComparisonSwitches.quietsWaitingSockets ? .unavailable(unavailableLibrary) : .unavailable("turned off for a comparison"))),
            .init(id: "connection-pool", summary: "libcurl keeps up to \(Self.connectionPoolSize) connections between bursts",
                  upstream: "FoundationNetworking never sets CURLMOPT_MAXCONNECTS", dependsOn: [],
                  status: sizesConnectionPool ? .active : .unavailable("the session's libcurl multi handle was not found")),
            .init(id: "task-options", summary: "connect timeouts, HTTP/1.1 under a bandwidth limit, trust settings on each task's handle",
                  upstream: "FoundationNetworking sets no connect timeout (libcurl's 300 s applies)", dependsOn: [],
                  status: taskOptionsStatus),
            .init(id: "response-heads", summary: "response heads are checked before FoundationNetworking parses them (trailers, 1xx, status lines)",
                  upstream: "FoundationNetworking 6.3 parses every header line as part of a head: trailers end the process",
                  dependsOn: ["task-options"],
                  // Without the task options, the dependency says why.
                  status: guardsResponseHeads || !taskOptionsStatus.isActive ? .active : .unavailable(unavailableLibrary)),
            .init(id: "trust-settings", summary: "added CAs and pinned keys are enforced on each task",
                  upstream: "FoundationNetworking has no server-trust challenge on Linux", dependsOn: ["task-options"],
                  status: trust.isEmpty ? .notNeeded("this session has no trust settings") : .active),
            .init(id: "bandwidth-wire", summary: "a bandwidth limit is held on the wire, counting what each socket received",
                  upstream: "URLSession reads at full speed; libcurl's own limit lets a connection's window through",
                  dependsOn: ["socket-wakeups", "task-options"], status: .active),
            .init(id: "reader-pace", summary: "a reader behind the network (a stream's, a download's disk) pauses the reading: the server waits, memory stays bounded",
                  upstream: "URLSession on Linux reads at full speed; suspend() does not stop libcurl",
                  dependsOn: ["task-options"],
                  status: Curl.isAvailable ? .active
                      : .unavailable("libcurl's functions were not found: a stream more than twice its buffer behind fails (FetchError.streamOverflow), a download stops and continues")),
            .init(id: "redirects-in-new-tasks", summary: "each redirect is followed in a task of its own, with its body and its host's pins",
                  upstream: "FoundationNetworking drops a redirected body; 6.3 traps on a redirect over a shared HTTP/2 connection",
                  dependsOn: [], status: .active),
            .init(id: "timeouts", summary: "idle and total timeouts at sub-second precision, the total one over every attempt; "
                      + "no idle timeout while an HTTP/1 response's bytes wait unread in the kernel (with socket-wakeups)",
                  upstream: "FoundationNetworking truncates timeouts to whole seconds and ignores the resource timeout",
                  dependsOn: [], status: .active),
            .init(id: "cookies-sent", summary: "each request (and each redirected one) carries the stored cookies RFC 6265 §5.4 says",
                  upstream: "FoundationNetworking matches stored cookies by host alone (a Secure cookie over plain HTTP) and adds none on a redirect",
                  dependsOn: [],
                  status: router.cookies.sendsCookies ? .active : .notNeeded("the configuration sends no cookies")),
            .init(id: "cookies-stored", summary: "cookies are stored only from responses that set them, a redirect's included",
                  upstream: "FoundationNetworking parses every header line for cookies (a quarter of a small request's CPU)",
                  dependsOn: [],
                  status: router.cookies.storesCookies ? .active
                      : (given.httpCookieAcceptPolicy == .never ? .notNeeded("the configuration accepts no cookies")
                          : .unavailable("the session's configuration has a urlCache of its own: FoundationNetworking stores the cookies, so that a cached response does not set them again"))),
            .init(id: "openssl-exit", summary: "OpenSSL's exit handler is off, so a process cannot crash as it exits",
                  upstream: "corelibs #5469 (6.3.x; 6.4 does the same, #5474)", dependsOn: [], status: exitCleanup),
            .init(id: "challenge-decline", summary: "a 401 that asks for a credential FetchKit has not got ends the fetch with that 401",
                  upstream: "corelibs #5457: such a task never completed (fixed in 6.3.2)", dependsOn: [],
                  status: ToolchainFixes.challengeWithoutCredentialCompletes
                      ? .notNeeded("fixed in this toolchain (Swift 6.3.2, #5457); FetchKit still declines, which ends the task the same way")
                      : .active),
        ])
        #else
        return FetchSessionReport([
            .init(id: "foundation-networking", summary: "FetchKit's Linux workarounds", upstream: "—", dependsOn: [],
                  status: .notNeeded("Apple platforms' URLSession needs none")),
        ])
        #endif
    }
}
