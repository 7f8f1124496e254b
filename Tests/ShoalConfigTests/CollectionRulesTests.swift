import ShoalConfig
import ShoalCore
import ShoalReplication
import ShoalRuntime
import Testing

/// The site file's built-in resolvers and filters, from YAML to the replicator's closures.
@Suite("Collection rules from YAML")
struct CollectionRulesTests {
    static let me = PeerID(bytes: Array(repeating: 1, count: 32))
    static let other = PeerID(bytes: Array(repeating: 2, count: 32))

    /// The policy of the one collection `rules` (indented YAML under `- name: c`) describes.
    func policy(_ rules: String) throws -> CollectionPolicy {
        let text = "group: g\ncollections:\n  - name: c\n" + rules.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") + "\n"
        let site = try repoLoader.loadSite(text: text, file: "site.yaml")
        return CollectionPolicies.make(site.collections).first { $0.name.description == "_default.c" }!
    }

    /// A document with a version written by `peer` at `millis`.
    func doc(_ body: String?, by peer: PeerID = other, at millis: UInt64, id: String = "d") -> ReplicatedDocument {
        let vector = try! VersionVector(entries: [.init(peer: peer, timestamp: HLCTimestamp(physicalMillis: millis, logical: 0))])
        return ReplicatedDocument(collection: try! CollectionName(parsing: "c"), id: id, body: body,
                                  version: DocumentVersion(vector: vector, bodyDigest: DocumentVersion.digest(of: body)))
    }

    func merged(_ r: Resolution) -> [String: JSONValue]? {
        guard case .merged(let text) = r else { return nil }
        return try? JSONValue.parse(text).objectValue
    }

