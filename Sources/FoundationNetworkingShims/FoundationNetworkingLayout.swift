#if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
import Foundation
import FoundationNetworking
import Synchronization

/// The one reflection path into FoundationNetworking's objects: a task's libcurl easy handle
/// and its session's work queue, a session's libcurl multi handle. Each step is checked (a
/// label, a type, an enum case), and any other layout gives `nil`: never a crash, never a
/// guess.
///
/// Read in swift-corelibs-foundation 6.3.1 and unchanged in 6.3.3 and in the 6.4 development
/// snapshots of August 2026:
/// - a task's handle: `URLSessionTask._protocolStorage` (an enum) → `.existing(protocol)` →
///   `_NativeProtocol.easyHandle` (an `_EasyHandle`) → `rawHandle` (the `CURL *`); the data
///   FoundationNetworking gives the handle's callbacks is the `_EasyHandle`'s address
///   (`Unmanaged.passUnretained(self).toOpaque()`, `EasyHandle.swift`);
/// - a task's work queue: `URLSessionTask.workQueue`, the session's serial queue, where every
///   libcurl call for its tasks runs (`org.swift.URLSession.SharedQueue`-targeted since #5016);
/// - a session's multi handle: `URLSession.multiHandle` → `rawHandle` (the `CURLM *`).
///
/// Call these on the session's work queue where the handle is used, as FoundationNetworking
/// does: a handle read elsewhere may be freed meanwhile.
package enum FoundationNetworkingLayout {
    /// A task's libcurl easy handle, and the data FoundationNetworking gives its callbacks (the
    /// address of its handle object).
    package struct EasyHandle {
        package let raw: UnsafeMutableRawPointer
        package let callbackData: UnsafeMutableRawPointer

        package init(raw: UnsafeMutableRawPointer, callbackData: UnsafeMutableRawPointer) {
            self.raw = raw
            self.callbackData = callbackData
        }
    }

    /// `task`'s libcurl easy handle, once FoundationNetworking has made its protocol; `nil` on
    /// any other layout, or before.
    @Sendable package static func easyHandle(of task: URLSessionTask) -> EasyHandle? {
        guard let storage = child("_protocolStorage", of: task) else { return nil }
        let state = Mirror(reflecting: storage)
        guard state.displayStyle == .enum, let existing = state.children.first, existing.label == "existing",
              let urlProtocol = existing.value as? URLProtocol, urlProtocol.task === task,
              let easyHandle = child("easyHandle", of: urlProtocol).flatMap(unwrapped),
              let raw = child("rawHandle", of: easyHandle).flatMap(unwrapped),
              isEasyHandleClass(type(of: easyHandle))
        else { return nil }
        let object = easyHandle as AnyObject
        let callbackData = Unmanaged.passUnretained(object).toOpaque()
        if let pointer = raw as? UnsafeMutableRawPointer { return EasyHandle(raw: pointer, callbackData: callbackData) }
        if let pointer = raw as? OpaquePointer { return EasyHandle(raw: UnsafeMutableRawPointer(pointer), callbackData: callbackData) }
        return nil
    }

    /// The serial queue where FoundationNetworking runs `task`'s libcurl work; `nil` on any
    /// other layout.
    package static func workQueue(of task: URLSessionTask) -> DispatchQueue? {
        child("workQueue", of: task) as? DispatchQueue
    }

    /// The libcurl multi handle behind `session`; `nil` on any other layout.
    package static func multiHandle(of session: URLSession) -> UnsafeMutableRawPointer? {
        guard let multiHandle = child("multiHandle", of: session) else { return nil }
        return child("rawHandle", of: multiHandle) as? UnsafeMutableRawPointer
    }

    /// Whether `type` is FoundationNetworking's `_EasyHandle` (its name checked once per type).
    private static func isEasyHandleClass(_ type: Any.Type) -> Bool {
        let key = ObjectIdentifier(type)
        if let known = easyHandleClasses.withLock({ $0[key] }) { return known }
        let matches = String(reflecting: type).hasSuffix("._EasyHandle")
        easyHandleClasses.withLock { $0[key] = matches }
        return matches
    }
    private static let easyHandleClasses = Mutex([ObjectIdentifier: Bool]())

    /// Where a stored property was found: how many superclasses up, and at which child.
    private struct ChildPlace {
        let depth: Int
        let offset: Int
    }
    private struct ChildKey: Hashable {
        let type: ObjectIdentifier
        let label: String
    }
    /// Where each property was found in each type, so that the next lookup reads one child
    /// (a mirror's children are made one at a time, as they are read) instead of all before it.
    private static let childPlaces = Mutex([ChildKey: ChildPlace]())

    /// The stored property `label` of `value`, looked for in its class and its superclasses.
    package static func child(_ label: String, of value: Any) -> Any? {
        let key = ChildKey(type: ObjectIdentifier(type(of: value)), label: label)
        if let place = childPlaces.withLock({ $0[key] }) {
            var mirror: Mirror? = Mirror(reflecting: value)
            for _ in 0..<place.depth { mirror = mirror?.superclassMirror }
            // The place is checked each time: the label must be the one found there.
            if let children = mirror?.children, place.offset < children.count {
                let found = children[children.index(children.startIndex, offsetBy: place.offset)]
                if found.label == label { return found.value }
            }
        }
        var mirror: Mirror? = Mirror(reflecting: value)
        var depth = 0
        while let current = mirror {
            if let index = current.children.firstIndex(where: { $0.label == label }) {
                let offset = current.children.distance(from: current.children.startIndex, to: index)
                childPlaces.withLock { $0[key] = ChildPlace(depth: depth, offset: offset) }
                return current.children[index].value
            }
            mirror = current.superclassMirror
            depth += 1
        }
        return nil
    }

    /// `value` itself, or what it wraps if it is an optional (`nil` if that is empty). (A cast
    /// to `Any?` unwraps an optional in an `Any`, and wraps anything else: no mirror needed.)
    private static func unwrapped(_ value: Any) -> Any? {
        if case Optional<Any>.some(let inner) = value { return inner }
        return nil
    }
}
#endif
