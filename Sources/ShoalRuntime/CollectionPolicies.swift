import ShoalConfig
import ShoalCore
import ShoalReplication
import ShoalTLS
import ShoalTrust

/// Turns a site file's collection settings into the replicator's policies: the built-in resolvers
/// and filters as closures.
public enum CollectionPolicies {
    /// With `trust`: the system collections first — `_trust` (only entries its admin keys signed
    /// get in), `_releases` (only manifests one of `releaseKeys` signed), `_status` (only a
    /// gateway's own status, written by it) — and every collection refuses what a revoked peer
    /// wrote after its revocation.
    public static func make(_ settings: [SiteConfig.CollectionSettings], trust: TrustBook, releaseKeys: [AdminPublicKey] = [],
                            log: @escaping @Sendable (String) -> Void = { _ in }) -> [CollectionPolicy] {
        var system = CollectionPolicy(name: .trust)
        system.pullFilter = trust.trustFilter
        system.resolver = TrustBook.resolver
        var releases = CollectionPolicy(name: .releases)
        releases.pullFilter = ReleaseManifest.pullFilter(keys: releaseKeys, log: log)
        releases.resolver = ReleaseManifest.resolver
        var status = CollectionPolicy(name: .status)
        status.pullFilter = UpdateStatus.pullFilter
        status.resolver = .lastWriteWins  // one writer per document: whole documents, no field stamps
        return [system, releases, status] + make(settings).map { p in
            var p = p
            p.pullFilter = trust.writerFilter(p.pullFilter)
            return p
        }
    }

    public static func make(_ settings: [SiteConfig.CollectionSettings]) -> [CollectionPolicy] {
        settings.map { c in
            var p = CollectionPolicy(name: c.name)
            p.push = c.push
            p.pull = c.pull
            p.resolver = resolver(c.resolver)
            p.documentIDs = c.documentIDs.map(Set.init)
            p.pushFilter = c.pushFilter.map(predicate)
            p.pullFilter = c.pullFilter.map(predicate)
            p.ttlMillis = c.ttlSeconds.map { $0 * 1000 }
            p.blobs = c.blobs == .onDemand ? .onDemand : .eager
            return p
        }
    }

    // MARK: resolvers

    public static func resolver(_ spec: ResolverSpec) -> ConflictResolver {
        switch spec {
        case .fieldMerge: return .fieldMerge
        case .lastWriteWins: return .lastWriteWins
        case .localWins: return .localWins
        case .remoteWins: return .remoteWins
        case .deleteWins:
            return ConflictResolver(name: spec.name) { peer, local, remote in
                if local.isDeleted || remote.isDeleted { return .delete }
                return ConflictResolver.lastWriteWins.resolve(peer, local, remote)
            }
        case .mergeFields:
            return ConflictResolver(name: spec.name) { peer, local, remote in
                let newest = ConflictResolver.lastWriteWins.resolve(peer, local, remote)
                guard let l = object(local.body), let r = object(remote.body) else { return newest }
                let remoteNewer = newest == .takeRemote
                var merged = l
                for (key, rv) in r {
                    if let lv = l[key], lv != rv {
                        merged[key] = remoteNewer ? rv : lv
                    } else {
                        merged[key] = rv
                    }
                }
                return .merged(JSONValue.object(merged).compactText)
            }
        case .maxField(let field), .minField(let field):
            let wantMax: Bool
            if case .maxField = spec { wantMax = true } else { wantMax = false }
            return ConflictResolver(name: spec.name) { peer, local, remote in
                let lv = object(local.body)?[field]?.doubleValue, rv = object(remote.body)?[field]?.doubleValue
                switch (lv, rv) {
                case (let a?, let b?) where a != b: return (b > a) == wantMax ? .takeRemote : .keepLocal
                case (nil, .some): return .takeRemote
                case (.some, nil): return .keepLocal
                default: return ConflictResolver.lastWriteWins.resolve(peer, local, remote)
                }
            }
        }
    }

    static func object(_ body: String?) -> [String: JSONValue]? {
        guard let body, let v = try? JSONValue.parse(body) else { return nil }
        return v.objectValue
    }

    // MARK: filters

    /// A filter as the replicator's predicate. A tombstone has no fields: field conditions let it
    /// through (a delete of a document that passed must follow it); ids, prefixes and peers apply.
    public static func predicate(_ f: FilterSpec) -> @Sendable (PeerID, ReplicatedDocument) -> Bool {
        let peers = Set(f.peers)
        return { peer, doc in
            if !peers.isEmpty && !peers.contains(peer.description) { return false }
            if !f.idPrefixes.isEmpty && !f.idPrefixes.contains(where: { doc.id.hasPrefix($0) }) { return false }
            guard !doc.isDeleted, !(f.fieldEquals.isEmpty && f.fieldIn.isEmpty) else { return true }
            guard let o = object(doc.body) else { return false }
            for (field, value) in f.fieldEquals where !matches(o[field], value) { return false }
            for (field, values) in f.fieldIn where !values.contains(where: { matches(o[field], $0) }) { return false }
            return true
        }
    }

    static func matches(_ v: JSONValue?, _ s: ConfigScalar) -> Bool {
        switch (v, s) {
        case (.string(let a)?, .string(let b)): return a == b
        case (.bool(let a)?, .bool(let b)): return a == b
        case (.null?, .null), (nil, .null): return true
        case (let j?, .number(let n)): return j.doubleValue == n
        default: return false
        }
    }
}
