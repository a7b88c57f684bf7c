import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif
import FoundationNetworkingShims
import Testing

#if canImport(FoundationNetworking) && os(Linux) && canImport(Glibc)
/// ``LoadedFunction`` finds a function of a loaded library by name from the file's symbol
/// table, and gives `nil` — never a crash — for anything it cannot check.
@Suite("Functions of a loaded library found by name", .timeLimit(.minutes(3)))
struct LoadedFunctionTests {
    /// An address inside FoundationNetworking.
    private let anchor = unsafeBitCast(URLSession.self as AnyClass, to: UnsafeRawPointer.self)

    /// An exported function, whose address the dynamic linker also knows: both agree.
    @Test func anExportedFunctionIsFoundWhereTheDynamicLinkerPutIt() throws {
        let name = "$s20FoundationNetworking10URLSessionCMa"   // URLSession's metadata accessor
        let linked = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), name))
        let found = try #require(LoadedFunction.address(of: name, inFileMappedAt: anchor))
        #expect(UnsafeRawPointer(linked) == found)
    }

    /// The local function the fix needs: found, and different from every exported one.
    @Test func foundationNetworkingsSocketCallbackIsFound() throws {
        let found = try #require(LoadedFunction.address(of: FoundationNetworkingCallbacks.socketCallbackName, inFileMappedAt: anchor))
        #expect(dlsym(UnsafeMutableRawPointer(bitPattern: 0), FoundationNetworkingCallbacks.socketCallbackName) == nil,
                "a local symbol: the dynamic linker cannot see it")
        #expect(FoundationNetworkingCallbacks.socket.map(FoundationNetworkingCallbacks.address(of:)) == found)
    }

    @Test(arguments: ["", "no_such_function_anywhere", "$s20FoundationNetworking10URLSessionC",
                      // A data object, not a function: URLSession's class metadata.
                      "$s20FoundationNetworking10URLSessionCN"])
    func aNameThatIsNotAFunctionGivesNil(name: String) {
        #expect(LoadedFunction.address(of: name, inFileMappedAt: anchor) == nil)
    }

    /// An anchor in memory that no file backs (the heap, the stack) gives `nil`.
    @Test func anAnchorOutsideAnyFileGivesNil() {
        let heap = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 16)
        defer { heap.deallocate() }
        #expect(LoadedFunction.address(of: FoundationNetworkingCallbacks.socketCallbackName, inFileMappedAt: heap) == nil)
        var local = 0
        withUnsafePointer(to: &local) { stack in
            #expect(LoadedFunction.address(of: FoundationNetworkingCallbacks.socketCallbackName, inFileMappedAt: stack) == nil)
        }
        #expect(LoadedFunction.address(of: FoundationNetworkingCallbacks.socketCallbackName,
                                       inFileMappedAt: UnsafeRawPointer(bitPattern: 0x10)!) == nil)
    }

    /// The right name in the wrong file (libc, whose symbol table is stripped or lacks it).
    @Test func theNameInAnotherLibraryGivesNil() throws {
        let libc = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "strlen"))
        #expect(LoadedFunction.address(of: FoundationNetworkingCallbacks.socketCallbackName, inFileMappedAt: libc) == nil)
    }

    /// Every line of this process's `/proc/self/maps` parses.
    @Test func theMappingsOfThisProcessParse() throws {
        let mappings = try #require(LoadedFunction.Mapping.ofThisProcess())
        #expect(mappings.contains { $0.isExecutable && $0.path.hasSuffix("libFoundationNetworking.so") })
        #expect(LoadedFunction.Mapping("garbage") == nil)
        #expect(LoadedFunction.Mapping("00400000-00300000 r-xp 00000000 08:01 12 /x") == nil, "an end before the start")
        #expect(LoadedFunction.Mapping("zz-00300000 r-xp 00000000 08:01 12 /x") == nil)
        #expect(LoadedFunction.Mapping("00400000-00500000 r-xp 00000000 08:01 12 /a path with spaces")?.path == "/a path with spaces")
    }
}
#endif
