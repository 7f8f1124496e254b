import Shoal
import ShoalTesting
import Testing

@Suite("Library queries")
struct QueryBuilderTests {
    @Test("the typed builder filters, orders, pages, projects, counts, aggregates and uses an index")
    func builder() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let db = try Database(directory: dir.path, identity: try TLSIdentity.createIdentity(commonName: "q"), fullDurability: false)
        defer { db.close() }
        let readings = try db.collection("sensors.readings")
        try readings.put((1...30).map { i in (id: "r\(i)", json: #"{"site":"\#(i % 2 == 0 ? "east" : "west")","pressure":\#(i % 7).5,"a":{"b":\#(i)}}"#) })

        let q = db.query("sensors.readings").where(.field("site") == "east" && .field("pressure") > 2.5).order(by: "-a.b").limit(3)
        #expect(try q.run().map(\.id) == ["r26", "r24", "r20"])
        #expect(try q.limit(100).run().count == 8)
        #expect(try q.count() == 8)
        #expect(try db.query("sensors.readings").where("site = \"east\" and pressure > 2.5").count() == 8)
        #expect(try db.query("sensors.readings").where(.id.starts(with: "r1") && !(.field("a.b") >= 12)).run().map(\.id) == ["r1", "r10", "r11"])
        #expect(try db.query("sensors.readings").where(.field("site").isIn(["north", "west"]) && .field("missing").exists).count() == 0)
        // A string never equals a number.
        #expect(try db.query("sensors.readings").where(.field("a.b") == "1").count() == 0)

        // Pages through the cursor: every document once, in order.
        var ids: [String] = []
        var page = try readings.find().order(by: "a.b").limit(7).page()
        ids += page.documents.map(\.id)
        while let next = page.next {
            page = try readings.find().order(by: "a.b").limit(7).after(next).page()
            ids += page.documents.map(\.id)
        }
        #expect(ids == (1...30).map { "r\($0)" })

        #expect(try readings.find().where(.id == "r4").fields("a.b").run().first?.json == #"{"a":{"b":4}}"#)
        let groups = try readings.find().aggregate("count,max(a.b)", groupBy: "site")
        #expect(groups == [QueryGroupRow(key: ["site": "\"east\""], values: ["count": 15, "max(a.b)": 30]),
                           QueryGroupRow(key: ["site": "\"west\""], values: ["count": 15, "max(a.b)": 29])])

        #expect(try readings.createIndex(["site", "pressure"]))
        #expect(try readings.indexes() == [["site", "pressure"]])
        #expect(try q.explain().indexesUsed == ["site,pressure"])
        #expect(throws: ShoalError.self) { try db.query("sensors.readings").where("site = east").run() }
        #expect(throws: ShoalError.self) { try readings.createIndex(["a b"]) }
        #expect(try readings.dropIndex(["site", "pressure"]))
    }
}
