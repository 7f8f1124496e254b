import ShoalStatus
import Testing

@Suite("Status LED patterns")
struct LEDTests {
    typealias T = [(UInt64, Bool)]
    func timeline(_ signal: LEDSignal, from start: UInt64 = 1000, for millis: UInt64) -> T {
        LEDEngine(signal: signal, now: start).timeline(from: start, to: start + millis).map { ($0.at, $0.on) }
    }

    func same(_ a: T, _ b: T) -> Bool { a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 } }

    @Test("every signal's timeline, to the millisecond, on virtual time")
    func timelines() {
        // booting: 100 ms on, 100 ms off.
        #expect(same(timeline(.booting, for: 450), [(1000, true), (1100, false), (1200, true), (1300, false), (1400, true)]))
        // discovering: a 100 ms heartbeat every 2 s.
        #expect(same(timeline(.discovering, for: 4200), [(1000, true), (1100, false), (3000, true), (3100, false), (5000, true), (5100, false)]))
        // connected to 2 peers: two 200 ms blinks 300 ms apart, then a 1.5 s pause (period 2.2 s).
        #expect(same(timeline(.connected(peers: 2), for: 2300), [(1000, true), (1200, false), (1500, true), (1700, false), (3200, true)]))
        // more than 5 peers counts 5.
        #expect(timeline(.connected(peers: 9), for: 4000).filter { $0.1 }.count == LEDEngine(signal: .connected(peers: 5), now: 0).timeline(from: 0, to: 4000).filter { $0.on }.count)
        // syncing: 50 ms flicker.
        #expect(same(timeline(.syncing, for: 160), [(1000, true), (1050, false), (1100, true), (1150, false)]))
        // errors: 2, 3, 4 long blinks (600 on, 300 off), 1.8 s pause.
        #expect(same(timeline(.error(.identity), for: 3500), [(1000, true), (1600, false), (1900, true), (2500, false), (4300, true)]))
        #expect(timeline(.error(.store), for: 4200).filter { $0.1 }.count == 3)  // period 4.2 s
        #expect(timeline(.error(.store), for: 4201).filter { $0.1 }.count == 4)
        #expect(timeline(.error(.radio), for: 5100).filter { $0.1 }.count == 4)  // period 5.1 s
        // dead: solid on, never changes.
        #expect(same(timeline(.dead, for: 10_000), [(1000, true)]))
        #expect(LEDEngine(signal: .dead, now: 0).nextChange(after: 5) == nil)
    }

    @Test("a new signal restarts its pattern; the same signal does not; patterns are distinct")
    func switching() {
        var e = LEDEngine(signal: .discovering, now: 0)
        #expect(e.isOn(at: 50) && !e.isOn(at: 150))
        let switched = e.show(.connected(peers: 1), now: 1234)
        #expect(switched)
        #expect(e.isOn(at: 1234) && e.nextChange(after: 1234) == 1434)
        let again = e.show(.connected(peers: 1), now: 2000)
        #expect(!again)
        #expect(e.startedAt == 1234)
        let all: [LEDSignal] = [.booting, .discovering, .connected(peers: 1), .connected(peers: 2), .connected(peers: 5), .syncing,
                                .error(.identity), .error(.store), .error(.radio), .dead]
        let sketches = all.map { LEDPattern.pattern(for: $0).sketch(tickMillis: 50) }
        #expect(Set(sketches).count == all.count, "each state looks different")
    }

    @Test("the signal for a gateway follows the table's precedence")
    func precedence() {
        func status(_ state: GatewayState = .running, peers: Int = 0, identity: String? = nil, store: String = "running") -> GatewayStatus {
            var s = GatewayStatus(state: state, version: "t", boardID: "b", boardName: "b", boardSupport: "s", group: "g", serviceType: "_X._tcp",
                                  uptimeSeconds: 1, storePath: "/", durability: "full", documents: 0, tombstones: 0, collections: [],
                                  lastSequence: 0, meshState: "Discovering", connectedPeers: peers, peerID: nil, identityLabel: "l",
                                  identityNotAfter: nil, identityProblem: identity,
                                  children: [.init(path: "root/store", state: store, restarts: 0, lastError: nil)])
            s.transports = []
            s.storeRunning = store == "running"
            return s
        }
        #expect(LEDEngine.signal(for: status(.failed, identity: "x"), syncing: true, radioError: true) == .dead)
        #expect(LEDEngine.signal(for: status(identity: "expired"), syncing: true, radioError: true) == .error(.identity))
        #expect(LEDEngine.signal(for: status(store: "restarting"), syncing: true, radioError: true) == .error(.store))
        #expect(LEDEngine.signal(for: status(.booting), syncing: false, radioError: false) == .booting)
        #expect(LEDEngine.signal(for: status(peers: 2), syncing: true, radioError: true) == .error(.radio))
        #expect(LEDEngine.signal(for: status(peers: 2), syncing: true, radioError: false) == .syncing)
        #expect(LEDEngine.signal(for: status(peers: 2), syncing: false, radioError: false) == .connected(peers: 2))
        #expect(LEDEngine.signal(for: status(), syncing: false, radioError: false) == .discovering)
    }
}
