import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    @Suite("shoal doc expire on a running gateway", .serialized)
    struct ExpiryProcessTests {
        @Test("doc expire sets, clears and (when due) purges at once without a tombstone; bad input exits 2, 4 or 6 and the gateway stays up")
        func expire() throws {
            let gw = try RunningGateway()
            #expect(try gw.cli(["doc", "put", "sensors.readings", "r1", #"{"t":1}"#]).status == 0)
            #expect(try gw.cli(["doc", "put", "sensors.readings", "r2", #"{"t":2}"#]).status == 0)
            let later = try Shoal.json(gw.cli(["doc", "expire", "sensors.readings", "r2", "--in", "7d", "--json"])) as? [String: Any]
            let at = try #require(later?["expiresAt"] as? Int)
            #expect(at > Int(Date().timeIntervalSince1970) + 6 * 86_400)
            let never = try gw.cli(["doc", "expire", "sensors.readings", "r2", "--never"])
            #expect(never.status == 0 && never.stdout.contains("never expires here"), "\(never)")
            let now = try gw.cli(["doc", "expire", "sensors.readings", "r1", "--in", "0s"])
            #expect(now.status == 0 && now.stdout.contains("purged now"), "\(now)")
            let gone = try gw.cli(["doc", "get", "sensors.readings", "r1"])
            #expect(gone.status == 4 && gone.stderr.contains("no document"), "\(gone)")  // not a tombstone
            #expect(try gw.cli(["doc", "get", "sensors.readings", "r2"]).status == 0)
            let status = try gw.cli(["status"])
            #expect(status.stdout.contains("expiration  1 expired, 0 past ttl, 0 over budget"), "\(status.stdout)")
            #expect(status.stdout.contains("0 tombstones"), "\(status.stdout)")
            for (args, code, words) in [
                (["--in", "soon"], 2, "--in takes a duration"),
                (["--in", "5m", "--never"], 2, "exactly one of"),
                ([], 2, "exactly one of"),
                (["--at", "-3"], 2, "--at takes a unix time"),
                (["--at", "99999999999"], 6, "ten years"),
            ] as [([String], Int32, String)] {
                let r = try gw.cli(["doc", "expire", "sensors.readings", "r2"] + args)
                #expect(r.status == code && r.stderr.contains(words), "\(args): \(r)")
            }
            let missing = try gw.cli(["doc", "expire", "sensors.readings", "nope", "--in", "1m"])
            #expect(missing.status == 4 && missing.stderr.contains("no document \"nope\""), "\(missing)")
            #expect(try gw.cli(["status"]).status == 0)
            #expect(gw.stop().status == 0)
        }
    }
}
