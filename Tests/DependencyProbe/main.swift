// A probe for FetchKitTests: frees the dependents of a fetch that is still in flight, in every
// order, then lets the fetch end. swift-corelibs-foundation keeps an operation's dependents
// without retaining them and never forgets one that ended first, so a freed dependent used to
// crash the process (SIGSEGV in `Operation.observeValue`) when its dependency finished. A
// crash ends this process, not the test run: FetchKitTests runs each scenario here.
//
// Usage: DependencyProbe <scenario> [succeeds|fails|cancelled ...] (default: all three endings,
// one after the other)
// Prints "ok <scenario> <ending>" for each ending and exits 0 when every dependency ended and
// every dependent was freed.
import FetchKit
import Foundation
import FetchKitTesting

let arguments = Array(CommandLine.arguments.dropFirst())
let scenario = arguments.first ?? "readme"
let endings = arguments.count > 1 ? Array(arguments.dropFirst()) : ["succeeds", "fails", "cancelled"]
/// The ending of the round being run: how the login ends.
nonisolated(unsafe) var ending = endings[0]

/// A signal that a deinit or a completion happened, waited for with a deadline.
final class Signal: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    func send() { semaphore.signal() }
    func wait(_ what: String, seconds: Double = 30) {
        if semaphore.wait(timeout: .now() + seconds) == .timedOut { fail("timed out waiting for \(what)") }
    }
}

func fail(_ message: String) -> Never {
    print("FAIL \(scenario) \(ending): \(message)")
    exit(1)
}

/// POST /login, answered when the test says (see `gate`).
final class LogIn: FetchOperation<String>, @unchecked Sendable {
    override init(url: URL) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(#"{"user":"alice","password":"secret"}"#.utf8)
        super.init(request: request)
    }

    override func parseResponseBody(_ body: Data) throws -> String {
        try JSONDecoder().decode([String: String].self, from: body)["token"] ?? ""
    }
}

/// GET /user after a login; tells `freed` when it is deallocated.
final class GetUser: FetchOperation<Data>, @unchecked Sendable {
    let freed: Signal
    init(url: URL, after dependency: Operation, freed: Signal) {
        self.freed = freed
        super.init(request: URLRequest(url: url))
        addDependency(dependency)
    }

    deinit { freed.send() }
}

