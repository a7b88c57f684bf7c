import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLRequest {
    /// Whether this is a GET (a request with no method is one). Only GETs are conditional,
    /// resumed or shared.
    var isGET: Bool {
        (httpMethod ?? "GET").uppercased() == "GET"
    }
}
