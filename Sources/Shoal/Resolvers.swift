import ShoalCore
import ShoalReplication
import ShoalRuntime

/// Turns the library's collection configurations into the replicator's policies.
enum ConflictResolvers {
    static func policy(_ c: MultipeerCollectionConfiguration, name: CollectionName) -> CollectionPolicy {
        var p = CollectionPolicy(name: name)
        p.push = c.push
        p.pull = c.pull
        p.documentIDs = c.documentIDs.map(Set.init)
        p.ttlMillis = c.ttlSeconds.map { Int64($0) * 1000 }
        let full = name.description
        if let f = c.pushFilter { p.pushFilter = { peer, d in f(PeerID(peer), document(d, full), d.isDeleted ? .deleted : []) } }
        if let f = c.pullFilter { p.pullFilter = { peer, d in f(PeerID(peer), document(d, full), d.isDeleted ? .deleted : []) } }
        switch c.conflictResolver {
        case nil: p.resolver = .fieldMerge
        case let builtIn as BuiltInConflictResolver: p.resolver = CollectionPolicies.resolver(builtIn.spec)
        case let custom?:
            p.resolver = ConflictResolver(name: "custom") { peer, local, remote in
                resolution(custom.resolve(peerID: PeerID(peer), conflict: Conflict(local: local, remote: remote, collection: full)))
            }
        }
        return p
    }

    static func document(_ d: ReplicatedDocument, _ collection: String) -> Document {
        Document(collection: collection, id: d.id, json: d.body)
    }

    static func resolution(_ r: Resolution) -> ConflictResolution {
        switch r {
        case .keepLocal: .keepLocal
        case .takeRemote: .takeRemote
        case .merged(let json): .merged(json: json)
        case .delete: .delete
        }
    }

    static func resolution(_ r: ConflictResolution) -> Resolution {
        switch r {
        case .keepLocal: .keepLocal
        case .takeRemote: .takeRemote
        case .merged(let json): .merged(json)
        case .delete: .delete
        }
    }
}

extension Conflict {
    init(local: ReplicatedDocument, remote: ReplicatedDocument, collection: String) {
        self.init(documentID: local.id,
                  localDocument: local.isDeleted ? nil : ConflictResolvers.document(local, collection),
                  remoteDocument: remote.isDeleted ? nil : ConflictResolvers.document(remote, collection),
                  core: (local, remote))
    }
}
