import ShoalStatus
import Testing

@Suite("Metrics exposition")
struct MetricsExpositionTests {
    typealias M = MetricsExposition

    @Test("a family renders as HELP, TYPE and its samples, whole numbers without a fraction")
    func oneFamily() {
        let text = M.render([M.Family("shoal_messages_sent_total", .counter, help: "Replication messages sent.", value: 42)])
        #expect(text == """
            # HELP shoal_messages_sent_total Replication messages sent.
            # TYPE shoal_messages_sent_total counter
            shoal_messages_sent_total 42

            """)
    }

    @Test("label values escape backslash, double quote and line feed; help escapes backslash and line feed only")
    func escaping() {
        let text = M.render([M.Family("shoal_led_state", .gauge, help: "A \"pattern\" C:\\ on\ntwo lines", [
            M.Sample([("pattern", "say \"hi\"\\now\nnext")], 1),
        ])])
        #expect(text.contains("# HELP shoal_led_state A \"pattern\" C:\\\\ on\\ntwo lines\n"))
        #expect(text.contains("shoal_led_state{pattern=\"say \\\"hi\\\"\\\\now\\nnext\"} 1\n"))
        #expect(text.split(separator: "\n").count == 3, "an escaped line feed does not break the line: \(text)")
    }

    @Test("families come sorted by name and samples by their labels, whatever order they were gathered in")
    func deterministicOrder() {
        let a = M.Family("shoal_collection_documents", .gauge, help: "h", [M.Sample([("collection", "z.z")], 1), M.Sample([("collection", "a.a")], 2)])
        let b = M.Family("shoal_build_info", .gauge, help: "h", [M.Sample([("version", "0.1.0")], 1)])
        let one = M.render([a, b])
        let two = M.render([b, M.Family(a.name, a.kind, help: a.help, a.samples.reversed())])
        #expect(one == two)
        let names = one.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0) }
        #expect(names == ["shoal_build_info{version=\"0.1.0\"} 1", "shoal_collection_documents{collection=\"a.a\"} 2",
                          "shoal_collection_documents{collection=\"z.z\"} 1"])
    }

    @Test("a family with no samples is left out, and a repeated label set keeps its first sample")
    func emptyAndRepeated() {
        let text = M.render([
            M.Family("shoal_peer_online", .gauge, help: "h", []),
            M.Family("shoal_connected_peers", .gauge, help: "h", [M.Sample([("x", "1")], 1), M.Sample([("x", "1")], 2)]),
        ])
        #expect(!text.contains("shoal_peer_online"))
        #expect(text.contains("shoal_connected_peers{x=\"1\"} 1\n"))
        #expect(!text.contains("} 2"))
    }

    @Test("values: fractions in shortest form, NaN and infinities as the format spells them")
    func values() {
        #expect(M.valueText(0) == "0")
        #expect(M.valueText(-3) == "-3")
        #expect(M.valueText(0.25) == "0.25")
        #expect(M.valueText(1_234_567_890_123) == "1234567890123")
        #expect(M.valueText(.nan) == "NaN")
        #expect(M.valueText(.infinity) == "+Inf")
        #expect(M.valueText(-.infinity) == "-Inf")
        #expect(Double(M.valueText(1e300)) == 1e300)
    }

    @Test("names: metric names may hold colons, label names may not, nor start with two underscores")
    func names() {
        #expect(M.isValidName("shoal_store_size_bytes", label: false))
        #expect(M.isValidName("job:shoal_docs:rate5m", label: false))
        #expect(!M.isValidName("9lives", label: false))
        #expect(!M.isValidName("shoal-store", label: false))
        #expect(!M.isValidName("", label: false))
        #expect(M.isValidName("collection", label: true))
        #expect(!M.isValidName("a:b", label: true))
        #expect(!M.isValidName("__name__", label: true))
    }

    @Test("the content type is the 0.0.4 text format's")
    func contentType() {
        #expect(M.contentType == "text/plain; version=0.0.4; charset=utf-8")
    }
}
