import Foundation
import ShoalCore
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Issue 25's lab: five gateways in network namespaces (NetLab without Avahi, `--board sim`,
    /// static peers) in a line g1–g2–g3–g4–g5 distribute a 10 MiB blob put on g1. The last link
    /// (g4–g5) is shaped with `tc` (g4's egress, so g5's share arrives over seconds, not a blink)
    /// and cut by taking g5's interface down once g5 holds part of the blob, then brought back: g5
    /// resumes from its verified chunks. The counters in `shoal status --json` show that no chunk
    /// came twice: every node verified each chunk once, and received about one copy in frames.
    /// Figures go to standard output as `LAB blob: …` lines.
    @Suite("BlobLab (a blob through five gateways in namespaces)", .serialized,
           .enabled(if: getuid() == 0 && NetLab.tool("ip") != nil && NetLab.tool("tc") != nil, "needs root, iproute2 and tc"))
    struct BlobLabTests {
        static let port = 4986
        static let size = 10 << 20

        static func identity(_ node: NetLab.Node) throws -> String {
            let r = try Shoal.run(["identity", "create", "--board", "sim", "--data-dir", node.dir + "/data", "--json"])
            guard r.status == 0, let j = try Shoal.json(r) as? [String: Any], let id = j["peerID"] as? String else {
                throw NetLab.CommandFailed(description: "identity create for g\(node.index): \(r.stderr)")
            }
            return id
        }

        /// `status --json`'s replication counters and blob transfer figures of a gateway.
        static func figures(_ g: LabGateway) -> (counters: [String: Int], transfer: [String: Int]) {
            let s = g.status()
            let counters = (s["counters"] as? [String: Any] ?? [:]).compactMapValues { $0 as? Int }
            let transfer = (s["blobTransfer"] as? [String: Any] ?? [:]).compactMapValues { $0 as? Int }
            return (counters, transfer)
        }

        static func holds(_ g: LabGateway, _ digest: String) -> Bool {
            guard let r = try? g.cli(["blob", "ls", "--json"]), r.status == 0,
                  let j = try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
                  let blobs = j["blobs"] as? [[String: Any]] else { return false }
            return blobs.contains { $0["digest"] as? String == digest && $0["state"] as? String == "complete" }
        }

        @Test("a 10 MiB blob put on g1 reaches all five gateways of a line; the last link cut mid-transfer resumes, and no node receives a chunk twice")
        func lineWithCut() throws {
            let lab = try NetLab(nodes: 5, avahi: false)
            defer { lab.teardown() }
            let ids = try lab.nodes.map(Self.identity)
            var gateways: [LabGateway] = []
            for (k, node) in lab.nodes.enumerated() {
                let path = lab.base.path + "/g\(node.index).yaml"
                let next = k + 1 < lab.nodes.count ? "\(lab.nodes[k + 1].address):\(Self.port)" : ""
                try """
                group: lab.blob
                collections:
                  - name: sensors.photos
                authenticator:
                  allowedPeers: [\(ids.joined(separator: ", "))]
                mesh:
                  connectDelayMillis: 200
                  backoffMillis: 1000
                replication:
                  listen: \(node.address):\(Self.port)
                  peers: [\(next)]
                """.write(toFile: path, atomically: true, encoding: .utf8)
                gateways.append(try lab.startGateway(node, site: path, board: "sim"))
            }
            // Each gateway linked to its neighbours in the line.
            let linked = eventuallyBlocking(within: 40, every: 0.25) {
                gateways.enumerated().allSatisfy { k, g in (Self.figures(g).counters["connectedPeers"] ?? 0) >= (k == 0 || k == 4 ? 1 : 2) }
            }
            #expect(linked, "the line did not form")
            // g4 → g5 at 40 Mbit/s (about 5 MB/s): g5's 10 MiB take about 2 s, long enough to cut.
            let shaped = lab.exec(in: lab.nodes[3].ns, ["tc", "qdisc", "add", "dev", "wlan0", "root", "tbf", "rate", "40mbit", "burst", "64kb", "latency", "400ms"])
            #expect(shaped.status == 0, "tc: \(shaped.output)")

            var random = SeededRandom(seed: 2025)
            var content = [UInt8](repeating: 0, count: Self.size)
            for i in content.indices { content[i] = UInt8(truncatingIfNeeded: random.next() >> 11) }
            let file = lab.base.path + "/blob.bin"
            try Data(content).write(to: URL(fileURLWithPath: file))
            let put = try gateways[0].cli(["blob", "put", file, "--doc", "sensors.photos/cam1"])
            #expect(put.status == 0, "\(put.stderr)")
            let digest = try #require((try JSONSerialization.jsonObject(with: Data(put.stdout.utf8)) as? [String: Any])?["@blob"] as? String)
            let began = Date()

            // When each gateway first holds the blob (polled all along, the cut included).
            var seen: [Int: Double] = [:]
            func look() {
                for (k, g) in gateways.enumerated().dropFirst() where seen[k] == nil && Self.holds(g, digest) { seen[k] = Date().timeIntervalSince(began) }
            }
            // Cut g4–g5 once g5 has verified at least 1 MiB and not all of it.
            var cutAt = 0
            let partial = eventuallyBlocking(within: 120, every: 0.05) {
                cutAt = Self.figures(gateways[4]).transfer["bytesReceived"] ?? 0
                if cutAt < 1 << 20 { look() }
                return cutAt >= 1 << 20
            }
            try lab.link(lab.nodes[4], up: false)
            let cutTime = Date().timeIntervalSince(began)
            #expect(partial && cutAt < Self.size, "g5 had \(cutAt) bytes when cut")
            let down = Date().addingTimeInterval(4)
            while Date() < down { look(); Thread.sleep(forTimeInterval: 0.1) }
            let duringCut = Self.figures(gateways[4]).transfer["bytesReceived"] ?? 0
            #expect(seen[4] == nil, "g5 completed with its link down")
            try lab.link(lab.nodes[4], up: true)
            let healedAt = Date()
            let all = eventuallyBlocking(within: 180, every: 0.1) {
                look()
                return seen.count == 4
            }
            #expect(all, "not every gateway got the blob: \(seen)")
            let total = seen.values.max() ?? 0
            let resumeSeconds = (seen[4] ?? 0) - healedAt.timeIntervalSince(began)
            let back = lab.base.path + "/back.bin"
            #expect(try gateways[4].cli(["blob", "get", digest, "--out", back]).status == 0)
            #expect(try Data(contentsOf: URL(fileURLWithPath: back)) == Data(content))

            let chunks = (Self.size + 65_535) / 65_536
            print("LAB blob: 10 MiB (\(chunks) chunks of 64 KiB) from g1 along g1–g2–g3–g4–g5; g4→g5 shaped to 40 Mbit/s")
            print("LAB blob: g5 cut at \(String(format: "%.2f", cutTime)) s holding \(cutAt) bytes (\(duringCut) after 4 s down); all five hold it \(String(format: "%.2f", total)) s after the put (g5 \(String(format: "%.2f", resumeSeconds)) s after the link came back)")
            for (k, g) in gateways.enumerated() {
                let f = Self.figures(g)
                let received = f.transfer["bytesReceived"] ?? 0, frames = f.counters["bytesReceived"] ?? 0
                let at = seen[k].map { String(format: "%.2f s", $0) } ?? "origin"
                print("LAB blob: g\(k + 1) \(at): blob bytes received \(received) (\(String(format: "%.3f", Double(received) / Double(Self.size))) × the blob), frame bytes received \(frames) (\(String(format: "%.3f", Double(frames) / Double(Self.size))) ×), chunks verified \(f.transfer["chunksVerified"] ?? 0), redundant pieces \(f.transfer["redundantPieces"] ?? 0), sent \(f.transfer["bytesSent"] ?? 0)")
                guard k > 0 else { continue }
                // One copy per node: each chunk verified once, nothing redundant, frames ≈ the blob.
                #expect(received == Self.size && f.transfer["chunksVerified"] == chunks, "g\(k + 1): \(f.transfer)")
                #expect(f.transfer["redundantPieces"] == 0 && f.transfer["badChunks"] == 0, "g\(k + 1): \(f.transfer)")
                #expect(Double(frames) <= 1.05 * Double(Self.size), "g\(k + 1) received \(frames) frame bytes for a \(Self.size)-byte blob")
            }
            let goodput = Double(4 * Self.size) / 1_048_576 / total
            print("LAB blob: goodput \(String(format: "%.2f", goodput)) MiB/s (4 copies delivered over the time to all five, the cut included)")
            for g in gateways { g.stop() }
        }
    }
}
