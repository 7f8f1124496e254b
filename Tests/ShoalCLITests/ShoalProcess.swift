import Foundation
import ShoalTesting
import Testing

/// Runs the built `shoal` binary (it sits beside the test bundle in .build/…/debug).
enum Shoal {
    static let binary: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = (exe as NSString).deletingLastPathComponent
        if dir.hasSuffix(".xctest") || dir.contains(".xctest/") {
            while dir.contains(".xctest") { dir = (dir as NSString).deletingLastPathComponent }
        }
        return dir + "/shoal"
    }()

    /// The crash campaign's writer, built beside shoal.
    static var crashWriter: String { (binary as NSString).deletingLastPathComponent + "/shoal-crash-writer" }

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs shoal to completion (a hang guard of `timeout` seconds kills it).
    @discardableResult
    static func run(_ args: [String], stdin: String? = nil, cwd: String? = nil, env: [String: String] = [:], timeout: Double = 60,
                    executable: String = binary) throws -> Result {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = args
        if let cwd { p.currentDirectoryURL = URL(fileURLWithPath: cwd) }
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "SHOAL_SOCKET")
        for (k, v) in env { environment[k] = v }
        p.environment = environment
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        let input = Pipe()
        p.standardInput = input
        try p.run()
        if let stdin { input.fileHandleForWriting.write(stdin.data(using: .utf8)!) }
        try? input.fileHandleForWriting.close()
        // The hang guard holds the process weakly: a cancelled work item stays queued (and keeps
        // what it captured) until its deadline, and holding `p` kept its pipes open for `timeout`
        // seconds after every run — a soak polling the CLI piled up ~1,400 descriptors, and
        // Foundation's Process.run crashed copying them (SIGSEGV in memmove).
        let guardTimer = DispatchWorkItem { [weak p] in if let p, p.isRunning { p.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: guardTimer)
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guardTimer.cancel()
        try? out.fileHandleForReading.close()
        try? err.fileHandleForReading.close()
        return Result(status: p.terminationStatus, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }

    /// Parses a command's JSON output.
    static func json(_ r: Result) throws -> Any {
        try JSONSerialization.jsonObject(with: r.stdout.data(using: .utf8)!, options: [.fragmentsAllowed])
    }
}

/// A `shoal run` in the background, stopped by `stop()`.
final class RunningGateway {
    let process = Process()
    let dir: TemporaryDirectory
    let stdout = Pipe(), stderr = Pipe()
    /// Read all along: a gateway logging verbosely fills a pipe's 64 KB and blocks in its log
    /// writes (it then never stops on SIGTERM) if the pipe is read only after it exits.
    private var drains: [PipeDrain] = []
    var socket: String { dir.path + "/control.sock" }

    /// The binary it runs (an older build in the protocol-compatibility test); its CLI talks to it.
    let executable: String

    init(dataDir: String? = nil, board: String = "sim", extraArgs: [String] = [], env: [String: String] = [:],
         executable: String = Shoal.binary) throws {
        self.executable = executable
        dir = dataDir.map { TemporaryDirectory(path: $0) } ?? TemporaryDirectory()
        var environment = ProcessInfo.processInfo.environment
        for (k, v) in env { environment[k] = v }
        process.environment = environment
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["run", "--board", board, "--data-dir", dir.path, "--log-level", "verbose"] + extraArgs
        process.currentDirectoryURL = URL(fileURLWithPath: dir.path)
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        drains = [PipeDrain(stdout), PipeDrain(stderr)]
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if FileManager.default.fileExists(atPath: socket),
               (try? Shoal.run(["status", "--socket", socket], executable: executable).status) == 0 { return }
            guard process.isRunning else { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        Issue.record("gateway did not come up: \(drains[1].text)")
    }

    func cli(_ args: [String], stdin: String? = nil) throws -> Shoal.Result {
        try Shoal.run(args + ["--socket", socket], stdin: stdin, executable: executable)
    }

    private var stopped: (status: Int32, stdout: String, stderr: String)?

    /// SIGTERM, then waits; returns the exit status and what the gateway printed. A second call
    /// returns the first one's result (the pipes are closed by then, and the pid may be reused).
    /// `keepDirectory` leaves the data directory for a later gateway (restore tests).
    func stop(signal: Int32 = SIGTERM, keepDirectory: Bool = false) -> (status: Int32, stdout: String, stderr: String) {
        if let stopped { return stopped }
        kill(process.processIdentifier, signal)
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let o = drains[0].waitForEnd(), e = drains[1].waitForEnd()
        try? stdout.fileHandleForReading.close()
        try? stderr.fileHandleForReading.close()
        if !keepDirectory { dir.remove() }
        stopped = (process.terminationStatus, o, e)
        return stopped!
    }
}

/// Every suite that runs `shoal` processes is nested here and runs one test at a time: they block
/// the thread they run on (process waits, sleeps), and with two cores Swift's cooperative pool has
/// two threads — two such tests at once would starve the timing-sensitive suites (supervision).
@Suite("Processes", .serialized)
struct ProcessSuites {}

/// Reads a pipe on a thread of its own until its end, keeping what came.
final class PipeDrain: @unchecked Sendable {  // `data` and `ended` only under `lock`
    private let lock = NSCondition()
    private var data = Data()
    private var ended = false

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let chunk = handle.availableData
                lock.lock()
                if chunk.isEmpty { ended = true; lock.broadcast(); lock.unlock(); return }
                data.append(chunk)
                lock.unlock()
            }
        }
    }

    /// What came so far.
    var text: String { lock.lock(); defer { lock.unlock() }; return String(decoding: data, as: UTF8.self) }

    /// Everything, once the writer closed its end (at most 10 s after the process ended).
    func waitForEnd() -> String {
        lock.lock()
        defer { lock.unlock() }
        let deadline = Date().addingTimeInterval(10)
        while !ended && lock.wait(until: deadline) {}
        return String(decoding: data, as: UTF8.self)
    }
}
