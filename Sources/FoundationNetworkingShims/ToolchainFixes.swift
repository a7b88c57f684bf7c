#if os(Linux)
/// The upstream fixes of what FetchKit works around, by the Swift toolchain that has them: the
/// one place where a workaround asks whether the FoundationNetworking it runs on still needs it
/// (`FetchSession.workarounds` reports the answer).
///
/// On Linux FoundationNetworking ships with the toolchain, so the compiler's version stands for
/// the library's. Read in swift-corelibs-foundation's release tags and development snapshots
/// (the first release or snapshot line that has each fix):
///
/// | Fix | First in | What FetchKit does there |
/// |---|---|---|
/// | #5457: a task answered `401` with `WWW-Authenticate`, and no credential, completes (it never did) | 6.3.2 | reports `challenge-decline` as not needed (the decline stays: FetchKit's answer when it has no credential, ending the task as the fix does) |
/// | #5474: OpenSSL's `atexit` handler turned off before libcurl starts (#5469: a crash at exit) | 6.4 snapshots | reports `openssl-exit` as not needed (FetchKit's load-time step repeats what FoundationNetworking did, harmlessly) |
/// | #5448: libcurl's default receive buffer, no per-task setting (the `try!` behind the redirect trap) | 6.4 snapshots | nothing yet: the HTTP/2 redirect trap the redirect workaround avoids is not that one |
/// | #5417: `URLSessionTask.cancel()` is asynchronous | 6.4 snapshots | nothing: the task-options probe waits for FoundationNetworking's answer on every toolchain |
///
/// Detection is preferred where a fix can be seen at run time (the probe, the callbacks found);
/// these are the fixes that cannot.
package enum ToolchainFixes {
    /// The toolchain's FoundationNetworking completes a task refused with `401` when no
    /// credential answers the challenge (swift-corelibs-foundation #5457, Swift 6.3.2).
    package static let challengeWithoutCredentialCompletes: Bool = {
        #if compiler(>=6.3.2)
        return true
        #else
        return false
        #endif
    }()

    /// The toolchain's FoundationNetworking turns OpenSSL's exit handler off itself
    /// (swift-corelibs-foundation #5474, Swift 6.4).
    package static let turnsOffOpenSSLExitHandler: Bool = {
        #if compiler(>=6.4)
        return true
        #else
        return false
        #endif
    }()
}
#endif
