import ShoalConfig
import ShoalCore
import Testing

/// Blob settings in the site file: `storage.blobBudget`, `storage.maxBlobSize` and a collection's
/// `blobs: eager | onDemand`.
@Suite("Blob settings from YAML")
struct BlobConfigTests {
    static let base = "group: g\ncollections:\n  - name: c\n"

    @Test("the budget and size limit are read with their units; collections are eager unless they say onDemand")
    func read() throws {
        let site = try repoLoader.loadSite(text: Self.base + "    blobs: onDemand\n  - name: d\nstorage:\n  blobBudget: 2GB\n  maxBlobSize: 512MB\n", file: "site.yaml")
        #expect(site.blobBudgetBytes == 2 << 30 && site.maxBlobBytes == 512 << 20)
        #expect(site.collections.filter { $0.name.name != "_default" }.map(\.blobs) == [.onDemand, .eager])
        let plain = try repoLoader.loadSite(text: Self.base, file: "site.yaml")
        #expect(plain.blobBudgetBytes == nil && plain.maxBlobBytes == nil && plain.collections.allSatisfy { $0.blobs == .eager })
    }

    @Test("a malformed blob setting names the file, line and key", arguments: [
        ("    blobs: lazy\n", "collections[0].blobs", 4),
        ("    blobs: [eager]\n", "collections[0].blobs", 4),
        ("storage:\n  blobBudget: lots\n", "storage.blobBudget", 5),
        ("storage:\n  blobBudget: 0\n", "storage.blobBudget", 5),
        ("storage:\n  maxBlobSize: 5GB\n", "storage.maxBlobSize", 5),
        ("storage:\n  blobBugdet: 1GB\n", "storage.blobBugdet", 5),
    ])
    func malformed(_ extra: String, _ key: String, _ line: Int) throws {
        let e = try #require(configError { _ = try repoLoader.loadSite(text: Self.base + extra, file: "site.yaml") })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.line == line, "\(e)")
    }
}
