import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Whether this process runs under a sanitizer (its runtime is linked in): it adds its own
/// memory to every process it builds.
let runsUnderSanitizer = (["__tsan_init", "__asan_init"] as [String]).contains { dlsym(UnsafeMutableRawPointer(bitPattern: 0), $0) != nil }

/// How many rounds a property test runs: `rounds`, or a tenth of them under a sanitizer. The
/// sanitizer run is for threads; the plain run covers the inputs in full, and a sanitizer's
/// 5–15× slowdown on thousands of rounds would only slow every other test in the process.
func fuzzRounds(_ rounds: Int) -> Int {
    runsUnderSanitizer ? max(1, rounds / 10) : rounds
}
