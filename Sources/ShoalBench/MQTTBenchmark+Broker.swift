import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime

/// The bench's outside world: a mosquitto of its own, `mosquitto_sub` counting messages, and the
/// paho publisher script.
extension MQTTBenchmark {
    /// A mosquitto on a free loopback port with a config of its own in `directory`: no
    /// persistence, 100 QoS 1 messages in flight per client (as the bridge's window), a queue
    /// per client large enough for a whole burst, and a log of connections and subscriptions the
    /// bench reads to know when a subscriber is ready.
    final class Broker {
        let child: ChildProcess
        let port: UInt16
        let log: String

        init(directory: String, mosquitto: String) throws {
            try Files.makeDirectories(directory)
            let probe = try TCPListener(ipv4: "127.0.0.1", port: 0)
            port = probe.port
            probe.close()
            log = directory + "/mosquitto.log"
            // Run as root, mosquitto drops to the user `mosquitto`, which cannot write this
            // (root's) directory: stay root instead (a bench on loopback).
            let user = geteuid() == 0 ? "user root\n" : ""
            let config = """
                # Written by `shoal bench mqtt`.
                listener \(port) 127.0.0.1
                allow_anonymous true
                persistence false
                max_inflight_messages 100
                max_queued_messages 1000000
                \(user)log_dest file \(log)
                log_type error
                log_type warning
                log_type notice
                log_type information
                log_type subscribe
                connection_messages true
                """
            try Files.write(directory + "/mosquitto.conf", config + "\n")
            child = try ChildProcess(path: mosquitto, arguments: ["-c", directory + "/mosquitto.conf"], output: directory + "/mosquitto.out")
            let deadline = monotonicMillis() + 10_000
            while monotonicMillis() < deadline {
                if child.exitStatus() != nil { break }
                if let s = try? TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 200) {
                    s.close()
                    return
                }
                usleep(20_000)
            }
            let out = ((try? Files.read(directory + "/mosquitto.out")) ?? "") + ((try? Files.read(log)) ?? "")
            child.stop()
            throw ConfigurationFailure(message: "mosquitto did not listen on 127.0.0.1:\(port) within 10 s; it printed:\n\(out.suffix(1500))")
        }

        /// Waits until the broker logged a subscription of `clientID` (the log line
        /// `<time>: <client id> <qos> <filter>`).
        func waitForSubscription(clientID: String, seconds: Int = 20) throws {
            let deadline = monotonicMillis() + seconds * 1000
            while monotonicMillis() < deadline {
                if let text = try? Files.read(log, max: 16 << 20), text.contains(": \(clientID) 1 ") || text.contains(": \(clientID) 0 ") { return }
                usleep(20_000)
            }
            throw ConfigurationFailure(message: "\(clientID) did not subscribe at the broker on 127.0.0.1:\(port) within \(seconds) s (see \(log))")
        }

        func stop() { child.stop() }

