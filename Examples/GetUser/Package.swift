// swift-tools-version:6.0
//
// A package that uses FetchKit as an app's or a server's package would: one endpoint subclass,
// `GetUser`, and its tests with FetchKitTesting — against a test server on 127.0.0.1, and with the
// stub transport, no socket. FetchKit's CI builds and tests it with the network off.
import PackageDescription

let package = Package(
    name: "GetUser",
    platforms: [.macOS(.v10_15), .iOS(.v13)],
    dependencies: [
        // In your package: .package(url: "https://github.com/…/FetchKit.git", from: "…").
        .package(name: "FetchKit", path: "../.."),
    ],
    targets: [
        .target(name: "GetUserAPI", dependencies: [.product(name: "FetchKit", package: "FetchKit")]),
        .testTarget(name: "GetUserAPITests", dependencies: [
            "GetUserAPI",
            .product(name: "FetchKitTesting", package: "FetchKit"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
