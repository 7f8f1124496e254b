import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime

/// The gateway under test and the three figures taken on it.
extension MQTTBenchmark {
    /// `shoal run` on a board file in `directory` (the sim board with the durability asked for),
    /// a site file with one broker: the inbound rule `bench/+n/state` → `bench.state`, id `{n}`,
    /// replace; the outbound rule `bench.changes` → `bench-out/{id}`, QoS 1. Up once its bridge
    /// has subscribed at the broker. Its output goes to gateway.log there.
    final class Gateway {
        let child: ChildProcess
        let control: ControlClient
        let log: String
        let clientID: String

        init(directory: String, durability: String, broker: Broker) throws {
            try Files.makeDirectories(directory)
            clientID = "shoal-bench-\(durability)-\(getpid())"
            let board = """
                extends: sim
                board:
                  name: Bench gateway (sim, durability \(durability))
                  support: community
                storage:
                  durability: \(durability)
                """
            try Files.write(directory + "/board.yaml", board + "\n")
            let site = """
                group: bench.mqtt
                collections:
                  - name: \(MQTTBenchmark.inCollection)
                  - name: \(MQTTBenchmark.outCollection)
                mqtt:
                  brokers:
                    - name: bench
                      url: mqtt://127.0.0.1:\(broker.port)
                      clientId: \(clientID)
                      inbound:
                        - topic: bench/+n/state
                          collection: \(MQTTBenchmark.inCollection)
                          id: "{n}"
                          mode: replace
                          qos: 1
                      outbound:
                        - collection: \(MQTTBenchmark.outCollection)
                          topic: "bench-out/{id}"
                          qos: 1
                """
            try Files.write(directory + "/site.yaml", site + "\n")
            log = directory + "/gateway.log"
            let socket = directory + "/control.sock"
            child = try ChildProcess(path: ChildProcess.currentExecutable,
                                     arguments: ["run", "--board", directory + "/board.yaml", "--data-dir", directory, "--config", directory + "/site.yaml",
                                                 "--log-level", "warning"],
                                     output: log)
            var client: ControlClient?
            let deadline = monotonicMillis() + 20_000
            while client == nil && monotonicMillis() < deadline && child.exitStatus() == nil {
                client = try? ControlClient(path: socket)
                if client == nil { usleep(50_000) }
            }
            guard let client else {
                let tail = (try? Files.read(log)).map { String($0.suffix(2000)) } ?? "(no output)"
                child.stop()
                throw ConfigurationFailure(message: "the gateway under test did not serve its control socket within 20 s; its output:\n\(tail)")
            }
            control = client
            do { try broker.waitForSubscription(clientID: clientID) } catch {
                child.stop()
                throw ConfigurationFailure(message: "\(error); the gateway's output:\n\((try? Files.read(log))?.suffix(2000) ?? "")")
            }
        }

        var pid: pid_t { child.pid }
        /// The bridge's thread, as MQTTService names it (`mqtt-<broker name>`).
        let bridgeThread = "mqtt-bench"

        /// The broker's `in` and `out` counters, from the control socket's `mqtt` op.
        func counters() throws -> (committed: Int64, received: Int64, dropped: Int64, acknowledged: Int64) {
            if let status = child.exitStatus() {
                throw ConfigurationFailure(message: "the gateway under test ended (status \(status)); its output:\n\((try? Files.read(log))?.suffix(2000) ?? "")")
            }
            let answer = try control.call(["op": "mqtt"])
            guard let b = answer["brokers"]?.arrayValue?.first else { throw ConfigurationFailure(message: "the gateway shows no MQTT broker: \(answer.compactText)") }
            let dropped = (b["in"]?["dropped"]?.objectValue ?? [:]).values.compactMap(\.int64Value).reduce(0, +)
            return (b["in"]?["committed"]?.int64Value ?? 0, b["in"]?["received"]?.int64Value ?? 0, dropped, b["out"]?["acknowledged"]?.int64Value ?? 0)
        }

        func stop() { child.stop() }
    }

    /// Every 50 ms until the gateway has committed `target` documents, or nothing moved for
    /// `stallSeconds`; calls `sample` each time. Returns the committed count and when it was read
    /// (CLOCK_MONOTONIC ns).
    static func waitForCommitted(_ gateway: Gateway, target: Int64, settings: Settings, sample: () -> Void = {}) throws -> (Int64, Int64) {
        var last: Int64 = -1
        var movedAt = monotonicMillis()
        while true {
            sample()
            let c = try gateway.counters()
            let now = monotonicNanos()
            if c.committed >= target { return (c.committed, now) }
            if c.committed + c.dropped != last {
                last = c.committed + c.dropped
                movedAt = monotonicMillis()
            } else if monotonicMillis() - movedAt > settings.stallSeconds * 1000 {
                return (c.committed, now)
            }
            usleep(50_000)
        }
    }

