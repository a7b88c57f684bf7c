// FetchKit: concurrent download operations on Foundation's `Operation` and `URLSession`.
//
// On Linux, `URLSession`, `URLRequest` and `HTTPURLResponse` live in FoundationNetworking.
// Re-exporting it lets users write `import FetchKit` alone on every platform.
#if canImport(FoundationNetworking)
@_exported import FoundationNetworking
#endif
@_exported import Foundation
