import Foundation
import ShoalCore
import ShoalStore
import ShoalTesting
import Testing

extension ProcessSuites {
    /// What a new user hit with the CLI in the field (issue 19): each test fails on the binary
    /// before its fix.
    @Suite("Field use of the CLI", .serialized)
    struct FieldUseTests {
        @Test("a second shoal run on a live data directory exits 7 at once, naming the directory; the first keeps serving")
        func dataDirectoryLocked() throws {
            let gw = try RunningGateway()
            let started = Date()
            // Its own socket, so only the data directory is shared.
            let second = try Shoal.run(["run", "--board", "sim", "--data-dir", gw.dir.path, "--socket", gw.dir.path + "/other.sock"], timeout: 30)
            let took = Date().timeIntervalSince(started)
            #expect(second.status == 7, "\(second.stderr)")
            #expect(second.stderr.contains("data directory \(gw.dir.path) is in use by another shoal run (pid \(gw.process.processIdentifier))"), "\(second.stderr)")
            #expect(took < 5, "took \(took) s")
            #expect(!FileManager.default.fileExists(atPath: gw.dir.path + "/other.sock"))
            #expect(try gw.cli(["status"]).status == 0)
            #expect(gw.stop().status == 0)
        }

        @Test("a gateway killed with SIGKILL leaves no lock behind: the next run on its data directory starts")
        func lockDiesWithTheProcess() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let dir = base.path + "/data"
            let first = Process()
            first.executableURL = URL(fileURLWithPath: Shoal.binary)
            first.arguments = ["run", "--board", "sim", "--data-dir", dir]
            first.standardOutput = FileHandle.nullDevice
            first.standardError = FileHandle.nullDevice
            try first.run()
            #expect(eventuallyBlocking(within: 30) { (try? Shoal.run(["status", "--socket", dir + "/control.sock"]).status) == 0 })
            kill(first.processIdentifier, SIGKILL)
            first.waitUntilExit()
            let again = try RunningGateway(dataDir: dir)
            #expect(try again.cli(["status"]).status == 0)
            #expect(again.stop().status == 0)
        }

        @Test("doc list and changes of 10,000 one-kilobyte documents: any limit the CLI accepts works")
        func largeLists() throws {
            let gw = try RunningGateway()
            let pad = String(repeating: "x", count: 1000)
            let lines = (0..<10_000).map { String(format: "doc-%05d\t{\"pad\":\"%@\",\"n\":%d}", $0, pad, $0) }.joined(separator: "\n")
            let imported = try gw.cli(["doc", "import", "sensors.readings", "-"], stdin: lines)
            #expect(imported.status == 0, "\(imported.stderr)")
            let list = try gw.cli(["doc", "list", "sensors.readings", "--limit", "10000", "--json"])
            #expect(list.status == 0, "\(list.stderr)")
            let docs = (try Shoal.json(list) as? [String: Any])?["documents"] as? [[String: Any]] ?? []
            #expect(docs.count == 10_000)
            #expect(docs.first?["id"] as? String == "doc-00000" && docs.last?["id"] as? String == "doc-09999")
            #expect(Set(docs.compactMap { $0["id"] as? String }).count == 10_000)
            // A cursor given by the user still works across pages.
            let after = try Shoal.json(gw.cli(["doc", "list", "sensors.readings", "--limit", "10000", "--after", "doc-04999", "--json"])) as? [String: Any]
            #expect((after?["documents"] as? [[String: Any]])?.count == 5_000)
            let changes = try gw.cli(["changes", "--limit", "10000", "--json"])
            #expect(changes.status == 0, "\(changes.stderr)")
            let feed = (try Shoal.json(changes) as? [String: Any])?["changes"] as? [[String: Any]] ?? []
            #expect(feed.count == 10_000)
            // Import batches by size too: 40 documents of 200 KB are more than one frame.
            let big = String(repeating: "y", count: 200_000)
            let bigLines = (0..<40).map { "big-\($0)\t{\"pad\":\"\(big)\"}" }.joined(separator: "\n")
            let bigImport = try gw.cli(["doc", "import", "_default", "-"], stdin: bigLines)
            #expect(bigImport.status == 0 && bigImport.stdout.contains("imported 40 documents"), "\(bigImport.stderr)")
            #expect(gw.stop().status == 0)
        }

