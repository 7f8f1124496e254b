import Foundation
import ShoalTesting
import Testing

/// curl and promtool (Debian's curl and prometheus packages) are installed.
private let hasScrapeTools = ["/usr/bin/curl", "/usr/bin/promtool"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }

extension ProcessSuites {
    /// `GET /metrics` of real gateways, scraped with curl over TCP and checked by Prometheus's own
    /// `promtool check metrics`: two `shoal run` processes that replicate over loopback.
    @Suite("Metrics over HTTP", .serialized, .enabled(if: hasScrapeTools, "needs curl and promtool (Debian's curl and prometheus packages)"))
    struct MetricsProcessTests {
        struct Scrape {
            var status: Int
            var contentType: String
            var body: String

            /// The value of one series, written as it appears (`name{labels}`), or nil.
            func value(_ series: String) -> Double? {
                for line in body.split(separator: "\n") where line.hasPrefix(series + " ") {
                    return Double(line.dropFirst(series.count + 1))
                }
                return nil
            }

            /// The series of one metric (lines starting with the name followed by `{` or a space).
            func series(_ name: String) -> [String] {
                body.split(separator: "\n").map(String.init).filter { $0.hasPrefix(name + "{") || $0.hasPrefix(name + " ") }
            }
        }

        /// `curl http://<address>/metrics`: status, Content-Type and body.
        static func scrape(_ address: String) throws -> Scrape {
            let r = try Shoal.run(["-sS", "-o", "-", "-w", "\n%{http_code} %{content_type}", "http://\(address)/metrics"],
                                  timeout: 20, executable: "/usr/bin/curl")
            guard r.status == 0, let cut = r.stdout.lastIndex(of: "\n") else { return Scrape(status: 0, contentType: "", body: r.stderr) }
            let tail = r.stdout[r.stdout.index(after: cut)...]
            let code = Int(tail.prefix { $0 != " " }) ?? 0
            return Scrape(status: code, contentType: String(tail.drop { $0 != " " }.dropFirst()), body: String(r.stdout[..<cut]))
        }

        /// The gateway's TCP address for HTTP, as `shoal status --json` lists it once bound.
        static func address(_ g: RunningGateway) throws -> String {
            var shown: [String] = []
            _ = eventuallyBlocking(within: 20) {
                shown = (try? HTTPProcessTests.addresses(g)) ?? []
                return shown.contains { $0.hasPrefix("127.0.0.1:") && !$0.hasSuffix(":0") }
            }
            return try #require(shown.first { $0.hasPrefix("127.0.0.1:") && !$0.hasSuffix(":0") }, "status http: \(shown)")
        }

        /// `promtool check metrics` on a scrape: its exit status and what it reported.
        static func promtool(_ text: String) throws -> Shoal.Result {
            try Shoal.run(["check", "metrics"], stdin: text, timeout: 30, executable: "/usr/bin/promtool")
        }

