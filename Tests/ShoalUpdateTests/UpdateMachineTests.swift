import ShoalUpdate
import Testing

/// The update's decisions as values: each transition of the boot check, the confirmation, and
/// each refusal with its reason.
@Suite("Update state machine")
struct UpdateMachineTests {
    static let t0: Int64 = 1_800_000_000

    static func pending(starts: Int = 0, deadline: Int64 = 0, failed: [String] = []) -> UpdateRecord {
        UpdateRecord(phase: .pending, candidate: "0.2.0", previous: "releases/base", starts: starts, deadline: deadline, installedAt: t0, at: t0, failed: failed)
    }

    @Test("no record: the boot check starts what current names")
    func noRecord() {
        #expect(UpdateMachine.bootCheck(nil, currentTarget: "releases/base", now: Self.t0, confirmSeconds: 120) == .start)
    }

    @Test("a pending candidate gets one start, with its deadline recorded")
    func firstStart() {
        let d = UpdateMachine.bootCheck(Self.pending(), currentTarget: "releases/0.2.0", now: Self.t0 + 5, confirmSeconds: 120)
        var expected = Self.pending(starts: 1, deadline: Self.t0 + 125)
        expected.at = Self.t0 + 5
        #expect(d == .startCandidate(expected))
    }

    @Test("a pending candidate that already had its start is rolled back and remembered as failed")
    func secondStartRollsBack() throws {
        let d = UpdateMachine.bootCheck(Self.pending(starts: 1, deadline: Self.t0 + 125), currentTarget: "releases/0.2.0", now: Self.t0 + 30, confirmSeconds: 120)
        guard case .rollBack(let r) = d else { Issue.record("\(d)"); return }
        #expect(r.phase == .rolledBack && r.failed == ["0.2.0"] && r.previous == "releases/base")
        #expect(r.reason == "0.2.0 stopped before it confirmed (it crashed, was killed, or gave up waiting to be ready)")
    }

    @Test("a pending candidate past its deadline is rolled back with that reason")
    func deadlineRollsBack() {
        let d = UpdateMachine.bootCheck(Self.pending(starts: 1, deadline: Self.t0 + 125), currentTarget: "releases/0.2.0", now: Self.t0 + 500, confirmSeconds: 120)
        guard case .rollBack(let r) = d else { Issue.record("\(d)"); return }
        #expect(r.reason == "0.2.0 did not confirm before its deadline (120 s): it never became ready or healthy")
    }

    @Test("an install cut before the switch is abandoned, not failed: the release may be tried again")
    func cutBeforeSwitch() {
        let d = UpdateMachine.bootCheck(Self.pending(), currentTarget: "releases/base", now: Self.t0 + 1, confirmSeconds: 120)
        guard case .abandon(let r) = d else { Issue.record("\(d)"); return }
        #expect(r.phase == .interrupted && r.failed.isEmpty)
        #expect(UpdateMachine.installRefusal(r, version: "0.2.0") == nil)
    }

    @Test("a rollback cut after its record is finished; a finished one starts")
    func cutRollback() {
        var r = Self.pending(starts: 1)
        r.phase = .rolledBack
        #expect(UpdateMachine.bootCheck(r, currentTarget: "releases/0.2.0", now: Self.t0, confirmSeconds: 120) == .finishRollBack("releases/base"))
        #expect(UpdateMachine.bootCheck(r, currentTarget: "releases/base", now: Self.t0, confirmSeconds: 120) == .start)
        var c = r
        c.phase = .confirmed
        #expect(UpdateMachine.bootCheck(c, currentTarget: "releases/0.2.0", now: Self.t0, confirmSeconds: 120) == .start)
    }

    @Test("only the candidate confirms, once ready and healthy, before its deadline")
    func confirmation() {
        let r = Self.pending(starts: 1, deadline: Self.t0 + 120)
        guard case .confirm(let c) = UpdateMachine.confirm(r, running: "0.2.0", ready: true, healthy: true, now: Self.t0 + 10) else { Issue.record("no confirm"); return }
        #expect(c.phase == .confirmed)
        #expect(UpdateMachine.confirm(r, running: "0.1.0", ready: true, healthy: true, now: Self.t0 + 10) == .nothing)
        #expect(UpdateMachine.confirm(r, running: "0.2.0", ready: false, healthy: true, now: Self.t0 + 10) == .wait)
        #expect(UpdateMachine.confirm(r, running: "0.2.0", ready: true, healthy: false, now: Self.t0 + 10) == .wait)
        #expect(UpdateMachine.confirm(r, running: "0.2.0", ready: true, healthy: true, now: Self.t0 + 121) == .giveUp("0.2.0 was not ready and healthy by its deadline"))
        #expect(UpdateMachine.confirm(Self.pending(), running: "0.2.0", ready: true, healthy: true, now: Self.t0) == .nothing)
        #expect(UpdateMachine.confirm(nil, running: "0.2.0", ready: true, healthy: true, now: Self.t0) == .nothing)
    }

    @Test("an install is refused for a version rolled back before, while another is pending, or for a bad name")
    func installRefusals() {
        #expect(UpdateMachine.installRefusal(nil, version: "0.2.0") == nil)
        var failed = Self.pending(failed: ["0.2.0"])
        failed.phase = .rolledBack
        #expect(UpdateMachine.installRefusal(failed, version: "0.2.0") == "0.2.0 was rolled back here before; publish a newer release")
        #expect(UpdateMachine.installRefusal(failed, version: "0.2.1") == nil)
        #expect(UpdateMachine.installRefusal(Self.pending(), version: "0.3.0") == "0.2.0 is still waiting to confirm")
        for bad in ["../etc", "0.2/..", "", ".1", "a"] { #expect(UpdateMachine.installRefusal(nil, version: bad) != nil, "\(bad)") }
    }

    @Test("after an install or a rollback the next install is held off; an interrupted install is not")
    func holdOff() {
        var r = Self.pending(starts: 1)
        r.phase = .confirmed
        #expect(UpdateMachine.installRefusal(r, version: "0.3.0", now: Self.t0 + 100, holdOffSeconds: 300)
                == "the last update (0.2.0, confirmed) was 100 s ago; the next waits 300 s after it")
        #expect(UpdateMachine.installRefusal(r, version: "0.3.0", now: Self.t0 + 300, holdOffSeconds: 300) == nil)
        r.phase = .interrupted
        #expect(UpdateMachine.installRefusal(r, version: "0.2.0", now: Self.t0 + 1, holdOffSeconds: 300) == nil)
    }

    @Test("the failed list keeps the newest 16")
    func failedBounded() {
        var r = Self.pending(starts: 1, failed: (0..<16).map { "0.0.\($0)" })
        r.candidate = "0.9.0"
        guard case .rollBack(let b) = UpdateMachine.bootCheck(r, currentTarget: "releases/0.9.0", now: Self.t0, confirmSeconds: 60) else { Issue.record("no rollback"); return }
        #expect(b.failed.count == 16 && b.failed.last == "0.9.0" && b.failed.first == "0.0.1")
    }

    @Test("the record round-trips and a damaged one is refused")
    func recordText() throws {
        let r = Self.pending(starts: 1, deadline: 5, failed: ["0.1.5"])
        #expect(try UpdateRecord.decode(r.text) == r)
        for bad in ["", "[]", "{\"v\":2}", r.text.replacing("\"pending\"", with: "\"odd\""),
                    r.text.replacing("\"0.2.0\"", with: "\"../x\"")] {
            #expect(throws: UpdateError.self) { _ = try UpdateRecord.decode(bad) }
        }
    }
}