        @Test("doc import reads CRLF files, skips blank lines, and names the line an editor shows; a body over 1 MiB on stdin is too big, not invalid JSON")
        func importLineEndings() throws {
            let gw = try RunningGateway()
            let crlf = try gw.cli(["doc", "import", "sensors.readings", "-"], stdin: "c1\t{\"a\":1}\r\n\r\nc2\t{\"a\":2}\r\n")
            // Empty input and a directory: said as such (exit 6), not as a JSON parse error or a raw errno.
            let empty = try gw.cli(["doc", "put", "sensors.readings", "e", "-"], stdin: "")
            #expect(empty.status == 6 && empty.stderr.contains("standard input is empty"), "\(empty.stderr)")
            let directory = try gw.cli(["doc", "import", "sensors.readings", "/tmp"])
            #expect(directory.status == 6 && directory.stderr.contains("/tmp is a directory"), "\(directory.stderr)")
            #expect(crlf.status == 0 && crlf.stdout.contains("imported 2 documents"), "\(crlf.stdout)\(crlf.stderr)")
            #expect(try gw.cli(["doc", "get", "sensors.readings", "c2"]).stdout.contains("\"a\": 2"))
            let bad = try gw.cli(["doc", "import", "sensors.readings", "-"], stdin: "e1\t{\"a\":1}\n\n\ne2 no tab\n")
            #expect(bad.status == 6)
            #expect(bad.stderr.contains("-:4: expected ID<TAB>JSON"), "\(bad.stderr)")
            // A line the gateway refuses (an empty id) is named by its line, not its place in a batch,
            // and an error after the first batch says what was imported.
            let emptyID = try gw.cli(["doc", "import", "sensors.readings", "-"], stdin: "ok1\t{}\n\n\t{\"a\":1}\n")
            #expect(emptyID.status == 6 && emptyID.stderr.contains("-:3: document id \"\": ") && emptyID.stderr.contains("(nothing was imported)"), "\(emptyID.stderr)")
            let late = try gw.cli(["doc", "import", "sensors.readings", "-"], stdin: (0..<600).map { "late-\($0)\t{}\n" }.joined() + "bad line\n")
            #expect(late.status == 6 && late.stderr.contains("-:601: expected ID<TAB>JSON (the 500 documents before its batch were imported, up to sequence "), "\(late.stderr)")
            let missing = try gw.cli(["doc", "import", "sensors.readings", "/nonexistent.tsv"])
            #expect(missing.status == 6 && missing.stderr.contains("/nonexistent.tsv: no such file"), "\(missing.stderr)")
            // A body over 1 MiB on standard input is too big, not "invalid JSON".
            let big = try gw.cli(["doc", "put", "sensors.readings", "big", "-"], stdin: "{\"x\":\"" + String(repeating: "a", count: 1_100_000) + "\"}")
            #expect(big.status == 6 && big.stderr.contains("standard input is over 1048576 bytes, the most a document body has (1 MiB)")
                    && !big.stderr.contains("invalid JSON"), "\(big.stderr)")
            #expect(gw.stop().status == 0)
        }

        @Test("status --json and mesh --json carry the same counters (refusedConnections and documentsSent in both)")
        func countersAgree() throws {
            let gw = try RunningGateway()
            let status = (try Shoal.json(gw.cli(["status", "--json"])) as? [String: Any])?["counters"] as? [String: Any] ?? [:]
            let mesh = (try Shoal.json(gw.cli(["mesh", "--json"])) as? [String: Any])?["counters"] as? [String: Any] ?? [:]
            #expect(!status.isEmpty && Set(status.keys) == Set(mesh.keys), "status \(status.keys.sorted()) vs mesh \(mesh.keys.sorted())")
            #expect(status["refusedConnections"] as? Int == 0 && mesh["documentsSent"] as? Int == 0)
            #expect(gw.stop().status == 0)
        }

        @Test("changes --follow and events --follow end with exit 5 and say so when the gateway stops (not 0 in silence, not a broken pipe)")
        func followEndsWhenGatewayStops() throws {
            let gw = try RunningGateway()
            let base = TemporaryDirectory()
            defer { base.remove() }
            _ = try gw.cli(["doc", "put", "sensors.readings", "x", "{}"])
            var followers: [(Process, Pipe, String)] = []
            for command in ["changes", "events"] {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: Shoal.binary)
                p.arguments = [command, "--follow", "--socket", gw.socket]
                let err = Pipe()
                FileManager.default.createFile(atPath: base.file(command), contents: nil)
                p.standardOutput = FileHandle(forWritingAtPath: base.file(command))
                p.standardError = err
                try p.run()
                followers.append((p, err, command))
            }
            // Each is following once it printed what was there (the document; the mesh's first events).
            for command in ["changes", "events"] {
                #expect(eventuallyBlocking(within: 10) { ((try? FileManager.default.attributesOfItem(atPath: base.file(command))[.size] as? Int) ?? 0) > 0 },
                        "\(command) --follow printed nothing")
            }
            #expect(gw.stop().status == 0)
            for (p, err, command) in followers {
                #expect(eventuallyBlocking(within: 10) { !p.isRunning }, "\(command) --follow still running")
                if p.isRunning { p.terminate() }
                p.waitUntilExit()
                let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                #expect(p.terminationStatus == 5, "\(command): \(p.terminationStatus) \(text)")
                #expect(text.contains("the gateway closed the connection: it stopped or restarted"), "\(command): \(text)")
            }
        }

        @Test("a second SIGTERM during a graceful stop exits at once with 1, as README and run --help say")
        func secondSignalExitsAtOnce() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Shoal.binary)
            p.arguments = ["run", "--board", "sim", "--data-dir", base.file("gw")]
            FileManager.default.createFile(atPath: base.file("log"), contents: nil)
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle(forWritingAtPath: base.file("log"))
            try p.run()
            func log() -> String { (try? String(contentsOfFile: base.file("log"), encoding: .utf8)) ?? "" }
            #expect(eventuallyBlocking(within: 30) { log().contains("gateway running") }, "\(log())")
            kill(p.processIdentifier, SIGTERM)
            #expect(eventuallyBlocking(within: 10) { log().contains("stopping gracefully") || !p.isRunning }, "\(log())")
            kill(p.processIdentifier, SIGTERM)
            p.waitUntilExit()
            // The graceful stop may have won the race; then it exited 0 and the test says nothing of the second signal.
            if log().contains("SIGTERM again: exiting now") {
                #expect(p.terminationStatus == 1)
            } else {
                #expect(p.terminationStatus == 0, "\(log())")
            }
            let help = try Shoal.run(["run", "--help"]).stdout
            #expect(help.contains("a second signal exits at once, with 1"))
        }

        @Test("doc get and doc delete of a deleted document say it is deleted (exit 4), not that there is no such document")
        func deletedDocumentSaysSo() throws {
            let gw = try RunningGateway()
            _ = try gw.cli(["doc", "put", "sensors.readings", "gone", "{}"])
            let deleted = try gw.cli(["doc", "delete", "sensors.readings", "gone"])
            #expect(deleted.status == 0)
            let seq = deleted.stdout.split(separator: "\t").first.map { $0.replacingOccurrences(of: "seq ", with: "") } ?? "?"
            for args in [["doc", "get", "sensors.readings", "gone"], ["doc", "delete", "sensors.readings", "gone"]] {
                let r = try gw.cli(args)
                #expect(r.status == 4)
                #expect(r.stderr.contains("document \"gone\" in sensors.readings is deleted (a tombstone since sequence \(seq); `doc list --deleted` shows tombstones)"), "\(r.stderr)")
            }
            let never = try gw.cli(["doc", "get", "sensors.readings", "never"])
            #expect(never.status == 4 && never.stderr.contains("no document \"never\" in sensors.readings"), "\(never.stderr)")
            #expect(gw.stop().status == 0)
        }

        @Test("identity show --json says which running gateway answered, as the text's gateway line does (null when read from files)")
        func identityShowJSONNamesTheGateway() throws {
            let gw = try RunningGateway()
            let running = try Shoal.json(gw.cli(["identity", "show", "--json"])) as? [String: Any]
            #expect(running?["socket"] as? String == gw.socket, "\(String(describing: running))")
            let files = try Shoal.json(Shoal.run(["identity", "show", "--dir", gw.dir.path + "/identities", "--json"])) as? [String: Any]
            #expect(files?.keys.contains("socket") == true && files?["socket"] is NSNull, "\(String(describing: files))")
            #expect(running?["peerID"] as? String == files?["peerID"] as? String)
            #expect(gw.stop().status == 0)
        }

        @Test("an unknown command lists every command help lists")
        func unknownCommandListsEveryCommand() throws {
            let help = try Shoal.run(["--help"]).stdout
            let section = help.components(separatedBy: "Commands:\n").last?.components(separatedBy: "\n\n").first ?? ""
            let names = section.split(separator: "\n").compactMap { line -> String? in
                guard line.hasPrefix("  "), let first = line.split(separator: " ").first, line.dropFirst(2).first != " " else { return nil }
                return String(first)
            }
            #expect(names.contains("doctor") && names.count >= 19, "\(names)")
            let r = try Shoal.run(["frobnicate"])
            #expect(r.status == 2)
            for name in names { #expect(r.stderr.contains(" \(name),") || r.stderr.contains(" \(name) ("), "\(name) missing: \(r.stderr)") }
            #expect(r.stderr.contains("see `shoal --help`"))
            for name in names {
                let help = try Shoal.run(["help", name])
                #expect(help.status == 0 && help.stdout.contains("Usage: shoal \(name)"), "no help for \(name): \(help.stderr)")
            }
        }

        @Test("log level names the bad value; status counts read right; the no-listen wifi event is said once, not at every retry")
        func wording() throws {
            let gw = try RunningGateway()
            let bad = try gw.cli(["log", "level", "replication", "loud"])
            #expect(bad.status == 6)
            #expect(bad.stderr.contains("\"loud\""), "\(bad.stderr)")
            let badRun = try Shoal.run(["run", "--log-level", "loud"])
            #expect(badRun.status == 2 && badRun.stderr.contains("\"loud\""), "\(badRun.stderr)")
            // The built-in site has no listen address: advertising fails, and retries with backoff
            // (2 s, then 5 s, 10 s later). One event says so, not one per retry.
            Thread.sleep(forTimeInterval: 9)
            let events = try gw.cli(["events", "--json"])   // one JSON object a line
            let list = events.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let wifi = list.filter { $0["type"] as? String == "transport" }
            #expect(wifi.count == 1, "\(wifi)")
            let status = try gw.cli(["status"]).stdout
            #expect(status.contains("0 peers connected") && status.contains("0 tombstones"))
            #expect(gw.stop().status == 0)
        }

        @Test("status and radios tell one truth about Wi-Fi on a board with no Wi-Fi interface replicating over static TCP")
        func radiosAgreeWithStatus() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let port = 21_000 + Int(getpid() % 20_000)
            let site = base.path + "/site.yaml"
            try "group: test.radios\nreplication:\n  listen: 127.0.0.1:\(port)\n  peers: [127.0.0.1:\(port + 1)]\n".write(toFile: site, atomically: true, encoding: .utf8)
            let gw = try RunningGateway(dataDir: base.path + "/gw", extraArgs: ["--config", site])
            var statusLine = ""
            #expect(eventuallyBlocking(within: 20) {
                statusLine = (try? gw.cli(["status"]).stdout)?.split(separator: "\n").first { $0.hasPrefix("wifi ") }.map(String.init) ?? ""
                return statusLine.contains("active;")
            }, "\(statusLine)")
            let summary = statusLine.dropFirst(4).trimmingCharacters(in: .whitespaces)
            #expect(summary.contains("listening on port \(port)") && summary.contains("static peers 127.0.0.1:\(port + 1)")
                    && summary.contains("no DNS-SD discovery (no Wi-Fi interface on this board)"), "\(summary)")
            let radios = try gw.cli(["radios"])
            #expect(!radios.stdout.contains("not usable: the board names no Wi-Fi interface"), "\(radios.stdout)")
            #expect(radios.stdout.contains("transport \(summary)"), "radios: \(radios.stdout)\nstatus: \(summary)")
            let json = try Shoal.json(gw.cli(["radios", "--json"])) as? [String: Any]
            let transport = (json?["wifi"] as? [String: Any])?["transport"] as? [String: Any]
            #expect(transport?["usable"] as? Bool == true && transport?["active"] as? Bool == true)
            #expect(gw.stop().status == 0)
        }

        @Test("conflicts show local and UTC times and both bodies; --json has the bodies whole")
        func conflictsInbox() throws {
            let base = TemporaryDirectory()
            defer { base.remove() }
            let dir = base.path + "/gw"
            // A conflict the replicator logged earlier, written straight into the gateway's store.
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            let store = try DocumentStore.open(StoreOptions(path: dir + "/shoal.db"), logger: Logger(sink: MemoryLogSink(), level: .none))
            let readings = try CollectionName(parsing: "sensors.readings")
            _ = try store.createCollection(readings)
            let at: Int64 = 1_767_225_600_000 + 3_723_000   // 2026-01-01 01:02:03 UTC
            try store.transaction { (tx) throws(StoreError) in
                try tx.logConflict(ConflictRecord(collection: readings, id: "boiler-1", localVersion: [], remoteVersion: [], peer: String(repeating: "ab", count: 32),
                                                  resolver: "lastWriteWins", outcome: "remote", atMillis: at,
                                                  localBody: #"{"t":70}"#, remoteBody: #"{"t":71.5}"#))
            }
            store.close()
            let gw = try RunningGateway(dataDir: dir)
            let text = try Shoal.run(["conflicts", "--socket", gw.socket], env: ["TZ": "XYZ-3"])
            #expect(text.status == 0, "\(text.stderr)")
            #expect(text.stdout.contains("2026-01-01 04:02:03 XYZ (2026-01-01 01:02:03 UTC)"), "\(text.stdout)")
            #expect(text.stdout.contains("sensors.readings/boiler-1") && text.stdout.contains("lastWriteWins → remote"))
            #expect(text.stdout.contains(#"local   {"t":70}"#) && text.stdout.contains(#"remote  {"t":71.5}"#), "\(text.stdout)")
            // With the local zone UTC the time is shown once, not "… UTC (… UTC)".
            let utc = try Shoal.run(["conflicts", "--socket", gw.socket], env: ["TZ": "UTC"])
            #expect(utc.stdout.hasPrefix("#1  2026-01-01 01:02:03 UTC  sensors.readings/boiler-1"), "\(utc.stdout)")
            let json = try Shoal.json(gw.cli(["conflicts", "--json"])) as? [[String: Any]]
            #expect((json?.first?["localBody"] as? [String: Any])?["t"] as? Int == 70)
            #expect((json?.first?["remoteBody"] as? [String: Any])?["t"] as? Double == 71.5)
            #expect(json?.first?["at"] as? String == "2026-01-01 01:02:03 UTC")
            #expect(gw.stop().status == 0)
        }
    }
}
