import Glibc
import ShoalCore
import ShoalTLS
import ShoalWire

/// Starting inputs for the binary targets, made with Shoal's own encoders (`shoal-fuzz seed DIR`;
/// the YAML targets start from the repository's board and site files, copied by `make fuzz-seed`;
/// the `trust` target's seeds are files in its corpus, signed once by the key TrustFuzz names).
enum Seeds {
    static func messages() -> [ReplicationMessage] {
        let a = PeerID(bytes: Array(repeating: 0xA1, count: 32)), b = PeerID(bytes: Array(repeating: 0xB2, count: 32))
        let change = ReplicationMessage.AnnouncedChange(sequence: 7, id: "boiler-1", deleted: false, version: [1, 2, 3, 4])
        let body = ReplicationMessage.DocumentBody(id: "boiler-1", deleted: false, version: [1, 2, 3, 4], body: Array(#"{"t":71.5}"#.utf8))
        return [
            .hello(version: 1, peer: a, group: "com.example.gateways", capabilities: 1, purgeHorizonMillis: 1_700_000_000_000,
                   neighbours: [b], collections: [.init(name: "sensors.readings", push: true, pull: true)]),
            .subscribe(collection: "sensors.readings", since: 42),
            .announce(collection: "sensors.readings", batch: 3, upTo: 9, changes: [change, .init(sequence: 9, id: "gone", deleted: true, version: [9])]),
            .request(collection: "sensors.readings", batch: 3, ids: ["boiler-1"]),
            .documents(collection: "sensors.readings", batch: 3, final: true, documents: [body]),
            .acknowledge(collection: "sensors.readings", batch: 3, upTo: 9),
            .error(code: 3, message: "group mismatch"),
            .topology(origin: a, sequence: 5, neighbours: [b]),
            .topologyRefs([.init(sequence: 5, refs: [.full(a), .full(b)]), .init(sequence: 6, refs: [.short(b.prefix64), .short(a.prefix64)])]),
            .push(collection: "sensors.readings", batch: 4, upTo: 10, changes: [change], documents: [body]),
            .prune(collection: "sensors.readings"),
            .graft(collection: "sensors.readings"),
        ] + blobMessages()
    }

    static func blobMessages() -> [ReplicationMessage] {
        let content = (0..<(BlobManifest.chunkSize + 100)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let manifest = BlobManifest.of(content)
        let d = manifest.digest
        return [
            .blobManifestRequest(digest: d),
            .blobManifest(manifest),
            .blobFetch(digest: d, firstChunk: 0, chunkCount: 2, pieceBytes: 16 * 1024),
            .blobPiece(digest: d, chunk: 1, offset: 0, bytes: Array(content[BlobManifest.chunkSize...])),
            .blobNotHere(digest: d),
            .blobHaveNow(digest: d),
        ]
    }

    static func write(into dir: String) {
        func put(_ target: String, _ name: String, _ bytes: [UInt8]) {
            mkdir(dir, 0o755)
            mkdir("\(dir)/\(target)", 0o755)
            guard let f = fopen("\(dir)/\(target)/\(name)", "wb") else { return }
            _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
            fclose(f)
        }
        var stream: [UInt8] = []
        for (i, m) in messages().enumerated() {
            put("message", "seed-\(i)", m.encoded())
            if let f = try? FrameEncoder.encode(m.encoded(), limit: 1 << 16) { stream += f; put("frame", "seed-\(i)", f) }
        }
        put("frame", "seed-all", stream)
        for (i, text) in [#"{"temperature": 71.5, "unit": "F", "tags": ["boiler", "east"], "ok": true, "note": null}"#,
                          #"{"a": {"b": {"c": [1, -2.5e3, "\u00e9\ud83d\ude00"]}}}"#, "[]", "0", #""x""#].enumerated() {
            put("json", "seed-\(i)", Array(text.utf8))
        }
        for (i, request) in [#"{"op": "status"}"#, #"{"op": "doc.put", "collection": "sensors.readings", "id": "a", "body": {"v": 1}}"#,
                             #"{"op": "changes", "since": 0, "follow": true}"#].enumerated() {
            if let f = try? ControlMessage.encode(try JSONValue.parse(request)) { put("control", "seed-\(i)", f) }
        }
        let layout = HubLayout(group: "com.example.gateways")
        let collection = try! CollectionName(parsing: "sensors.readings")
        let body = #"{"t":71.5}"#
        let version = DocumentVersion(vector: (try? VersionVector(entries: [.init(peer: PeerID(bytes: Array(repeating: 0xA1, count: 32)), timestamp: HLCTimestamp(physicalMillis: 1_700_000_000_000, logical: 0))])) ?? VersionVector(),
                                      bodyDigest: DocumentVersion.digest(of: body))
        let origin = PeerID(bytes: Array(repeating: 0xA1, count: 32)).description
        put("hub", "seed-0", Array("\(layout.subject(collection, id: "boiler-1"))\n\(HubHeader.version): \(HubHeader.hex(version.encoded))\n\(HubHeader.origin): \(origin)\n\n\(body)".utf8))
        put("hub", "seed-1", Array("\(layout.subject(collection, id: "boiler 2/ü"))\n\(HubHeader.version): \(HubHeader.hex(version.encoded))\n\(HubHeader.origin): \(origin)\n\(HubHeader.deleted): true\n\n".utf8))
        put("hub", "seed-2", Array("\(layout.subject(collection, id: "x"))\nContent-Type: text/plain\n\nnot shoal's".utf8))
        if let identity = try? Identity.createSelfSigned(.init(commonName: "fuzz-seed")) {
            put("certificate", "seed-der", identity.certificate.der)
            put("certificate", "seed-pem", Array(identity.certificate.pem.utf8))
        }
        print("seeds written to \(dir)")
    }
}
