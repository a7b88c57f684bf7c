// swift-tools-version:6.0
//
// FetchKit: concurrent download operations on Foundation's `Operation` and `URLSession`,
// for Linux (FoundationNetworking) and Apple platforms. No package dependencies.
import PackageDescription

let package = Package(
    name: "FetchKit",
    // The floors are those of Swift concurrency's back-deployment (async/await, `Task`
    // cancellation handlers), which FetchKit's `async` API uses. Everything else FetchKit
    // touches (`Operation`, `URLSession` delegates, `Progress`, `NotificationCenter`) is older.
    platforms: [
        .macOS(.v10_15),
        .iOS(.v13),
        .tvOS(.v13),
        .watchOS(.v6),
    ],
    products: [
        .library(name: "FetchKit", targets: ["FetchKit"]),
        // A test server for users' endpoint tests: routes, canned answers, faults at the socket,
        // a request log and expectations (issue 35).
        .library(name: "FetchKitTesting", targets: ["FetchKitTesting"]),
    ],
    targets: [
        .target(name: "FetchKit", dependencies: ["FoundationNetworkingShims"]),
        // The one door into FoundationNetworking, libcurl and raw sockets (Linux): the table of
        // libcurl functions and numbers, the reflection path to a task's handles, FoundationNetworking's
        // own callbacks, the socket calls, the toolchain's fixes. FetchKit keeps the policy. Not a
        // product: `package` symbols only.
        .target(name: "FoundationNetworkingShims", dependencies: ["CFetchKitShims"]),
        // The part of the shims that must run before any Swift code: OpenSSL's exit-time cleanup
        // turned off as the process loads (corelibs #5469). Not a product.
        .target(name: "CFetchKitShims"),
        // The in-tree HTTP/1.1 server on 127.0.0.1 under FetchKitTesting's TestServer (which
        // FetchKit's own tests use), the demo and the benchmark. A target, not a product: its
        // API is not FetchKit's public surface.
        .target(name: "LoopbackServer"),
        .target(name: "FetchKitTesting", dependencies: ["FetchKit", "LoopbackServer"]),
        .testTarget(name: "FetchKitTests", dependencies: ["FetchKit", "FoundationNetworkingShims", "RunLoopProbe", "DependencyProbe", "TLSProbe", "FramingProbe", "SubclassProbe", "ExitCleanupProbe", "MeasurementProbe", "CZlib", "FetchKitTesting",
                                                       // A second process holding a partial file's lock (PartialFileLockTests).
                                                       "fetchkit"]),
        // The `fetchkit` command's tests: the command runs as its users run it, in a process of
        // its own. `Support` is the library tests' folder (a link), compiled into each target.
        .testTarget(name: "FetchKitCommandLineTests", dependencies: ["FetchKit", "FoundationNetworkingShims", "fetchkit", "CZlib", "FetchKitTesting"]),
        // zlib, for the tests only: they compress real gzip streams (a bomb, a truncated body).
        // FetchKit itself needs no zlib: libcurl decodes content codings under URLSession.
        .systemLibrary(name: "CZlib", path: "Tests/CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // Waits for a fetch on a real main thread from top-level code, for FetchKitTests to run
        // as a subprocess (an in-process test always runs inside a main-queue job).
        .executableTarget(name: "RunLoopProbe", dependencies: ["FetchKit", "FetchKitTesting"], path: "Tests/RunLoopProbe"),
        // Frees the dependents of a fetch in flight, for FetchKitTests to run as a subprocess (a
        // use of a freed dependent crashes the process it happens in).
        .executableTarget(name: "DependencyProbe", dependencies: ["FetchKit", "FetchKitTesting"], path: "Tests/DependencyProbe"),
        // Fetches over HTTPS in a process of its own, which the TLS tests start in a private mount
        // namespace where their test CA is in the system bundle (all that libcurl trusts on Linux).
        .executableTarget(name: "TLSProbe", dependencies: ["FetchKit", "FetchKitTesting"], path: "Tests/TLSProbe"),
        // Fetches one hostile response in a process of its own, through FetchKit or a plain
        // URLSession: where FoundationNetworking crashes on it, this process dies, not the tests.
        .executableTarget(name: "FramingProbe", dependencies: ["FetchKit", "FetchKitTesting"], path: "Tests/FramingProbe"),
        // Subclasses of each operation calling each of its initializers through `super`, as an
        // endpoint author's module does: built with the tests, so an initializer that compiles
        // across modules but does not link fails the build.
        .executableTarget(name: "SubclassProbe", dependencies: ["FetchKit"], path: "Tests/SubclassProbe"),
        // Reports, from an `atexit` handler, whether OpenSSL's own exit handler ran before it:
        // for FetchKitTests to run as a subprocess (what happens at exit happens once a process).
        .executableTarget(name: "ExitCleanupProbe", dependencies: ["FetchKit", "FoundationNetworkingShims", "FetchKitTesting"], path: "Tests/ExitCleanupProbe"),
        .testTarget(name: "LoopbackServerTests", dependencies: ["LoopbackServer"]),
        // The door's own paths, each checked on this toolchain (FetchKitTests check the workarounds).
        .testTarget(name: "FoundationNetworkingShimsTests", dependencies: ["FoundationNetworkingShims"]),
        // The command-line downloader, and the offline demo it runs with no URL: `swift run fetchkit`.
        .executableTarget(name: "fetchkit", dependencies: ["FetchKit", "LoopbackServer"]),
        // Benchmarks against raw URLSession: `swift run -c release fetchkit-bench`.
        .executableTarget(name: "fetchkit-bench", dependencies: ["FetchKit", "LoopbackServer", "Measurements"]),
        // The measurements that run in a process of their own (memory, CPU, a stream's pace),
        // for fetchkit-bench's rows and, through MeasurementProbe, for the tests that bound them.
        .target(name: "Measurements", dependencies: ["FetchKit", "LoopbackServer"]),
        // Runs one of those measurements in a fresh process, for FetchKitTests.
        .executableTarget(name: "MeasurementProbe", dependencies: ["Measurements"], path: "Tests/MeasurementProbe"),
    ],
    swiftLanguageModes: [.v6]
)