        /// `mosquitto -h`'s first line names the version.
        static func version(_ mosquitto: String) -> String {
            let out = "/tmp/shoal-bench-mosquitto-version-\(getpid())"
            defer { unlink(out) }
            guard let c = try? ChildProcess(path: mosquitto, arguments: ["-h"], output: out) else { return "?" }
            _ = c.wait()
            let first = (try? Files.read(out))?.split(separator: "\n").first.map(String.init) ?? "?"
            return first.hasPrefix("mosquitto version ") ? String(first.dropFirst("mosquitto version ".count)) : first
        }
    }

    /// `mosquitto_sub -q 1 -C count`: subscribed when `init` returns, ends by itself once it has
    /// `count` messages (or after `timeoutSeconds`); `arrivedNanos` polls for that moment.
    final class Subscriber {
        let child: ChildProcess
        let clientID: String
        let count: Int

        init(_ sub: String, broker: Broker, filter: String, count: Int, clientID: String, timeoutSeconds: Int) throws {
            self.clientID = clientID
            self.count = count
            child = try ChildProcess(path: sub, arguments: ["-h", "127.0.0.1", "-p", "\(broker.port)", "-q", "1", "-t", filter,
                                                          "-C", "\(count)", "-W", "\(timeoutSeconds)", "-i", clientID])
            do { try broker.waitForSubscription(clientID: clientID) } catch {
                child.stop()
                throw error
            }
        }

        /// Polls every millisecond until mosquitto_sub ends; the moment it ended (CLOCK_MONOTONIC
        /// ns) and whether it had all its messages (status 0) rather than timing out.
        func waitForAll() -> (nanos: Int64, complete: Bool) {
            while true {
                if let status = child.exitStatus() { return (MQTTBenchmark.monotonicNanos(), status == 0) }
                usleep(1000)
            }
        }
    }

    /// What the publisher script printed.
    struct Published {
        var count: Int
        var acknowledged: Int
        var firstPublishNanos: Int64
        var lastAckNanos: Int64
        var rate: Double
        var cpuSeconds: Double
    }

    /// The paho publisher, started: `count` messages on `topic` (with {i} for the message's
    /// number, from `first`).
    final class Publisher {
        let child: ChildProcess
        let output: String

        init(_ tools: Tools, broker: Broker, count: Int, first: Int = 0, topic: String = "bench/{i}/state", output: String) throws {
            guard let python = tools.python, let script = tools.script else { throw ConfigurationFailure(message: "no publisher (python3 and the script)") }
            self.output = output
            unlink(output)
            child = try ChildProcess(path: python, arguments: [script, "--port", "\(broker.port)", "--count", "\(count)", "--first", "\(first)",
                                                               "--topic", topic, "--client-id", "shoal-bench-publisher-\(getpid())"],
                                     output: output)
        }

        var running: Bool { child.exitStatus() == nil }

        /// Waits for the script to end and reads its JSON line.
        func result() throws -> Published {
            let status = child.wait()
            let text = (try? Files.read(output)) ?? ""
            guard let line = text.split(separator: "\n").last(where: { $0.hasPrefix("{") }), let json = try? JSONValue.parse(String(line)) else {
                throw ConfigurationFailure(message: "the publisher ended with status \(status) and printed:\n\(text.suffix(1500))")
            }
            if let error = json["error"]?.stringValue { throw ConfigurationFailure(message: "the publisher: \(error)") }
            guard let first = json["firstPublishNs"]?.int64Value, let last = json["lastAckNs"]?.int64Value else {
                throw ConfigurationFailure(message: "the publisher printed no times: \(line)")
            }
            return Published(count: Int(json["count"]?.int64Value ?? 0), acknowledged: Int(json["acknowledged"]?.int64Value ?? 0),
                             firstPublishNanos: first, lastAckNanos: last, rate: json["rate"]?.doubleValue ?? 0,
                             cpuSeconds: json["cpuSeconds"]?.doubleValue ?? 0)
        }
    }

    /// The baseline: the publisher into `mosquitto_sub -q 1`, first publish → its last message.
    static func baselineIngest(directory: String, mosquitto: String, sub: String, tools: Tools, settings: Settings) throws -> Ingest {
        let broker = try Broker(directory: directory, mosquitto: mosquitto)
        defer { broker.stop() }
        let subscriber = try Subscriber(sub, broker: broker, filter: "bench/+/state", count: settings.messages, clientID: "shoal-bench-baseline",
                                        timeoutSeconds: 600)
        let brokerCPU = cpuSeconds(broker.child.pid)
        let publisher = try Publisher(tools, broker: broker, count: settings.messages, output: directory + "/publisher.json")
        let (end, complete) = subscriber.waitForAll()
        let p = try publisher.result()
        let seconds = Double(end - p.firstPublishNanos) / 1e9
        return Ingest(messages: settings.messages, received: complete ? Int64(settings.messages) : 0, seconds: seconds, publisherRate: p.rate,
                      cpu: [("mosquitto", cpuSeconds(broker.child.pid) - brokerCPU), ("publisher", p.cpuSeconds)])
    }
}
