import Glibc
import ShoalCore
import ShoalMesh

/// The mesh as a picture, drawn by Shoal itself (`GET /v1/mesh?format=svg`, the web console): no
/// Graphviz on the gateway. The layout is fixed, not searched: this gateway in the centre, every
/// other node on one circle in peer-id order, the circle growing with the count so 30 nodes stay
/// apart. Same view, same bytes — tests and caches can compare pictures.
///
/// What a reader would get wrong: only our own links are known for sure (transport, tree); the
/// others are what gossip reported and may be stale, so they are drawn thin and dashed.
extension MeshView {
    /// One node's box, in SVG user units.
    static let svgNodeWidth = 108
    static let svgNodeHeight = 40
    static let svgMargin = 24
    static let svgCaptionHeight = 28
    static let svgLegendHeight = 48

    /// A link as drawn: ends in id order, with what we know of it.
    struct SVGLink: Equatable {
        var a: PeerID
        var b: PeerID
        var ours: Bool
        var tree: Bool
        var transport: MeshTransport?
    }

    /// The SVG document (UTF-8 text, `image/svg+xml`).
    public func svg() -> String {
        let info = Dictionary(peers.map { ($0.info.peer, $0) }, uniquingKeysWith: { a, _ in a })
        let links = svgLinks(info)
        var names = Set(peers.map(\.info.peer))
        for l in links { names.insert(l.a); names.insert(l.b) }
        if let me { names.insert(me) }
        let others = names.filter { $0 != me }.sorted()
        let placed = svgLayout(others)
        let (width, height) = (placed.size, placed.size + Self.svgCaptionHeight + Self.svgLegendHeight)

        var out = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"shoal-mesh\" viewBox=\"0 0 \(width) \(height)\""
        out += " width=\"\(width)\" height=\"\(height)\" font-family=\"sans-serif\" role=\"img\" aria-label=\"mesh of \(names.count) nodes\">\n"
        out += "<rect class=\"background\" width=\"\(width)\" height=\"\(height)\" fill=\"#ffffff\"/>\n"
        out += svgCaption(nodes: names.count, links: links.count)
        out += "<g class=\"links\" transform=\"translate(0,\(Self.svgCaptionHeight))\">\n"
        for l in links {
            guard let p = placed.at[l.a], let q = placed.at[l.b] else { continue }
            out += svgLink(l, p, q)
        }
        out += "</g>\n<g class=\"nodes\" transform=\"translate(0,\(Self.svgCaptionHeight))\">\n"
        for id in names.sorted() {
            guard let p = placed.at[id] else { continue }
            out += svgNode(id, info[id], at: p)
        }
        out += "</g>\n"
        out += svgLegend(top: placed.size + Self.svgCaptionHeight)
        return out + "</svg>\n"
    }

    /// Gossip's links (each once, ends in id order) plus any link of ours the gossip has not told
    /// yet (a peer we are connected to is linked, whatever gossip says), sorted.
    func svgLinks(_ info: [PeerID: Peer]) -> [SVGLink] {
        var pairs = Set<[PeerID]>()
        for (a, b) in links where a != b { pairs.insert([min(a, b), max(a, b)]) }
        if let me {
            for p in peers where p.info.connectedOn != nil && p.info.peer != me {
                pairs.insert([min(me, p.info.peer), max(me, p.info.peer)])
            }
        }
        return pairs.sorted { $0[0] != $1[0] ? $0[0] < $1[0] : $0[1] < $1[1] }.map { pair in
            let ours = pair.contains { $0 == me }
            let other = pair[0] == me ? pair[1] : pair[0]
            return SVGLink(a: pair[0], b: pair[1], ours: ours, tree: ours && treeNeighbours.contains(other),
                           transport: ours ? info[other]?.info.connectedOn : nil)
        }
    }

    /// Centres of the nodes (this gateway in the middle when known; the others on a circle from
    /// the top, clockwise, in the order given) and the square's side.
    func svgLayout(_ others: [PeerID]) -> (at: [PeerID: (x: Int, y: Int)], size: Int) {
        let n = others.count
        // Adjacent boxes on the circle stay a box width and a gap apart: the circumference grows
        // with the count (30 nodes: radius ~600).
        let spacing = Double(Self.svgNodeWidth + 20)
        let radius = n == 0 ? 0 : max(150, Int((Double(n) * spacing / (2 * Double.pi)).rounded(.up)))
        // At least as wide as the caption and the legend (a gateway alone was cut off at 156 px).
        let size = max(360, 2 * radius + Self.svgNodeWidth + 2 * Self.svgMargin)
        let centre = size / 2
        var at: [PeerID: (x: Int, y: Int)] = [:]
        if let me { at[me] = (centre, centre) }
        for (i, id) in others.enumerated() {
            let angle = -Double.pi / 2 + 2 * Double.pi * Double(i) / Double(n)
            at[id] = (centre + Int((Double(radius) * cos(angle)).rounded()), centre + Int((Double(radius) * sin(angle)).rounded()))
        }
        return (at, size)
    }

    func svgCaption(nodes: Int, links: Int) -> String {
        let who = me.map { "\($0.short) · " } ?? ""
        let text = nodes <= 1 && links == 0 ? "\(who)mesh \(state.rawValue) · no peers known yet"
            : "\(who)mesh \(state.rawValue) · \(nodes - (me == nil ? 0 : 1)) peers · \(links) links"
        return "<text class=\"caption\" x=\"\(Self.svgMargin)\" y=\"19\" font-size=\"14\" fill=\"#333\">\(Self.xmlEscaped(text))</text>\n"
    }

    static func svgColour(_ t: MeshTransport?) -> String {
        switch t {
        case .wifi: return "#1f6feb"
        case .bluetooth: return "#8250df"
        case nil: return "#8c959f"
        }
    }

