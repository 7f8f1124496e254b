import ShoalConfig
import Testing

@Suite("Collection indexes from YAML")
struct CollectionIndexesTests {
    func site(_ rules: String) throws -> SiteConfig {
        let text = "group: g\ncollections:\n  - name: c\n" + rules.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") + "\n"
        return try repoLoader.loadSite(text: text, file: "site.yaml")
    }

    @Test("indexes: a field or a list of fields each, nested fields and pseudo-fields allowed")
    func indexes() throws {
        let s = try site("indexes: [site, [site, pressure], a.b_2, updatedAt]")
        #expect(s.collections.first { $0.name.description == "_default.c" }?.indexes == [["site"], ["site", "pressure"], ["a.b_2"], ["updatedAt"]])
        let block = try site("indexes:\n  - site\n  - [site, pressure]")
        #expect(block.collections.first { $0.name.description == "_default.c" }?.indexes == [["site"], ["site", "pressure"]])
    }

    @Test("a malformed index names the file, line and key", arguments: [
        ("indexes: site", "collections[0].indexes", 4),
        ("indexes:\n  - site\n  - \"a'b\"", "collections[0].indexes[1]", 6),
        ("indexes: [[a, a]]", "collections[0].indexes[0]", 4),
        ("indexes: [[]]", "collections[0].indexes[0]", 4),
        ("indexes: [{a: b}]", "collections[0].indexes[0]", 4),
        ("indexes: [a..b]", "collections[0].indexes[0]", 4),
        ("indexes: [1a]", "collections[0].indexes[0]", 4),
    ])
    func malformed(_ rules: String, _ key: String, _ line: Int) throws {
        let text = "group: g\ncollections:\n  - name: c\n" + rules.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") + "\n"
        let e = try #require(configError { _ = try repoLoader.loadSite(text: text, file: "site.yaml") })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.line == line, "\(e)")
    }
}