    /// The publisher into the gateway: first publish → all committed.
    static func gatewayIngest(_ gateway: Gateway, broker: Broker, tools: Tools, settings: Settings) throws -> Ingest {
        let before = try gateway.counters().committed
        let cpu0 = (gateway: cpuSeconds(gateway.pid), bridge: cpuSeconds(gateway.pid, thread: gateway.bridgeThread), broker: cpuSeconds(broker.child.pid))
        let publisher = try Publisher(tools, broker: broker, count: settings.messages, output: Files.directory(of: gateway.log) + "/publisher.json")
        let (committed, end) = try waitForCommitted(gateway, target: before + Int64(settings.messages), settings: settings)
        let cpu: [(part: String, seconds: Double)] = [("gateway", cpuSeconds(gateway.pid) - cpu0.gateway),
                                                       ("its bridge thread", cpuSeconds(gateway.pid, thread: gateway.bridgeThread) - cpu0.bridge),
                                                       ("mosquitto", cpuSeconds(broker.child.pid) - cpu0.broker)]
        let p = try publisher.result()
        return Ingest(messages: settings.messages, received: committed - before, seconds: Double(end - p.firstPublishNanos) / 1e9, publisherRate: p.rate,
                      cpu: cpu + [("publisher", p.cpuSeconds)])
    }

    /// `changes` documents through the control socket (1,000 per `doc.putMany`) → the outbound
    /// rule → `mosquitto_sub -q 1`: first write → its last message.
    static func outbound(_ gateway: Gateway, broker: Broker, sub: String, settings: Settings) throws -> Outbound {
        let subscriber = try Subscriber(sub, broker: broker, filter: "bench-out/#", count: settings.changes, clientID: "shoal-bench-outbound",
                                        timeoutSeconds: 600)
        var batches: [JSONValue] = []
        var n = 0
        while n < settings.changes {
            var batch: [JSONValue] = []
            while batch.count < 1000 && n < settings.changes {
                batch.append(["id": .string("out-\(n)"), "body": ["seq": .int(Int64(n)), "celsius": .double(21.5), "sensor": .string("t\(n % 97)")]])
                n += 1
            }
            batches.append(["op": "doc.putMany", "collection": .string(outCollection), "documents": .array(batch)])
        }
        let start = monotonicNanos()
        for b in batches { _ = try gateway.control.call(b) }
        let written = monotonicNanos()
        let (end, complete) = subscriber.waitForAll()
        let acknowledged = try gateway.counters().acknowledged
        return Outbound(changes: settings.changes, received: complete ? Int64(settings.changes) : min(acknowledged, Int64(settings.changes)),
                        seconds: Double(end - start) / 1e9, writeSeconds: Double(written - start) / 1e9)
    }

    /// VmRSS before (connected and idle for 1 s), every 50 ms while `burst` messages arrive, and
    /// 2 s after the last is committed.
    static func burst(_ gateway: Gateway, broker: Broker, tools: Tools, settings: Settings) throws -> Burst {
        usleep(1_000_000)
        let before = HTTPBenchmark.residentKB(gateway.pid)
        var peak = before, samples = 0
        let publisher = try Publisher(tools, broker: broker, count: settings.burst, first: 0, topic: "bench/burst-{i}/state",
                                      output: Files.directory(of: gateway.log) + "/burst.json")
        let (committed, end) = try waitForCommitted(gateway, target: Int64(settings.burst), settings: settings) {
            peak = max(peak, HTTPBenchmark.residentKB(gateway.pid))
            samples += 1
        }
        let p = try publisher.result()
        let deadline = monotonicMillis() + 2000
        while monotonicMillis() < deadline {
            peak = max(peak, HTTPBenchmark.residentKB(gateway.pid))
            samples += 1
            usleep(50_000)
        }
        let after = HTTPBenchmark.residentKB(gateway.pid)
        return Burst(messages: settings.burst, committed: committed, seconds: Double(end - p.firstPublishNanos) / 1e9,
                     rssBeforeKB: before, rssPeakKB: peak, rssAfterKB: after, samples: samples, publisherRate: p.rate)
    }
}
