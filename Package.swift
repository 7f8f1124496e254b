// swift-tools-version:6.0
// Shoal: a peer-to-peer data runtime for Linux IoT gateways. See README.md and the layers in
// ARCHITECTURE.md: imports only go down, each C library has exactly one Swift importer, and the
// pure modules (ShoalCore, ShoalWire, ShoalSupervision, ShoalConfig, ShoalStatus) import no C module.
import PackageDescription

let package = Package(
    name: "Shoal",
    products: [
        .executable(name: "shoal", targets: ["shoal"]),
        // `import Shoal`: the Couchbase seed's Swift API, for teams that build their own firmware.
        .library(name: "Shoal", targets: ["Shoal"]),
    ],
    targets: [
        // C libraries from Debian's -dev packages, one modulemap each.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "CMbedTLS", path: "Sources/CMbedTLS"),
        .systemLibrary(name: "CAvahi", path: "Sources/CAvahi"),
        .systemLibrary(name: "CBlueZ", path: "Sources/CBlueZ"),
        .systemLibrary(name: "CGPIOD", path: "Sources/CGPIOD"),
        .systemLibrary(name: "CYAML", path: "Sources/CYAML"),
        .systemLibrary(name: "CMicroHTTPD", path: "Sources/CMicroHTTPD"),
        .systemLibrary(name: "CMosquitto", path: "Sources/CMosquitto"),
        .systemLibrary(name: "CNATS", path: "Sources/CNATS"),

        // Pure modules: no C module, fast to test, reused by the simulator.
        // Threads and locks over pthreads (ThreadSanitizer sees them): the one place they are made.
        .target(name: "ShoalThreads"),
        .target(name: "ShoalCore", dependencies: ["ShoalThreads"]),
        .target(name: "ShoalWire", dependencies: ["ShoalCore"]),
        .target(name: "ShoalSupervision", dependencies: ["ShoalThreads", "ShoalCore"]),
        .target(name: "ShoalConfig", dependencies: ["ShoalCore"]),
        .target(name: "ShoalStatus", dependencies: ["ShoalCore"]),

        // The one importer of each C library.
        .target(name: "ShoalYAML", dependencies: ["ShoalConfig", "CYAML"]),
        .target(name: "ShoalStore", dependencies: ["ShoalThreads", "ShoalCore", "CSQLite"]),
        .target(name: "ShoalTLS", dependencies: ["ShoalThreads", "ShoalCore", "CMbedTLS"]),
        .target(name: "ShoalLinux", dependencies: ["ShoalThreads", "ShoalCore", "CAvahi", "CBlueZ", "CGPIOD"]),
        // The local API's HTTP server (libmicrohttpd): bytes in, bytes out; the routes are the runtime's.
        .target(name: "ShoalHTTP", dependencies: ["ShoalThreads", "ShoalCore", "ShoalLinux", "CMicroHTTPD"]),
        // The MQTT bridge's client (libmosquitto): one connection, driven by one thread.
        .target(name: "ShoalMQTT", dependencies: ["ShoalCore", "ShoalLinux", "CMosquitto"]),
        // The uplink's client (libnats): one connection to a NATS JetStream server or cluster.
        .target(name: "ShoalUplink", dependencies: ["ShoalCore", "ShoalLinux", "CNATS"]),

        // Replication: the sans-IO protocol state machine over the store and the wire codec.
        .target(name: "ShoalReplication", dependencies: ["ShoalThreads", "ShoalCore", "ShoalWire", "ShoalStore"]),
        // Sans-IO mesh manager (pure: no C library).
        .target(name: "ShoalMesh", dependencies: ["ShoalCore", "ShoalConfig"]),
        // The gateway core: mesh manager + replicator + their glue, one handle(input, now) ->
        // [action], driven alike by the runtime, the library and the simulator.
        .target(name: "ShoalGateway", dependencies: ["ShoalCore", "ShoalMesh", "ShoalReplication", "ShoalStore", "ShoalWire"]),
        // The seeded radio medium in virtual time, with real stores, replicators and mesh managers
        // inside (tests, `shoal sim`, `shoal demo`).
        // The fleet's trust: signed `_trust` entries, what they add up to, the live authenticator.
        .target(name: "ShoalTrust", dependencies: ["ShoalThreads", "ShoalCore", "ShoalTLS", "ShoalReplication", "ShoalStore"]),
        // Updates of Shoal itself: the install/boot-check/confirm state machine and its file shell.
        .target(name: "ShoalUpdate", dependencies: ["ShoalCore", "ShoalLinux"]),
        .target(name: "ShoalSim", dependencies: ["ShoalTrust", "ShoalThreads", "ShoalCore", "ShoalGateway", "ShoalMesh", "ShoalReplication", "ShoalStore", "ShoalWire", "ShoalTLS", "ShoalStatus"]),

        // Composition root.
        .target(name: "ShoalRuntime", dependencies: ["ShoalThreads", 
            "ShoalCore", "ShoalWire", "ShoalSupervision", "ShoalConfig", "ShoalYAML", "ShoalStatus",
            "ShoalStore", "ShoalTLS", "ShoalLinux", "ShoalReplication", "ShoalMesh", "ShoalGateway", "ShoalHTTP", "ShoalMQTT", "ShoalUplink", "ShoalTrust", "ShoalUpdate",
        ]),
        .target(name: "ShoalTesting", dependencies: ["ShoalThreads", "ShoalCore", "ShoalSupervision"]),
        // The in-process medium in real time, as a transport: `import Shoal`'s simulated medium,
        // tests and the example firmware (not part of the runtime).
        .target(name: "ShoalMedium", dependencies: ["ShoalThreads", "ShoalCore", "ShoalMesh", "ShoalRuntime", "ShoalTLS"]),

        // The library product: a public API over the runtime's driver (network or in-process medium).
        .target(name: "Shoal", dependencies: ["ShoalThreads", "ShoalCore", "ShoalConfig", "ShoalMedium", "ShoalMesh", "ShoalReplication", "ShoalRuntime", "ShoalStore", "ShoalTLS", "ShoalLinux"]),
        // A custom firmware built on the library only (Examples/Firmware; built and run in make test).
        .executableTarget(name: "shoal-example-firmware", dependencies: ["Shoal"], path: "Examples/Firmware"),

        // `shoal bench`: the store, TLS and replication benchmarks against their bare baselines
        // (the bare C calls stay in the C importers). Not part of the runtime.
        .target(name: "ShoalBench", dependencies: ["CSQLite", "ShoalThreads", "ShoalCore", "ShoalConfig", "ShoalLinux", "ShoalMesh", "ShoalReplication", "ShoalRuntime", "ShoalStore", "ShoalSupervision", "ShoalTLS", "ShoalUplink", "ShoalWire"]),

        .executableTarget(name: "shoal", dependencies: ["ShoalUpdate", "ShoalTrust", "ShoalBench", "ShoalRuntime", "ShoalMQTT", "ShoalUplink", "ShoalSim", "ShoalMesh", "ShoalStatus", "ShoalStore", "ShoalConfig", "ShoalYAML", "ShoalTLS", "ShoalLinux", "ShoalWire", "ShoalCore"]),

        // The crash campaign's writer (a test tool beside the product, not in it).
        // The gateway with a plain main thread, for valgrind (`shoal bench instructions`; a benchmark tool).
        .executableTarget(name: "shoal-bench-gateway", dependencies: ["ShoalCore", "ShoalRuntime", "ShoalThreads"], path: "Sources/ShoalBenchGateway"),
        .executableTarget(name: "shoal-crash-writer", dependencies: ["ShoalCore", "ShoalStore"], path: "Sources/ShoalCrashWriter"),

        // Fuzz targets for every input from outside (make fuzz); without libFuzzer, a corpus replayer.
        .executableTarget(name: "shoal-fuzz", dependencies: ["ShoalTrust", "ShoalConfig", "ShoalCore", "ShoalReplication", "ShoalTLS", "ShoalWire", "ShoalYAML", "ShoalStore"], path: "Sources/ShoalFuzz"),

        .testTarget(name: "ShoalCoreTests", dependencies: ["ShoalCore", "ShoalWire", "ShoalStatus", "ShoalTesting"]),
        .testTarget(name: "ShoalSupervisionTests", dependencies: ["ShoalThreads", "ShoalSupervision", "ShoalTesting"]),
        .testTarget(name: "ShoalStoreTests", dependencies: ["ShoalBench", "ShoalThreads", "ShoalStore", "ShoalTesting"]),
        .testTarget(name: "ShoalConfigTests", dependencies: ["ShoalTesting", "ShoalConfig", "ShoalYAML", "ShoalRuntime", "ShoalTLS", "ShoalReplication"]),
        .testTarget(name: "ShoalMeshTests", dependencies: ["ShoalThreads", "ShoalMesh", "ShoalGateway", "ShoalSim", "ShoalCore", "ShoalConfig", "ShoalRuntime"]),
        .testTarget(name: "ShoalGatewayTests", dependencies: ["ShoalTrust", "ShoalGateway", "ShoalMedium", "ShoalRuntime", "ShoalUplink", "ShoalConfig", "ShoalThreads", "ShoalSim", "ShoalMesh", "ShoalReplication", "ShoalStore", "ShoalTLS", "ShoalWire", "ShoalCore", "ShoalTesting"]),
        .testTarget(name: "ShoalReplicationTests", dependencies: ["ShoalThreads", "ShoalReplication", "ShoalStore", "ShoalWire", "ShoalTesting", "ShoalCore"]),
        .testTarget(name: "ShoalTLSTests", dependencies: ["ShoalTrust", "ShoalStore", "ShoalReplication", "ShoalThreads", "ShoalTLS", "ShoalLinux", "ShoalTesting", "ShoalCore"]),
        .testTarget(name: "ShoalUpdateTests", dependencies: ["ShoalUpdate", "ShoalCore", "ShoalLinux", "ShoalTesting"]),
        .testTarget(name: "ShoalLinuxTests", dependencies: ["ShoalThreads", "ShoalLinux", "ShoalCore", "ShoalTesting"]),
        .testTarget(name: "ShoalLibraryTests", dependencies: ["Shoal", "ShoalTesting"]),
        .testTarget(name: "ShoalCLITests", dependencies: ["ShoalThreads", "shoal", "shoal-crash-writer", "ShoalStore", "ShoalTesting", "ShoalLinux", "ShoalRuntime"]),
    ],
    swiftLanguageModes: [.v6]
)
