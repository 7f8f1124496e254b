// shoal-bench-gateway --board NAME --data-dir DIR --config FILE [--log-level LEVEL]
//
// `shoal run`'s gateway with a plain main thread, for `shoal bench instructions` (a benchmark tool
// beside the product, not in it). Valgrind 3.19 (Debian 12's) dies as soon as `shoal` starts:
// `shoal`'s async main parks the main thread in libdispatch's dispatch_main, whose sigsuspend
// passes a signal mask libdispatch keeps in read-only memory, and valgrind writes to that mask.
// Here the main thread blocks signals (as libdispatch's threads do, so SIGTERM reaches the
// gateway's signal source) and waits on a semaphore while the gateway runs in a task.
import Dispatch
import Glibc
import ShoalCore
import ShoalRuntime
import ShoalThreads

var blocked = sigset_t()
sigfillset(&blocked)
for fatal in [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP] { sigdelset(&blocked, fatal) }
pthread_sigmask(SIG_BLOCK, &blocked, nil)

func fail(_ message: String) -> Never {
    let text = Array("shoal-bench-gateway: \(message)\n".utf8)
    _ = text.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(64)
}

var options = RuntimeOptions()
var args = Array(CommandLine.arguments.dropFirst())[...]
while let flag = args.popFirst() {
    guard let value = args.popFirst() else { fail("\(flag) needs a value") }
    switch flag {
    case "--board": options.board = value
    case "--data-dir": options.dataDir = value
    case "--config": options.configPath = value
    case "--log-level":
        guard let level = LogLevel(name: value) else { fail("unknown log level \(value)") }
        options.logLevel = level
    default: fail("unknown option \(flag) (--board, --data-dir, --config, --log-level)")
    }
}

let ended = DispatchSemaphore(value: 0)
let status = Locked<Int32>(0)
let runOptions = options
Task.detached {
    let code = await GatewayRuntime.run(runOptions)
    status.withLock { $0 = code }
    ended.signal()
}
ended.wait()
exit(status.withLock { $0 })
