import ShoalConfig
import ShoalCore
import ShoalReplication
import ShoalRuntime
import Testing

/// A collection's expiration settings in the site file: `ttl`, `maxDocuments`, `maxBytes`.
@Suite("Expiration settings from YAML")
struct ExpiryConfigTests {
    func collection(_ rules: String) throws -> SiteConfig.CollectionSettings {
        let text = "group: g\ncollections:\n  - name: c\n" + rules.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") + "\n"
        return try repoLoader.loadSite(text: text, file: "site.yaml").collections.first { $0.name.description == "_default.c" }!
    }

    @Test("ttl, maxDocuments and maxBytes are read with their units; the TTL reaches the replicator's policy")
    func reads() throws {
        let c = try collection("ttl: 7d\nmaxDocuments: 100000\nmaxBytes: 64MB")
        #expect(c.ttlSeconds == 7 * 86_400 && c.maxDocuments == 100_000 && c.maxBytes == 64 << 20)
        #expect(try collection("ttl: 90s").ttlSeconds == 90)
        #expect(try collection("ttl: 10m").ttlSeconds == 600)
        #expect(try collection("ttl: 3600").ttlSeconds == 3600)
        #expect(try collection("maxBytes: 512kb").maxBytes == 512 << 10)
        #expect(try collection("").ttlSeconds == nil)
        #expect(CollectionPolicies.make([c]).first?.ttlMillis == Int64(604_800_000))
    }

    @Test("a malformed ttl or budget names the file, line and key", arguments: [
        ("ttl: soon", "collections[0].ttl", 4),
        ("ttl: 0s", "collections[0].ttl", 4),
        ("ttl: -5m", "collections[0].ttl", 4),
        ("ttl: 99999999999999999999d", "collections[0].ttl", 4),
        ("ttl: [7d]", "collections[0].ttl", 4),
        ("maxDocuments: 0", "collections[0].maxDocuments", 4),
        ("maxDocuments: many", "collections[0].maxDocuments", 4),
        ("maxBytes: 64 MB", "collections[0].maxBytes", 4),
        ("maxBytes: 0", "collections[0].maxBytes", 4),
        ("maxBytes: 9999999999GB", "collections[0].maxBytes", 4),
        ("tll: 7d", "collections[0].tll", 4),
    ])
    func malformed(_ rules: String, _ key: String, _ line: Int) throws {
        let text = "group: g\ncollections:\n  - name: c\n" + rules.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") + "\n"
        let e = try #require(configError { _ = try repoLoader.loadSite(text: text, file: "site.yaml") })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.line == line, "\(e)")
    }
}
