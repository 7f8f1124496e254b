import ShoalCore
import ShoalTrust

extension ReplicationDriver {
    /// Follows the fleet's trust from now on: a peer it revokes has its links closed at once (and
    /// every later one as it opens); a peer it newly allows is dialled again without waiting for a
    /// backoff. Peers already revoked are told first. Finish the returned continuation to stop,
    /// then await the task.
    package nonisolated func follow(_ trust: TrustBook) -> (task: Task<Void, Never>, feed: AsyncStream<TrustBook.Change>.Continuation) {
        let (changes, feed) = trust.changes.subscribe()
        let revoked = trust.current().revokedPeers
        if !revoked.isEmpty { peersRevoked(revoked) }
        let task = Task {
            for await change in changes {
                if !change.revoked.isEmpty { self.peersRevoked(change.revoked) }
                if !change.allowed.isEmpty { self.retryNetworks() }
            }
        }
        return (task, feed)
    }
}
