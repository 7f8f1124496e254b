import ShoalCore
import ShoalSupervision
import ShoalTesting
import Synchronization
import Testing
import ShoalThreads

/// Records what the services under test did, in order.
final class Journal: Sendable {
    private let entries = Locked<[String]>([])
    func add(_ e: String) { entries.withLock { $0.append(e) } }
    var all: [String] { entries.withLock { $0 } }
    func count(_ e: String) -> Int { all.filter { $0 == e }.count }
    func after(_ marker: String) -> [String] {
        let a = all
        guard let i = a.firstIndex(of: marker) else { return [] }
        return Array(a[(i + 1)...])
    }
}

/// Counts runs per child name across restarts.
final class Runs: Sendable {
    private let counts = Locked<[String: Int]>([:])
    func next(_ name: String) -> Int { counts.withLock { c in c[name, default: 0] += 1; return c[name]! } }
}

struct Crash: Error, CustomStringConvertible {
    let name: String
    var description: String { "\(name) crashed on purpose" }
}

/// A child that records start/stop and crashes on the runs `crashOn` says.
/// With `after`, a crash waits until the journal holds that entry (a sibling's start), so a
/// loaded test run (other suites holding the cooperative pool) cannot reorder what the test reads.
/// `ready`: the child says it is ready once it has written its start, so siblings start after it.
func child(_ name: String, journal: Journal, runs: Runs, restart: RestartPolicy = .permanent,
           crashOn: @escaping @Sendable (Int) -> Bool = { _ in false }, after: String? = nil, ready: Bool = false) -> ChildSpec {
    ChildSpec(name: name, restart: restart, shutdownTimeout: .milliseconds(500), readyTimeout: ready ? .seconds(120) : nil) {
        ClosureService { ctx in
            let run = runs.next(name)
            journal.add("start \(name)")
            if ready { ctx.markReady() }
            if crashOn(run) {
                while let after, journal.count(after) == 0 { try await Task.sleep(for: .milliseconds(2)) }
                try await Task.sleep(for: .milliseconds(5))
                journal.add("crash \(name)")
                throw Crash(name: name)
            }
            await ctx.waitForShutdown()
            journal.add("stop \(name)")
        }
    }
}

let fastIntensity = RestartIntensity(maxRestarts: 5, within: .seconds(60), backoffInitial: .milliseconds(1), backoffMax: .milliseconds(5))

func start(_ sup: Supervisor, logger: Logger = Logger(sink: MemoryLogSink(), level: .debug)) -> (ServiceContext, Task<Void, any Error>) {
    let ctx = ServiceContext(name: "root", path: "root", logger: logger, clock: SystemClock())
    let task = Task { try await sup.run(context: ctx) }
    return (ctx, task)
}

