import ShoalCore

/// Why a supervisor gave up. It reaches the parent as this child's crash; at the root it makes the
/// process exit non-zero, and systemd (Restart=on-failure) becomes the outer supervisor.
public struct SupervisorError: Error, Sendable, CustomStringConvertible {
    public let supervisor: String
    public let child: String
    public let restarts: Int
    public let window: Duration
    public var description: String {
        "supervisor \(supervisor) gave up: child \(child) needed more than \(restarts) restarts within \(window.secondsDouble)s"
    }
}

/// Which siblings restart with a crashed child, as in OTP.
public enum RestartStrategy: String, Sendable {
    /// Only the crashed child.
    case oneForOne = "one_for_one"
    /// Every child: the others are stopped (reverse order) and all start again in order.
    case oneForAll = "one_for_all"
    /// The crashed child and every child started after it.
    case restForOne = "rest_for_one"
}

/// At most `maxRestarts` restarts within `window`; each restart waits a backoff that doubles from
/// `backoffInitial` up to `backoffMax` while restarts keep coming within the window.
public struct RestartIntensity: Sendable {
    public var maxRestarts: Int
    public var window: Duration
    public var backoffInitial: Duration
    public var backoffMax: Duration

    public init(maxRestarts: Int = 5, within window: Duration = .seconds(30),
                backoffInitial: Duration = .milliseconds(100), backoffMax: Duration = .seconds(5)) {
        precondition(maxRestarts >= 0)
        self.maxRestarts = maxRestarts
        self.window = window
        self.backoffInitial = backoffInitial
        self.backoffMax = backoffMax
    }

    func backoff(forRestart n: Int) -> Duration {
        guard n > 1 else { return backoffInitial }
        var d = backoffInitial
        for _ in 1..<min(n, 20) {
            d = d * 2
            if d >= backoffMax { return backoffMax }
        }
        return min(d, backoffMax)
    }
}

/// An OTP supervisor, itself a `Service`, so supervisors nest into a tree.
///
/// One event loop owns all state: child exits, heartbeat checks and shutdown requests arrive as
/// events and are handled one at a time, so no two restarts ever race. A child's exit is matched by
/// generation: the exit of a child that was already stopped or abandoned (hung) is ignored.
public final class Supervisor: Service {
    public let name: String
    public let strategy: RestartStrategy
    public let intensity: RestartIntensity
    public let children: [ChildSpec]
    public let report: SupervisionReport

    public init(name: String, strategy: RestartStrategy, intensity: RestartIntensity = RestartIntensity(),
                children: [ChildSpec], report: SupervisionReport) {
        precondition(Set(children.map(\.name)).count == children.count, "child names must be unique")
        self.name = name
        self.strategy = strategy
        self.intensity = intensity
        self.children = children
        self.report = report
    }

    enum Outcome: Sendable {
        case normal
        case crashed(String)
        case hung
        var isAbnormal: Bool { if case .normal = self { return false }; return true }
    }

    enum Event: Sendable {
        case exited(index: Int, generation: Int, outcome: Outcome)
        case tick
        case shutdown
    }

    struct Running {
        var generation: Int
        var task: Task<Void, Never>
        var context: ServiceContext
    }

    public func run(context: ServiceContext) async throws {
        let loop = Loop(supervisor: self, context: context)
        try await loop.run()
    }
}

