import ShoalCore
import ShoalReplication
import ShoalTLS

extension ReleaseManifest {
    /// Whether a replicated `_releases` document may be taken: a manifest that reads strictly, kept
    /// under its own document id, signed by one of `keys`. Nil when it may, else why not. With no
    /// release keys in the site file nothing is taken (and nothing relayed): a gateway cannot tell
    /// a real release from a forged one.
    public static func refusal(of doc: ReplicatedDocument, keys: [AdminPublicKey]) -> String? {
        guard let body = doc.body else { return "a deletion: a release is replaced by a newer manifest, never deleted" }
        let m: ReleaseManifest
        do { m = try decode(body) } catch { return error.description }
        guard m.documentID == doc.id else { return "kept as \(doc.id) but it is \(m.documentID)" }
        return m.verify(keys: keys)
    }

    /// The `_releases` collection's pull filter over the site file's release keys; refusals go to `log`.
    public static func pullFilter(keys: [AdminPublicKey], log: @escaping @Sendable (String) -> Void = { _ in }) -> @Sendable (PeerID, ReplicatedDocument) -> Bool {
        { peer, doc in
            guard let why = refusal(of: doc, keys: keys) else { return true }
            log("release manifest \(doc.id) from \(peer.short) refused: \(why)")
            return false
        }
    }

    /// Of two concurrent versions of one manifest's document, the newer manifest wins (not the
    /// later write), so every gateway keeps the same one.
    public static let resolver = ConflictResolver(name: "newestReleaseManifest") { _, local, remote in
        guard let r = remote.body.flatMap({ try? ReleaseManifest.decode($0) }) else { return .keepLocal }
        guard let l = local.body.flatMap({ try? ReleaseManifest.decode($0) }) else { return .takeRemote }
        return ReleaseManifest.isNewer(r, than: l) ? .takeRemote : .keepLocal
    }
}
