#if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
import Foundation

/// Finds a function of a loaded ELF file by its symbol name, a local one included — one that
/// `dlsym` cannot see, because only the file's full symbol table (`.symtab`) names it.
///
/// Used once per process, to find FoundationNetworking's libcurl header and socket callbacks
/// (``FoundationNetworkingCallbacks``). Every step is checked, and any surprise gives `nil` — never a
/// crash, never a read outside what was checked:
///
/// 1. `/proc/self/maps` names the file mapped at `anchor` (its path and inode);
/// 2. the file at that path is opened and must have that inode (it was not replaced);
/// 3. its ELF header, section headers, `.symtab` and the `.strtab` it links to are read with
///    every offset and size checked against the file's size and a cap;
/// 4. the symbol must be a defined function of non-zero size inside an executable section;
/// 5. its address is where `/proc/self/maps` shows that file offset mapped, readable and
///    executable, in one mapping of the same file;
/// 6. the bytes there must equal the file's bytes (the code is the code the file describes).
package enum LoadedFunction {
    /// The address of the function named `name` (a mangled name, exactly) in the ELF file
    /// that is mapped at `anchor`, or `nil`.
    package static func address(of name: String, inFileMappedAt anchor: UnsafeRawPointer) -> UnsafeRawPointer? {
        addresses(of: [name], inFileMappedAt: anchor)[name]
    }

    /// The addresses of the functions named `names` in the ELF file mapped at `anchor`, each
    /// checked as ``address(of:inFileMappedAt:)`` checks one; the names not found are missing.
    /// The mappings and the file's tables are read once for all of them.
    package static func addresses(of names: Set<String>, inFileMappedAt anchor: UnsafeRawPointer) -> [String: UnsafeRawPointer] {
        guard let mappings = Mapping.ofThisProcess(),
              let image = mappings.first(where: { $0.contains(UInt(bitPattern: anchor), length: 1) }),
              image.inode != 0, image.path.hasPrefix("/")
        else { return [:] }
        let descriptor = open(image.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return [:] }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
              UInt64(status.st_ino) == image.inode,
              status.st_size > 0, status.st_size <= maximumFileSize
        else { return [:] }
        let file = ELFFile(descriptor: descriptor, size: UInt64(status.st_size))
        var found: [String: UnsafeRawPointer] = [:]
        for (name, symbol) in file.functions(named: names) {
            // The mapping of the same file that holds the function's bytes, readable and executable.
            guard let mapping = mappings.first(where: {
                      $0.inode == image.inode && $0.path == image.path && $0.isReadable && $0.isExecutable
                          && symbol.fileOffset >= $0.offset
                          && symbol.fileOffset - $0.offset <= $0.length
                          && symbol.size <= $0.length - (symbol.fileOffset - $0.offset)
                  }),
                  let address = UnsafeRawPointer(bitPattern: mapping.start + UInt(symbol.fileOffset - mapping.offset)),
                  let expected = file.read(at: symbol.fileOffset, count: Int(symbol.size))
            else { continue }
            let matches = expected.withUnsafeBytes { bytes in
                bytes.elementsEqual(UnsafeRawBufferPointer(start: address, count: bytes.count))
            }
            if matches { found[name] = address }
        }
        return found
    }

    /// Files larger than this are not read (FoundationNetworking is under 2 MiB).
    static let maximumFileSize: Int = 512 << 20
    /// Tables larger than this are not read.
    static let maximumTableSize: UInt64 = 64 << 20

    /// One line of `/proc/self/maps`.
    package struct Mapping {
        package let start: UInt
        package let length: UInt64
        package let isReadable: Bool
        package let isExecutable: Bool
        package let offset: UInt64
        package let inode: UInt64
        package let path: String

        func contains(_ address: UInt, length count: UInt) -> Bool {
            address >= start && address - start < UInt(length) && count <= UInt(length) - (address - start)
        }

        /// The mappings of this process, or `nil` if they cannot be read or parsed.
        package static func ofThisProcess() -> [Mapping]? {
            guard let bytes = readProcFile("/proc/self/maps", limit: 16 << 20) else { return nil }
            var mappings: [Mapping] = []
            var lineStart = 0
            while lineStart < bytes.count {
                let lineEnd = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
                guard let mapping = Mapping(bytes[lineStart..<lineEnd]) else { return nil }
                mappings.append(mapping)
                lineStart = lineEnd + 1
            }
            return mappings.isEmpty ? nil : mappings
        }

        /// Parses one line, given as text.
        package init?(_ line: String) {
            self.init(ArraySlice(line.utf8))
        }

        /// Parses `start-end perms offset dev inode [path]` (as bytes: this runs over every
        /// line of the process's mappings, hundreds of them).
        init?(_ line: ArraySlice<UInt8>) {
            var index = line.startIndex
            func skipSpaces() { while index < line.endIndex, line[index] == 0x20 { index += 1 } }
            /// A number in `radix` up to `end` (a byte, or the next space), at least one digit.
            func number(radix: UInt64, until end: UInt8 = 0x20) -> UInt64? {
                var value: UInt64 = 0
                let start = index
                while index < line.endIndex, line[index] != end {
                    let byte = line[index]
                    let digit: UInt64
                    switch byte {
                    case 0x30...0x39: digit = UInt64(byte - 0x30)
                    case 0x61...0x66 where radix == 16: digit = UInt64(byte - 0x61 + 10)
                    default: return nil
                    }
                    let (shifted, overflow) = value.multipliedReportingOverflow(by: radix)
                    guard !overflow else { return nil }
                    value = shifted + digit
                    index += 1
                }
                return index > start ? value : nil
            }
            guard let start = number(radix: 16, until: UInt8(ascii: "-")), index < line.endIndex else { return nil }
            index += 1
            guard let end = number(radix: 16), end > start, index < line.endIndex else { return nil }
            skipSpaces()
            guard line.endIndex - index >= 5, line[index + 4] == 0x20 else { return nil }
            isReadable = line[index] == UInt8(ascii: "r")
            isExecutable = line[index + 2] == UInt8(ascii: "x")
            index += 5
            skipSpaces()
            guard let offset = number(radix: 16) else { return nil }
            skipSpaces()
            // The device, `major:minor`.
            while index < line.endIndex, line[index] != 0x20 { index += 1 }
            skipSpaces()
            guard let inode = number(radix: 10) else { return nil }
            skipSpaces()
            self.start = UInt(start)
            length = end - start
            self.offset = offset
            self.inode = inode
            path = String(decoding: line[index...], as: UTF8.self)
        }
    }

    /// Reads a file whose size `stat` does not tell (a `/proc` file), up to `limit` bytes.
    private static func readProcFile(_ path: String, limit: Int) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var data = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            data.append(contentsOf: chunk[0..<count])
            if data.count > limit { return nil }
        }
        return data
    }
}

