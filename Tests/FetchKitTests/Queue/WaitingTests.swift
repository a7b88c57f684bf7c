import Foundation
import FetchKitTesting
import Testing
@testable import FetchKit

@Suite("Waiting: the run-loop wait and async", .timeLimit(.minutes(3)))
struct WaitingTests {
    /// Runs the RunLoopProbe executable, built beside the test bundle.
    private func runProbe(_ mode: String) async throws -> (status: Int32, output: String) {
        let (status, stdout, stderr) = try await runTool("RunLoopProbe", [mode])
        return (status, stdout + stderr)
    }

    @Test func mainThreadWaitWithMainQueueCompletionsReturns() async throws {
        let (status, output) = try await runProbe("main")
        #expect(status == 0, "probe said: \(output)")
        #expect(output.contains("returned=true completionRan=true onExpectedThread=true error=none"))
    }

    @Test func mainThreadWaitWithBackgroundCompletionsReturns() async throws {
        let (status, output) = try await runProbe("global")
        #expect(status == 0, "probe said: \(output)")
    }

    @Test func backgroundThreadWaitWithoutRunLoopSourcesReturns() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/delay/100")
        let ranHandler = Locked(false)
        operation.onCompletion { _ in ranHandler.withLock { $0 = true } }
        makeQueue(1).addOperation(operation)
        let result = Locked<Bool?>(nil)
        let done = Countdown(1)
        let thread = Thread {
            result.withLock { $0 = operation.waitUntilFinished(timeout: 30) }
            done.signal()
        }
        thread.start()
        #expect(await done.wait())
        #expect(result.current == true)
        #expect(ranHandler.current, "the wait returns only after the completion handler ran")
    }

    @Test func waitTimesOutForAnOperationNobodyStarts() async {
        let operation = FetchOperation<Data>(url: URL(string: "http://127.0.0.1:9/")!)
        let result = Locked<Bool?>(nil)
        let done = Countdown(1)
        Thread {
            result.withLock { $0 = operation.waitUntilFinished(timeout: 0.2) }
            done.signal()
        }.start()
        #expect(await done.wait())
        #expect(result.current == false)
    }

    @Test func finishedReturnsTheTypedOperation() async throws {
        let server = try TestServer.standard()
        defer { server.shutDown() }
        let operation = server.operation("/json")
        makeQueue(1).addOperation(operation)
        let finished: RecordingOperation = try await operation.finished()
        #expect(finished === operation)
        #expect(finished.parses.current.count == 1)
    }
}
