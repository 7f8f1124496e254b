import ShoalCore
import ShoalReplication
import ShoalTLS
import ShoalTrust
import Testing

/// Release manifests (`_system._releases`) and update status documents (`_system._status`): the
/// signature through the one path trust entries use, the strict reader, every refusal with the
/// reason an operator reads, the rollout's stable buckets, and who may write a status document.
@Suite("Release manifests")
struct ReleaseManifestTests {
    static let t0: Int64 = 1_799_000_000

    /// A fake executable: an ELF header for `machine`, then filler.
    static func binary(machine: UInt16 = ReleaseArchitecture.running.elfMachine, size: Int = 3000, fill: UInt8 = 0x90) -> [UInt8] {
        var b = [UInt8](repeating: fill, count: size)
        b[0] = 0x7F; b[1] = 0x45; b[2] = 0x4C; b[3] = 0x46; b[4] = 2; b[5] = 1; b[6] = 1
        b[16] = 2; b[17] = 0
        b[18] = UInt8(machine & 0xFF); b[19] = UInt8(machine >> 8)
        return b
    }

    static func peer(_ n: UInt8) -> PeerID { PeerID(bytes: [UInt8](repeating: n, count: 32)) }

    static func manifest(_ key: AdminSigningKey, version: String = "0.2.0", min: String? = nil, rollout: ReleaseManifest.Rollout = .all,
                         binary: [UInt8] = binary()) throws -> ReleaseManifest {
        try ReleaseManifest.signed(binary: binary, version: ReleaseVersion(version)!, minVersion: min.flatMap(ReleaseVersion.init),
                                   rollout: rollout, notes: "fixes", serial: 1, issuedAt: t0, by: key)
    }

