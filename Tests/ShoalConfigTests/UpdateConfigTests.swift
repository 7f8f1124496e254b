import ShoalConfig
import ShoalRuntime
import Testing

/// The site file's `updates:` mapping: release keys, the install directory, the confirmation
/// deadline, and every mistake named at its line.
@Suite("Update settings from YAML")
struct UpdateConfigTests {
    static let key = "3059301306072a8648ce3d020106082a8648ce3d03010703420004e57d103e426607098341cf269bc38ebfda02885be42d88816502bf7ca51b37f528d1f5d8ae6c0e8260c3fce76a1c66558177aea23316e6497b71901be1280e64"

    func site(_ updates: String) throws -> SiteConfig {
        let text = "group: g\nupdates:\n" + updates.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n") + "\n"
        return try repoLoader.loadSite(text: text, file: "site.yaml")
    }

    @Test("release keys, installDir, confirmSeconds and enabled are read; keys turn updates on; the keys parse")
    func reads() throws {
        let s = try site("releaseKeys: [\(Self.key)]\ninstallDir: /opt/shoal/\nconfirmSeconds: 60\nholdOffSeconds: 0")
        #expect(s.updates.holdOffSeconds == 0)
        #expect(s.updates.releaseKeys.map(\.text) == [Self.key])
        #expect(s.updates.installDir == "/opt/shoal" && s.updates.confirmSeconds == 60 && s.updates.enabled)
        #expect(try ConfigurationLoading.releaseKeys(s).map(\.hex) == [Self.key])
        let off = try site("releaseKeys: [\(Self.key)]\nenabled: false")
        #expect(!off.updates.enabled)
        let none = try repoLoader.loadSite(text: "group: g\n", file: "site.yaml")
        #expect(!none.updates.enabled && none.updates.installDir == "/var/lib/shoal/updates" && none.updates.confirmSeconds == 120)
    }

    @Test("a malformed updates setting names the file, line and key", arguments: [
        ("releaseKeys: [\"\"]", "updates.releaseKeys[0]", 3),
        ("releaseKeys: [[a]]", "updates.releaseKeys[0]", 3),
        ("installDir: relative/dir", "updates.installDir", 3),
        ("installDir: /var/../etc", "updates.installDir", 3),
        ("confirmSeconds: 5", "updates.confirmSeconds", 3),
        ("confirmSeconds: soon", "updates.confirmSeconds", 3),
        ("holdOffSeconds: -1", "updates.holdOffSeconds", 3),
        ("enabled: true", "updates.enabled", 3),
        ("enabled: maybe", "updates.enabled", 3),
        ("releaseKey: [abc]", "updates.releaseKey", 3),
    ])
    func malformed(_ text: String, _ key: String, _ line: Int) throws {
        let e = try #require(configError { _ = try site(text) })
        #expect(e.key == key, "\(e)")
        #expect(e.mark.line == line, "\(e)")
    }

    @Test("a release key that is no P-256 public key is refused at its line")
    func badKey() throws {
        let s = try site("releaseKeys:\n  - \(Self.key)\n  - 00ff\n  - /nonexistent/release.pub")
        let e = try #require(configError { _ = try ConfigurationLoading.releaseKeys(s) })
        #expect(e.key == "updates.releaseKeys[1]" || e.key == "updates.releaseKeys[2]", "\(e)")
    }
}
