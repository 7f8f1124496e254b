import Foundation
import ShoalLinux
import ShoalTesting
import Testing

/// A `shoal run` for the MQTT tests, whose log goes to a file (a gateway that logs while a test
/// streams thousands of messages must never block on a full pipe) and whose data directory
/// outlives it: `kill()` (SIGKILL) and `start()` again on the same data, with the same or another
/// site file. The caller owns and removes the directory.
final class MQTTGateway: @unchecked Sendable {  // a pid and paths, used from one test's thread
    let dataDir: String
    var site: String
    let logPath: String
    private var process: ChildProcess?
    var socket: String { dataDir + "/control.sock" }
    var isRunning: Bool { process.map { $0.exitStatus() == nil } ?? false }
    var pid: pid_t? { isRunning ? process?.pid : nil }

    /// A line of /proc/<pid>/status in kB (`VmRSS`, `VmHWM`), nil when not running.
    func memoryKB(_ field: String) -> Int? {
        guard let pid, let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }) else { return nil }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    }

    /// The binary it runs (an older build in the protocol-compatibility test); its CLI talks to it.
    let executable: String

    init(dataDir: String, site: String, executable: String = Shoal.binary) throws {
        self.executable = executable
        self.dataDir = dataDir
        self.site = site
        logPath = dataDir + ".log"
        try start()
    }

    deinit { process?.stop(signal: SIGKILL) }

    /// Starts `shoal run` (with `site` if given) and waits until its control socket answers.
    func start(site: String? = nil) throws {
        if let site { self.site = site }
        guard !isRunning else { return }
        try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true)
        let p = try ChildProcess(path: executable, arguments: ["run", "--board", "sim", "--data-dir", dataDir, "--config", self.site, "--log-level", "verbose"],
                                 output: logPath)
        process = p
        let up = eventuallyBlocking(within: 30, every: 0.05) {
            p.exitStatus() == nil && FileManager.default.fileExists(atPath: socket)
                && (try? Shoal.run(["status", "--socket", socket], executable: executable).status) == 0
        }
        guard up else { throw MQTTTools.Failed(description: "the gateway did not come up (\(p.exitStatus().map { "exit \($0)" } ?? "running")): …\(log().suffix(3000))") }
    }

    func cli(_ args: [String], stdin: String? = nil) throws -> Shoal.Result {
        try Shoal.run(args + ["--socket", socket], stdin: stdin, executable: executable)
    }

    /// SIGTERM and wait; the exit status.
    @discardableResult
    func stop() -> Int32? {
        defer { process = nil }
        return process?.stop(signal: SIGTERM, graceMillis: 30_000)
    }

    /// SIGKILL: the store is left as a power cut would leave it.
    func kill() {
        process?.stop(signal: SIGKILL)
        process = nil
    }

    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// `shoal mqtt status --json`'s entry for `broker`.
    func mqttStatus(_ broker: String = "local") -> [String: Any]? {
        guard let r = try? cli(["mqtt", "status", "--json"]), r.status == 0,
              let all = (try? Shoal.json(r)) as? [String: Any], let brokers = all["brokers"] as? [[String: Any]] else { return nil }
        return brokers.first { $0["name"] as? String == broker }
    }

    /// A counter of `mqtt status`: in.committed, in.dropped.not_json, out.acknowledged …
    func counter(_ path: String, broker: String = "local") -> Int {
        var value: Any? = mqttStatus(broker)
        for key in path.split(separator: ".") { value = (value as? [String: Any])?[String(key)] }
        return (value as? Int) ?? 0
    }

    func state(_ broker: String = "local") -> String? { mqttStatus(broker)?["state"] as? String }

    /// Every document of `collection` (deleted ones too with `deleted`), by id, read in pages.
    func documents(_ collection: String, deleted: Bool = false) throws -> [String: [String: Any]] {
        var all: [String: [String: Any]] = [:]
        var after: String?
        while true {
            var args = ["doc", "list", collection, "--limit", "10000", "--json"]
            if let after { args += ["--after", after] }
            if deleted { args.append("--deleted") }
            let r = try cli(args)
            guard r.status == 0, let page = (try Shoal.json(r) as? [String: Any])?["documents"] as? [[String: Any]] else {
                throw MQTTTools.Failed(description: "shoal doc list \(collection): exit \(r.status): \(r.stderr)")
            }
            for d in page { if let id = d["id"] as? String { all[id] = d } }
            guard page.count == 10000, let last = page.last?["id"] as? String else { return all }
            after = last
        }
    }

    /// A document's body, or nil if there is none.
    func body(_ collection: String, _ id: String) -> [String: Any]? {
        guard let r = try? cli(["doc", "get", collection, id, "--json"]), r.status == 0 else { return nil }
        return ((try? Shoal.json(r)) as? [String: Any])?["body"] as? [String: Any]
    }

    func document(_ collection: String, _ id: String) -> [String: Any]? {
        guard let r = try? cli(["doc", "get", collection, id, "--json"]), r.status == 0 else { return nil }
        return (try? Shoal.json(r)) as? [String: Any]
    }
}

/// Site files with an `mqtt:` section (COMMON.md's contract). Rules are YAML flow mappings, one a
/// string: `#"{ topic: "a/+x", collection: c.d, id: "{x}" }"#`.
enum MQTTSiteFile {
    struct Broker {
        var name = "local"
        var url: String
        var clientID: String
        var inbound: [String] = []
        var outbound: [String] = []
        /// More lines of the broker's mapping (`tls: {...}`, `protocol: "5"`).
        var more: [String] = []
    }

    /// Writes `path`: the group, the collections, the brokers, and `extra` (top-level YAML); the
    /// local API is off unless `extra` has an `http:` section.
    static func write(_ path: String, group: String = "test.mqtt", collections: [String], brokers: [Broker], extra: String = "") throws {
        var text = "group: \(group)\ncollections:\n" + collections.map { "  - name: \($0)\n" }.joined()
        if !brokers.isEmpty {
            text += "mqtt:\n  brokers:\n"
            for b in brokers {
                text += "    - name: \(b.name)\n      url: \(b.url)\n      clientId: \(b.clientID)\n      reconnect: { minMillis: 100, maxMillis: 1000 }\n"
                text += b.more.map { "      \($0)\n" }.joined()
                if !b.inbound.isEmpty { text += "      inbound:\n" + b.inbound.map { "        - \($0)\n" }.joined() }
                if !b.outbound.isEmpty { text += "      outbound:\n" + b.outbound.map { "        - \($0)\n" }.joined() }
            }
        }
        text += extra
        // No local API unless asked for: many test gateways would all try its default port 8470.
        if !extra.contains("http:") { text += "http: {enabled: false}\n" }
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
