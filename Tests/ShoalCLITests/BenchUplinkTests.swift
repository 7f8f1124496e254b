import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// `shoal bench uplink` against the nats-server it starts itself (skipped without one).
    @Suite("shoal bench uplink")
    struct BenchUplinkTests {
        @Test("a short run prints the baseline, the push and end-to-end rates against it, and the bytes per document")
        func shortRun() throws {
            guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nats-server") else {
                print("skipped: /usr/sbin/nats-server is not installed (make deps)")
                return
            }
            let r = try Shoal.run(["bench", "uplink", "--count", "200"], timeout: 180)
            #expect(r.status == 0, "stderr: \(r.stderr)")
            for needle in ["baseline, NATSClient.publish with acks", "ratio push/baseline", "ratio end-to-end/baseline",
                           "A published 200", "B applied 200", "A → hub", "hub → B", "Shoal-Version"] {
                #expect(r.stdout.contains(needle), "stdout lacks \(needle):\n\(r.stdout)")
            }
            #expect(!r.stdout.contains("incomplete"), "\(r.stdout)")
        }

        @Test("bad options are named")
        func badOptions() throws {
            let r = try Shoal.run(["bench", "uplink", "--count", "0"])
            #expect(r.status == 2)
            #expect(r.stderr.contains("--count"), "stderr: \(r.stderr)")
        }
    }
}