extension Supervisor {
    /// The state of one run of a supervisor. Not shared: only the supervisor's own task touches it.
    actor Loop {
        let sup: Supervisor
        let context: ServiceContext
        let events: AsyncStream<Event>
        let sink: AsyncStream<Event>.Continuation
        var running: [Running?]
        var generation = 0
        var restartTimes: [Duration] = []

        init(supervisor: Supervisor, context: ServiceContext) {
            self.sup = supervisor
            self.context = context
            (events, sink) = AsyncStream<Event>.makeStream()
            running = Array(repeating: nil, count: supervisor.children.count)
        }

        var log: Logger { context.logger }
        func path(_ i: Int) -> String { "\(context.path)/\(sup.children[i].name)" }

        func run() async throws {
            let watchers = startWatchers()
            defer { for w in watchers { w.cancel() } }
            log.info(.supervision, "\(context.path): starting \(sup.children.count) children (\(sup.strategy.rawValue))")
            for i in sup.children.indices {
                if context.isShuttingDown { break }
                await start(i)
            }
            context.markReady()
            for await event in events {
                switch event {
                case .shutdown:
                    log.info(.supervision, "\(context.path): shutting down")
                    await stopAll()
                    return
                case .tick:
                    // A supervisor nested under another is alive while its loop goes round:
                    // its own heartbeat, for the parent's hung check (root/mqtt under root).
                    context.heartbeat()
                    try await checkHeartbeats()
                case .exited(let i, let gen, let outcome):
                    guard let r = running[i], r.generation == gen else { continue }
                    running[i] = nil
                    try await childExited(i, outcome)
                }
            }
            // The stream ends only if our own task was cancelled: no grace, cancel everyone.
            for r in running.compactMap({ $0 }) { r.task.cancel() }
            throw CancellationError()
        }

        func startWatchers() -> [Task<Void, Never>] {
            var tasks: [Task<Void, Never>] = []
            let ctx = context
            let sink = self.sink
            tasks.append(Task {
                await ctx.waitForShutdown()
                sink.yield(.shutdown)
            })
            let timeouts = sup.children.compactMap(\.heartbeatTimeout)
            if let shortest = timeouts.min() {
                let period = max(shortest / 4, .milliseconds(5))
                let clock = context.clock
                tasks.append(Task {
                    while !Task.isCancelled {
                        do { try await clock.sleep(for: period) } catch { return }
                        sink.yield(.tick)
                    }
                })
            }
            return tasks
        }

        /// Starts child `i` and, if it says it will signal readiness, waits for that.
        func start(_ i: Int) async {
            let spec = sup.children[i]
            generation += 1
            let gen = generation
            let p = path(i)
            let ctx = ServiceContext(name: spec.name, path: p, logger: log, clock: context.clock)
            sup.report.update(p) { $0.state = .starting }
            let service: any Service
            do { service = try spec.make() } catch { service = ClosureService { _ in throw error } }
            let sink = self.sink
            let task = Task {
                let outcome: Outcome
                do {
                    try await service.run(context: ctx)
                    outcome = .normal
                } catch is CancellationError where ctx.isShuttingDown || Task.isCancelled {
                    outcome = .normal
                } catch {
                    outcome = .crashed("\(error)")
                }
                ctx.exitLatch.open()
                ctx.readyLatch.open()
                sink.yield(.exited(index: i, generation: gen, outcome: outcome))
            }
            running[i] = Running(generation: gen, task: task, context: ctx)
            if let readyTimeout = spec.readyTimeout {
                let ready = await ctx.readyLatch.wait(timeout: readyTimeout, clock: context.clock)
                if !ready || ctx.exitLatch.isOpen {
                    if !ready { log.error(.supervision, "\(p): not ready within \(readyTimeout.secondsDouble)s") }
                    // An exit is reported through the event stream; a timeout is reported as a hang.
                    if !ready { sink.yield(.exited(index: i, generation: gen, outcome: .hung)); running[i]?.task.cancel() }
                    return
                }
            }
            sup.report.update(p) { $0.state = .running }
            log.verbose(.supervision, "\(p): started")
        }

        /// Stops child `i` gracefully; cancels it if it overruns; abandons it if even that fails.
        func stop(_ i: Int) async {
            guard let r = running[i] else { return }
            running[i] = nil
            let spec = sup.children[i]
            let p = path(i)
            sup.report.update(p) { $0.state = .stopping }
            r.context.requestShutdown()
            var exited = await r.context.exitLatch.wait(timeout: spec.shutdownTimeout, clock: context.clock)
            if !exited {
                log.warning(.supervision, "\(p): did not stop within \(spec.shutdownTimeout.secondsDouble)s; cancelling")
                r.task.cancel()
                exited = await r.context.exitLatch.wait(timeout: spec.shutdownTimeout, clock: context.clock)
                if !exited { log.error(.supervision, "\(p): ignored cancellation; abandoned") }
            }
            sup.report.update(p) { $0.state = .stopped }
            log.verbose(.supervision, "\(p): stopped")
        }

        func stopAll() async {
            for i in sup.children.indices.reversed() { await stop(i) }
        }

        func checkHeartbeats() async throws {
            let now = context.clock.now
            for i in sup.children.indices {
                guard let r = running[i], let timeout = sup.children[i].heartbeatTimeout else { continue }
                guard r.context.readyLatch.isOpen || sup.children[i].readyTimeout == nil else { continue }
                if now - r.context.lastHeartbeat > timeout {
                    log.error(.supervision, "\(path(i)): no heartbeat for \((now - r.context.lastHeartbeat).secondsDouble)s; treating it as hung")
                    sup.report.update(path(i)) { $0.state = .hung }
                    running[i] = nil
                    r.context.requestShutdown()
                    r.task.cancel()
                    try await childExited(i, .hung)
                }
            }
        }

        func childExited(_ i: Int, _ outcome: Outcome) async throws {
            let spec = sup.children[i]
            let p = path(i)
            let restart: Bool
            switch spec.restart {
            case .permanent: restart = true
            case .transient: restart = outcome.isAbnormal
            case .temporary: restart = false
            }
            switch outcome {
            case .normal: log.info(.supervision, "\(p): exited normally")
            case .crashed(let why): log.error(.supervision, "\(p): crashed: \(why)")
            case .hung: log.error(.supervision, "\(p): hung")
            }
            let reason: String? = switch outcome {
            case .normal: nil
            case .crashed(let why): why
            case .hung: "hung (missed heartbeat)"
            }
            sup.report.update(p) {
                // A temporary child that crashed is gone, as in OTP; it does not make the tree
                // unhealthy. Its error stays in the report.
                $0.state = restart ? .restarting : .stopped
                if let reason { $0.lastError = reason }
            }
            guard restart else { return }

            let now = context.clock.now
            restartTimes.append(now)
            restartTimes.removeAll { now - $0 > sup.intensity.window }
            if restartTimes.count > sup.intensity.maxRestarts {
                log.error(.supervision, "\(context.path): restart intensity exceeded (\(sup.intensity.maxRestarts) in \(sup.intensity.window.secondsDouble)s); escalating")
                sup.report.update(p) { $0.state = .failed }
                await stopAll()
                throw SupervisorError(supervisor: context.path, child: spec.name,
                                      restarts: sup.intensity.maxRestarts, window: sup.intensity.window)
            }
            let delay = sup.intensity.backoff(forRestart: restartTimes.count)
            if !(await context.pause(for: delay)) { return }  // shutdown came during the backoff

            let group: [Int]
            switch sup.strategy {
            case .oneForOne: group = [i]
            case .oneForAll: group = Array(sup.children.indices)
            case .restForOne: group = Array(i..<sup.children.count)
            }
            for j in group.reversed() where j != i { await stop(j) }
            for j in group {
                if j != i && sup.children[j].restart == .temporary { continue }
                sup.report.update(path(j)) { $0.restarts += 1 }
                log.info(.supervision, "\(path(j)): restarting")
                await start(j)
            }
        }
    }
}
