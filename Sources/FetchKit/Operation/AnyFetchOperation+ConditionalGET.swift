import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Conditional GET, all of an operation's part in it: the validators an attempt sends, the body a
// `304 Not Modified` stands for, and the validators a fresh body leaves for next time. The store
// itself is ``ValidatorStore``; the output made after a 304 is
// ``FetchOperation/outputWhenNotModified(storedBody:)``. The store's lock is never taken under
// the operation's.
extension AnyFetchOperation {
    /// `request` with the validators the store keeps for its URL (`If-None-Match`,
    /// `If-Modified-Since`), when it is a GET that sets neither itself — and when the store
    /// kept the body, or the operation can make its output without it
    /// (``revalidatesWithoutStoredBody``): a `304` it could make nothing of is not asked for.
    func conditionalRequest(for request: URLRequest) -> AttemptSetup {
        guard let store = validatorStore, request.isGET, let url = request.url,
              request.value(forHTTPHeaderField: "If-None-Match") == nil,
              request.value(forHTTPHeaderField: "If-Modified-Since") == nil,
              let validators = store.validators(for: url),
              validators.body != nil || revalidatesWithoutStoredBody
        else { return AttemptSetup(request: request, acceptsNotModified: false) }
        var request = request
        if let tag = validators.entityTag { request.setValue(tag, forHTTPHeaderField: "If-None-Match") }
        if let date = validators.lastModified { request.setValue(date, forHTTPHeaderField: "If-Modified-Since") }
        return AttemptSetup(request: request, acceptsNotModified: true)
    }

    /// After a `304 Not Modified` to a conditional request, the body the store kept for the URL
    /// (`nil` if it keeps none); `nil` for any other result.
    func storedBodyIfNotModified(_ result: TransferResult) -> Data? {
        guard case .success(let response, _, _) = result, response.statusCode == 304 else { return nil }
        let (conditional, url, store) = core.withLock {
            ($0.sentConditionalRequest, $0.sentRequest?.url, $0.settings.configuration.validatorStore)
        }
        guard conditional, let url, let store else { return nil }
        return store.validators(for: url)?.body
    }

    /// Records the validators of a `200` to a GET, once its body made an output: a body that
    /// failed to parse is fetched whole next time.
    func recordValidators(body: ResponseBody?) {
        guard let store = validatorStore, let response, response.statusCode == 200,
              let sent = sentRequest, sent.isGET, let url = sent.url
        else { return }
        store.record(response, body: body?.data, for: url)
    }
}
