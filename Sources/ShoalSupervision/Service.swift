/// ShoalSupervision: Erlang/OTP-style supervision for Swift services. A service is one `run()`;
/// a supervisor starts its children in order, restarts them by policy, and escalates when they
/// crash too often. Pure: no C module, time through `ShoalClock`.
import ShoalCore

/// A long-running part of the gateway. `run` returns when the service is done (after a graceful
/// shutdown request, normally), throws when it crashed. A supervisor makes a fresh instance for
/// every (re)start, so a service may keep state in itself without cleaning it up for the next run.
public protocol Service: Sendable {
    func run(context: ServiceContext) async throws
}

/// A service made from a closure, for small children and tests.
public struct ClosureService: Service {
    private let body: @Sendable (ServiceContext) async throws -> Void
    public init(_ body: @escaping @Sendable (ServiceContext) async throws -> Void) { self.body = body }
    public func run(context: ServiceContext) async throws { try await body(context) }
}

/// How a child is restarted, as in OTP.
public enum RestartPolicy: String, Sendable {
    /// Always restarted, whatever the reason it stopped.
    case permanent
    /// Restarted only if it crashed (threw, or hung); a normal return is final.
    case transient
    /// Never restarted.
    case temporary
}

/// One child of a supervisor.
public struct ChildSpec: Sendable {
    public var name: String
    public var restart: RestartPolicy
    /// How long a graceful stop may take before the child's task is cancelled.
    public var shutdownTimeout: Duration
    /// A child that does not call `heartbeat()` for this long is hung, and counts as crashed.
    public var heartbeatTimeout: Duration?
    /// Start the next sibling only once this child called `markReady()` (or this long passed,
    /// which counts as a crash).
    public var readyTimeout: Duration?
    /// Makes a fresh instance for every (re)start. It may throw (a dependency it takes from a
    /// `Provision` is missing): the child then counts as crashed with that error.
    public var make: @Sendable () throws -> any Service

    public init(
        name: String, restart: RestartPolicy = .permanent, shutdownTimeout: Duration = .seconds(5),
        heartbeatTimeout: Duration? = nil, readyTimeout: Duration? = nil,
        make: @escaping @Sendable () throws -> any Service
    ) {
        self.name = name
        self.restart = restart
        self.shutdownTimeout = shutdownTimeout
        self.heartbeatTimeout = heartbeatTimeout
        self.readyTimeout = readyTimeout
        self.make = make
    }
}