    func svgLink(_ l: SVGLink, _ p: (x: Int, y: Int), _ q: (x: Int, y: Int)) -> String {
        var classes = ["link", l.ours ? "ours" : "gossip", l.tree ? "tree" : "not-tree"]
        if let t = l.transport { classes.append(t.rawValue) }
        let width = l.ours ? 3 : 1
        let dash = l.tree ? "" : " stroke-dasharray=\"\(l.ours ? "8 5" : "4 4")\""
        var out = "<g class=\"\(classes.joined(separator: " "))\" data-link=\"\(l.a.description) \(l.b.description)\">"
        out += "<line x1=\"\(p.x)\" y1=\"\(p.y)\" x2=\"\(q.x)\" y2=\"\(q.y)\" stroke=\"\(Self.svgColour(l.transport))\" stroke-width=\"\(width)\"\(dash)/>"
        if let t = l.transport {
            // The transport at the link's middle, on a white halo so crossing lines do not hide it.
            let (mx, my) = ((p.x + q.x) / 2, (p.y + q.y) / 2)
            out += "<text class=\"transport\" x=\"\(mx)\" y=\"\(my + 4)\" text-anchor=\"middle\" font-size=\"11\" fill=\"\(Self.svgColour(t))\""
            out += " stroke=\"#ffffff\" stroke-width=\"4\" paint-order=\"stroke\">\(Self.xmlEscaped(t.rawValue))</text>"
        }
        return out + "</g>\n"
    }

    func svgNode(_ id: PeerID, _ peer: Peer?, at p: (x: Int, y: Int)) -> String {
        let isMe = id == me
        let status = isMe ? "this gateway" : peer.map { $0.info.online ? "online" : "offline" } ?? "via gossip"
        let kind = isMe ? "me" : peer?.info.online == true ? "online" : "offline"
        let stroke = isMe ? "#24292f" : kind == "online" ? "#1a7f37" : "#8c959f"
        let fill = isMe ? "#fff8c5" : kind == "online" ? "#dafbe1" : "#f6f8fa"
        // The tooltip: the full id, where we dial it and why the last link failed (the peer's own
        // words may be in it: escaped like every text here).
        var title = id.description
        if let a = peer?.address { title += "\n\(a)" }
        if let e = peer?.info.lastError { title += "\nlast error: \(e)" }
        let (w, h) = (Self.svgNodeWidth, Self.svgNodeHeight)
        var out = "<g class=\"node \(kind)\(isMe ? "" : " \(status == "via gossip" ? "gossip" : "peer")")\" data-peer=\"\(id.description)\""
        out += " transform=\"translate(\(p.x),\(p.y))\"><title>\(Self.xmlEscaped(title))</title>"
        out += "<rect x=\"\(-w / 2)\" y=\"\(-h / 2)\" width=\"\(w)\" height=\"\(h)\" rx=\"6\" fill=\"\(fill)\" stroke=\"\(stroke)\""
        out += " stroke-width=\"\(isMe ? 3 : 1.5)\"\(kind == "offline" ? " stroke-dasharray=\"4 3\"" : "")/>"
        out += "<text y=\"-3\" text-anchor=\"middle\" font-family=\"monospace\" font-size=\"13\"\(isMe ? " font-weight=\"bold\"" : "") fill=\"#24292f\">\(Self.xmlEscaped(id.short))</text>"
        out += "<text class=\"status\" y=\"13\" text-anchor=\"middle\" font-size=\"11\" fill=\"#57606a\">\(Self.xmlEscaped(status))</text>"
        return out + "</g>\n"
    }

    func svgLegend(top: Int) -> String {
        let x = Self.svgMargin, y1 = top + 16, y2 = top + 36
        var out = "<g class=\"legend\" font-size=\"11\" fill=\"#57606a\">"
        out += "<line x1=\"\(x)\" y1=\"\(y1 - 4)\" x2=\"\(x + 28)\" y2=\"\(y1 - 4)\" stroke=\"#24292f\" stroke-width=\"3\"/>"
        out += "<text x=\"\(x + 34)\" y=\"\(y1)\">our link, tree</text>"
        out += "<line x1=\"\(x + 130)\" y1=\"\(y1 - 4)\" x2=\"\(x + 158)\" y2=\"\(y1 - 4)\" stroke=\"#24292f\" stroke-width=\"3\" stroke-dasharray=\"8 5\"/>"
        out += "<text x=\"\(x + 164)\" y=\"\(y1)\">our link</text>"
        out += "<line x1=\"\(x)\" y1=\"\(y2 - 4)\" x2=\"\(x + 28)\" y2=\"\(y2 - 4)\" stroke=\"#8c959f\" stroke-width=\"1\" stroke-dasharray=\"4 4\"/>"
        out += "<text x=\"\(x + 34)\" y=\"\(y2)\">gossip</text>"
        out += "<text x=\"\(x + 130)\" y=\"\(y2)\"><tspan fill=\"\(Self.svgColour(.wifi))\">wifi</tspan> · <tspan fill=\"\(Self.svgColour(.bluetooth))\">bluetooth</tspan></text>"
        return out + "</g>\n"
    }

    /// Text made safe for XML character data and attribute values: the five markup characters as
    /// entities, and the control characters XML 1.0 forbids (a peer's error text may carry them)
    /// as U+FFFD.
    static func xmlEscaped(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for u in s.unicodeScalars {
            switch u {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\t", "\n", "\r": out.unicodeScalars.append(u)
            default:
                if u.value < 0x20 || u.value == 0xFFFE || u.value == 0xFFFF {
                    out += "\u{FFFD}"
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out
    }
}
