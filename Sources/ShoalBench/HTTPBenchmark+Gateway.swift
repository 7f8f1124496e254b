import Glibc
import ShoalCore
import ShoalLinux
import ShoalRuntime

extension HTTPBenchmark {
    /// The gateway under test: `shoal run` on the sim board in `directory`, its HTTP API on a free
    /// loopback port, the one collection the benchmark writes. Its output goes to gateway.log
    /// there (quoted when it does not come up).
    final class Gateway {
        let child: ChildProcess
        let port: UInt16
        let controlSocket: String
        let log: String

        init(directory: String) throws {
            try Files.makeDirectories(directory)
            // A free port: the kernel picks one for a listener we close at once (another process
            // could take it in between; then the gateway logs it and the wait below says so).
            let probe = try TCPListener(ipv4: "127.0.0.1", port: 0)
            port = probe.port
            probe.close()
            // 100 SSE clients and wrk's connections all come from 127.0.0.1: past the default 64
            // per address.
            let site = """
                group: bench.http
                collections:
                  - name: \(HTTPBenchmark.collection)
                http:
                  listen: ["127.0.0.1:\(port)"]
                  unixSocket: false
                  maxConnections: 512
                  maxConnectionsPerAddress: 512
                """
            try Files.write(directory + "/site.yaml", site)
            controlSocket = directory + "/control.sock"
            log = directory + "/gateway.log"
            child = try ChildProcess(path: ChildProcess.currentExecutable,
                                     arguments: ["run", "--board", "sim", "--data-dir", directory, "--config", directory + "/site.yaml", "--log-level", "warning"],
                                     output: log)
            try waitUntilServing()
        }

        var pid: pid_t { child.pid }

        private func waitUntilServing() throws {
            let deadline = monotonicMillis() + 20_000
            while monotonicMillis() < deadline {
                if child.exitStatus() != nil { break }
                if (try? ControlClient(path: controlSocket)) != nil, let s = try? TCPStream.connect(ipv4: "127.0.0.1", port: port, timeoutMillis: 200) {
                    s.close()
                    return
                }
                usleep(50_000)
            }
            let tail = (try? Files.read(log)).map { String($0.suffix(2000)) } ?? "(no output)"
            stop()
            throw ConfigurationFailure(message: "the gateway under test did not serve its control socket and 127.0.0.1:\(port) within 20 s; its output:\n\(tail)")
        }

        func stop() { child.stop() }
    }
}
