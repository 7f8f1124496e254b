import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    @Suite("shoal doc query and indexes")
    struct QueryProcessTests {
        @Test("a gateway answers queries, explains them, and keeps the site file's and the CLI's indexes")
        func queryThroughTheCLI() throws {
            let site = TemporaryDirectory()
            defer { site.remove() }
            try "group: g\ncollections:\n  - name: sensors.readings\n    indexes: [site, [site, pressure]]\n"
                .write(toFile: site.file("site.yaml"), atomically: true, encoding: .utf8)
            let gw = try RunningGateway(extraArgs: ["--config", site.file("site.yaml")])
            defer { _ = gw.stop() }
            let lines = (1...30).map { i in "r\(i)\t{\"site\":\"\(i % 2 == 0 ? "east" : "west")\",\"pressure\":\(i % 7).5,\"a\":{\"b\":\(i)}}" }
            #expect(try gw.cli(["doc", "import", "sensors.readings", "-"], stdin: lines.joined(separator: "\n")).status == 0)

            let q = try gw.cli(["doc", "query", "sensors.readings", #"site = "east" and pressure > 2.5"#, "--order", "-updatedAt,a.b", "--limit", "3"])
            #expect(q.status == 0 && q.stdout.split(separator: "\n").map { $0.split(separator: "\t")[0] } == ["r4", "r6", "r10"], "\(q.stdout)\(q.stderr)")
            #expect(q.stderr.contains("more: --after "))

            let explain = try gw.cli(["doc", "query", "sensors.readings", #"site = "east" and pressure > 2.5"#, "--explain"])
            #expect(explain.stdout.contains("uses index site,pressure"), "\(explain.stdout)")
            let scan = try gw.cli(["doc", "query", "sensors.readings", "a.b > 3", "--explain"])
            #expect(scan.stdout.contains("no collection index is used"), "\(scan.stdout)")

            let groups = try gw.cli(["doc", "query", "sensors.readings", "--aggregate", "count,max(a.b)", "--group-by", "site"])
            #expect(groups.stdout == "{\"count\":15,\"key\":{\"site\":\"east\"},\"max(a.b)\":30}\n{\"count\":15,\"key\":{\"site\":\"west\"},\"max(a.b)\":29}\n", "\(groups.stdout)")

            // A malformed query: exit 6, with a caret under the character; nothing reaches the gateway.
            let bad = try gw.cli(["doc", "query", "sensors.readings", "site = east"])
            #expect(bad.status == 6 && bad.stderr.contains("site = east\n         ^ (character 8)"), "\(bad.stderr)")
            let injected = try gw.cli(["doc", "index", "create", "sensors.readings", "`a\"); DROP TABLE documents; --`"])
            #expect(injected.status == 6, "\(injected.stderr)")

            #expect(try gw.cli(["doc", "index", "create", "sensors.readings", "a.b"]).stdout == "created index a.b on sensors.readings\n")
            #expect(try gw.cli(["doc", "index", "drop", "sensors.readings", "site"]).stdout == "dropped index site on sensors.readings\n")
            #expect(try gw.cli(["doc", "indexes"]).stdout == "sensors.readings\ta.b\nsensors.readings\tsite,pressure\n")
            #expect(try gw.cli(["doc", "query", "sensors.readings", "a.b > 3", "--explain"]).stdout.contains("uses index a.b"))
        }
    }
}