let server = try TestServer()
// The user a login's bearer token names, as FetchKit's tests' standard `/user` answers.
server.route("GET", "/user") { request in
    guard let token = request.header("Authorization")?.split(separator: " ").last, token.hasPrefix("token-") else {
        return .json(#"{"error":"unauthorized"}"#, status: 401)
    }
    return .json(#"{"name":"\#(token.dropFirst(6))","id":42}"#)
}
let queue = FetchQueue(maximumConcurrentTransfers: 8)
nonisolated(unsafe) var rounds = 0

/// Starts a login, answered when its gate opens, and waits until the server holds its request.
func startLogin() -> (LogIn, TestGate) {
    let gate = TestGate()
    let status = ending == "fails" ? 403 : 200
    let body = Data(ending == "fails" ? #"{"error":"bad credentials"}"# .utf8 : #"{"token":"token-alice"}"#.utf8)
    rounds += 1
    let path = "/gated-login/\(rounds)"
    server.route(path) { _ in
        .steps([.wait(for: gate),
                .head(status: status, headers: ["Content-Type": "application/json", "Content-Length": "\(body.count)"]),
                .write(body)])
    }
    let login = LogIn(url: server.url(path))
    login.name = "login"
    queue.enqueue(login, on: .global) { _ in }
    if !server.blockingWait(timeout: 30, until: { $0.requestsInFlight >= 1 }) { fail("the login never arrived") }
    return (login, gate)
}

/// Ends the login as the scenario says and waits until it finished.
func endLogin(_ started: (LogIn, TestGate)) {
    let (login, gate) = started
    if ending == "cancelled" { login.cancel() }
    gate.open()
    if !login.waitUntilFinished(timeout: 30) { fail("the login never finished") }
    if !server.blockingWait(timeout: 30, until: { $0.requestsInFlight == 0 }) { fail("the login's request never ended") }
}

/// Every order of `count` items.
func permutations(_ count: Int) -> [[Int]] {
    guard count > 1 else { return [[0]] }
    return permutations(count - 1).flatMap { shorter in
        (0...shorter.count).map { place in
            var order = shorter
            order.insert(count - 1, at: place)
            return order
        }
    }
}

/// The README's `ProfileModel.reload`: the task awaiting `GetUser` is cancelled while the
/// login is in flight; the dependent is freed; then the login ends.
func readme() async {
    let login = startLogin()
    let freed = Signal()
    let task = Task { [queue] in
        try await queue.fetch(GetUser(url: server.url("/user"), after: login.0, freed: freed))
    }
    task.cancel()
    switch await task.result {
    case .success: fail("the cancelled fetch succeeded")
    case .failure(let error):
        guard case .cancelled? = error as? FetchError else { fail("expected cancelled, got \(error)") }
    }
    freed.wait("GetUser to be freed")
    endLogin(login)
    if !server.requests("/user").isEmpty { fail("the cancelled GetUser sent a request") }
}

/// Dependents of one login, each cancelled and freed in the order given, before the login ends.
func fanOut(freeing order: [Int]) {
    let login = startLogin()
    let signals = order.map { _ in Signal() }
    var dependents: [GetUser?] = signals.map { GetUser(url: server.url("/user"), after: login.0, freed: $0) }
    for dependent in dependents { queue.enqueue(dependent!, on: .global) { _ in } }
    for index in order {
        dependents[index]?.cancel()
        if !(dependents[index]?.waitUntilFinished(timeout: 30) ?? false) { fail("dependent \(index) never finished") }
        dependents[index] = nil
        signals[index].wait("dependent \(index) to be freed")
    }
    endLogin(login)
}

/// A chain login ← first ← second ← third: dependents cancelled and freed in the order given.
func chain(freeing order: [Int]) {
    let login = startLogin()
    let signals = order.map { _ in Signal() }
    var links: [GetUser?] = []
    var previous: Operation = login.0
    for signal in signals {
        let link = GetUser(url: server.url("/user"), after: previous, freed: signal)
        links.append(link)
        previous = link
    }
    previous = login.0
    for link in links { queue.enqueue(link!, on: .global) { _ in } }
    for index in order {
        links[index]?.cancel()
    }
    for index in order {
        if !(links[index]?.waitUntilFinished(timeout: 30) ?? false) { fail("link \(index) never finished") }
        links[index] = nil
    }
    for index in order { signals[index].wait("link \(index) to be freed") }
    endLogin(login)
}

/// A dependent that was never enqueued nor cancelled, dropped while its dependency runs.
func abandoned() {
    let login = startLogin()
    let freed = Signal()
    var dependent: GetUser? = GetUser(url: server.url("/user"), after: login.0, freed: freed)
    _ = dependent
    dependent = nil
    endLogin(login)
    freed.wait("the abandoned dependent to be freed once its dependency finished")
}

/// Plain `BlockOperation` dependents of a FetchKit operation, and FetchKit dependents of a
/// plain `BlockOperation`: the second is FetchKit's to keep safe.
func fetchAfterBlock() {
    let blocker = TestGate()
    let block = BlockOperation { _ = blocker.wait(timeout: 30) }
    let signals = (0..<3).map { _ in Signal() }
    var dependents: [GetUser?] = signals.map { GetUser(url: server.url("/user"), after: block, freed: $0) }
    let plain = OperationQueue()
    plain.addOperation(block)
    for dependent in dependents { queue.enqueue(dependent!, on: .global) { _ in } }
    for index in [2, 0, 1] {
        dependents[index]?.cancel()
        if !(dependents[index]?.waitUntilFinished(timeout: 30) ?? false) { fail("dependent \(index) never finished") }
        dependents[index] = nil
        signals[index].wait("dependent \(index) to be freed")
    }
    blocker.open()
    plain.waitUntilAllOperationsAreFinished()
}

for each in endings {
    ending = each
    switch scenario {
    case "readme": await readme()
    case "fan-out": for order in permutations(3) { fanOut(freeing: order) }
    case "chain": for order in permutations(3) { chain(freeing: order) }
    case "abandoned": abandoned()
    case "after-block": fetchAfterBlock()
    default: fail("unknown scenario")
    }
    print("ok \(scenario) \(ending)")
}
server.shutDown()
exit(0)
