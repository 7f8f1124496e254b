import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Testing
import ShoalCore
@testable import ShoalMesh
@testable import ShoalRuntime

/// The mesh picture (`MeshView.svg()`): well-formed XML, every node and link drawn with what we
/// know of it, text escaped, and the same bytes for the same view.
@Suite("Mesh picture (SVG)")
struct MeshSVGTests {
    static func id(_ byte: UInt8) -> PeerID { PeerID(bytes: [byte] + Array(repeating: 0x11, count: 31)) }

    static func peer(_ id: PeerID, online: Bool = true, on transport: MeshTransport? = nil, lastError: String? = nil) -> MeshView.Peer {
        MeshView.Peer(info: PeerInfo(peer: id, online: online, discoveredOn: online ? [.wifi] : [], connectedOn: transport,
                                     outgoing: transport.map { _ in true }, neighbours: [], activity: transport == nil ? .offline : .idle,
                                     lastError: lastError),
                      address: nil, certificateSubject: nil, certificateNotAfter: nil, certificate: nil, sync: nil)
    }

    /// Me, a peer over Wi-Fi on the tree, one over Bluetooth off it, one offline, and one only
    /// gossip knows (linked to the Wi-Fi peer).
    static func lab() -> MeshView {
        var v = MeshView()
        v.me = id(0x50)
        v.state = .fullyConnected
        v.peers = [peer(id(0x10), on: .wifi), peer(id(0x90), on: .bluetooth), peer(id(0x30), online: false)]
        v.links = [(id(0x50), id(0x10)), (id(0x90), id(0x50)), (id(0x10), id(0xc0))]
        v.treeNeighbours = [id(0x10)]
        return v
    }

    /// What a parse found: the elements' attributes in order, and the text of every <title>.
    final class Parsed: NSObject, XMLParserDelegate {
        var elements: [(name: String, attributes: [String: String])] = []
        var titles: [String] = []
        private var inTitle = false
        var error: Error?

        func parser(_ p: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            elements.append((name, attributes))
            if name == "title" { inTitle = true; titles.append("") }
        }
        func parser(_ p: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            if name == "title" { inTitle = false }
        }
        func parser(_ p: XMLParser, foundCharacters s: String) {
            if inTitle { titles[titles.count - 1] += s }
        }
        func parser(_ p: XMLParser, parseErrorOccurred e: Error) { error = e }

        func all(_ name: String) -> [[String: String]] { elements.filter { $0.name == name }.map(\.attributes) }
        var groups: [[String: String]] { all("g") }
    }

    static func parse(_ svg: String) throws -> Parsed {
        let parsed = Parsed()
        let parser = XMLParser(data: Data(svg.utf8))
        parser.delegate = parsed
        let ok = parser.parse()
        try #require(ok && parsed.error == nil, "not well-formed XML: \(String(describing: parsed.error ?? parser.parserError))\n\(svg)")
        return parsed
    }

