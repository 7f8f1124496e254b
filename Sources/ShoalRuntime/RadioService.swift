import ShoalCore
import ShoalLinux
import ShoalSupervision
import ShoalThreads

/// The radio manager: watches the board's Wi-Fi interface (link, carrier, addresses), its Bluetooth
/// adapter (present, up) and rfkill (soft and hard blocks, from /dev/rfkill's events), publishes
/// what it sees for `shoal radios` and the console, and tells the replication driver (through
/// `Gateway.radioChanges`), which tells the mesh which transports are usable. Reacts within a second:
/// it wakes on rtnetlink and rfkill events and looks again every second.
struct RadioService: Service {
    let gateway: Gateway

    func run(context: ServiceContext) async throws {
        let gw = gateway
        let last = LastUsable()
        let watcher = RadioWatcher(wifiInterface: gateway.board.wifiInterface, bluetoothAdapter: gateway.board.bluetoothAdapter,
                                   rfkillPath: ProcessEnvironment.get("SHOAL_RFKILL") ?? "/dev/rfkill") { snapshot in
            gw.radios.withLock { $0 = snapshot }
            last.report(snapshot, logger: gw.logger)
            gw.radioChanges.send(snapshot)
        }
        guard watcher.start() else { throw ConfigurationFailure(message: "cannot start the radio watcher thread") }
        context.markReady()
        while await context.pause(for: .seconds(1)) { context.heartbeat() }
        let abandoned = (try? await gateway.workThread.run { watcher.stop() }) ?? []
        if !abandoned.isEmpty { gateway.logger.warning(.mesh, "radios: stopping: abandoned \(abandoned.joined(separator: ", ")) still blocked after 3 s") }
    }
}

/// Logs a transport becoming usable or not, once per change.
final class LastUsable: Sendable {
    let last = Locked<(wifi: Bool?, bluetooth: Bool?)>((nil, nil))

    func report(_ s: RadioSnapshot, logger: Logger) {
        let before = last.withLock { $0 }
        if s.wifiInterface != nil {
            let (up, why) = s.wifiUsable
            if up != before.wifi { up ? logger.info(.mesh, "radios: wifi usable (\(s.wifiInterface!) up)") : logger.warning(.mesh, "radios: wifi not usable: \(why ?? "?")") }
            last.withLock { $0.wifi = up }
        }
        if s.bluetoothAdapter != nil {
            let (up, why) = s.bluetoothUsable
            if up != before.bluetooth { up ? logger.info(.mesh, "radios: bluetooth usable (\(s.bluetoothAdapter!) up)") : logger.info(.mesh, "radios: bluetooth not usable: \(why ?? "?")") }
            last.withLock { $0.bluetooth = up }
        }
    }
}
