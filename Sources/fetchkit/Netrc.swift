import Foundation

/// A `.netrc` file, as curl reads it (`--netrc`, `--netrc-file`): logins and passwords by host.
///
/// Tokens are separated by spaces, tabs and line ends. `machine NAME` starts an entry for a
/// host, `default` one for every host no `machine` names (it must come last, as in ftp(1));
/// `login` and `password` give its credentials, `account` is read and ignored, and `macdef NAME`
/// skips a macro, up to the next empty line; a word starting with `#` starts a comment, to the end
/// of its line. A token may be quoted (`"a b"`), with `\"`, `\\`,
/// `\n`, `\r` and `\t` inside, as curl 7.84 and later read it. Host names compare without case;
/// the first entry for a host wins. Nothing read from the file is ever printed: an error names
/// the line and what is wrong, never a login or password.
struct Netrc: Equatable {
    struct Entry: Equatable, CustomStringConvertible, CustomDebugStringConvertible {
        /// The host, lowercased; `nil` for `default`.
        var machine: String?
        var login: String?
        var password: String?
        var description: String { "netrc entry for \(machine ?? "default") (REDACTED)" }
        var debugDescription: String { description }
    }

    /// Why a file could not be used; says nothing of its credentials.
    struct Failure: Error, Equatable, CustomStringConvertible {
        let description: String
    }

    /// The largest file read: a netrc is a few lines.
    static let maximumSize = 1 << 20

    let entries: [Entry]

    /// The login and password for `host`: its `machine` entry, or else `default`; `nil` when
    /// neither gives both.
    func credentials(forHost host: String) -> (login: String, password: String)? {
        let host = host.lowercased()
        let entry = entries.first { $0.machine == host } ?? entries.first { $0.machine == nil }
        guard let login = entry?.login, let password = entry?.password, !login.isEmpty, !password.isEmpty else { return nil }
        return (login, password)
    }

    /// Reads the file at `path`; `nil` when it does not exist and `missingIsEmpty`.
    static func read(path: String, missingIsEmpty: Bool) throws(Failure) -> Netrc? {
        let shown = Terminal.sanitized(path)
        guard let handle = FileHandle(forReadingAtPath: path) else {
            if missingIsEmpty, !FileManager.default.fileExists(atPath: path) { return nil }
            throw Failure(description: "cannot read the netrc file \(shown)")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: maximumSize + 1) ?? Data()
        } catch {
            throw Failure(description: "cannot read the netrc file \(shown)")
        }
        guard data.count <= maximumSize else {
            throw Failure(description: "the netrc file \(shown) is larger than \(maximumSize >> 20) MiB")
        }
        do {
            return try parse(data)
        } catch {
            throw Failure(description: "the netrc file \(shown): \(error.description)")
        }
    }

    /// Parses a file's bytes.
    static func parse(_ data: Data) throws(Failure) -> Netrc {
        guard let text = String(data: data, encoding: .utf8) else { throw Failure(description: "not UTF-8 text") }
        var tokens = Tokenizer(text)
        var entries: [Entry] = []
        var current: Entry?
        var sawDefault = false
        func finish() {
            if let current { entries.append(current) }
            current = nil
        }
        while let token = try tokens.next() {
            switch token.text {
            case "machine" where !token.quoted:
                finish()
                guard let name = try tokens.next() else { throw Failure(description: "line \(token.line): 'machine' without a host name") }
                if sawDefault { throw Failure(description: "line \(token.line): a 'machine' after 'default' (default comes last)") }
                current = Entry(machine: name.text.lowercased())
            case "default" where !token.quoted:
                finish()
                sawDefault = true
                current = Entry(machine: nil)
            case "login" where !token.quoted, "password" where !token.quoted, "account" where !token.quoted:
                guard let value = try tokens.next() else { throw Failure(description: "line \(token.line): '\(token.text)' without a value") }
                guard current != nil else { throw Failure(description: "line \(token.line): '\(token.text)' before any 'machine' or 'default'") }
                guard !value.text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                    throw Failure(description: "line \(value.line): the \(token.text) holds a control character")
                }
                if token.text == "login", current?.login == nil { current?.login = value.text }
                if token.text == "password", current?.password == nil { current?.password = value.text }
            case "macdef" where !token.quoted:
                finish()
                guard try tokens.next() != nil else { throw Failure(description: "line \(token.line): 'macdef' without a name") }
                tokens.skipMacro()
            default:
                throw Failure(description: "line \(token.line): an unknown word (expected machine, default, login, password, account or macdef)")
            }
        }
        finish()
        return Netrc(entries: entries)
    }

    /// The file's tokens, with the line each starts on.
    private struct Tokenizer {
        private let scalars: [Unicode.Scalar]
        private var index = 0
        private var line = 1

        init(_ text: String) {
            scalars = Array(text.unicodeScalars)
        }

        private static func isSpace(_ scalar: Unicode.Scalar) -> Bool {
            scalar == " " || scalar == "\t" || scalar == "\n" || scalar == "\r"
        }

        mutating func next() throws(Failure) -> (text: String, quoted: Bool, line: Int)? {
            while index < scalars.count, Self.isSpace(scalars[index]) {
                if scalars[index] == "\n" { line += 1 }
                index += 1
            }
            guard index < scalars.count else { return nil }
            // A word starting with '#' starts a comment, to the end of its line (as curl reads it).
            if scalars[index] == "#" {
                while index < scalars.count, scalars[index] != "\n" { index += 1 }
                return try next()
            }
            let start = line
            var text = String.UnicodeScalarView()
            if scalars[index] == "\"" {
                index += 1
                while true {
                    guard index < scalars.count else { throw Failure(description: "line \(start): a quoted word without its closing quote") }
                    let scalar = scalars[index]
                    index += 1
                    if scalar == "\"" { break }
                    if scalar == "\n" { throw Failure(description: "line \(start): a quoted word without its closing quote") }
                    if scalar == "\\", index < scalars.count {
                        let escaped = scalars[index]
                        index += 1
                        switch escaped {
                        case "n": text.append("\n")
                        case "r": text.append("\r")
                        case "t": text.append("\t")
                        default: text.append(escaped)
                        }
                    } else {
                        text.append(scalar)
                    }
                }
                return (String(text), true, start)
            }
            while index < scalars.count, !Self.isSpace(scalars[index]) {
                text.append(scalars[index])
                index += 1
            }
            return (String(text), false, start)
        }

        /// Skips a `macdef` body: up to and past the next empty line (or the end).
        mutating func skipMacro() {
            // The rest of the `macdef NAME` line first.
            while index < scalars.count, scalars[index] != "\n" { index += 1 }
            while index < scalars.count {
                // At a line end: an empty line next ends the macro.
                index += 1
                line += 1
                var probe = index
                while probe < scalars.count, scalars[probe] == " " || scalars[probe] == "\t" || scalars[probe] == "\r" { probe += 1 }
                if probe >= scalars.count || scalars[probe] == "\n" {
                    index = probe
                    return
                }
                while index < scalars.count, scalars[index] != "\n" { index += 1 }
            }
        }
    }
}
