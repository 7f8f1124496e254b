import Glibc
import ShoalCore

// Two builds of one program:
// - with `-sanitize=fuzzer -DSHOAL_FUZZ` (make fuzz): libFuzzer's main drives
//   LLVMFuzzerTestOneInput; SHOAL_FUZZ_TARGET picks the target;
// - otherwise: `shoal-fuzz TARGET PATH...` replays files (or every file of directories) through
//   the same code — the corpus in Tests/Fuzz/corpus as a regression test, and any crash file.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selectedTarget.run(bytes)
    return 0
}

let selectedTarget: FuzzTarget = {
    let name = getenv("SHOAL_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let t = FuzzTarget(rawValue: name) else {
        let text = "SHOAL_FUZZ_TARGET must be one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))\n"
        _ = text.withCString { write(2, $0, strlen($0)) }
        exit(2)
    }
    return t
}()

#if SHOAL_FUZZ
// SwiftPM links an executable's entry point under the name shoal_fuzz_main (and maps `main` to
// it); under libFuzzer that entry hands control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@_cdecl("shoal_fuzz_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var values = argv
    return runFuzzerDriver(&count, &values, fuzzOneInput)
}
#else
@main
struct Replay {
    static func main() {
        let args = Array(CommandLine.arguments.dropFirst())
        if args.count == 2 && args[0] == "seed" {
            Seeds.write(into: args[1])
            return
        }
        guard let name = args.first, let target = FuzzTarget(rawValue: name), args.count > 1 else {
            print("usage: shoal-fuzz TARGET FILE|DIR... | shoal-fuzz seed DIR  (targets: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")))")
            exit(2)
        }
        var count = 0
        for path in args.dropFirst() {
            for file in files(path) {
                target.run(read(file))
                count += 1
            }
        }
        print("\(name): \(count) inputs replayed, no crash")
    }

    static func files(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [path] }
        defer { closedir(dir) }
        var out: [String] = []
        while let e = readdir(dir) {
            let n = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if !n.hasPrefix(".") { out.append(path + "/" + n) }
        }
        return out.sorted()
    }

    static func read(_ path: String) -> [UInt8] {
        guard let f = fopen(path, "rb") else { return [] }
        defer { fclose(f) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&buf, 1, buf.count, f)
            if n <= 0 { break }
            out += buf.prefix(n)
        }
        return out
    }
}
#endif