    @Test("every built-in resolver decides as documented")
    func resolvers() throws {
        let older = doc(#"{"a":1,"b":"old","t":20}"#, by: Self.me, at: 1_000)
        let newer = doc(#"{"b":"new","c":true,"t":5}"#, by: Self.other, at: 2_000)
        let gone = doc(nil, by: Self.other, at: 500)

        #expect(try policy("resolver: lastWriteWins").resolver.resolve(Self.other, older, newer) == .takeRemote)
        #expect(try policy("resolver: localWins").resolver.resolve(Self.other, older, newer) == .keepLocal)
        #expect(try policy("resolver: remoteWins").resolver.resolve(Self.other, newer, older) == .takeRemote)
        let deleteWins = try policy("resolver: deleteWins").resolver
        #expect(deleteWins.resolve(Self.other, newer, gone) == .delete, "an older delete still wins")
        #expect(deleteWins.resolve(Self.other, older, newer) == .takeRemote, "no delete: the newest write")
        // mergeFields: fields only one side has are kept; b differs and the remote wrote last.
        let m = try #require(merged(try policy("resolver: mergeFields").resolver.resolve(Self.other, older, newer)))
        #expect(m["a"] == .number("1") && m["b"] == .string("new") && m["c"] == .bool(true) && m["t"] == .number("5"))
        let mReversed = try #require(merged(try policy("resolver: mergeFields").resolver.resolve(Self.me, newer, older)))
        #expect(mReversed == m, "both sides merge alike")
        #expect(try policy("resolver: mergeFields").resolver.resolve(Self.other, older, gone) == .keepLocal, "a delete against a newer edit: the edit")
        #expect(try policy("resolver: {max: t}").resolver.resolve(Self.other, older, newer) == .keepLocal)
        #expect(try policy("resolver: {min: t}").resolver.resolve(Self.other, older, newer) == .takeRemote)
        #expect(try policy("resolver: {max: a}").resolver.resolve(Self.other, newer, older) == .takeRemote, "only one side has a number")
        #expect(try policy("resolver: {max: zz}").resolver.resolve(Self.other, older, newer) == .takeRemote, "neither: newest write")
        #expect(try policy("resolver: {max: t}").resolver.name == "max(t)")
    }

    @Test("every built-in filter holds as documented")
    func filters() throws {
        let east = doc(#"{"site":"east","kind":"pump","n":3,"ok":true}"#, at: 1, id: "boiler-1")
        let west = doc(#"{"site":"west","kind":"fan","n":4,"ok":false}"#, at: 1, id: "fan-2")
        let tombstone = doc(nil, at: 1, id: "boiler-9")

        let ids = try policy("documentIDs: [boiler-1, boiler-2]")
        #expect(ids.documentIDs == ["boiler-1", "boiler-2"])

        let prefix = try #require(try policy("pushFilter:\n  idPrefix: boiler-").pushFilter)
        #expect(prefix(Self.other, east) && !prefix(Self.other, west) && prefix(Self.other, tombstone))
        let prefixes = try #require(try policy("pushFilter:\n  idPrefix: [boiler-, fan-]").pushFilter)
        #expect(prefixes(Self.other, east) && prefixes(Self.other, west))

        let equals = try #require(try policy("pullFilter:\n  field: {site: east, n: 3, ok: true}").pullFilter)
        #expect(equals(Self.other, east) && !equals(Self.other, west))
        #expect(equals(Self.other, doc(nil, at: 1, id: "fan-3")), "a tombstone has no fields: it passes field conditions")
        let quoted = try #require(try policy("pullFilter:\n  field: {n: \"3\"}").pullFilter)
        #expect(!quoted(Self.other, east), "a quoted 3 is a string, not the number 3")

        let anyOf = try #require(try policy("pushFilter:\n  fieldIn: {kind: [pump, valve]}").pushFilter)
        #expect(anyOf(Self.other, east) && !anyOf(Self.other, west))

        let peers = try #require(try policy("pushFilter:\n  peers: [\(Self.other.description.uppercased())]").pushFilter)
        #expect(peers(Self.other, east) && !peers(Self.me, east))

        let all = try #require(try policy("pushFilter:\n  idPrefix: boiler-\n  fieldIn: {kind: [pump]}\n  peers: [\(Self.other)]").pushFilter)
        #expect(all(Self.other, east) && !all(Self.me, east) && !all(Self.other, west))
    }

    @Test("a malformed resolver or filter names the file, line and key", arguments: [
        ("resolver: coinFlip", "collections[0].resolver", 4),
        ("resolver: {median: t}", "collections[0].resolver", 4),
        ("resolver: {max: t, min: u}", "collections[0].resolver", 4),
        ("resolver: [lastWriteWins]", "collections[0].resolver", 4),
        ("resolver: {max: [t]}", "collections[0].resolver.max", 4),
        ("documentIDs: [ok, \"\"]", "collections[0].documentIDs[1]", 4),
        ("pushFilter: {}", "collections[0].pushFilter", 4),
        ("pushFilter:\n  idPrefixes: x", "collections[0].pushFilter.idPrefixes", 5),
        ("pushFilter:\n  field: {site: [east]}", "collections[0].pushFilter.field.site", 5),
        ("pushFilter:\n  fieldIn: {site: east}", "collections[0].pushFilter.fieldIn.site", 5),
        ("pullFilter:\n  fieldIn: {site: []}", "collections[0].pullFilter.fieldIn.site", 5),
        ("pullFilter:\n  peers: [abc]", "collections[0].pullFilter.peers[0]", 5),
        ("pullFilter:\n  idPrefix: {a: b}", "collections[0].pullFilter.idPrefix", 5),
        ("pullFilter: yes", "collections[0].pullFilter", 4),
    ])
    func malformed(_ rules: String, _ key: String, _ line: Int) throws {
        let text = "group: g\ncollections:\n  - name: c\n" + rules.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") + "\n"
        let e = try #require(configError { _ = try repoLoader.loadSite(text: text, file: "site.yaml") })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.file == "site.yaml")
        #expect(e.mark.line == line, "\(e)")
    }
}
