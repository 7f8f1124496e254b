import ShoalCore
import ShoalReplication
import ShoalStore
import ShoalTLS
import ShoalTrust

/// The fleet trust's control-socket requests: trust (what it adds up to), trust.pending,
/// trust.entries (every entry held, for `shoal trust export`), trust.import (signed entries made
/// elsewhere: judged as if a peer sent them, then written to `_trust`, which replicates them).
extension ControlHandler {
    func dispatchTrust(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        let book = gateway.trust
        switch op {
        case "trust":
            return ControlHandler.trustJSON(book, warnDays: gateway.site.trust.warnDays)
        case "trust.pending":
            return .array(book.pending.map(ControlHandler.json))
        case "trust.entries":
            let entries = book.ledger.entries.sorted { $0.key < $1.key }
            return .array(entries.map { ["id": .string($0.key), "body": .string($0.value.body)] })
        case "trust.import":
            guard let items = r["entries"]?.arrayValue, !items.isEmpty, items.count <= 1000 else {
                throw bad("\"entries\" is an array of 1 to 1000 signed entries (the JSON bodies `shoal trust` writes)")
            }
            let writer = try writer()
            var results: [JSONValue] = []
            for (i, item) in items.enumerated() {
                let body = item.stringValue ?? (item.isObject ? item.compactText : "")
                let entry: TrustEntry
                do { entry = try TrustEntry.decode(body) } catch {
                    results.append(["index": .int(Int64(i)), "outcome": "refused", "reason": .string(error.description)])
                    continue
                }
                do {
                    let (verdict, _) = try book.record(entry) { id, body in
                        _ = try writer.put(.trust, id: try DocumentID(id), body: body)
                    }
                    results.append(["index": .int(Int64(i)), "id": .string(entry.documentID), "summary": .string(entry.summary),
                                    "outcome": verdict == .unchanged ? "unchanged" : "taken"])
                } catch {
                    results.append(["index": .int(Int64(i)), "id": .string(entry.documentID), "summary": .string(entry.summary),
                                    "outcome": "refused", "reason": .string(error.description)])
                }
            }
            return ["results": .array(results)]
        default:
            return nil
        }
    }

    static func json(_ p: TrustBook.Pending) -> JSONValue {
        ["peer": .string(p.peer.description), "subject": .string(p.subject), "transports": .array(p.transports.sorted().map { .string($0) }),
         "firstSeen": .int(p.firstSeen), "lastSeen": .int(p.lastSeen), "attempts": .int(Int64(p.attempts))]
    }

    /// What the gateway's trust adds up to now.
    static func trustJSON(_ book: TrustBook, warnDays: Int64, now: Int64 = Identity.now()) -> JSONValue {
        let ledger = book.ledger
        let current = book.current()
        let site = book.site
        let keys = ledger.adminKeys.values.sorted { $0.key.fingerprint < $1.key.fingerprint }.map { k -> JSONValue in
            ["fingerprint": .string(k.key.fingerprint), "fromSiteFile": .bool(k.fromSiteFile), "removedAt": k.removedAt.map { .int($0) } ?? .null]
        }
        let revoked = ledger.revokedPeers.sorted { $0.key.description < $1.key.description }.map { p, at -> JSONValue in
            ["peer": .string(p.description), "at": .int(at)]
        }
        let siteRoots = Set(site.roots.map { Digest.hex(Digest.sha256($0.der)) })
        let roots = current.roots.map { c -> JSONValue in
            let fp = Digest.hex(Digest.sha256(c.der))
            return ["subject": .string(c.subject), "sha256": .string(fp), "notAfter": .int(c.notAfter), "from": .string(siteRoots.contains(fp) ? "site file" : "_trust")]
        }
        var checkpoint: JSONValue = .null
        var state = "ok"
        if let c = ledger.checkpoint, let next = c.nextUpdate {
            let stale = now >= next
            checkpoint = ["issuedAt": .int(c.issuedAt), "nextUpdate": .int(next), "stale": .bool(stale), "secondsLeft": .int(next - now)]
            if stale { state = "stale" } else if next - now <= warnDays * 86_400 { state = "expiring" }
        }
        return [
            "state": .string(state),
            "adminKeys": .array(keys),
            "entries": .int(Int64(ledger.entries.count)),
            "allowedPeers": .array(current.allowedPeers.map(\.description).sorted().map { .string($0) }),
            "revokedPeers": .array(revoked),
            "roots": .array(roots),
            "removedRoots": .array(ledger.removedRoots.sorted().map { .string($0) }),
            "crls": .int(Int64(current.revocationList?.entries.count ?? 0)),
            "checkpoint": checkpoint,
            "pending": .int(Int64(book.pending.count)),
            "rejectedEntries": .int(Int64(book.rejectedCount)),
            "lastSerials": .object(ledger.lastSerials.mapValues { .int(Int64($0)) }),
        ]
    }
}