    @Test("versions compare number by number, and malformed ones are refused")
    func versions() {
        #expect(ReleaseVersion("0.10.0")! > ReleaseVersion("0.9.3")!)
        #expect(ReleaseVersion("1.2")! == ReleaseVersion("1.2.0")!)
        #expect(ReleaseVersion("0.1.0")! < ReleaseVersion("0.1.1")!)
        for bad in ["", "1.", ".1", "1..2", "1.2.3.4.5", "v1", "1.2-rc1", "1234567890", "-1", " 1"] { #expect(ReleaseVersion(bad) == nil, "\(bad)") }
    }

    @Test("a signed manifest round-trips through its body and verifies under its key and no other")
    func signAndRoundTrip() throws {
        let k1 = try AdminSigningKey.generate(), k2 = try AdminSigningKey.generate()
        let m = try Self.manifest(k1, min: "0.1.0", rollout: .peers([Self.peer(1), Self.peer(2)]))
        let back = try ReleaseManifest.decode(m.body)
        #expect(back == m)
        #expect(back.verify(keys: [k1.publicKey]) == nil)
        #expect(back.verify(keys: [k2.publicKey]) == "signed by \(k1.publicKey.fingerprint), not a release key this gateway trusts")
        #expect(back.documentID == "release-0.2.0-\(ReleaseArchitecture.running.rawValue)@\(k1.publicKey.fingerprint)")
        // Any signed field changed breaks the signature.
        var other = back
        other.rollout = .all
        #expect(other.verify(keys: [k1.publicKey]) == "its signature does not verify under release key \(k1.publicKey.fingerprint)")
        other = back
        other.minVersion = nil
        #expect(other.verify(keys: [k1.publicKey]) != nil)
        // A key that claims another's fingerprint still fails: the signature is checked, not the name.
        var forged = try Self.manifest(k2)
        forged.signer = k1.publicKey.fingerprint
        #expect(forged.verify(keys: [k1.publicKey]) != nil)
    }

    @Test("trust entries and release manifests are signed on one path, with different headers")
    func onePath() throws {
        let k = try AdminSigningKey.generate()
        let m = try Self.manifest(k)
        #expect(m.signedBytes.starts(with: Array("shoal-release 1\n".utf8)))
        let e = try TrustEntry.signed(.allow, subject: String(repeating: "ab", count: 32), serial: 1, issuedAt: Self.t0, by: k)
        #expect(e.signedBytes.starts(with: Array("shoal-trust 1\n".utf8)))
        #expect(e.isSigned(by: k.publicKey) && m.isSigned(by: k.publicKey))
        // A trust entry's signature is no manifest's.
        var swapped = m
        swapped.signature = e.signature
        #expect(!swapped.isSigned(by: k.publicKey))
    }

    @Test("the reader refuses every malformed body with its reason", arguments: [
        ("\"v\":1", "\"v\":2", "unsupported format (v must be 1)"),
        ("\"version\":\"0.2.0\"", "\"version\":\"two\"", "version must be dotted whole numbers (0.2.0)"),
        ("\"architecture\":\"", "\"architecture\":\"sparc", "architecture must be one of x86_64, aarch64, armv7, riscv64"),
        ("\"size\":3000", "\"size\":3001", "size 3001 differs from the blob reference's length 3000"),
        ("\"size\":3000", "\"size\":0", "size must be a positive whole number of bytes"),
        ("\"rollout\":{\"all\":true}", "\"rollout\":{\"percent\":0}", "rollout.percent must be a whole number from 1 to 100"),
        ("\"rollout\":{\"all\":true}", "\"rollout\":{\"percent\":101}", "rollout.percent must be a whole number from 1 to 100"),
        ("\"rollout\":{\"all\":true}", "\"rollout\":{\"peers\":[]}", "rollout.peers must list 1 to 256 peer ids"),
        ("\"rollout\":{\"all\":true}", "\"rollout\":{\"peers\":[\"x\"]}", "rollout.peers holds something other than a peer id (64 lower-case hex digits)"),
        ("\"rollout\":{\"all\":true}", "\"rollout\":{\"all\":true,\"percent\":5}", "rollout is one of {\"all\": true}, {\"percent\": 1-100}, {\"peers\": [peer ids]}"),
        ("\"rollout\":{\"all\":true}", "\"rollout\":{\"some\":1}", "rollout is one of {\"all\": true}, {\"percent\": 1-100}, {\"peers\": [peer ids]}, not \"some\""),
        ("\"notes\":\"fixes\"", "\"notes\":\"a\\nb\"", "notes holds a line break"),
        ("\"notes\":\"fixes\"", "\"notes\":\"a\\r\\nb\"", "notes holds a line break"),
        ("\"notes\":\"fixes\"", "\"notes\":5", "notes must be a string"),
        ("\"notes\":\"fixes\"", "\"colour\":\"red\"", "unknown field \"colour\""),
        ("\"serial\":1", "\"serial\":-1", "serial must be a whole number"),
        ("\"issuedAt\":1799000000", "\"issuedAt\":0", "issuedAt must be after 1970"),
        ("\"issuedAt\":1799000000", "\"issuedAt\":\"now\"", "issuedAt must be whole seconds since 1970"),
        ("\"minVersion\":\"0.1.0\"", "\"minVersion\":\"0.3.0\"", "minVersion 0.3.0 is after the release's own version 0.2.0"),
        ("\"minVersion\":\"0.1.0\"", "\"minVersion\":\"x\"", "minVersion must be dotted whole numbers (0.1.0)"),
    ])
    func malformed(_ from: String, _ to: String, _ reason: String) throws {
        let k = try AdminSigningKey.generate()
        let good = try Self.manifest(k, min: "0.1.0").body
        #expect(good.contains(from), "\(good)")
        #expect(throws: TrustError(reason)) { _ = try ReleaseManifest.decode(good.replacingOccurrences(of: from, with: to)) }
    }

    @Test("a sha256 that differs from the blob reference's, a non-object and an oversized body are refused")
    func mismatchedDigest() throws {
        let k = try AdminSigningKey.generate()
        let m = try Self.manifest(k)
        let other = BlobDigest.of([1, 2, 3])
        let body = m.body.replacingOccurrences(of: "\"sha256\":\"\(m.digest)\"", with: "\"sha256\":\"\(other)\"")
        #expect(throws: TrustError("sha256 \(other) differs from the blob reference's \(m.digest)")) { _ = try ReleaseManifest.decode(body) }
        #expect(throws: TrustError("a manifest is a JSON object")) { _ = try ReleaseManifest.decode("[1]") }
        #expect(throws: TrustError("manifest too large: 20000 bytes, at most 16384")) { _ = try ReleaseManifest.decode(String(repeating: " ", count: 20000)) }
    }

    @Test("a gateway refuses a release for another machine, an older or equal version, one below its minimum, outside its rollout, or unsigned")
    func refusals() throws {
        let k = try AdminSigningKey.generate(), stranger = try AdminSigningKey.generate()
        let keys = [k.publicKey], me = Self.peer(7), arch = ReleaseArchitecture.running
        let running = ReleaseVersion("0.1.0")!
        #expect(try Self.manifest(k).refusal(keys: keys, peer: me, running: running, architecture: arch) == nil)
        let other: ReleaseArchitecture = arch == .x86_64 ? .aarch64 : .x86_64
        let foreign = try Self.manifest(k, binary: Self.binary(machine: other.elfMachine))
        #expect(foreign.refusal(keys: keys, peer: me, running: running, architecture: arch)
                == .otherArchitecture("built for \(other.rawValue), this gateway is \(arch.rawValue)"))
        #expect(try Self.manifest(k, version: "0.1.0").refusal(keys: keys, peer: me, running: running, architecture: arch)
                == .notNewer("version 0.1.0 is not newer than the running 0.1.0"))
        #expect(try Self.manifest(k, version: "0.0.9").refusal(keys: keys, peer: me, running: running, architecture: arch)
                == .notNewer("version 0.0.9 is not newer than the running 0.1.0"))
        #expect(try Self.manifest(k, version: "0.3.0", min: "0.2.0").refusal(keys: keys, peer: me, running: running, architecture: arch)
                == .belowMinimum("needs at least 0.2.0 running first, this gateway runs 0.1.0"))
        #expect(try Self.manifest(k, rollout: .peers([Self.peer(8)])).refusal(keys: keys, peer: me, running: running, architecture: arch)
                == .notInRollout("the rollout (peers \(Self.peer(8))) does not include this gateway"))
        #expect(try Self.manifest(stranger).refusal(keys: keys, peer: me, running: running, architecture: arch)
                == .badSignature("signed by \(stranger.publicKey.fingerprint), not a release key this gateway trusts"))
        #expect(try Self.manifest(k).refusal(keys: [], peer: me, running: running, architecture: arch)?.isQuiet == false)
    }

    @Test("a fetched binary is checked for size, digest and ELF machine")
    func binaryCheck() throws {
        let k = try AdminSigningKey.generate()
        let bin = Self.binary()
        let m = try Self.manifest(k, binary: bin)
        #expect(m.check(binary: bin) == nil)
        #expect(m.check(binary: bin + [0]) == .sizeMismatch("the binary has 3001 bytes, the release says 3000"))
        var flipped = bin
        flipped[100] ^= 1
        #expect(m.check(binary: flipped) == .digestMismatch("the binary's SHA-256 is \(BlobDigest.of(flipped)), the release says \(m.digest)"))
        // A manifest can only be made for an executable.
        #expect(throws: TrustError("not an ELF executable (no \\x7fELF magic)")) { _ = try Self.manifest(k, binary: [UInt8](repeating: 0x23, count: 100)) }
        #expect(throws: TrustError("an ELF executable for machine 2, not one Shoal releases")) { _ = try Self.manifest(k, binary: Self.binary(machine: 2)) }
    }

    @Test("a percentage rollout takes about that share of peers, and raising it only adds peers")
    func percentRollout() {
        let peers = (0..<2000).map { i -> PeerID in
            var b = [UInt8](repeating: 0, count: 32)
            b[0] = UInt8(i & 0xFF); b[1] = UInt8(i >> 8)
            return PeerID(bytes: b)
        }
        let at10 = Set(peers.filter { ReleaseManifest.Rollout.percent(10).includes($0) })
        let at50 = Set(peers.filter { ReleaseManifest.Rollout.percent(50).includes($0) })
        #expect((120...280).contains(at10.count), "\(at10.count)")
        #expect((850...1150).contains(at50.count), "\(at50.count)")
        #expect(at10.isSubset(of: at50))
        #expect(peers.allSatisfy { ReleaseManifest.Rollout.percent(100).includes($0) })
    }

    @Test("the _releases pull filter takes only validly signed manifests kept under their own id")
    func releasesFilter() throws {
        let k = try AdminSigningKey.generate(), stranger = try AdminSigningKey.generate()
        let m = try Self.manifest(k), bad = try Self.manifest(stranger)
        func doc(_ id: String, _ body: String?) -> ReplicatedDocument {
            ReplicatedDocument(collection: .releases, id: id, body: body, version: DocumentVersion(vector: VersionVector(), bodyDigest: 0))
        }
        #expect(ReleaseManifest.refusal(of: doc(m.documentID, m.body), keys: [k.publicKey]) == nil)
        #expect(ReleaseManifest.refusal(of: doc(bad.documentID, bad.body), keys: [k.publicKey]) != nil)
        #expect(ReleaseManifest.refusal(of: doc("release-9.9.9", m.body), keys: [k.publicKey]) == "kept as release-9.9.9 but it is \(m.documentID)")
        #expect(ReleaseManifest.refusal(of: doc(m.documentID, nil), keys: [k.publicKey]) == "a deletion: a release is replaced by a newer manifest, never deleted")
        #expect(ReleaseManifest.refusal(of: doc(m.documentID, m.body), keys: []) != nil)
        #expect(CollectionName.systemNames == [.trust, .releases, .status])
    }

    @Test("a status document is taken only when its latest writer is the peer it names")
    func statusFilter() throws {
        let me = Self.peer(1), relay = Self.peer(2)
        let s = UpdateStatus(peer: me, running: "0.1.0", architecture: "x86_64", attempted: "0.2.0", outcome: .rolledBack,
                             reason: "the candidate never confirmed", outcomeAt: Self.t0, startedAt: Self.t0)
        #expect(try UpdateStatus.decode(s.body) == s)
        func doc(_ id: String, _ body: String?, writer: PeerID) throws -> ReplicatedDocument {
            let v = try VersionVector(entries: [.init(peer: writer, timestamp: HLCTimestamp(physicalMillis: 1, logical: 0))])
            return ReplicatedDocument(collection: .status, id: id, body: body, version: DocumentVersion(vector: v, bodyDigest: 0))
        }
        #expect(UpdateStatus.refusal(of: try doc(me.description, s.body, writer: me)) == nil)
        #expect(UpdateStatus.refusal(of: try doc(me.description, s.body, writer: relay)) == "written by another peer than the one it is about (\(me.short))")
        #expect(UpdateStatus.refusal(of: try doc(relay.description, s.body, writer: relay)) == "kept as \(relay) but about peer \(me)")
        #expect(UpdateStatus.refusal(of: try doc(me.description, nil, writer: me)) == "a deletion: status documents are replaced, never deleted")
        #expect(UpdateStatus.refusal(of: try doc(me.description, "{\"v\":1}", writer: me)) != nil)
        #expect(throws: TrustError("unknown field \"x\"")) { _ = try UpdateStatus.decode(s.body.replacingOccurrences(of: "\"v\":1", with: "\"v\":1,\"x\":2")) }
    }
}