@Suite("Supervisor")
struct SupervisorTests {
    @Test("one_for_one restarts only the crashed child; stop order is the reverse of start order")
    func oneForOne() async throws {
        let j = Journal(), runs = Runs()
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity, children: [
            child("a", journal: j, runs: runs, ready: true), child("b", journal: j, runs: runs, crashOn: { $0 == 1 }, after: "start c", ready: true), child("c", journal: j, runs: runs, ready: true),
        ], report: SupervisionReport())
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.count("start b") == 2 && j.count("start c") == 1 }, "b restarted")
        ctx.requestShutdown()
        try await task.value
        #expect(Array(j.all.prefix(3)) == ["start a", "start b", "start c"])
        #expect(j.after("crash b") == ["start b", "stop c", "stop b", "stop a"])
        #expect(j.count("start a") == 1 && j.count("start c") == 1)
        #expect(sup.report.snapshot.first { $0.path == "root/b" }?.restarts == 1)
    }

    @Test("one_for_all stops the others in reverse order and starts everyone again in order")
    func oneForAll() async throws {
        let j = Journal(), runs = Runs()
        let sup = Supervisor(name: "root", strategy: .oneForAll, intensity: fastIntensity, children: [
            child("a", journal: j, runs: runs, ready: true), child("b", journal: j, runs: runs, crashOn: { $0 == 1 }, after: "start c", ready: true), child("c", journal: j, runs: runs, ready: true),
        ], report: SupervisionReport())
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.count("start c") == 2 }, "all restarted")
        ctx.requestShutdown()
        try await task.value
        #expect(j.after("crash b") == ["stop c", "stop a", "start a", "start b", "start c", "stop c", "stop b", "stop a"])
    }

    @Test("rest_for_one restarts the crashed child and those started after it, not those before")
    func restForOne() async throws {
        let j = Journal(), runs = Runs()
        let sup = Supervisor(name: "root", strategy: .restForOne, intensity: fastIntensity, children: [
            child("a", journal: j, runs: runs, ready: true), child("b", journal: j, runs: runs, crashOn: { $0 == 1 }, after: "start c", ready: true), child("c", journal: j, runs: runs, ready: true),
        ], report: SupervisionReport())
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.count("start c") == 2 }, "b and c restarted")
        ctx.requestShutdown()
        try await task.value
        #expect(j.after("crash b") == ["stop c", "start b", "start c", "stop c", "stop b", "stop a"])
        #expect(j.count("start a") == 1)
    }

    @Test("more restarts than the intensity allows makes the supervisor give up and escalate")
    func intensityEscalates() async throws {
        let j = Journal(), runs = Runs()
        let sup = Supervisor(name: "root", strategy: .oneForOne,
                             intensity: RestartIntensity(maxRestarts: 3, within: .seconds(60), backoffInitial: .milliseconds(1), backoffMax: .milliseconds(2)),
                             children: [child("ok", journal: j, runs: runs), child("bad", journal: j, runs: runs, crashOn: { _ in true })],
                             report: SupervisionReport())
        let (_, task) = start(sup)
        await #expect(throws: SupervisorError.self) { try await task.value }
        #expect(j.count("start bad") == 4)  // the first run and 3 restarts
        #expect(j.all.last == "stop ok")    // the survivors are stopped before escalating
    }

    @Test("restarts outside the intensity window do not add up")
    func intensityWindow() async throws {
        let j = Journal(), runs = Runs()
        let sup = Supervisor(name: "root", strategy: .oneForOne,
                             intensity: RestartIntensity(maxRestarts: 1, within: .milliseconds(30), backoffInitial: .milliseconds(60), backoffMax: .milliseconds(60)),
                             children: [child("flaky", journal: j, runs: runs, crashOn: { $0 <= 4 })], report: SupervisionReport())
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.count("start flaky") == 5 }, "fifth run")
        ctx.requestShutdown()
        try await task.value
    }

    @Test("a child that stops sending heartbeats is treated as hung and restarted")
    func hungChild() async throws {
        let j = Journal(), runs = Runs()
        // A timeout long enough that a busy test run does not make the healthy second run look
        // hung too: at the start of a parallel run, CPU-bound sync tests hold the cooperative pool
        // for 30-40 s, and neither the heartbeats nor the watchdog run meanwhile (CI runs saw it).
        let spec = ChildSpec(name: "worker", heartbeatTimeout: .seconds(60)) {
            ClosureService { ctx in
                let run = runs.next("worker")
                j.add("start worker \(run)")
                if run == 1 {
                    // Hangs: no heartbeat, and deaf to shutdown and cancellation until the
                    // supervisor has given up on it and started run 2 (or 10 minutes). A fixed hang
                    // a little past the timeout raced the watchdog on a starved pool: the run
                    // returned first, normally, and was restarted as a return, not as hung (CI).
                    let until = ContinuousClock.now + .seconds(600)
                    while ContinuousClock.now < until, !j.all.contains("start worker 2") { try? await Task.sleep(for: .milliseconds(10)) }
                    return
                }
                while await ctx.pause(for: .milliseconds(10)) { ctx.heartbeat() }
            }
        }
        let report = SupervisionReport()
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity, children: [spec], report: report)
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 240, every: 0.05) { j.all.contains("start worker 2") }, "restart after hang")
        let entry = report.snapshot.first { $0.path == "root/worker" }
        #expect(entry?.restarts == 1)
        #expect(entry?.lastError?.contains("hung") == true)
        try #require(await eventually(within: 120, every: 0.005) { report.isHealthy }, "healthy again")
        ctx.requestShutdown()
        try await task.value
    }

    @Test("a supervisor nested under a heartbeat timeout heartbeats while its loop runs: never taken for hung")
    func nestedSupervisorHeartbeats() async throws {
        let j = Journal(), runs = Runs()
        let report = SupervisionReport()
        // As root/mqtt: a supervisor child whose own children heartbeat. On a manual clock that
        // moves only when every periodic task has gone round, so a loaded test run (other suites
        // holding the cooperative pool) cannot make anyone look hung.
        let inner = ChildSpec(name: "inner", heartbeatTimeout: .milliseconds(1500)) {
            Supervisor(name: "inner", strategy: .oneForOne, intensity: fastIntensity, children: [
                ChildSpec(name: "worker", heartbeatTimeout: .milliseconds(1000)) {
                    ClosureService { ctx in
                        j.add("start worker \(runs.next("worker"))")
                        while await ctx.pause(for: .milliseconds(50)) { ctx.heartbeat() }
                    }
                },
            ], report: report)
        }
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity, children: [inner], report: report)
        let clock = ManualClock()
        let ctx = ServiceContext(name: "root", path: "root", logger: Logger(sink: MemoryLogSink(), level: .debug), clock: clock)
        let task = Task { try await sup.run(context: ctx) }
        // Three sleepers when all is quiet: the root's tick, the inner supervisor's tick, the worker's pause.
        try #require(await eventually(within: 120, every: 0.005) { j.all.contains("start worker 1") && clock.sleeperCount >= 3 }, "worker started")
        for _ in 0..<50 {  // 5 s of the clock: the inner supervisor's timeout three times over
            clock.advance(by: .milliseconds(100))
            try #require(await eventually(within: 120, every: 0.002) { clock.sleeperCount >= 3 }, "the periodic tasks went round")
        }
        #expect(!j.all.contains("start worker 2"), "\(j.all)")
        #expect(report.snapshot.first { $0.path == "root/inner" }?.restarts == 0)
        ctx.requestShutdown()
        try await task.value
    }

    @Test("transient children that end normally and temporary children are not restarted")
    func restartPolicies() async throws {
        let j = Journal(), runs = Runs()
        let done = ChildSpec(name: "once", restart: .transient) { ClosureService { _ in j.add("once ran") } }
        let temp = child("temp", journal: j, runs: runs, restart: .temporary, crashOn: { _ in true })
        let failing = child("transientBad", journal: j, runs: runs, restart: .transient, crashOn: { $0 == 1 })
        let report = SupervisionReport()
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity, children: [done, temp, failing], report: report)
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.count("start transientBad") == 2 }, "transient restarted after its crash")
        // Not restarted, checked against the supervisor's decision (the report says stopped, not
        // restarting), not after a sleep.
        try #require(await eventually(within: 120, every: 0.005) {
            let s = Dictionary(uniqueKeysWithValues: report.snapshot.map { ($0.path, $0.state) })
            return s["root/once"] == .stopped && s["root/temp"] == .stopped
        }, "the supervisor decided about once and temp")
        ctx.requestShutdown()
        try await task.value
        #expect(j.count("once ran") == 1)
        #expect(j.count("start temp") == 1)
        let states = Dictionary(uniqueKeysWithValues: report.snapshot.map { ($0.path, $0.state) })
        #expect(states["root/once"] == .stopped)
        #expect(states["root/temp"] == .stopped)
    }

    @Test("graceful shutdown comes first; a child that ignores it is cancelled after its shutdown timeout")
    func gracefulThenCancel() async throws {
        let j = Journal()
        let polite = ChildSpec(name: "polite", shutdownTimeout: .seconds(5)) {
            ClosureService { ctx in
                await ctx.waitForShutdown()
                j.add("polite finished its work")
            }
        }
        let deaf = ChildSpec(name: "deaf", shutdownTimeout: .milliseconds(50)) {
            ClosureService { _ in
                do { try await Task.sleep(for: .seconds(60)) } catch { j.add("deaf cancelled") }
            }
        }
        let report = SupervisionReport()
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity, children: [polite, deaf], report: report)
        let (ctx, task) = start(sup)
        // Both started (the supervisor is ready once it started every child), then the shutdown.
        #expect(await ctx.waitUntilReady(timeout: .seconds(120)))
        ctx.requestShutdown()
        try await task.value
        #expect(j.all == ["deaf cancelled", "polite finished its work"])
    }

    @Test("a child supervisor that gives up is restarted by its parent")
    func nestedEscalation() async throws {
        let j = Journal(), runs = Runs()
        let report = SupervisionReport()
        let inner = ChildSpec(name: "inner") {
            Supervisor(name: "inner", strategy: .oneForOne,
                       intensity: RestartIntensity(maxRestarts: 1, within: .seconds(60), backoffInitial: .milliseconds(1), backoffMax: .milliseconds(1)),
                       children: [child("leaf", journal: j, runs: runs, crashOn: { $0 <= 2 })], report: report)
        }
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity, children: [inner], report: report)
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.count("start leaf") == 3 }, "leaf runs a third time")
        #expect(report.snapshot.first { $0.path == "root/inner" }?.restarts == 1)
        ctx.requestShutdown()
        try await task.value
    }

    @Test("a child that signals readiness is ready before its next sibling starts")
    func readinessOrder() async throws {
        let j = Journal(), runs = Runs()
        let slow = ChildSpec(name: "slow", readyTimeout: .seconds(120)) {
            ClosureService { ctx in
                try await Task.sleep(for: .milliseconds(30))
                j.add("slow ready")
                ctx.markReady()
                await ctx.waitForShutdown()
            }
        }
        let sup = Supervisor(name: "root", strategy: .oneForOne, intensity: fastIntensity,
                             children: [slow, child("next", journal: j, runs: runs)], report: SupervisionReport())
        let (ctx, task) = start(sup)
        // Generous bounds: these tests are about order, and in a parallel suite the cooperative
        // pool can be busy with other tests for tens of seconds (a CI run waited 34 s once).
        #expect(await ctx.waitUntilReady(timeout: .seconds(120)))
        ctx.requestShutdown()
        try await task.value
        #expect(Array(j.all.prefix(2)) == ["slow ready", "start next"])
    }
    @Test("a provider hands its value to the siblings made after it; when it restarts (rest_for_one) they are made again with the new value; a missing value makes its taker crash")
    func provisions() async throws {
        let j = Journal(), runs = Runs()
        let value = Provision<Int>("the number")
        let provider = ChildSpec(name: "provider", shutdownTimeout: .milliseconds(500), readyTimeout: .seconds(120)) {
            ClosureService { ctx in
                let run = runs.next("provider")
                value.provide(run * 10)
                ctx.markReady()
                if run == 1 {
                    try await Task.sleep(for: .milliseconds(20))
                    value.withdraw()
                    throw Crash(name: "provider")
                }
                await ctx.waitForShutdown()
                value.withdraw()
            }
        }
        let taker = ChildSpec(name: "taker", shutdownTimeout: .milliseconds(500)) {
            let v = try value.value()
            return ClosureService { ctx in
                j.add("taker got \(v)")
                await ctx.waitForShutdown()
            }
        }
        let sup = Supervisor(name: "root", strategy: .restForOne, intensity: fastIntensity, children: [provider, taker], report: SupervisionReport())
        let (ctx, task) = start(sup)
        try #require(await eventually(within: 120, every: 0.005) { j.all.contains("taker got 20") }, "taker made again with the second value")
        ctx.requestShutdown()
        try await task.value
        #expect(j.all == ["taker got 10", "taker got 20"])

        // Made with nothing provided: the child counts as crashed, with the provision's name.
        let report = SupervisionReport()
        let orphan = Supervisor(name: "root", strategy: .oneForOne, intensity: RestartIntensity(maxRestarts: 0), children: [
            ChildSpec(name: "orphan") {
                let v = try Provision<Int>("the store").value()
                return ClosureService { _ in _ = v }
            },
        ], report: report)
        let (octx, otask) = start(orphan)
        await #expect(throws: SupervisorError.self) { try await otask.value }
        #expect(report.snapshot.first { $0.path == "root/orphan" }?.lastError == "the store is not provided (its service is not ready)")
        octx.requestShutdown()
    }
}

@Suite("Latch and manual clock")
struct LatchTests {
    @Test("a latch wait times out on the injected clock, and opens for every waiter")
    func latchTimeout() async throws {
        let clock = ManualClock()
        let latch = Latch()
        let waiter = Task { await latch.wait(timeout: .seconds(10), clock: clock) }
        try #require(await eventually(within: 120, every: 0.005) { clock.sleeperCount == 1 }, "waiter asleep")
        clock.advance(by: .seconds(9))
        #expect(clock.sleeperCount == 1)
        clock.advance(by: .seconds(1))
        #expect(await waiter.value == false)

        let a = Task { await latch.wait() }
        let b = Task { await latch.wait(timeout: .seconds(100), clock: clock) }
        try await Task.sleep(for: .milliseconds(10))
        latch.open()
        #expect(await a.value == true)
        #expect(await b.value == true)
        #expect(await latch.wait() == true)
    }
}
