import Foundation
import ShoalCore
import ShoalRuntime
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Two `shoal run` gateways linked over TCP + mutual TLS on loopback: a blob put on one reaches
    /// the other (eagerly, or when a reader asks), and garbage on the control socket harms neither.
    @Suite("Blobs between gateways", .serialized)
    struct BlobMeshProcessTests {
        /// The state of `digest` in `g`'s `shoal blob ls --json` (nil: not listed).
        static func blobState(_ g: RunningGateway, _ digest: String) -> String? {
            guard let r = try? g.cli(["blob", "ls", "--json"]), r.status == 0,
                  let j = try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
                  let blobs = j["blobs"] as? [[String: Any]] else { return nil }
            return blobs.first { $0["digest"] as? String == digest }?["state"] as? String
        }

        /// `shoal status --json`'s `blobTransfer` figures.
        static func transfer(_ g: RunningGateway) -> [String: Any] {
            guard let r = try? g.cli(["status", "--json"]), r.status == 0,
                  let j = try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any] else { return [:] }
            return j["blobTransfer"] as? [String: Any] ?? [:]
        }

        static func digest(of put: Shoal.Result) throws -> String {
            #expect(put.status == 0, "\(put.stderr)")
            let reference = try #require(try JSONSerialization.jsonObject(with: Data(put.stdout.utf8)) as? [String: Any])
            return try #require(reference["@blob"] as? String)
        }

        @Test("a blob put on one gateway with --doc reaches the other whole; an on-demand collection's blob comes on blob get --wait; garbage uploads leave both up")
        func blobCrossesTheLink() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try ReplicationProcessTests.peerID(aDir), bID = try ReplicationProcessTests.peerID(bDir)
            let port = 20_000 + Int((getpid() + 11) % 20_000)
            func site(_ name: String, allow: String, replication: String) throws -> String {
                let path = base.path + "/\(name).yaml"
                try """
                    group: test.blobmesh
                    collections:
                      - name: sensors.photos
                      - name: sensors.archive
                        blobs: onDemand
                    authenticator:
                      allowedPeers: [\(allow)]
                    replication:
                      \(replication)

                    """.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", try site("b", allow: aID, replication: "listen: 127.0.0.1:\(port)")])
            defer { _ = b.stop() }
            let a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", try site("a", allow: bID, replication: "peers: [127.0.0.1:\(port)]")])
            defer { _ = a.stop() }

            // Eager: 3 MB (48 chunks of 64 KiB) put on a, with its document.
            let file = base.path + "/photo.bin"
            var random = SeededRandom(seed: 7)
            let content = Data((0..<3_000_000).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            try content.write(to: URL(fileURLWithPath: file))
            let digest = try Self.digest(of: a.cli(["blob", "put", file, "--content-type", "image/jpeg", "--doc", "sensors.photos/cam1"]))
            #expect(eventuallyBlocking(within: 60) { Self.blobState(b, digest) == "complete" }, "b never held the blob: \(Self.blobState(b, digest) ?? "not listed")")
            let out = base.path + "/on-b.bin"
            let get = try b.cli(["blob", "get", digest, "--out", out])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: out)) == content)
            // The counters say so: b received one copy (verified), a sent it.
            var bTransfer: [String: Any] = [:]
            #expect(eventuallyBlocking(within: 10) { bTransfer = Self.transfer(b); return bTransfer["completed"] as? Int == 1 }, "b: \(bTransfer)")
            #expect(bTransfer["bytesReceived"] as? Int == 3_000_000 && bTransfer["badChunks"] as? Int == 0, "b: \(bTransfer)")
            #expect((bTransfer["fetching"] as? [Any])?.isEmpty == true, "b: \(bTransfer)")
            #expect(eventuallyBlocking(within: 10) { (Self.transfer(a)["bytesSent"] as? Int ?? 0) >= 3_000_000 })
            let metrics = try b.cli(["status"])
            #expect(metrics.stdout.contains("blob moves  3000000 bytes received"), "\(metrics.stdout)")

            // On demand: the document comes, the blob stays on a until a reader on b asks and waits.
            let old = base.path + "/old.bin"
            let oldContent = Data((0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) })
            try oldContent.write(to: URL(fileURLWithPath: old))
            let oldDigest = try Self.digest(of: a.cli(["blob", "put", old, "--doc", "sensors.archive/old1"]))
            #expect(eventuallyBlocking(within: 30) { (try? b.cli(["doc", "get", "sensors.archive", "old1"]).status) == 0 })
            Thread.sleep(forTimeInterval: 1.5)
            #expect(Self.blobState(b, oldDigest) != "complete", "an onDemand blob was fetched before anyone asked")
            let oldOut = base.path + "/old-on-b.bin"
            let waited = try b.cli(["blob", "get", oldDigest, "--wait", "30", "--out", oldOut])
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: oldOut)) == oldContent)

            // Garbage through a's control socket: a frame that is not JSON, an upload of bytes no
            // document declares correctly (a reference with the wrong length, one to nothing).
            let raw = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { p in
                for (i, c) in a.socket.utf8.prefix(p.count - 1).enumerated() { p[i] = c }
            }
            let connected = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(raw, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
            #expect(connected == 0)
            let junk: [UInt8] = [0, 0, 0, 12] + Array("{not json!!!".utf8) + [0xff, 0xff, 0xff, 0xff] + Array(repeating: 0x41, count: 64)
            _ = junk.withUnsafeBytes { write(raw, $0.baseAddress, $0.count) }
            close(raw)
            let client = try ControlClient(path: a.socket)
            let token = try #require(try client.call(["op": "blob.begin"])["upload"]?.stringValue)
            _ = try? client.call(["op": "blob.append", "upload": .string(token), "data": "%%%garbage%%%"])
            _ = try client.call(["op": "blob.append", "upload": .string(token), "data": .string(Base64.encode(Array(repeating: 0x5a, count: 70_000)))])
            let junkDigest = try #require(try client.call(["op": "blob.finish", "upload": .string(token)])["@blob"]?.stringValue)
            #expect(try a.cli(["doc", "put", "sensors.photos", "liar", #"{"img":{"@blob":"\#(junkDigest)","length":5}}"#]).status == 0)
            let nowhere = "sha256-" + String(repeating: "ee", count: 32)
            #expect(try a.cli(["doc", "put", "sensors.photos", "ghost", #"{"img":{"@blob":"\#(nowhere)","length":100}}"#]).status == 0)
            #expect(try a.cli(["doc", "put", "sensors.photos", "after", #"{"v":1}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) { (try? b.cli(["doc", "get", "sensors.photos", "after"]).status) == 0 }, "replication stopped after the garbage")
            Thread.sleep(forTimeInterval: 1)
            #expect(Self.blobState(b, junkDigest) != "complete", "a blob with a wrong declared length was taken")
            #expect(try a.cli(["status"]).status == 0)
            #expect(try b.cli(["status"]).status == 0)
            let aEnd = a.stop(), bEnd = b.stop()
            #expect(aEnd.status == 0 && bEnd.status == 0, "a: \(aEnd.stderr.suffix(1500)) b: \(bEnd.stderr.suffix(1500))")
        }
    }
}
