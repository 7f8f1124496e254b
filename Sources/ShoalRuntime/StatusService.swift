import Glibc
import ShoalConfig
import ShoalCore
import ShoalLinux
import ShoalStatus
import ShoalStore
import ShoalSupervision
import Synchronization
import ShoalThreads

/// What a field engineer sees and types at the gateway:
/// - the console line: written to the board's console when anything in it changes (other than the
///   uptime) and at least every `statusIntervalSeconds`;
/// - the serial console's commands (a tty console): status, peers, retry, help — see ConsoleShell;
/// - the status LED: the signal for the gateway's state (LEDEngine's table), driven by a thread of
///   its own so blinks keep time whatever the rest does.
/// A console or LED that cannot be opened is logged and the service runs on without it: the
/// gateway's job is not the console.
struct StatusService: Service {
    let gateway: Gateway
    let store: DocumentStore

    func run(context: ServiceContext) async throws {
        let console = gateway.board.console
        var writer: ConsoleWriter?
        if console.device != "none" {
            do { writer = try ConsoleWriter(device: console.device, baud: console.baud) } catch {
                gateway.logger.warning(.status, "console \(console.device) unavailable (\(error)); status lines go to the log only")
            }
        }
        let threads = StatusThreads(gateway: gateway, store: store)
        threads.startLED()
        if let writer, writer.isInteractive { threads.startConsole(writer) }
        // The snapshots are taken on a thread of this service's, not the store's: a store thread
        // held by a slow disk (a purge or a ping waiting behind a stalled commit) must not freeze
        // the LED and the console line. A snapshot reads the store without its write lock.
        let snapshots = BlockingThread(name: "shoal-status", maxQueued: 4)
        defer { snapshots.shutdown() }
        // Stopping joins the LED and console threads: on the work thread, never the pool.
        do { try await loop(context: context, writer: writer, threads: threads, snapshots: snapshots) } catch {
            _ = try? await gateway.workThread.run { threads.stop() }
            throw error
        }
        _ = try? await gateway.workThread.run { threads.stop() }
    }

    private func loop(context: ServiceContext, writer: ConsoleWriter?, threads: StatusThreads, snapshots: BlockingThread) async throws {
        let console = gateway.board.console
        var lastKey = ""
        var lastWrite = ContinuousClock.now
        var lastMoved = (0, 0)
        var movedAt = ContinuousClock.now - .seconds(60)
        let interval = Duration.seconds(console.statusIntervalSeconds)
        let gw = gateway, store = self.store
        repeat {
            context.heartbeat()
            let status = try await snapshots.run { gw.statusSnapshot(store: store) }
            // The LED: documents moving in the last 2 s is "syncing"; every transport in error is a
            // radio error.
            let moved = (Int(status.counters["documentsReceived"] ?? 0), Int(status.counters["documentsSent"] ?? 0))
            if moved != lastMoved { movedAt = ContinuousClock.now; lastMoved = moved }
            let syncing = ContinuousClock.now - movedAt < .seconds(2)
            // A radio error needs a radio: on a board with none (sim, a wired box) a transport that
            // cannot advertise is a configuration matter, which the log and `shoal status` tell.
            let hasRadio = gw.board.wifiInterface != nil || gw.board.bluetoothAdapter != nil
            let radioError = hasRadio && !status.transports.isEmpty && status.transports.allSatisfy { !$0.active && $0.error != nil }
            threads.show(LEDEngine.signal(for: status, syncing: syncing, radioError: radioError))

            let key = "\(status.state) \(status.documents) \(status.lastSequence) \(status.meshState) \(status.connectedPeers) \(status.children.map(\.state)) \(status.sync?.text ?? "")"
            let due = console.statusIntervalSeconds > 0 && ContinuousClock.now - lastWrite >= interval
            if key != lastKey || due {
                let line = status.consoleLine
                // stdout may be a pipe that stalls: write from a thread of our own.
                if let w = writer { _ = try await gateway.workThread.run { threads.write(w, line) } }
                if key != lastKey { gateway.logger.verbose(.status, line) }
                lastKey = key
                lastWrite = ContinuousClock.now
            }
        } while await context.pause(for: .seconds(1))
    }
}

/// The LED and console threads of the status service (never the cooperative pool: they sleep and
/// block on the tty).
final class StatusThreads: Sendable {
    let gateway: Gateway
    let store: DocumentStore
    let signal = Locked<LEDSignal>(.booting)
    let stopping = Atomic<Bool>(false)
    let workers = WorkerGroup()
    /// One writer at a time on the console (status lines and command answers).
    let consoleLock = Locked<Void>(())

    init(gateway: Gateway, store: DocumentStore) {
        self.gateway = gateway
        self.store = store
    }

    func show(_ s: LEDSignal) { signal.withLock { $0 = s } }

    func write(_ w: ConsoleWriter, _ line: String) {
        consoleLock.withLock { _ in _ = w.writeLine(line) }
    }

