import ShoalCore
import ShoalLinux
import ShoalStatus
import ShoalSupervision

/// Writes the one-line status to the board's console when anything in it changes (other than the
/// uptime) and at least every `statusIntervalSeconds`. A console that cannot be opened is logged
/// and the service runs on without it: the gateway's job is not the console.
struct StatusService: Service {
    let gateway: Gateway

    func run(context: ServiceContext) async throws {
        let console = gateway.board.console
        var writer: ConsoleWriter?
        if console.device != "none" {
            do { writer = try ConsoleWriter(device: console.device, baud: console.baud) } catch {
                gateway.logger.warning(.status, "console \(console.device) unavailable (\(error)); status lines go to the log only")
            }
        }
        var lastKey = ""
        var lastWrite = ContinuousClock.now
        let interval = Duration.seconds(console.statusIntervalSeconds)
        let gw = gateway
        repeat {
            context.heartbeat()
            let status = try await gateway.storeThread.run { gw.statusSnapshot() }
            let key = "\(status.state) \(status.documents) \(status.lastSequence) \(status.meshState) \(status.connectedPeers) \(status.children.map(\.state))"
            let due = console.statusIntervalSeconds > 0 && ContinuousClock.now - lastWrite >= interval
            if key != lastKey || due {
                let line = status.consoleLine
                // stdout may be a pipe that stalls: write from a thread of our own.
                if let w = writer { _ = try await gateway.storeThread.run { w.writeLine(line) } }
                if key != lastKey { gateway.logger.verbose(.status, line) }
                lastKey = key
                lastWrite = ContinuousClock.now
            }
        } while await context.pause(for: .seconds(1))
    }
}
