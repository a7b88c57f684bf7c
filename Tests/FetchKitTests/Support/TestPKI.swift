import Foundation
import Testing

/// A certificate authority and server certificates for 127.0.0.1, made with `openssl` at run
/// time in a temporary directory of their own: nothing secret is committed, and each test run
/// has keys no other run has.
///
/// Every key is EC P-256 (quick to make). The test CA is valid for two days; each server
/// certificate, except where its kind says otherwise, is issued by it for
/// `IP:127.0.0.1, DNS:localhost`, valid for two days, for server authentication only.
struct TestPKI: Sendable {
    /// The server certificates there are, each with a key of its own.
    enum Kind: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Issued by the test CA for 127.0.0.1: what a client that trusts the CA accepts.
        case valid
        /// Issued by the test CA, but its `notAfter` is a day before its `notBefore` (now):
        /// expired. (OpenSSL 3.0's `x509` cannot set a `notBefore` in the past.)
        case expired
        /// Issued by the test CA for `wrong-host.invalid` only.
        case wrongHost
        /// Signed by its own key, not by the test CA.
        case selfSigned
        /// Issued by an intermediate CA (itself issued by the test CA) that the server does not
        /// send: the client cannot build a chain to the CA it trusts.
        case intermediateMissing
        /// Issued by the same intermediate CA, which the server sends after it: the chain is
        /// complete (what ``intermediateMissing`` lacks, and only that).
        case intermediateSent
        /// Like ``valid`` (issued by the test CA for 127.0.0.1) with another key pair: for a
        /// pin that matches one and not the other.
        case otherKey

        var testDescription: String { rawValue }
    }

    /// The directory that holds every file, removed by ``remove()``.
    let directory: TemporaryDirectory

    /// The test CA's certificate (PEM).
    var caCertificate: URL { directory.file("ca.pem") }

    /// The server certificate of `kind` (PEM: the leaf, then the intermediate CA for
    /// ``Kind/intermediateSent``).
    func certificate(_ kind: Kind) -> URL { directory.file("\(kind.rawValue).pem") }

    /// The private key of `kind`'s certificate (PEM).
    func privateKey(_ kind: Kind) -> URL { directory.file("\(kind.rawValue).key") }

    /// The system's CA bundle (libcurl's only trust store on Linux) followed by the test CA: what
    /// the tests mount over the system bundle in a private mount namespace.
    var trustBundle: URL { directory.file("bundle-with-test-ca.pem") }

    /// Where libcurl finds the CAs it trusts on Linux, and nothing else.
    static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"

    /// Makes the CA, the intermediate CA, a certificate of every kind and the trust bundle.
    ///
    /// - Throws: When `openssl` is missing or one of its commands fails (with its output).
    static func make() async throws -> TestPKI {
        let pki = TestPKI(directory: try TemporaryDirectory())
        do {
            try await pki.makeEverything()
        } catch {
            pki.remove()
            throw error
        }
        return pki
    }

    /// Removes every file.
    func remove() {
        directory.remove()
    }

    private func makeEverything() async throws {
        let ca = directory.file("ca"), intermediate = directory.file("intermediate")
        try await makeKey(ca.path + ".key")
        try await openssl(["req", "-x509", "-new", "-key", ca.path + ".key", "-subj", "/CN=FetchKit Test CA",
                           "-days", "2", "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", ca.path + ".pem"])
        try await makeKey(intermediate.path + ".key")
        try await issue(key: intermediate.path + ".key", subject: "/CN=FetchKit Test Intermediate CA",
                        extensions: ["basicConstraints=critical,CA:TRUE,pathlen:0", "keyUsage=critical,keyCertSign,cRLSign"],
                        signer: ["-CA", ca.path + ".pem", "-CAkey", ca.path + ".key"], serial: 1,
                        output: intermediate.path + ".pem")
        for (serial, kind) in Kind.allCases.enumerated() {
            try await makeKey(privateKey(kind).path)
            let names = kind == .wrongHost ? "DNS:wrong-host.invalid" : "IP:127.0.0.1,DNS:localhost"
            let signer: [String]
            switch kind {
            case .selfSigned: signer = ["-signkey", privateKey(kind).path]
            case .intermediateMissing, .intermediateSent: signer = ["-CA", intermediate.path + ".pem", "-CAkey", intermediate.path + ".key"]
            case .valid, .expired, .wrongHost, .otherKey: signer = ["-CA", ca.path + ".pem", "-CAkey", ca.path + ".key"]
            }
            try await issue(key: privateKey(kind).path, subject: "/CN=\(kind == .wrongHost ? "wrong-host.invalid" : "127.0.0.1")",
                            extensions: ["subjectAltName=\(names)", "basicConstraints=critical,CA:FALSE",
                                         "keyUsage=critical,digitalSignature", "extendedKeyUsage=serverAuth"],
                            signer: signer, serial: serial + 2, days: kind == .expired ? -1 : 2,
                            output: certificate(kind).path)
            if kind == .intermediateSent {
                let chain = try Data(contentsOf: certificate(kind)) + Data(contentsOf: URL(fileURLWithPath: intermediate.path + ".pem"))
                try chain.write(to: certificate(kind))
            }
        }
        var bundle = FileManager.default.contents(atPath: Self.systemBundle) ?? Data()
        if !bundle.isEmpty, bundle.last != UInt8(ascii: "\n") { bundle.append(UInt8(ascii: "\n")) }
        bundle.append(try Data(contentsOf: caCertificate))
        try bundle.write(to: trustBundle)
    }

    private func makeKey(_ path: String) async throws {
        try await openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path])
    }

    /// Makes a certificate for `key`, signed as `signer` says (`-CA`… or `-signkey`).
    private func issue(key: String, subject: String, extensions: [String], signer: [String], serial: Int,
                       days: Int = 2, output: String) async throws {
        let request = output + ".csr", extensionFile = output + ".ext"
        try Data(extensions.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: extensionFile))
        try await openssl(["req", "-new", "-key", key, "-subj", subject, "-out", request])
        try await openssl(["x509", "-req", "-in", request] + signer +
                          ["-set_serial", "\(serial)", "-days", "\(days)", "-extfile", extensionFile, "-out", output])
    }

    private func openssl(_ arguments: [String]) async throws {
        guard let openssl = TLSTools.openssl else { throw ParseTestError(reason: "openssl is not installed") }
        let child = try ChildProcess(openssl, arguments)
        let (ending, stdout, stderr) = try await child.finish(timeout: 60)
        guard ending == .exit(0) else {
            throw ParseTestError(reason: "openssl \(arguments.joined(separator: " ")): \(ending)\n\(stdout)\(stderr)")
        }
    }
}