    @Test("the picture is well-formed SVG with every node and every link, ours marked with their transport and tree")
    func everyNodeAndLink() throws {
        let v = Self.lab()
        let svg = v.svg()
        let parsed = try Self.parse(svg)
        #expect(parsed.elements.first?.name == "svg")
        #expect(parsed.elements.first?.attributes["xmlns"] == "http://www.w3.org/2000/svg")
        let nodes = parsed.groups.filter { $0["data-peer"] != nil }
        #expect(Set(nodes.compactMap { $0["data-peer"] }) == Set([0x50, 0x10, 0x90, 0x30, 0xc0].map { Self.id($0).description }))
        #expect(nodes.count == 5)
        func node(_ b: UInt8) -> String { nodes.first { $0["data-peer"] == Self.id(b).description }?["class"] ?? "" }
        #expect(node(0x50).contains("me"))
        #expect(node(0x10).contains("online") && node(0x30).contains("offline") && node(0xc0).contains("gossip"))
        // Every id drawn by its short form, this gateway named as such.
        for b: UInt8 in [0x50, 0x10, 0x90, 0x30, 0xc0] { #expect(svg.contains(">\(Self.id(b).short)</text>")) }
        #expect(svg.contains(">this gateway</text>"))

        let links = parsed.groups.filter { $0["data-link"] != nil }
        func link(_ a: UInt8, _ b: UInt8) -> String? {
            let (x, y) = (min(Self.id(a), Self.id(b)), max(Self.id(a), Self.id(b)))
            return links.first { $0["data-link"] == "\(x.description) \(y.description)" }?["class"]
        }
        #expect(links.count == 3)
        #expect(link(0x50, 0x10) == "link ours tree wifi")
        #expect(link(0x50, 0x90) == "link ours not-tree bluetooth")
        #expect(link(0x10, 0xc0) == "link gossip not-tree")
        // Ours bold, the tree solid, the rest dashed.
        let lines = parsed.all("line").filter { $0["x1"] != nil }
        #expect(lines.filter { $0["stroke-width"] == "3" && $0["stroke-dasharray"] == nil }.count >= 1)
        #expect(svg.contains(">wifi</text>") && svg.contains(">bluetooth</text>"))
    }

    @Test("a link of ours that gossip has not told yet is drawn from the peer's connection; duplicates are drawn once")
    func oursFromTheConnection() throws {
        var v = Self.lab()
        v.links = [(Self.id(0x10), Self.id(0xc0)), (Self.id(0xc0), Self.id(0x10))]
        let parsed = try Self.parse(v.svg())
        let links = parsed.groups.compactMap { $0["data-link"] }
        #expect(links.count == 3, "\(links)")
    }

    @Test("text from outside (a peer's error, its address) is escaped, and control characters XML forbids are replaced")
    func textIsEscaped() throws {
        var v = Self.lab()
        let hostile = "refused: <script>alert('x')</script> & \"more\"\u{1}\u{7}"
        v.peers[2] = Self.peer(Self.id(0x30), online: false, lastError: hostile)
        v.peers[2].address = "gw<1>&.local:4984"
        let svg = v.svg()
        #expect(!svg.contains("<script>"))
        #expect(svg.contains("&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt; &amp; &quot;more&quot;"))
        let parsed = try Self.parse(svg)
        let title = parsed.titles.first { $0.hasPrefix(Self.id(0x30).description) }
        #expect(title == "\(Self.id(0x30).description)\ngw<1>&.local:4984\nlast error: refused: <script>alert('x')</script> & \"more\"\u{FFFD}\u{FFFD}")
        #expect(MeshView.xmlEscaped("a<b>&\"c'\u{0}\n") == "a&lt;b&gt;&amp;&quot;c&apos;\u{FFFD}\n")
    }

    @Test("the same view gives the same bytes, whatever order peers and links came in")
    func deterministic() {
        let v = Self.lab()
        var w = Self.lab()
        w.peers.reverse()
        w.links = w.links.reversed().map { ($0.1, $0.0) }
        #expect(v.svg() == v.svg())
        #expect(v.svg() == w.svg())
    }

    @Test("30 nodes: every box inside the picture and none overlapping another")
    func thirtyNodesStayApart() throws {
        var v = MeshView()
        v.me = Self.id(0)
        let ids: [PeerID] = (1...29).map { (n: Int) -> PeerID in Self.id(UInt8(n * 8)) }
        v.peers = ids.enumerated().map { (i: Int, p: PeerID) -> MeshView.Peer in Self.peer(p, on: i % 3 == 0 ? .wifi : nil) }
        v.links = ids.indices.map { (i: Int) -> (PeerID, PeerID) in (ids[i], ids[(i + 1) % ids.count]) }
        let parsed = try Self.parse(v.svg())
        let box = try #require(parsed.elements.first?.attributes["viewBox"]?.split(separator: " ").compactMap { Int($0) })
        let (w, h) = (MeshView.svgNodeWidth, MeshView.svgNodeHeight)
        let centres: [(Int, Int)] = parsed.groups.compactMap { g in
            guard g["data-peer"] != nil, let t = g["transform"] else { return nil }
            let xy = t.dropFirst("translate(".count).dropLast().split(separator: ",").compactMap { Int($0) }
            return xy.count == 2 ? (xy[0], xy[1] + MeshView.svgCaptionHeight) : nil
        }
        #expect(centres.count == 30)
        for (x, y) in centres {
            let inside: Bool = x >= w / 2 && x + w / 2 <= box[2] && y >= h / 2 && y + h / 2 <= box[3]
            #expect(inside, "(\(x), \(y)) outside \(box)")
        }
        for i in centres.indices {
            for j in centres.indices where j > i {
                let dx: Int = abs(centres[i].0 - centres[j].0), dy: Int = abs(centres[i].1 - centres[j].1)
                let apart = dx >= w || dy >= h
                #expect(apart, "nodes \(i) and \(j) overlap at \(centres[i]) and \(centres[j])")
            }
        }
    }

    @Test("a gateway with no peers yet still gets a picture: itself and a caption saying so")
    func alone() throws {
        var v = MeshView()
        v.me = Self.id(0x42)
        let svg = v.svg()
        let parsed = try Self.parse(svg)
        #expect(parsed.groups.compactMap { $0["data-peer"] } == [Self.id(0x42).description])
        #expect(svg.contains("no peers known yet"))
        #expect(try Self.parse(MeshView().svg()).groups.compactMap { $0["data-peer"] }.isEmpty)
    }
}
