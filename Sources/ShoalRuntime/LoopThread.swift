import ShoalCore
import ShoalLinux
import ShoalSupervision
import ShoalThreads

/// A service whose work is one loop blocking in C on a thread of its own (an MQTT broker's bridge,
/// the uplink): the loop runs there, the service heartbeats for it while it goes round (`lastBeat`
/// recent: a blocking connect to a host that does not answer takes the kernel ~2 min), and on
/// shutdown asks it to `stop` and waits `stopWithin` before abandoning it (it then finds the stop
/// when its blocking call returns). `what` names it in the log ("mqtt local", "uplink").
struct LoopThread {
    let name: String
    let what: String
    let domain: LogDomain
    let stopWithin: Duration
    let lastBeat: @Sendable () -> ContinuousClock.Instant
    let loop: @Sendable () -> Void
    let stop: @Sendable () -> Void

    func run(context: ServiceContext, gateway: Gateway) async throws {
        let workers = WorkerGroup()
        let ended = Latch()
        let loop = self.loop
        guard workers.spawn(name, { loop(); ended.open() }) else {
            throw SystemError(call: "pthread_create(\(what))", code: 11)
        }
        context.markReady()
        while await context.pause(for: .seconds(1)) {
            if ended.isOpen { break }
            if ContinuousClock.now - lastBeat() < .seconds(150) { context.heartbeat() }
        }
        stop()
        guard await ended.wait(timeout: stopWithin) else {
            gateway.logger.warning(domain, "\(what): stopping: its thread is still inside a blocking call after \(stopWithin); abandoned")
            return
        }
        let abandoned = (try? await gateway.workThread.run { workers.join(timeoutMillis: 3000) }) ?? []
        if !abandoned.isEmpty { gateway.logger.warning(domain, "\(what): stopping: abandoned \(abandoned.joined(separator: ", ")) after 3 s") }
    }
}
