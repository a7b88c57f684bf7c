#if canImport(FoundationNetworking) && os(Linux) && (canImport(Glibc) || canImport(Musl))
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Finds a function of a loaded ELF file by its symbol name, a local one included — one that
/// `dlsym` cannot see, because only the file's full symbol table (`.symtab`) names it.
///
/// Used once per process, to find FoundationNetworking's libcurl socket callback
/// (``CurlSocketCallback``). Every step is checked, and any surprise gives `nil` — never a
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
enum LoadedFunction {
    /// The address of the function named `name` (a mangled name, exactly) in the ELF file
    /// that is mapped at `anchor`, or `nil`.
    static func address(of name: String, inFileMappedAt anchor: UnsafeRawPointer) -> UnsafeRawPointer? {
        guard let mappings = Mapping.ofThisProcess(),
              let image = mappings.first(where: { $0.contains(UInt(bitPattern: anchor), length: 1) }),
              image.inode != 0, image.path.hasPrefix("/")
        else { return nil }
        let descriptor = open(image.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
              UInt64(status.st_ino) == image.inode,
              status.st_size > 0, status.st_size <= maximumFileSize
        else { return nil }
        let file = ELFFile(descriptor: descriptor, size: UInt64(status.st_size))
        guard let symbol = file.function(named: name) else { return nil }
        // The mapping of the same file that holds the function's bytes, readable and executable.
        guard let mapping = mappings.first(where: {
                  $0.inode == image.inode && $0.path == image.path && $0.isReadable && $0.isExecutable
                      && symbol.fileOffset >= $0.offset
                      && symbol.fileOffset - $0.offset <= $0.length
                      && symbol.size <= $0.length - (symbol.fileOffset - $0.offset)
              }),
              let address = UnsafeRawPointer(bitPattern: mapping.start + UInt(symbol.fileOffset - mapping.offset)),
              let expected = file.read(at: symbol.fileOffset, count: Int(symbol.size))
        else { return nil }
        let matches = expected.withUnsafeBytes { bytes in
            bytes.elementsEqual(UnsafeRawBufferPointer(start: address, count: bytes.count))
        }
        return matches ? address : nil
    }

    /// Files larger than this are not read (FoundationNetworking is under 2 MiB).
    static let maximumFileSize: Int = 512 << 20
    /// Tables larger than this are not read.
    static let maximumTableSize: UInt64 = 64 << 20

    /// One line of `/proc/self/maps`.
    struct Mapping {
        let start: UInt
        let length: UInt64
        let isReadable: Bool
        let isExecutable: Bool
        let offset: UInt64
        let inode: UInt64
        let path: String

        func contains(_ address: UInt, length count: UInt) -> Bool {
            address >= start && address - start < UInt(length) && count <= UInt(length) - (address - start)
        }

        /// The mappings of this process, or `nil` if they cannot be read or parsed.
        static func ofThisProcess() -> [Mapping]? {
            guard let text = readProcFile("/proc/self/maps", limit: 16 << 20) else { return nil }
            var mappings: [Mapping] = []
            for line in text.split(separator: "\n") {
                guard let mapping = Mapping(line) else { return nil }
                mappings.append(mapping)
            }
            return mappings.isEmpty ? nil : mappings
        }

        /// Parses `start-end perms offset dev inode [path]`.
        init?(_ line: Substring) {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5 else { return nil }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16), end > start,
                  fields[1].utf8.count == 4, let offset = UInt64(fields[2], radix: 16), let inode = UInt64(fields[4])
            else { return nil }
            let permissions = Array(fields[1].utf8)
            self.start = start
            length = UInt64(end - start)
            isReadable = permissions[0] == UInt8(ascii: "r")
            isExecutable = permissions[2] == UInt8(ascii: "x")
            self.offset = offset
            self.inode = inode
            path = fields.count == 6 ? String(fields[5].drop(while: { $0 == " " })) : ""
        }
    }

    /// Reads a file whose size `stat` does not tell (a `/proc` file), up to `limit` bytes.
    private static func readProcFile(_ path: String, limit: Int) -> String? {
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
        return String(decoding: data, as: UTF8.self)
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

    /// The defined function called `name`, with its bytes inside an executable section of
    /// the file, or `nil`.
    func function(named name: String) -> Symbol? {
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
        let wanted = Array(name.utf8)
        guard !wanted.isEmpty else { return nil }
        for index in 0..<Int(symbolTable.size / Self.symbolSize) {
            let base = index * Int(Self.symbolSize)
            let nameOffset = Int(symbols.integer(UInt32.self, at: base))
            // The name, NUL-terminated inside the string table.
            guard nameOffset + wanted.count < strings.count, strings[nameOffset + wanted.count] == 0,
                  strings[nameOffset..<nameOffset + wanted.count].elementsEqual(wanted)
            else { continue }
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
        return nil
    }

    /// `count` bytes at `offset`, if they are all inside the file.
    func read(at offset: UInt64, count: Int) -> [UInt8]? {
        guard count >= 0, UInt64(count) <= size, offset <= size - UInt64(count),
              offset <= UInt64(Int64.max)
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { return nil }
            done += got
        }
        return bytes
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
