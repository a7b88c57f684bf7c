import Foundation
import Testing

// swift-corelibs-foundation keeps an operation's dependents without retaining them, and a
// dependent that ends first is never forgotten: freeing it before its dependency finished
// crashed the process when the dependency did (README's `ProfileModel.reload`, cancelled while
// the login is in flight). DependencyProbe stages each case in a process of its own, so that a
// crash fails one test instead of ending the run.

@Suite("Dependents freed before their dependency finishes", .timeLimit(.minutes(3)))
struct DependentLifetimeTests {
    /// Each scenario with the login succeeding, failing and cancelled, in one process.
    @Test(arguments: ["readme", "fan-out", "chain", "abandoned", "after-block"])
    func freeingADependentNeverCrashesItsDependency(scenario: String) async throws {
        let (status, stdout, stderr) = try await runTool("DependencyProbe", [scenario])
        #expect(status == 0, "probe said: \(stdout)\(stderr.suffix(2000))")
        for ending in ["succeeds", "fails", "cancelled"] {
            #expect(stdout.contains("ok \(scenario) \(ending)"), "\(stdout)")
        }
    }
}
