// A probe for FetchKitTests: waits for a fetch with FetchOperation.waitUntilFinished(timeout:)
// on the process's real main thread, from top-level code — the situation of a command-line
// tool or an app's main thread, which an in-process test (always inside a main-queue job)
// cannot reproduce.
//
// Usage: RunLoopProbe <main|global>   (the completion queue)
// Prints one line and exits 0 when the wait returned after the completion ran.
import FetchKit
import Foundation
import FetchKitTesting

final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.lock(); value = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
}

let mode = CommandLine.arguments.dropFirst().first ?? "main"
let server = try TestServer()
server.route("GET", "/delay/150") { _ in TestResponse.text("delayed 150").delayed(milliseconds: 150) }
let operation = FetchOperation<Data>(url: server.url("/delay/150"))
let completionRan = Flag()
let completionOnMainThread = Flag()
if mode == "main" {
    operation.onCompletion { _ in
        if Thread.isMainThread { completionOnMainThread.set() }
        completionRan.set()
    }
} else {
    operation.onCompletion(on: .global) { _ in
        completionRan.set()
    }
}
let queue = OperationQueue()
queue.maxConcurrentOperationCount = 1
queue.addOperation(operation)

let returned = operation.waitUntilFinished(timeout: 30)
let expectedThread = mode == "main" ? completionOnMainThread.isSet : true
print("returned=\(returned) completionRan=\(completionRan.isSet) onExpectedThread=\(expectedThread) error=\(operation.error.map { "\($0)" } ?? "none")")
server.shutDown()
exit(returned && completionRan.isSet && expectedThread && operation.error == nil ? 0 : 1)
