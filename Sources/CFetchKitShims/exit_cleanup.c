// OpenSSL's exit-time cleanup, turned off before libcurl initialises OpenSSL.
//
// The bug: OpenSSL (1.1.0 to 3.x) registers an `atexit` handler, OPENSSL_cleanup, when it is
// first initialised; libcurl initialises it in curl_global_init, which FoundationNetworking calls
// when the first URLSession is made. At exit, that handler races with Swift objects still being
// released on libdispatch threads: a URLSession's multi handle freed after OPENSSL_cleanup calls
// curl_multi_cleanup on SSL state that is gone (a null dereference or double free).
// swift-corelibs-foundation #5469; swift-package-manager #8171.
//
// Upstream: Swift 6.4's FoundationNetworking (#5474, cherry-picked to 6.4.x as #5479) calls
// OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL), found with dlsym, in CFURLSessionInit before
// curl_global_init. 6.3.x (read in 6.3.1) does not. OpenSSL 4.0 stops registering the handler.
//
// Here: the same call, made when the process loads FetchKit (a constructor, before main and so
// before any URLSession), where the process has OpenSSL 1.1.1 or later (the first with
// OPENSSL_INIT_NO_ATEXIT). The flag takes effect only in OpenSSL's first initialisation, which
// is why it cannot wait for FetchKit's first session: an app may make a URLSession before that.
// On 6.4 the call is the one FoundationNetworking makes anyway. Without OpenSSL in the process,
// or with an older one, nothing is done and fetchkit_openssl_exit_cleanup() says why.
//
// What it costs: OpenSSL's memory is not freed at exit (the kernel frees it); leak checkers that
// run at exit report OpenSSL's allocations.
#if defined(__linux__)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#endif
#include "CFetchKitShims.h"

static FetchKitOpenSSLExitCleanup state = FetchKitOpenSSLExitCleanupNotApplicable;

#if defined(__linux__)
typedef int (*fetchkit_init_crypto)(uint64_t, const void *);
typedef unsigned long (*fetchkit_version_num)(void);

#define FETCHKIT_OPENSSL_INIT_NO_ATEXIT 0x00080000L

unsigned long fetchkit_openssl_version_number(void) {
    fetchkit_version_num version = (fetchkit_version_num)dlsym(RTLD_DEFAULT, "OpenSSL_version_num");
    return version != NULL ? version() : 0;
}

__attribute__((constructor))
static void fetchkit_disable_openssl_exit_cleanup(void) {
    fetchkit_init_crypto init = (fetchkit_init_crypto)dlsym(RTLD_DEFAULT, "OPENSSL_init_crypto");
    if (init == NULL) {
        state = FetchKitOpenSSLExitCleanupNoOpenSSL;
        return;
    }
    // 1.1.1 is 0x1010100fL; OpenSSL_version_num exists from 1.1.0 (before, SSLeay).
    if (fetchkit_openssl_version_number() < 0x10101000UL) {
        state = FetchKitOpenSSLExitCleanupTooOld;
        return;
    }
    state = init(FETCHKIT_OPENSSL_INIT_NO_ATEXIT, NULL) == 1 ? FetchKitOpenSSLExitCleanupDisabled
                                                              : FetchKitOpenSSLExitCleanupFailed;
}

int fetchkit_openssl_was_cleaned_up(void) {
    fetchkit_init_crypto init = (fetchkit_init_crypto)dlsym(RTLD_DEFAULT, "OPENSSL_init_crypto");
    if (init == NULL) return -1;
    return init(0, NULL) == 1 ? 0 : 1;
}
#else
unsigned long fetchkit_openssl_version_number(void) { return 0; }
int fetchkit_openssl_was_cleaned_up(void) { return -1; }
#endif

FetchKitOpenSSLExitCleanup fetchkit_openssl_exit_cleanup(void) {
    return state;
}
