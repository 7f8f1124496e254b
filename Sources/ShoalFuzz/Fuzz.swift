import Glibc
import ShoalConfig
import ShoalCore
import ShoalReplication
import ShoalTLS
import ShoalTrust
import ShoalWire
import ShoalYAML

/// The inputs Shoal takes from outside, each behind one fuzz target: every one must answer bad
/// bytes with an error, never a crash, a hang or unbounded memory. The two `fatalError`s below are
/// the fuzzer's oracles (a property that failed), not error handling: this program only fuzzes.
enum FuzzTarget: String, CaseIterable {
    /// A replication link's byte stream: frames, then messages (HELLO and the rest) and the
    /// prepared form the link threads hand the node.
    case frame
    /// One replication message payload.
    case message
    /// Document bodies and control requests: the JSON parser (and its printer, round-tripped).
    case json
    /// A site file (YAML through libyaml, then the site's rules).
    case site
    /// A board file extending the built-in base.
    case board
    /// A peer's certificate (DER or PEM), as TLS would see it.
    case certificate
    /// A control-socket request frame.
    case control
    /// A message on the uplink's hub: a subject line, header lines up to an empty line, then the
    /// payload (anyone allowed on the stream may put anything there).
    case hub
    /// A `_trust` document body (any peer may relay any body, signed or not): read strictly, then
    /// judged by a ledger that trusts one fixed admin key and already holds a few entries.
    case trust
    /// A query (filter, order, aggregates, group by): parsed, printed back, and run on a small
    /// store against the Swift reference.
    case query
    /// A `_releases` manifest or `_status` document body (any peer may relay any body): read
    /// strictly, round-tripped, then judged against one fixed release key.
    case release

    func run(_ bytes: [UInt8]) {
        switch self {
        case .frame:
            var decoder = FrameDecoder(limit: 1 << 16)
            // Fed in two pieces, as a socket would.
            let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
            decoder.feed(bytes[..<cut])
            decoder.feed(bytes[cut...])
            while true {
                guard let frame = try? decoder.next() else { break }
                _ = try? ReplicationMessage(decoding: frame)
                _ = ReplicationNode.prepare(frame, maxBodyBytes: 4096)
            }
        case .message:
            if let m = try? ReplicationMessage(decoding: bytes) {
                // What decodes must encode and decode to the same message.
                guard let again = try? ReplicationMessage(decoding: m.encoded()), again == m else {
                    fatalError("a decoded message did not survive encode + decode")
                }
            }
            _ = ReplicationNode.prepare(bytes, maxBodyBytes: 1 << 20)
        case .json:
            if let v = try? JSONValue.parse(bytes: bytes) {
                guard let again = try? JSONValue.parse(v.compactText), again == v else {
                    fatalError("JSON did not round-trip through its printer")
                }
            }
        case .site:
            _ = try? FuzzTarget.loader.loadSite(text: String(decoding: bytes, as: UTF8.self), file: "fuzz-site.yaml")
        case .board:
            let source = OneBoard(text: String(decoding: bytes, as: UTF8.self))
            _ = try? ConfigLoader(parse: YAMLParser.parse, source: source).loadBoard("fuzz")
        case .certificate:
            _ = try? Certificate(parsing: bytes)
        case .control:
            var decoder = FrameDecoder(limit: ControlMessage.frameLimit)
            decoder.feed(bytes)
            while true {
                guard let frame = try? decoder.next() else { break }
                _ = ControlMessage.decode(frame)
            }
        case .hub:
            let (subject, headers, payload) = FuzzTarget.hubMessage(bytes)
            let layout = HubLayout(group: "com.example.gateways")
            let collection = try! CollectionName(parsing: "sensors.readings")
            _ = HubDocument.read(subject: subject, headers: headers, payload: payload, collection: collection, layout: layout, maxBodyBytes: 4096)
            // Any id a subject token decodes to must survive encode + decode.
            let token = String(subject.split(separator: ".", omittingEmptySubsequences: false).last ?? "")
            if let id = HubLayout.untoken(token), HubLayout.untoken(HubLayout.token(id)) != id {
                fatalError("a hub document id did not survive encode + decode")
            }
        case .query:
            QueryFuzz.run(bytes)
        case .release:
            ReleaseFuzz.run(bytes)
        case .trust:
            guard let entry = try? TrustEntry.decode(String(decoding: bytes, as: UTF8.self)) else { break }
            // What decodes must encode to a body that decodes to the same entry.
            guard let again = try? TrustEntry.decode(entry.body), again == entry else {
                fatalError("a trust entry did not survive body + decode")
            }
            var ledger = TrustFuzz.ledger
            let verdict = ledger.consider(entry, documentID: entry.documentID, now: TrustFuzz.now)
            // An entry just taken is the one held: the same again is a redelivery.
            if verdict == .accepted, ledger.consider(entry, documentID: entry.documentID, now: TrustFuzz.now) != .unchanged {
                fatalError("an accepted trust entry was not held")
            }
            _ = (ledger.adminKeys.count, ledger.allowedPeers, ledger.revokedPeers, ledger.addedRoots, ledger.removedRoots, ledger.checkpoint, ledger.lastSerials)
        }
    }

    static let loader = ConfigLoader(parse: YAMLParser.parse, source: OneBoard(text: ""))

    /// `subject\nKey: value\n…\n\npayload`.
    static func hubMessage(_ bytes: [UInt8]) -> (String, [String: String], [UInt8]) {
        var lines: [[UInt8]] = []
        var rest = bytes[...]
        while let nl = rest.firstIndex(of: 0x0A) {
            let line = Array(rest[..<nl])
            rest = rest[(nl + 1)...]
            if line.isEmpty, !lines.isEmpty { break }
            lines.append(line)
        }
        if lines.isEmpty { return (String(decoding: bytes, as: UTF8.self), [:], []) }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            let text = String(decoding: line, as: UTF8.self)
            guard let colon = text.firstIndex(of: ":") else { continue }
            headers[String(text[..<colon])] = String(text[text.index(after: colon)...].drop { $0 == " " })
        }
        return (String(decoding: lines[0], as: UTF8.self), headers, Array(rest))
    }
}

/// The fuzzed text as board `fuzz`, over a base like board-configs/base.yaml (the fuzz target
/// links no runtime, so the base is here).
struct OneBoard: BoardSource {
    let text: String
    static let base = """
        board: {name: Shoal base, support: abstract}
        led: {driver: none}
        console: {device: none, baud: 115200, statusIntervalSeconds: 60}
        wifi: {interface: wlan0}
        bluetooth: {adapter: hci0}
        storage: {path: /var/lib/shoal, durability: full}
        control: {socket: /run/shoal/control.sock}
        log: {level: info}
        """
    func boardFile(named name: String, relativeTo: String?) -> (path: String, text: String)? {
        switch name {
        case "fuzz": ("fuzz.yaml", text)
        case "base": ("base.yaml", OneBoard.base)
        default: nil
        }
    }
    func boardNames() -> [String] { ["fuzz", "base"] }
}