        @Test("two replicating gateways serve /metrics that promtool accepts; a write on one moves the other's applied documents and per-peer series")
        func scrapedAndChecked() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let aDir = base.path + "/a", bDir = base.path + "/b"
            let aID = try ReplicationProcessTests.peerID(aDir), bID = try ReplicationProcessTests.peerID(bDir)
            let port = 20_000 + Int((getpid() + 31) % 19_000)
            // The API on a port the kernel picks; status says which.
            func site(_ name: String, allow: String, replication: String) throws -> String {
                let path = try ReplicationProcessTests.writeSite(in: base.path, name, group: "test.metrics", allow: [allow], replication: [replication])
                let text = try String(contentsOfFile: path, encoding: .utf8) + "http:\n  listen: [\"127.0.0.1:0\"]\n"
                try text.write(toFile: path, atomically: true, encoding: .utf8)
                return path
            }
            let b = try RunningGateway(dataDir: bDir, extraArgs: ["--config", try site("b", allow: aID, replication: "listen: 127.0.0.1:\(port)")])
            let a = try RunningGateway(dataDir: aDir, extraArgs: ["--config", try site("a", allow: bID, replication: "peers: [127.0.0.1:\(port)]")])
            defer {
                _ = a.stop()
                _ = b.stop()
            }
            let aHTTP = try Self.address(a), bHTTP = try Self.address(b)
            let link = "shoal_peer_link_info{peer=\"\(bID)\",transport=\"wifi\",direction=\"outgoing\"}"
            var scrape = Scrape(status: 0, contentType: "", body: "")
            #expect(eventuallyBlocking(within: 30) {
                scrape = (try? Self.scrape(aHTTP)) ?? scrape
                return scrape.value(link) == 1
            }, "a never showed its link to b: \(scrape.status) \(scrape.body.prefix(3000))")
            #expect(scrape.status == 200)
            #expect(scrape.contentType == "text/plain; version=0.0.4; charset=utf-8")
            let check = try Self.promtool(scrape.body)
            #expect(check.status == 0 && check.stdout.isEmpty && check.stderr.isEmpty, "promtool: \(check.stdout) \(check.stderr)")

            // A write on b reaches a: its applied documents and the collection's count move.
            let applied = scrape.value("shoal_documents_applied_total") ?? -1
            let docs = scrape.value("shoal_collection_documents{collection=\"sensors.readings\"}") ?? -1
            #expect(applied >= 0 && docs >= 0, "\(scrape.body.prefix(3000))")
            #expect(try b.cli(["doc", "put", "sensors.readings", "m1", #"{"celsius":21.5}"#]).status == 0)
            #expect(eventuallyBlocking(within: 30) {
                scrape = (try? Self.scrape(aHTTP)) ?? scrape
                return (scrape.value("shoal_documents_applied_total") ?? 0) >= applied + 1
                    && (scrape.value("shoal_collection_documents{collection=\"sensors.readings\"}") ?? 0) == docs + 1
            }, "a's metrics did not move: \(scrape.series("shoal_documents_applied_total")) \(scrape.series("shoal_collection_documents"))")
            #expect((scrape.value("shoal_messages_received_total") ?? 0) > 0)
            #expect((scrape.value("shoal_received_bytes_total") ?? 0) > 0)
            #expect(scrape.value("shoal_connected_peers") == 1)
            #expect(scrape.value("shoal_peer_replication_lag_documents{peer=\"\(bID)\"}") != nil, "\(scrape.series("shoal_peer_replication_lag_documents"))")
            let idle = try #require(scrape.value("shoal_peer_idle_seconds{peer=\"\(bID)\"}"), "\(scrape.series("shoal_peer_idle_seconds"))")
            #expect(idle >= 0 && idle < 30)
            #expect(scrape.value("shoal_gateway_state{state=\"running\"}") == 1)
            #expect(scrape.value("shoal_build_info{version=\"0.1.0\",board=\"sim\",group=\"test.metrics\"}") == 1, "\(scrape.series("shoal_build_info"))")
            #expect(scrape.value("shoal_supervision_restarts_total{child=\"root/store\"}") == 0, "\(scrape.series("shoal_supervision_restarts_total"))")
            #expect(scrape.series("shoal_led_state").count == 1)
            #expect((scrape.value("shoal_store_size_bytes") ?? 0) > 0)
            #expect((scrape.value("process_resident_memory_bytes") ?? 0) > 1_000_000)

            // b's side: the same link seen incoming, and the document sent (counted once a acknowledged it).
            var bScrape = Scrape(status: 0, contentType: "", body: "")
            #expect(eventuallyBlocking(within: 30) {
                bScrape = (try? Self.scrape(bHTTP)) ?? bScrape
                return (bScrape.value("shoal_documents_sent_total") ?? 0) >= 1
            }, "b's documents sent: \(bScrape.series("shoal_documents_sent_total"))")
            #expect(bScrape.value("shoal_peer_link_info{peer=\"\(aID)\",transport=\"wifi\",direction=\"incoming\"}") == 1, "\(bScrape.series("shoal_peer_link_info"))")
            let bCheck = try Self.promtool(bScrape.body)
            #expect(bCheck.status == 0 && bCheck.stdout.isEmpty && bCheck.stderr.isEmpty, "promtool on b: \(bCheck.stdout) \(bCheck.stderr)")
        }
    }
}
