#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import FoundationNetworkingShims

extension Transfer {
    /// The bandwidth decision for one chunk of `dataTask`'s body, `chunk` bytes, where it
    /// arrives (URLSession's work queue, inside libcurl's write callback): pause the reading
    /// until the budgets have paid for it, or not. (A breath's resume may end such a pause
    /// early: the next chunk pauses again, for the debt, which the budgets keep.) A queue's
    /// transfers read under its budgets even without a limit, so that one set later holds them
    /// too. `breathing`: the inbox asked for a breath (the work queue drains what it holds).
    func holdToBandwidthLimits(_ dataTask: URLSessionDataTask, chunk: Int, breathing: Bool) {
        let budgets = receiveBudgets
        let limits = budgets.isEmpty ? (limited: false, changes: 0) : budgets.status
        var wait: TimeInterval = 0
        if limits.limited {
            let connection = ReceivePause.connection(of: dataTask)
            // Kept to HTTP/1.1 where the session could (`FetchSession.resume`); a stream of an
            // HTTP/2 connection is held only as the app reads it, not on the wire.
            if connection == .multiplexed { budgets.markUnenforced(.multiplexedConnection) }
            // Charged for what crossed the wire (``WireMeter``), not only for the chunk read.
            let charge = wireMeter.charge(forChunkOf: chunk, receipt: connection.receipt, changes: limits.changes)
            wait = budgets.take(charge, by: ObjectIdentifier(self))
        }
        if wait > 0 {
            if let workQueue = ReceivePause.pause(dataTask, for: wait) {
                limitPause.withLock { $0 = (dataTask, workQueue) }
            } else {
                limitPause.withLock { $0 = nil }
                budgets.markUnenforced(.cannotPause)
            }
        } else {
            if limits.limited { limitPause.withLock { $0 = nil } }
            if breathing { ReceivePause.breathe(dataTask) }
        }
    }
}