/// Just enough of a 64-bit little-endian ELF file to find a function in its `.symtab`.
private struct ELFFile {
    let descriptor: Int32
    let size: UInt64

    struct Symbol {
        /// Where its first byte is in the file.
        let fileOffset: UInt64
        let size: UInt64
    }

    struct Section {
        let type: UInt32
        let flags: UInt64
        let address: UInt64
        let offset: UInt64
        let size: UInt64
        let link: UInt32
        let entrySize: UInt64
    }

    private static let headerSize = 64
    private static let sectionHeaderSize = 64
    private static let symbolSize: UInt64 = 24
    private static let sectionTypeSymbolTable: UInt32 = 2     // SHT_SYMTAB
    private static let sectionTypeStringTable: UInt32 = 3     // SHT_STRTAB
    private static let sectionTypeNoBits: UInt32 = 8          // SHT_NOBITS
    private static let sectionFlagExecutable: UInt64 = 0x4    // SHF_EXECINSTR
    private static let symbolTypeFunction: UInt8 = 2          // STT_FUNC

    /// The defined functions called `names`, each with its bytes inside an executable section
    /// of the file; a name whose first symbol is not such a function is missing.
    func functions(named names: Set<String>) -> [String: Symbol] {
        guard let tables = symbolTables() else { return [:] }
        var wanted = names.map { (name: $0, bytes: Array($0.utf8)) }.filter { !$0.bytes.isEmpty }
        var found: [String: Symbol] = [:]
        let (sections, symbols, strings, count) = tables
        for index in 0..<count where !wanted.isEmpty {
            let base = index * Int(Self.symbolSize)
            let nameOffset = Int(symbols.integer(UInt32.self, at: base))
            // The name, NUL-terminated inside the string table.
            guard let match = wanted.firstIndex(where: { name in
                nameOffset + name.bytes.count < strings.count && strings[nameOffset + name.bytes.count] == 0
                    && strings[nameOffset..<nameOffset + name.bytes.count].elementsEqual(name.bytes)
            }) else { continue }
            let name = wanted.remove(at: match).name
            if let symbol = function(at: base, in: symbols, sections: sections) { found[name] = symbol }
        }
        return found
    }

