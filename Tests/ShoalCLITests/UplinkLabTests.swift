import Foundation
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Issue 22's lab tests of the NATS uplink: real `shoal run` gateways in network namespaces
    /// (NetLab: real Avahi within a site, sites on bridges of their own) syncing with real
    /// nats-servers (NATSServer.swift): a three-node JetStream cluster losing the node a gateway
    /// uploads 10,000 documents to; two sites of three gateways (one uplink each) converging
    /// through one hub, concurrent edits of the same documents resolved alike on all six gateways
    /// and on the hub; a hub outage while both sites write; an uplink gateway SIGKILLed
    /// repeatedly. Each test prints its phases and their times as `UPLINK LAB …` lines. The hub is
    /// read with Tests/NATS/hub.py (the contract: one message per document, headers
    /// Shoal-Version and Shoal-Origin).
    @Suite("NATS uplink lab", .serialized,
           .enabled(if: NATSServer.available && NetLab.available, "needs root, iproute2, dbus, avahi-daemon, avahi-utils and Debian's nats-server (make deps)"))
    struct UplinkLabTests {
        static let group = "lab.uplink"
        static let collection = "sensors.readings"

        // MARK: - The lab's pieces

        /// A site file's `uplink:` section (top level; NetLabTests.site appends it). A short
        /// reconnect backoff: a test waits for the uplink, not for its backoff.
        static func uplinkSection(_ servers: [String], replicas: Int = 1) -> String {
            """
            uplink:
              servers: [\(servers.joined(separator: ", "))]
              replicas: \(replicas)
              reconnect: {minMillis: 200, maxMillis: 2000}
            """
        }

        /// One gateway per lab node, all of one group trusting each other (each meshes with its
        /// own site only: Avahi does not cross sites); `uplinks[i]` is node i's `uplink:` section.
        static func startGateways(_ lab: NetLab, uplinks: [Int: String]) throws -> [LabGateway] {
            let ids = try NetLabTests.identities(lab)
            return try lab.nodes.enumerated().map { i, node in
                let site = try NetLabTests.site(lab, "g\(i + 1)", group: group, allowed: ids, extra: uplinks[i] ?? "")
                return try lab.startGateway(node, site: site)
            }
        }

        /// What `shoal status --json` says under "uplink" (UplinkBoard.State.json).
        struct Uplink: CustomStringConvertible {
            var json: [String: Any] = [:]
            var state: String { json["state"] as? String ?? "?" }
            var server: String { json["server"] as? String ?? "" }
            var push: [String: Any] { json["push"] as? [String: Any] ?? [:] }
            var pull: [String: Any] { json["pull"] as? [String: Any] ?? [:] }
            var published: Int { push["published"] as? Int ?? -1 }
            var alreadyThere: Int { push["alreadyThere"] as? Int ?? -1 }
            var pushLag: Int { push["lag"] as? Int ?? -1 }
            var pullLag: Int { pull["lag"] as? Int ?? -1 }
            var conflicts: Int { json["conflicts"] as? Int ?? -1 }
            var connects: Int { json["connects"] as? Int ?? -1 }
            /// The test collection's stream (the site's `_default._default` has one too).
            var stream: String? { (json["collections"] as? [[String: Any]])?.first { $0["name"] as? String == collection }?["stream"] as? String }
            var description: String {
                (try? JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            }
        }

        static func uplink(_ g: LabGateway) -> Uplink { Uplink(json: g.status()["uplink"] as? [String: Any] ?? [:]) }

        /// The gateway's uplink status and the last lines of its log about the uplink, for a
        /// failure's message.
        static func diagnose(_ g: LabGateway, lines: Int = 30) -> String {
            let text = (try? String(contentsOfFile: g.dataDir + "/shoal.log", encoding: .utf8)) ?? ""
            let all = text.split(separator: "\n", omittingEmptySubsequences: false)
            let log = all.filter { $0.contains("uplink") }.suffix(lines).joined(separator: "\n")
            // A crash's backtrace (Swift's runtime writes it to stderr, which is the log) in full.
            let crash = all.firstIndex { $0.contains(" crashed:") || $0.contains("Crash") }.map { all[$0...].prefix(150).joined(separator: "\n") }
            return "g\(g.node.index) uplink \(uplink(g))\ng\(g.node.index)'s log about the uplink:\n\(log)" + (crash.map { "\nthe crash:\n\($0)" } ?? "")
        }

        /// The uplink's warnings in the gateway's log: how many, and the last few.
        static func uplinkWarnings(_ g: LabGateway, last count: Int = 5) -> String {
            let text = (try? String(contentsOfFile: g.dataDir + "/shoal.log", encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").filter { $0.contains("WARN") && $0.contains("uplink") }
            return "\(lines.count)" + (lines.isEmpty ? "" : ", the last: " + lines.suffix(count).joined(separator: " | "))
        }

        /// Prints each phase as it ends (`UPLINK LAB <test>: <phase> <s>`) and a summary.
        final class Phases {
            let test: String
            let started = Date()
            private var mark = Date()
            private var done: [String] = []
            init(_ test: String) { self.test = test }
            func end(_ phase: String) {
                let s = String(format: "%.1f s", Date().timeIntervalSince(mark))
                done.append("\(phase) \(s)")
                print("UPLINK LAB \(test): \(phase) \(s)")
                mark = Date()
            }
            var total: Double { Date().timeIntervalSince(started) }
            func summary(_ extra: String = "") {
                print("UPLINK LAB \(test): \(String(format: "%.1f", total)) s in all\(extra.isEmpty ? "" : "; " + extra): \(done.joined(separator: ", "))")
            }
        }

        static func canonical(_ body: Any) -> String {
            (try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .fragmentsAllowed])).map { String(decoding: $0, as: UTF8.self) } ?? "?"
        }

        /// A JSON text as `canonical` writes it (keys sorted, no spaces): how bodies are compared.
        static func canonical(text: String) -> String {
            (try? JSONSerialization.jsonObject(with: Data(text.utf8))).map(canonical) ?? "<not JSON: \(text.prefix(40))>"
        }

        /// A document as a gateway holds it: its body (canonical JSON) and its local sequence.
        struct Held: Equatable {
            var body: String
            var sequence: Int
        }

        /// The gateway's live documents by id (nil: it did not answer).
        static func documents(_ g: LabGateway) -> [String: Held]? {
            guard let r = try? g.cli(["doc", "list", collection, "--limit", "10000", "--json"]), r.status == 0,
                  let j = (try? Shoal.json(r)) as? [String: Any], let docs = j["documents"] as? [[String: Any]] else { return nil }
            var out: [String: Held] = [:]
            for d in docs {
                guard let id = d["id"] as? String, let body = d["body"], !(body is NSNull) else { continue }
                out[id] = Held(body: canonical(body), sequence: d["sequence"] as? Int ?? -1)
            }
            return out
        }

        /// A document as the hub holds it: body, Shoal-Version (hex), origin and stream sequence.
        struct OnHub: Equatable {
            var body: String
            var version: String
            var origin: String
            var sequence: Int
        }

        /// tok(x) read back: `_XX` is the byte XX.
        static func untoken(_ t: String) -> String {
            let u = Array(t.utf8)
            var bytes: [UInt8] = []
            var k = 0
            while k < u.count {
                if u[k] == UInt8(ascii: "_"), k + 2 < u.count, let b = UInt8(String(decoding: u[(k + 1)...(k + 2)], as: UTF8.self), radix: 16) {
                    bytes.append(b)
                    k += 3
                } else {
                    bytes.append(u[k])
                    k += 1
                }
            }
            return String(decoding: bytes, as: UTF8.self)
        }

        /// The hub's documents by id, from hub.py dump (nil: the dump failed).
        static func hubDocuments(_ hub: NATSServer, stream: String) -> [String: OnHub]? {
            guard let dump = try? hub.hub(["dump", stream], timeout: 300), dump.ok else { return nil }
            return hubDocuments(dump)
        }

        static func hubDocuments(_ dump: NATSHubResult) -> [String: OnHub] {
            var out: [String: OnHub] = [:]
            for line in dump.lines {
                guard let subject = line["subject"] as? String, let last = subject.split(separator: ".").last else { continue }
                let headers = line["headers"] as? [String: Any] ?? [:]
                let text = line["payload"] as? String ?? ""
                let body = canonical(text: text)
                out[untoken(String(last))] = OnHub(body: body, version: (headers["Shoal-Version"] as? String ?? "").lowercased(),
                                                   origin: headers["Shoal-Origin"] as? String ?? "", sequence: line["seq"] as? Int ?? -1)
            }
            return out
        }

        /// `ID<TAB>JSON` lines for `shoal doc import`.
        static func importLines(_ docs: [(String, String)]) -> String {
            docs.map { "\($0.0)\t\($0.1)" }.joined(separator: "\n") + "\n"
        }

        static func importDocuments(_ g: LabGateway, _ docs: [(String, String)]) -> Bool {
            guard let r = try? g.cli(["doc", "import", collection, "-"], stdin: importLines(docs)), r.status == 0 else { return false }
            return true
        }

        /// Everything the gateways and the hub hold at one moment.
        struct Snapshot: Equatable {
            var gateways: [[String: Held]?]
            var hub: [String: OnHub]?
            var lags: [Int]

            func bodies(_ i: Int) -> [String: String]? { gateways[i]?.mapValues(\.body) }
            var hubBodies: [String: String]? { hub?.mapValues(\.body) }

            /// Every gateway and the hub hold the same bodies (`expected`, if given), and the
            /// uplinks have nothing left to push or pull.
            func converged(expected: [String: String]?) -> Bool {
                guard let first = expected ?? bodies(0) else { return false }
                return gateways.indices.allSatisfy { bodies($0) == first } && hubBodies == first && lags.allSatisfy { $0 == 0 }
            }

            /// Who lacks what, for a failure's message.
            func differences(expected: [String: String]?) -> String {
                guard let want = expected ?? bodies(0) else { return "g1 did not answer" }
                var lines: [String] = []
                for (i, g) in gateways.enumerated() {
                    guard let b = g?.mapValues(\.body) else { lines.append("g\(i + 1): no answer"); continue }
                    let missing = want.keys.filter { b[$0] == nil }.sorted(), extra = b.keys.filter { want[$0] == nil }.sorted()
                    let differ = want.keys.filter { b[$0] != nil && b[$0] != want[$0] }.sorted()
                    lines.append("g\(i + 1): \(b.count) documents, \(missing.count) missing \(missing.prefix(5)), \(extra.count) extra \(extra.prefix(5)), \(differ.count) differ \(differ.prefix(3).map { "\($0): \(b[$0]!) vs \(want[$0]!)" })")
                }
                if let h = hubBodies {
                    let missing = want.keys.filter { h[$0] == nil }.sorted(), differ = want.keys.filter { h[$0] != nil && h[$0] != want[$0] }.sorted()
                    lines.append("hub: \(h.count) documents, \(missing.count) missing \(missing.prefix(5)), \(differ.count) differ \(differ.prefix(3))")
                } else { lines.append("hub: the dump failed") }
                lines.append("uplink lags (push + pull): \(lags)")
                return lines.joined(separator: "\n")
            }
        }

        static func snapshot(_ gateways: [LabGateway], uplinks: [LabGateway], hub: NATSServer, stream: String) -> Snapshot {
            Snapshot(gateways: gateways.map(documents), hub: hubDocuments(hub, stream: stream),
                     lags: uplinks.map { let u = uplink($0); return u.state == "connected" ? u.pushLag + u.pullLag : -1 })
        }

        /// Waits until every gateway and the hub hold the same documents (`expected`, if given)
        /// and the uplinks are connected with nothing to push or pull; with `quiet`, until two
        /// such snapshots a second apart are the same, sequences and hub versions included (no
        /// change still on its way). Returns the last snapshot and whether it converged.
        static func converge(_ gateways: [LabGateway], uplinks: [LabGateway], hub: NATSServer, stream: String,
                             expected: [String: String]? = nil, quiet: Bool = false, within seconds: Double) -> (ok: Bool, last: Snapshot) {
            var last = snapshot(gateways, uplinks: uplinks, hub: hub, stream: stream)
            var previous: Snapshot?
            let ok = eventuallyBlocking(within: seconds, every: 1) {
                previous = last
                last = snapshot(gateways, uplinks: uplinks, hub: hub, stream: stream)
                return last.converged(expected: expected) && (!quiet || previous == last)
            }
            return (ok, last)
        }

        /// Waits for the uplink gateways to be connected with a stream known, and each gateway
        /// to be linked to at least one mesh peer when its site has several.
        static func waitForLab(_ gateways: [LabGateway], uplinks: [LabGateway], lab: NetLab) -> Bool {
            let meshed = eventuallyBlocking(within: 60, every: 0.25) {
                gateways.allSatisfy { g in lab.nodes(atSite: g.node.site).count < 2 || g.counter("connectedPeers") >= 1 }
            }
            let connected = eventuallyBlocking(within: 60, every: 0.25) {
                uplinks.allSatisfy { let u = uplink($0); return u.state == "connected" && u.stream != nil }
            }
            if !meshed { Issue.record("the site meshes did not form: \(gateways.map { "g\($0.node.index) \($0.counter("connectedPeers"))" })") }
            if !connected { Issue.record("the uplinks did not connect: \(uplinks.map { diagnose($0) }.joined(separator: "\n"))") }
            return meshed && connected
        }

        /// The running cluster nodes with a client connection from `address` (their `/connz`).
        static func nodesServing(_ address: String, in cluster: NATSCluster) -> [Int] {
            cluster.servers.indices.filter { i in
                guard cluster.servers[i].isRunning, let conns = cluster.servers[i].monitor("connz")?["connections"] as? [[String: Any]] else { return false }
                return conns.contains { $0["ip"] as? String == address }
            }
        }

        /// Two sites of three gateways (g1–g3, g4–g6) and a hub on both sites' bridges; g1 and g4
        /// have the uplink, to the hub's address on their own site's leg.
        static func twoSites() throws -> (lab: NetLab, hubHost: NetLab.Host, hub: NATSServer, gateways: [LabGateway]) {
            let lab = try NetLab(sites: [3, 3])
            do {
                let (hubHost, hub) = try lab.startHub()
                let gateways = try startGateways(lab, uplinks: [0: uplinkSection([hub.url(at: hubHost.addresses[0]!)]),
                                                                3: uplinkSection([hub.url(at: hubHost.addresses[1]!)])])
                return (lab, hubHost, hub, gateways)
            } catch {
                lab.teardown()
                throw error
            }
        }

        /// The documents of a stopped gateway's store: body and version (hex) by id.
        static func storedVersions(_ g: LabGateway) throws -> [String: (body: String, version: String)] {
            let store = try DocumentStore.open(StoreOptions(path: g.dataDir + "/shoal.db"), logger: Logger(sink: MemoryLogSink(), level: .none))
            defer { store.close() }
            var out: [String: (body: String, version: String)] = [:]
            for d in try store.list(try CollectionName(parsing: collection), limit: 10_000, includeDeleted: true) {
                let body = d.body.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) }.map(canonical) ?? "<deleted>"
                out[d.id] = (body, d.version.map { String(format: "%02x", $0) }.joined())
            }
            return out
        }

        /// Expects the stream to hold exactly `documents` (id, body JSON), each once, published by
        /// `origin`, with no version published twice (the stream's last sequence is its message
        /// count). Returns the message count and last sequence.
        static func expectStream(_ stream: String, on cluster: NATSCluster, holds documents: [(String, String)], origin: String) throws -> (Int, Int) {
            let total = documents.count
            let info = try cluster.hub(["info", stream])
            let messages = info.lines.last?["messages"] as? Int ?? -1, lastSeq = info.lines.last?["lastSeq"] as? Int ?? -1
            #expect(info.ok && messages == total, "\(info)")
            #expect(lastSeq == total, "stream sequence \(lastSeq) for \(messages) messages: \(lastSeq - messages) publishes replaced a message already there (a document published twice)")
            let dump = try cluster.hub(["dump", stream], timeout: 300)
            let onHub = hubDocuments(dump)
            #expect(dump.ok && dump.lines.count == total && onHub.count == total, "dump: \(dump.lines.count) lines, \(onHub.count) documents: \(dump.output.suffix(500))")
            let wrong = documents.filter { onHub[$0.0]?.body != canonical(text: $0.1) }.map(\.0)
            let wrongCount = wrong.count
            #expect(wrongCount == 0, "\(wrongCount) documents missing or with another body on the hub, e.g. \(wrong.prefix(5))")
            #expect(Set(onHub.values.map(\.origin)) == [origin], "origins: \(Set(onHub.values.map(\.origin)))")
            return (messages, lastSeq)
        }

        // MARK: - The tests

        @Test("an R3 cluster loses the node a gateway is uploading 10,000 documents to: the gateway moves to another node, and the stream ends with each document once, none lost or doubled")
        func clusterNodeKilledDuringUpload() throws {
            guard NATSFixtureTests.requireNATSPy() else { return }
            let phases = Phases("cluster node killed during upload")
            let lab = try NetLab(sites: [1])
            defer { lab.teardown() }
            let cluster = try NATSCluster(lab: lab)
            defer { cluster.remove() }
            phases.end("lab and R3 cluster up")
            let ids = try NetLabTests.identities(lab)
            let site = try NetLabTests.site(lab, "g1", group: Self.group, allowed: ids, extra: Self.uplinkSection(cluster.urls, replicas: 3))
            let g = try lab.startGateway(lab.nodes[0], site: site)
            var up = Uplink()
            guard eventuallyBlocking(within: 60, every: 0.2, { up = Self.uplink(g); return up.state == "connected" && up.stream != nil }),
                  let stream = up.stream else {
                Issue.record("the uplink did not connect: \(Self.diagnose(g)) \(cluster.diagnostics())")
                return
            }
            phases.end("gateway up, uplink connected to \(up.server)")

            // 10,000 small documents, 1,000 to an import; the node goes while the first 3,000 upload.
            let total = 10_000, chunk = 1_000
            func body(_ n: Int) -> String { "{\"n\":\(n),\"t\":21.5}" }
            func id(_ n: Int) -> String { String(format: "doc-%05d", n) }
            func importChunk(_ c: Int) -> Bool { Self.importDocuments(g, (c * chunk..<(c + 1) * chunk).map { (id($0), body($0)) }) }
            let uploadStarted = Date()
            for c in 0..<3 { #expect(importChunk(c), "import of documents \(c * chunk)…") }
            guard eventuallyBlocking(within: 120, every: 0.05, { up = Self.uplink(g); return up.published >= 1_000 }) else {
                Issue.record("the upload did not start: \(Self.diagnose(g))")
                return
            }
            let publishedAtKill = up.published, server = up.server
            guard let victim = cluster.hosts.firstIndex(where: { server.contains("//\($0.addresses[0]!):") }) else {
                Issue.record("the uplink's server \(server) is none of the cluster's \(cluster.urls)")
                return
            }
            cluster.kill(victim)
            let killedAt = Date()
            #expect(publishedAtKill >= 1_000 && publishedAtKill <= 9_000, "published when the node was killed: \(publishedAtKill)")
            phases.end("\(publishedAtKill) published, then n\(victim + 1) (\(server), the gateway's server) SIGKILLed")
            for c in 3..<(total / chunk) { #expect(importChunk(c), "import of documents \(c * chunk)…") }
            phases.end("the other 7,000 documents written")
            // Where the gateway is connected, by the live nodes' own connection lists.
            var holders: [Int] = []
            let moved = eventuallyBlocking(within: 60, every: 0.2) {
                holders = Self.nodesServing(lab.nodes[0].address, in: cluster)
                return !holders.isEmpty && !holders.contains(victim)
            }
            // The status follows libnats's reconnect within moments (its callback thread).
            _ = eventuallyBlocking(within: 10, every: 0.1) { up = Self.uplink(g); return up.server != server }
            #expect(moved, "the gateway connected to a live node: the nodes' connz list it on \(holders.map { "n\($0 + 1)" }) \(Self.diagnose(g))")
            phases.end("gateway on \(holders.map { "n\($0 + 1)" }) by the nodes' connz (\(String(format: "%.1f", Date().timeIntervalSince(killedAt))) s after the kill; \(up.published) published; its status says server \(up.server), state \(up.state), \(up.connects) connects)")
            #expect(up.server != server, "`shoal status` names the server the gateway is on: it says \(up.server), the node killed, while the nodes list the gateway on \(holders.map { cluster.urls[$0] }) \(Self.diagnose(g))")
            _ = eventuallyBlocking(within: 120, every: 0.1) { up = Self.uplink(g); return up.published >= 7_000 || up.pushLag == 0 }
            try cluster.restart(victim)
            #expect(cluster.waitForJetStream(within: 60), "\(cluster.diagnostics())")
            phases.end("n\(victim + 1) restarted at \(up.published) published")
            let drained = eventuallyBlocking(within: 180, every: 0.1) {
                up = Self.uplink(g)
                return up.state == "connected" && up.pushLag == 0 && up.published + up.alreadyThere >= total
            }
            #expect(drained, "the push lag reached 0: \(Self.diagnose(g))")
            let uploadSeconds = Date().timeIntervalSince(uploadStarted)
            phases.end("push lag 0 (\(up.published) published, \(up.alreadyThere) already there)")
            let pulled = eventuallyBlocking(within: 60, every: 0.2) { up = Self.uplink(g); return up.pullLag == 0 && up.pull["received"] as? Int ?? 0 >= total }
            #expect(pulled, "the gateway read its own 10,000 back from the stream: \(Self.diagnose(g))")

            let (messages, lastSeq) = try Self.expectStream(stream, on: cluster, holds: (0..<total).map { (id($0), body($0)) }, origin: ids[0])
            // The restarted node's own copy catches up.
            let caughtUp = eventuallyBlocking(within: 60, every: 0.5) {
                (try? cluster.servers[victim].hub(["info", stream]))?.lines.last?["messages"] as? Int == total
            }
            #expect(caughtUp, "n\(victim + 1) has the stream's \(total) messages: \(cluster.servers[victim].diagnostics(1500))")
            phases.end("stream checked (\(messages) messages, last sequence \(lastSeq), dump by id)")
            print("UPLINK LAB cluster node killed during upload: g1's uplink warnings: \(Self.uplinkWarnings(g))")
            phases.summary(String(format: "10,000 documents uploaded in %.1f s (%.0f documents/s) across the node's loss", uploadSeconds, Double(total) / uploadSeconds))
        }

        @Test("two sites of three gateways, one uplink each: writes at either site reach all six through the hub; concurrent edits of the same 50 documents at both sites end with the same body and version on all six gateways and on the hub")
        func twoSitesConvergeThroughTheHub() throws {
            guard NATSFixtureTests.requireNATSPy() else { return }
            let phases = Phases("two sites converge through the hub")
            let (lab, hubHost, hub, gateways) = try Self.twoSites()
            defer { lab.teardown() }
            defer { hub.remove() }
            let uplinks = [gateways[0], gateways[3]]
            guard Self.waitForLab(gateways, uplinks: uplinks, lab: lab), let stream = Self.uplink(gateways[0]).stream else { return }
            phases.end("lab, hub and six gateways up, site meshes formed, uplinks connected")

            // Writes at both sites, on gateways without an uplink: through the mesh, the hub, the other mesh.
            var expected: [String: String] = [:]
            let fromA = (0..<20).map { ("a-\($0)", "{\"by\":\"A\",\"n\":\($0)}") }, fromB = (0..<20).map { ("b-\($0)", "{\"by\":\"B\",\"n\":\($0)}") }
            #expect(Self.importDocuments(gateways[1], fromA) && Self.importDocuments(gateways[5], fromB))
            for (id, body) in fromA + fromB { expected[id] = Self.canonical(text: body) }
            var result = Self.converge(gateways, uplinks: uplinks, hub: hub, stream: stream, expected: expected, within: 120)
            #expect(result.ok, "writes at both sites reach all six: \(result.last.differences(expected: expected))\n\(uplinks.map { Self.diagnose($0) }.joined(separator: "\n"))")
            phases.end("20 documents from each site on all six and the hub")

            // The 50 shared documents, written at site A and seen everywhere; then both sites cut
            // off the hub, each edits all 50, and the hub comes back.
            let shared = (0..<50).map { String(format: "shared-%02d", $0) }
            #expect(Self.importDocuments(gateways[2], shared.map { ($0, "{\"v\":0}") }))
            for id in shared { expected[id] = "{\"v\":0}" }
            result = Self.converge(gateways, uplinks: uplinks, hub: hub, stream: stream, expected: expected, within: 120)
            #expect(result.ok, "the shared documents everywhere: \(result.last.differences(expected: expected))")
            phases.end("50 shared documents everywhere")
            try lab.link(hubHost, site: 0, up: false)
            try lab.link(hubHost, site: 1, up: false)
            #expect(Self.importDocuments(gateways[1], shared.map { ($0, "{\"site\":\"A\",\"v\":1}") }))
            #expect(Self.importDocuments(gateways[4], shared.map { ($0, "{\"site\":\"B\",\"v\":1}") }))
            let editedA = "{\"site\":\"A\",\"v\":1}", editedB = "{\"site\":\"B\",\"v\":1}"
            let withinSites = eventuallyBlocking(within: 60, every: 0.5) {
                gateways.allSatisfy { g in
                    guard let docs = Self.documents(g) else { return false }
                    let want = g.node.site == 0 ? editedA : editedB
                    return shared.allSatisfy { docs[$0]?.body == want }
                }
            }
            #expect(withinSites, "each site's edits reached its three gateways while cut off the hub")
            phases.end("hub cut off; each site edited the 50 (its own edits on its three gateways)")
            try lab.link(hubHost, site: 0, up: true)
            try lab.link(hubHost, site: 1, up: true)
            result = Self.converge(gateways, uplinks: uplinks, hub: hub, stream: stream, quiet: true, within: 180)
            #expect(result.ok, "all six and the hub agree after the edits: \(result.last.differences(expected: nil))\n\(uplinks.map { Self.diagnose($0) }.joined(separator: "\n"))")
            let bodies = result.last.bodies(0) ?? [:]
            let winners = shared.map { bodies[$0] ?? "?" }
            let wonByA = winners.filter { $0 == editedA }.count, wonByB = winners.filter { $0 == editedB }.count
            #expect(wonByA + wonByB == shared.count, "each shared document holds one site's edit: \(winners.prefix(5))")
            #expect(expected.keys.filter { !shared.contains($0) }.allSatisfy { bodies[$0] == expected[$0] }, "the other documents are untouched")
            let conflicts = uplinks.map { Self.uplink($0).conflicts }
            phases.end("healed: all six and the hub agree (\(wonByA) edits of site A kept, \(wonByB) of site B; uplink conflicts \(conflicts))")

            // The versions: every gateway's store and the hub hold the same version of each document.
            let onHub = result.last.hub ?? [:]
            for g in gateways { g.stop() }
            for g in gateways {
                let stored = try Self.storedVersions(g)
                let differ = onHub.keys.sorted().filter { stored[$0]?.version != onHub[$0]!.version || stored[$0]?.body != onHub[$0]!.body }
                #expect(differ.isEmpty && stored.count == onHub.count,
                        "g\(g.node.index): \(differ.count) documents differ from the hub's body or version, e.g. \(differ.prefix(3).map { "\($0): \(stored[$0]?.version ?? "none") \(stored[$0]?.body ?? "") vs hub \(onHub[$0]!.version) \(onHub[$0]!.body)" }); \(stored.count) stored, \(onHub.count) on the hub")
            }
            phases.end("versions compared: each document has one version on all six stores and the hub")
            phases.summary()
        }

        /// How long the hub is cut off: SHOAL_UPLINK_OUTAGE_SECONDS, default 60 (`make
        /// uplink-soak` runs 300).
        static var outageSeconds: Double { Double(ProcessInfo.processInfo.environment["SHOAL_UPLINK_OUTAGE_SECONDS"] ?? "") ?? 60 }

        @Test("the hub cut off from both sites while both keep writing: each site replicates within itself, the uplinks say they are not connected and the push lag grows; healed, everything converges everywhere, nothing lost")
        func hubOutageWhileBothSitesWrite() throws {
            guard NATSFixtureTests.requireNATSPy() else { return }
            let outage = Self.outageSeconds
            let phases = Phases("hub outage (\(Int(outage)) s) while both sites write")
            let (lab, hubHost, hub, gateways) = try Self.twoSites()
            defer { lab.teardown() }
            defer { hub.remove() }
            let uplinks = [gateways[0], gateways[3]]
            guard Self.waitForLab(gateways, uplinks: uplinks, lab: lab), let stream = Self.uplink(gateways[0]).stream else { return }
            var expected: [String: String] = [:]
            for (i, g) in gateways.enumerated() {
                let id = "before-g\(i + 1)", body = "{\"g\":\(i + 1)}"
                #expect(g.put(id, body))
                expected[id] = Self.canonical(text: body)
            }
            var result = Self.converge(gateways, uplinks: uplinks, hub: hub, stream: stream, expected: expected, within: 120)
            #expect(result.ok, "before the outage: \(result.last.differences(expected: expected))")
            phases.end("lab up, one document from each gateway everywhere")

            try lab.link(hubHost, site: 0, up: false)
            try lab.link(hubHost, site: 1, up: false)
            let cut = Date()
            var written: [[String: String]] = [[:], [:]]  // acknowledged writes at site A, site B
            var refused = 0, n = 0
            var states: [Set<String>] = [[], []]
            var lags: [[(at: Double, lag: Int, state: String)]] = [[], []]
            var errors: [Set<String>] = [[], []]
            var nextSample = Date()
            while Date().timeIntervalSince(cut) < outage {
                for s in 0..<2 {
                    // Each site's three gateways take turns.
                    let g = gateways[s * 3 + n % 3], id = "\(s == 0 ? "a" : "b")-\(n)", body = "{\"n\":\(n),\"site\":\(s)}"
                    if g.put(id, body) { written[s][id] = body } else { refused += 1 }
                }
                n += 1
                if Date() >= nextSample {
                    for (s, g) in uplinks.enumerated() {
                        let u = Self.uplink(g)
                        states[s].insert(u.state)
                        lags[s].append((Date().timeIntervalSince(cut), u.pushLag, u.state))
                        if let e = u.json["lastError"] as? String { errors[s].insert(String(e.prefix(160))) }
                    }
                    nextSample = Date().addingTimeInterval(2)
                }
                Thread.sleep(forTimeInterval: 0.2)
            }
            for (s, g) in uplinks.enumerated() {
                let u = Self.uplink(g)
                states[s].insert(u.state)
                lags[s].append((Date().timeIntervalSince(cut), u.pushLag, u.state))
            }
            phases.end("hub cut off, \(written[0].count) + \(written[1].count) documents written at sites A and B (\(refused) refused)")
            // Within each site, the outage's writes replicate; across, nothing can.
            let local = eventuallyBlocking(within: 60, every: 1) {
                gateways.allSatisfy { g in
                    guard let docs = Self.documents(g) else { return false }
                    let mine = written[g.node.site], theirs = written[1 - g.node.site]
                    return mine.keys.allSatisfy { docs[$0] != nil } && !theirs.keys.contains { docs[$0] != nil }
                }
            }
            #expect(local, "each site holds its own outage writes on its three gateways and none of the other site's: \(gateways.map { "g\($0.node.index) \(Self.documents($0)?.count ?? -1)" })")
            for s in 0..<2 {
                let site = s == 0 ? "A" : "B"
                let samples = lags[s].map { "\(Int($0.at)) s: \($0.lag) \($0.state)" }.joined(separator: ", ")
                print("UPLINK LAB hub outage: site \(site)'s uplink states \(states[s].sorted()), push lag and state \(samples); errors \(errors[s].sorted())")
                // Writes go on all the time (~3 a second at each site): 10 s into the outage,
                // changes wait, and the status must say so.
                let stale = lags[s].filter { $0.at >= 10 && $0.lag == 0 }.map { Int($0.at) }
                #expect(stale.isEmpty, "site \(site)'s uplink status says push lag 0 at \(stale) s into the outage while its site's writes wait for the hub: \(samples)")
                #expect(states[s].contains { $0 != "connected" }, "site \(site)'s uplink never left \"connected\" during a \(Int(outage)) s outage: \(Self.diagnose(uplinks[s]))")
                // The lag grows: in the outage's last quarter it is above what it was in its first.
                let early = lags[s].filter { $0.at <= outage / 4 }.map(\.lag).max() ?? 0
                let late = lags[s].filter { $0.at >= outage * 3 / 4 }.map(\.lag).max() ?? 0
                #expect(late > early && late > 0, "site \(site)'s push lag grows during the outage: \(samples)\n\(Self.diagnose(uplinks[s]))")
            }

            try lab.link(hubHost, site: 0, up: true)
            try lab.link(hubHost, site: 1, up: true)
            let healed = Date()
            for s in 0..<2 { expected.merge(written[s]) { $1 } }
            expected = expected.mapValues { Self.canonical(text: $0) }
            result = Self.converge(gateways, uplinks: uplinks, hub: hub, stream: stream, expected: expected, within: 240)
            #expect(result.ok, "after the outage: \(result.last.differences(expected: expected))\n\(uplinks.map { Self.diagnose($0) }.joined(separator: "\n"))")
            phases.end("healed: \(expected.count) documents on all six and the hub")
            phases.summary(String(format: "converged %.1f s after the hub came back", Date().timeIntervalSince(healed)))
        }

        @Test("site A's uplink gateway SIGKILLed four times while site A writes and site B's documents arrive through the hub: after the last restart everything converges, and the hub holds each document once")
        func uplinkGatewayKilledRepeatedly() throws {
            guard NATSFixtureTests.requireNATSPy() else { return }
            let phases = Phases("uplink gateway killed repeatedly")
            let (lab, _, hub, gateways) = try Self.twoSites()
            defer { lab.teardown() }
            defer { hub.remove() }
            let uplinks = [gateways[0], gateways[3]]
            guard Self.waitForLab(gateways, uplinks: uplinks, lab: lab), let stream = Self.uplink(gateways[0]).stream else { return }
            phases.end("lab up")

            // Writes at g2/g3 (site A) and g5/g6 (site B) every 0.1 s; g1 killed at 3, 8, 13 and
            // 18 s, each time restarted 1–2 s later; the writes stop at 22 s.
            let g1 = gateways[0]
            var written: [String: String] = [:]
            var refused = 0, n = 0, kills = 0
            let kill = [3.0, 8, 13, 18], restartAfter = [1.0, 2, 1.5, 1]
            var restartAt: Date?
            let start = Date()
            while Date().timeIntervalSince(start) < 22 {
                let t = Date().timeIntervalSince(start)
                if kills < kill.count, t >= kill[kills], restartAt == nil {
                    g1.kill9()
                    restartAt = Date().addingTimeInterval(restartAfter[kills])
                    kills += 1
                }
                if let at = restartAt, Date() >= at {
                    try g1.start()
                    restartAt = nil
                }
                for (g, prefix) in [(gateways[1 + n % 2], "a"), (gateways[4 + n % 2], "b")] {
                    let id = "\(prefix)-\(n)", body = "{\"n\":\(n)}"
                    if g.put(id, body) { written[id] = body } else { refused += 1 }
                }
                n += 1
                Thread.sleep(forTimeInterval: 0.1)
            }
            if restartAt != nil { try g1.start() }
            phases.end("\(kills) SIGKILLs of g1 while \(written.count) documents were written at both sites (\(refused) refused)")

            let expected = written.mapValues { Self.canonical(text: $0) }
            let result = Self.converge(gateways, uplinks: uplinks, hub: hub, stream: stream, expected: expected, within: 180)
            #expect(result.ok, "after the last restart: \(result.last.differences(expected: expected))\n\(uplinks.map { Self.diagnose($0) }.joined(separator: "\n"))")
            phases.end("converged: \(expected.count) documents on all six and the hub")
            let info = try hub.hub(["info", stream])
            let messages = info.lines.last?["messages"] as? Int ?? -1, lastSeq = info.lines.last?["lastSeq"] as? Int ?? -1
            #expect(messages == expected.count, "the stream holds \(messages) messages for \(expected.count) documents: \(info)")
            #expect(lastSeq == messages, "stream sequence \(lastSeq) for \(messages) messages: \(lastSeq - messages) versions published twice")
            let u = Self.uplink(g1)
            phases.summary("stream: \(messages) messages, last sequence \(lastSeq); g1's uplink since its last start: \(u.published) published, \(u.alreadyThere) already there, \(u.pull["applied"] ?? "?") applied")
        }
    }
}
