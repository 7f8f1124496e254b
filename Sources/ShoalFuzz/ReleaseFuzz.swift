import ShoalCore
import ShoalTLS
import ShoalTrust

/// The `release` target's fixed world: one release key (public half only; its private half signed
/// the seed Tests/Fuzz/corpus/release/signed and was then thrown away). A fuzzed body is read as a
/// manifest and as a status document; what reads must survive body + decode, and a manifest must
/// get a verdict from every check a gateway runs, never a crash.
enum ReleaseFuzz {
    static let key = try! AdminPublicKey(hex: "3059301306072a8648ce3d020106082a8648ce3d03010703420004e57d103e426607098341cf269bc38ebfda02885be42d88816502bf7ca51b37f528d1f5d8ae6c0e8260c3fce76a1c66558177aea23316e6497b71901be1280e64")

    static func run(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        if let m = try? ReleaseManifest.decode(text) {
            guard let again = try? ReleaseManifest.decode(m.body), again == m else { fatalError("a release manifest did not survive body + decode") }
            _ = m.refusal(keys: [key], peer: PeerID(bytes: [UInt8](repeating: 7, count: 32)), running: ReleaseVersion("0.1.0")!, architecture: .x86_64)
            _ = m.check(binary: Array(bytes.prefix(4096)))
            _ = (m.summary, m.documentID, m.signedBytes.count)
        }
        if let s = try? UpdateStatus.decode(text) {
            guard let again = try? UpdateStatus.decode(s.body), again == s else { fatalError("a status document did not survive body + decode") }
        }
        _ = try? ReleaseArchitecture.ofELF(Array(bytes.prefix(64)))
    }
}
