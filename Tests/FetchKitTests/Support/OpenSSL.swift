import Foundation

/// The pin of `certificate`'s key, as the documentation tells users to compute it.
func opensslPin(of certificate: URL) async throws -> String {
    try await shell("openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64", certificate)
}

/// `certificate`'s DER SubjectPublicKeyInfo, as openssl reads it.
func opensslSubjectPublicKeyInfo(of certificate: URL) async throws -> Data? {
    Data(base64Encoded: try await shell("openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der | base64 -w0", certificate))
}

/// What `script` prints, given `file` as `$1`, trimmed.
func shell(_ script: String, _ file: URL) async throws -> String {
    guard let shell = TLSTools.shell, TLSTools.openssl != nil else { throw ParseTestError(reason: "openssl is not installed") }
    let child = try ChildProcess(shell, ["-c", script, "sh", file.path])
    let (ending, stdout, stderr) = try await child.finish(timeout: 60)
    guard ending == .exit(0) else { throw ParseTestError(reason: "\(script): \(ending) \(stderr)") }
    return stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}