    /// The section headers, `.symtab`, the `.strtab` it links to, and its number of symbols,
    /// each checked against the file and the caps; `nil` if any is not as expected.
    private func symbolTables() -> (sections: [Section], symbols: [UInt8], strings: [UInt8], count: Int)? {
        // This reader takes the host's byte order for the file's: little-endian hosts only.
        guard UInt16(littleEndian: 1) == 1, let header = read(at: 0, count: Self.headerSize),
              header[0] == 0x7F, header[1] == UInt8(ascii: "E"), header[2] == UInt8(ascii: "L"), header[3] == UInt8(ascii: "F"),
              header[4] == 2,                                  // ELFCLASS64
              header[5] == 1,                                  // ELFDATA2LSB
              [2, 3].contains(header.integer(UInt16.self, at: 16)),   // ET_EXEC, ET_DYN
              header.integer(UInt16.self, at: 58) == Self.sectionHeaderSize
        else { return nil }
        let sectionTable = header.integer(UInt64.self, at: 40)
        let sectionCount = Int(header.integer(UInt16.self, at: 60))
        // 0 means "more than 0xff00 sections, counted elsewhere": not supported.
        guard sectionCount > 0, let table = read(at: sectionTable, count: sectionCount * Self.sectionHeaderSize) else { return nil }
        let sections = (0..<sectionCount).map { index -> Section in
            let base = index * Self.sectionHeaderSize
            return Section(type: table.integer(UInt32.self, at: base + 4), flags: table.integer(UInt64.self, at: base + 8),
                           address: table.integer(UInt64.self, at: base + 16), offset: table.integer(UInt64.self, at: base + 24),
                           size: table.integer(UInt64.self, at: base + 32), link: table.integer(UInt32.self, at: base + 40),
                           entrySize: table.integer(UInt64.self, at: base + 56))
        }
        guard let symbolTable = sections.first(where: { $0.type == Self.sectionTypeSymbolTable }),
              symbolTable.entrySize == Self.symbolSize, symbolTable.size % Self.symbolSize == 0,
              symbolTable.size <= LoadedFunction.maximumTableSize,
              Int(symbolTable.link) < sections.count
        else { return nil }
        let stringTable = sections[Int(symbolTable.link)]
        guard stringTable.type == Self.sectionTypeStringTable, stringTable.size <= LoadedFunction.maximumTableSize,
              let symbols = read(at: symbolTable.offset, count: Int(symbolTable.size)),
              let strings = read(at: stringTable.offset, count: Int(stringTable.size))
        else { return nil }
        return (sections, symbols, strings, Int(symbolTable.size / Self.symbolSize))
    }

    /// The symbol at `base` in `symbols`, if it is a defined function with its bytes inside an
    /// executable section of the file.
    private func function(at base: Int, in symbols: [UInt8], sections: [Section]) -> Symbol? {
        let info = symbols[base + 4]
        let sectionIndex = Int(symbols.integer(UInt16.self, at: base + 6))
        let value = symbols.integer(UInt64.self, at: base + 8)
        let size = symbols.integer(UInt64.self, at: base + 16)
        // A defined function in an ordinary section (not SHN_UNDEF, not SHN_ABS and the like).
        guard info & 0xF == Self.symbolTypeFunction, size > 0, size <= 1 << 20,
              sectionIndex > 0, sectionIndex < min(sections.count, 0xFF00)
        else { return nil }
        let section = sections[sectionIndex]
        guard section.flags & Self.sectionFlagExecutable != 0, section.type != Self.sectionTypeNoBits,
              value >= section.address, value - section.address <= section.size,
              size <= section.size - (value - section.address)
        else { return nil }
        let (fileOffset, overflow) = section.offset.addingReportingOverflow(value - section.address)
        guard !overflow, fileOffset <= self.size, size <= self.size - fileOffset else { return nil }
        return Symbol(fileOffset: fileOffset, size: size)
    }

    /// `count` bytes at `offset`, if they are all inside the file.
    func read(at offset: UInt64, count: Int) -> [UInt8]? {
        guard count >= 0, UInt64(count) <= size, offset <= size - UInt64(count),
              offset <= UInt64(Int64.max)
        else { return nil }
        var complete = true
        // Not zeroed first: every byte is read into, or the bytes are thrown away.
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var done = 0
            while done < count {
                let got = pread(descriptor, buffer.baseAddress.map { $0 + done }, count - done, off_t(offset) + off_t(done))
                if got < 0, errno == EINTR { continue }
                guard got > 0 else {
                    complete = false
                    break
                }
                done += got
            }
            // What is not read is zeroed, so that the array holds no uninitialized byte.
            if done < count, let base = buffer.baseAddress { (base + done).initialize(repeating: 0, count: count - done) }
            initialized = count
        }
        return complete ? bytes : nil
    }
}

private extension Array where Element == UInt8 {
    /// The little-endian integer at `offset` (which the caller has checked is in range).
    func integer<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        var value: T = 0
        for index in (0..<MemoryLayout<T>.size).reversed() {
            value = value << 8 | T(self[offset + index])
        }
        return value
    }
}
#endif
