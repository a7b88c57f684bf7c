// A probe for FetchKitTests: fetches one hostile response, byte for byte as a server sent it,
// through FetchKit or through a plain URLSession, in a process of its own. On Linux
// FoundationNetworking 6.3.x ends the process for some of them (a fatalError, SIGILL): a crash
// ends this process, not the test run. FramingTests run each case here.
//
// Usage: FramingProbe <case> fetchkit|urlsession|own-url-cache
// Prints one line and exits 0 unless the process crashed:
//   ok status=<code> body=<bytes> md5ish=<checksum> trailers=<name=value;...> guards=<true|false>
//   error kind=<FetchError code or URLError code> description=<text>
import FetchKit
import Foundation
import FetchKitTesting

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 2, let framing = FramingCase.all[arguments[0]] else {
    print("usage: FramingProbe <\(FramingCase.all.keys.sorted().joined(separator: "|"))> fetchkit|urlsession|own-url-cache")
    exit(2)
}
let mode = arguments[1]

let server: TestServer
do { server = try TestServer() } catch {
    print("error kind=server description=\(error)")
    exit(1)
}
for (path, bytes) in framing.routes {
    server.route(path) { _ in .steps([.write(bytes), .close]) }
}
let url = server.url(framing.routes[0].path)

switch mode {
case "urlsession":
    // What a plain URLSession does with the same bytes.
    let done = DispatchSemaphore(value: 0)
    let line = Locked("")
    let task = URLSession.shared.dataTask(with: url) { data, response, error in
        if let error {
            line.set("error kind=\((error as? URLError)?.code.rawValue ?? 0) description=\(oneLine(error.localizedDescription))")
        } else {
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            let body = data ?? Data()
            line.set("ok status=\(status) body=\(body.count) md5ish=\(checksum(body))")
        }
        done.signal()
    }
    task.resume()
    if done.wait(timeout: .now() + 60) == .timedOut { print("error kind=hang"); exit(1) }
    print(line.get())
case "fetchkit", "own-url-cache":
    let session: FetchSession
    if mode == "own-url-cache" {
        let configuration = FetchSession.defaultConfiguration()
        configuration.urlCache = URLCache(memoryCapacity: 0, diskCapacity: 0, diskPath: nil)
        session = FetchSession(configuration: configuration)
    } else {
        session = FetchSession.shared
    }
    let operation = FetchOperation<Data>(url: url)
    operation.configuration.session = session
    operation.configuration.retryPolicy = .none
    operation.configuration.totalTimeout = 60
    let queue = FetchQueue()
    do throws(FetchError) {
        let body = try await queue.fetch(operation)
        let trailers = operation.responseTrailers.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";")
        print("ok status=\(operation.response?.statusCode ?? 0) body=\(body.count) md5ish=\(checksum(body)) "
              + "trailers=\(trailers) guards=\(session.guardsResponseHeads)")
    } catch {
        print("error kind=\(error.code) description=\(oneLine(error.description)) guards=\(session.guardsResponseHeads)")
    }
default:
    print("unknown mode \(mode)")
    exit(2)
}
server.shutDown()
exit(0)

