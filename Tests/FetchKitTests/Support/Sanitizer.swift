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

/// Runs `body` for each of ``fuzzRounds(_:)`` rounds, giving up the thread every few rounds.
///
/// Swift Testing runs every test on the cooperative pool, which has one thread per core: two
/// here. A property test that loops for seconds without suspending holds one of them, and two
/// at once (a parameterised test's cases run in parallel) left every other test waiting for
/// ten seconds to resume after an `await`: timers fired on time but the tests that awaited
/// them could not look. Yielding lets the rest of the suite through.
func forEachRound(_ rounds: Int, _ body: (Int) throws -> Void) async rethrows {
    for round in 0..<fuzzRounds(rounds) {
        if round.isMultiple(of: 20) { await Task.yield() }
        try body(round)
    }
}
