#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Serialization of response heads: status line, header fields, empty line.
enum ResponseHead {
    /// The bytes of a head: `HTTP/1.1 {status} {reason}`, each field, and the empty line.
    static func bytes(status: Int, reason: String? = nil, headers: HTTPHeaders) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        append("HTTP/1.1 ", to: &out)
        append(String(status), to: &out)
        out.append(0x20)
        append(reason ?? reasonPhrase(status), to: &out)
        out.append(0x0D); out.append(0x0A)
        for (name, value) in headers {
            append(name, to: &out)
            out.append(0x3A); out.append(0x20)
            append(value, to: &out)
            out.append(0x0D); out.append(0x0A)
        }
        out.append(0x0D); out.append(0x0A)
        return out
    }

    @inline(__always)
    private static func append(_ s: String, to out: inout [UInt8]) {
        out.append(contentsOf: s.utf8)
    }

    /// Whether a response with this status never has a body (1xx, 204, 304).
    static func statusForbidsBody(_ status: Int) -> Bool {
        (100..<200).contains(status) || status == 204 || status == 304
    }

    /// The standard reason phrase for `status`, or a generic one.
    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 201: return "Created"
        case 202: return "Accepted"
        case 203: return "Non-Authoritative Information"
        case 204: return "No Content"
        case 205: return "Reset Content"
        case 206: return "Partial Content"
        case 300: return "Multiple Choices"
        case 301: return "Moved Permanently"
        case 302: return "Found"
        case 303: return "See Other"
        case 304: return "Not Modified"
        case 307: return "Temporary Redirect"
        case 308: return "Permanent Redirect"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 402: return "Payment Required"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 406: return "Not Acceptable"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 410: return "Gone"
        case 411: return "Length Required"
        case 412: return "Precondition Failed"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 415: return "Unsupported Media Type"
        case 416: return "Range Not Satisfiable"
        case 417: return "Expectation Failed"
        case 418: return "I'm a teapot"
        case 422: return "Unprocessable Content"
        case 425: return "Too Early"
        case 426: return "Upgrade Required"
        case 428: return "Precondition Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        case 505: return "HTTP Version Not Supported"
        default:
            switch status {
            case 100..<200: return "Informational"
            case 200..<300: return "Success"
            case 300..<400: return "Redirection"
            case 400..<500: return "Client Error"
            default: return "Server Error"
            }
        }
    }
}

/// Formatting of HTTP dates (IMF-fixdate, e.g. `Wed, 21 Oct 2026 07:28:00 GMT`), without
/// `DateFormatter`, so it is cheap and thread-safe.
enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The current time as an HTTP date.
    static func now() -> String {
        format(secondsSince1970: time(nil))
    }

    /// `seconds` since 1970 (UTC) as an HTTP date.
    static func format(secondsSince1970 seconds: time_t) -> String {
        var t = seconds
        var parts = tm()
        _ = gmtime_r(&t, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
