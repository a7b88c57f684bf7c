import Foundation

extension HTTPResponse {
    /// The answer to a request for a representation of `size` bytes that honours a byte range
    /// (RFC 9110, section 14): the whole representation (`200`), one satisfiable range (`206`
    /// with `Content-Range: bytes first-last/size`), or a range that selects nothing (`416` with
    /// `Content-Range: bytes */size`). A multi-range or malformed `Range` is ignored (a server
    /// may), and so is any `Range` when `ifRange` is present and is not one of
    /// `ifRangeValidators` (the representation changed: send it whole).
    ///
    /// `/bytes/{n}` answers with it; FetchKitTesting's `TestResponse.ranged` too.
    ///
    /// - Parameters:
    ///   - size: The representation's length in bytes.
    ///   - range: The request's `Range` value, or `nil` (none, or a method without ranges).
    ///   - ifRange: The request's `If-Range` value, or `nil`.
    ///   - ifRangeValidators: The values an `If-Range` must equal exactly for the range to
    ///     apply: the strong `ETag`, the `Last-Modified` date.
    ///   - headers: The header fields of every answer (`Content-Type`, `ETag`…);
    ///     `Accept-Ranges: bytes` is added, and a `416` drops `Content-Type`.
    ///   - body: The body of `count` bytes from `offset` (the whole: `0` and `size`).
    public static func ranged(size: Int, range: String?, ifRange: String?, ifRangeValidators: [String],
                              headers: HTTPHeaders, body: (_ offset: Int, _ count: Int) -> Body) -> HTTPResponse {
        var headers = headers
        if !headers.contains("Accept-Ranges") { headers.add(name: "Accept-Ranges", value: "bytes") }
        var selected = BuiltinRoutes.ByteRange.parse(range, size: size)
        if let ifRange, !ifRangeValidators.contains(ifRange.trimmingOWS()) {
            selected = .whole
        }
        switch selected {
        case .whole:
            return HTTPResponse(status: 200, headers: headers, body: body(0, size))
        case let .part(first, last):
            headers.replaceOrAdd(name: "Content-Range", value: "bytes \(first)-\(last)/\(size)")
            return HTTPResponse(status: 206, headers: headers, body: body(first, last - first + 1))
        case .unsatisfiable:
            headers.remove(name: "Content-Type")
            headers.replaceOrAdd(name: "Content-Range", value: "bytes */\(size)")
            return HTTPResponse(status: 416, headers: headers)
        }
    }
}