    func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        if !workers.spawn(name, body) { gateway.logger.error(.status, "cannot start the \(name) thread") }
    }

    /// Asks the LED and console threads to end and joins them (3 s at most: a console write can
    /// block on a stalled tty); logs those abandoned.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        let abandoned = workers.join(timeoutMillis: 3000)
        if !abandoned.isEmpty { gateway.logger.warning(.status, "stopping: abandoned threads still blocked after 3 s: \(abandoned.joined(separator: ", "))") }
    }

    /// Opens the board's LED (nil for console and none, or when it cannot be had).
    static func openLight(_ led: BoardConfig.LED, logger: Logger) -> StatusLight? {
        do {
            switch led.driver {
            case .gpiod:
                guard let chip = led.chip, let line = led.line else { return nil }
                return try GPIOLineLight(chip: chip, line: Int(line), activeLow: led.activeLow)
            case .sysfs:
                guard let name = led.name else { return nil }
                return try SysfsLight(name: name, root: ProcessEnvironment.get("SHOAL_SYSFS_LEDS") ?? "/sys/class/leds")
            case .console, .none:
                return nil
            }
        } catch {
            logger.warning(.status, "status LED (\(led.driver.rawValue)) unavailable: \(error); the pattern shows in the log and the console line only")
            return nil
        }
    }

    func startLED() {
        let light = StatusThreads.openLight(gateway.board.led, logger: gateway.logger)
        if let light { gateway.logger.info(.status, "status LED: \(light.description)") }
        spawn("status-led") {
            var engine = LEDEngine(signal: self.signal.withLock { $0 }, now: UInt64(monotonicMillis()))
            var lit: Bool?
            var failed = false
            self.gateway.ledPattern.withLock { $0 = engine.pattern.name }
            while !self.stopping.load(ordering: .relaxed) {
                let now = UInt64(monotonicMillis())
                if engine.show(self.signal.withLock { $0 }, now: now) {
                    self.gateway.ledPattern.withLock { $0 = engine.pattern.name }
                    self.gateway.logger.verbose(.status, "status LED: \(engine.pattern.name)")
                }
                let on = engine.isOn(at: now)
                if on != lit, let light, !failed {
                    do { try light.set(on) } catch {
                        failed = true
                        self.gateway.logger.warning(.status, "status LED \(light.description) failed: \(error); giving it up until restart")
                    }
                }
                lit = on
                let next = engine.nextChange(after: now) ?? now + 200
                SystemCall.pause(millis: Int(max(5, min(200, next - now))))
            }
            if let light {
                try? light.set(false)
                light.close()
            }
        }
    }

    func startConsole(_ writer: ConsoleWriter) {
        let shell = ConsoleShell(gateway: gateway, store: store)
        spawn("console-in") {
            self.write(writer, "shoal console: type help")
            while !self.stopping.load(ordering: .relaxed) {
                switch writer.readLines(timeoutMillis: 250) {
                case .lines(let lines):
                    for line in lines {
                        for answer in shell.respond(to: line) { self.write(writer, answer) }
                    }
                case .disconnected(let why):
                    // A serial line with nobody on it: wait and listen again; output keeps going
                    // (writes to a hung-up tty are dropped).
                    self.gateway.logger.verbose(.status, "console \(writer.device): \(why); listening again in 2 s")
                    for _ in 0..<8 where !self.stopping.load(ordering: .relaxed) { SystemCall.pause(millis: 250) }
                }
            }
        }
    }
}

/// The serial console's commands. Each answer is a few short lines (a 115200-baud line writes
/// about 11 characters a millisecond).
struct ConsoleShell {
    let gateway: Gateway
    let store: DocumentStore

    func respond(to raw: String) -> [String] {
        if raw == ConsoleWriter.overlongLine { return ["error: line longer than \(ConsoleWriter.maxLine) characters ignored"] }
        let words = raw.split(separator: " ").map(String.init)
        guard let command = words.first?.lowercased() else { return [] }
        switch command {
        case "help", "?":
            return [
                "commands:",
                "  status        the gateway's state, mesh, documents, transports, LED",
                "  peers         peers this gateway knows (online, link, activity)",
                "  retry         retry the radios now: advertising and discovery (retryNetworks)",
                "  help          this list",
            ]
        case "status":
            let s = gateway.statusSnapshot(store: store)
            var lines = [s.consoleLine]
            for t in s.transports {
                lines.append("\(t.name): \(t.summary)")
            }
            if let p = s.identityProblem { lines.append("identity problem: \(p)") }
            lines.append("led: \(gateway.ledPattern.withLock { $0 })")
            return lines
        case "peers":
            let view = gateway.meshView.withLock { $0 }
            if view.peers.isEmpty { return ["no peers known yet (mesh \(view.state.rawValue))"] }
            return view.peers.map { p in
                let link = p.info.connectedOn.map { "linked \($0.rawValue) \(p.info.outgoing == true ? "out" : "in")" } ?? "not linked"
                return "\(p.info.peer.short) \(p.info.online ? "online" : "offline") \(link) \(p.info.activity.rawValue)\(p.address.map { " \($0)" } ?? "")"
                    + (p.sync.map { " syncing \($0.text)" } ?? "")
            }
        case "retry":
            guard words.count == 1 || (words.count == 2 && words[1].lowercased() == "radios") else { return ["usage: retry"] }
            return [gateway.retryRadios() ? "retrying the radios now" : "replication is not running yet"]
        default:
            let shown = command.count > 20 ? String(command.prefix(20)) + "…" : command
            return ["unknown command \"\(shown)\"; type help"]
        }
    }
}
