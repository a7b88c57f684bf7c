// C parts of FetchKit's workarounds for FoundationNetworking on Linux: only what must run
// before any Swift code does. Empty elsewhere.
#ifndef CFETCHKITSHIMS_H
#define CFETCHKITSHIMS_H

/// What FetchKit did about OpenSSL's exit-time cleanup when the process loaded it.
typedef enum {
    /// Not on Linux, or not yet run.
    FetchKitOpenSSLExitCleanupNotApplicable = 0,
    /// `OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT)` succeeded before libcurl was initialised.
    FetchKitOpenSSLExitCleanupDisabled = 1,
    /// No OpenSSL in the process (libcurl uses another TLS library, or none).
    FetchKitOpenSSLExitCleanupNoOpenSSL = 2,
    /// OpenSSL older than 1.1.1, which has no `OPENSSL_INIT_NO_ATEXIT`.
    FetchKitOpenSSLExitCleanupTooOld = 3,
    /// `OPENSSL_init_crypto` returned failure.
    FetchKitOpenSSLExitCleanupFailed = 4,
} FetchKitOpenSSLExitCleanup;

/// What the load-time step did (see `exit_cleanup.c`).
FetchKitOpenSSLExitCleanup fetchkit_openssl_exit_cleanup(void);

/// The linked OpenSSL's `OpenSSL_version_num()`, or 0 when there is none.
unsigned long fetchkit_openssl_version_number(void);

/// Whether OpenSSL has already run its cleanup (it can then not be initialised again). For
/// tests, from an `atexit` handler: asks `OPENSSL_init_crypto(0, NULL)`; -1 without OpenSSL.
int fetchkit_openssl_was_cleaned_up(void);

#endif
