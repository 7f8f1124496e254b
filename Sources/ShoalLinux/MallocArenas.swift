import Glibc

/// glibc's cap on malloc arenas (`mallopt(M_ARENA_MAX, n)`). Swift's Glibc module leaves
/// malloc.h out, so the function is looked up by name; a libc without it makes this a no-op.
/// Why cap: glibc gives each thread that contends for malloc an arena of its own (up to 8 per
/// core) and keeps what an arena freed, so a pool of threads that each allocate a lot in turn
/// holds far more RSS than the work needs.
public enum MallocArenas {
    /// glibc's M_ARENA_MAX (malloc.h).
    static let arenaMaxOption: Int32 = -8

    /// Caps the arenas made from now on at `count`; false where the libc has no mallopt or refuses.
    @discardableResult
    public static func limit(_ count: Int32) -> Bool {
        guard let symbol = dlsym(nil, "mallopt") else { return false }  // nil: RTLD_DEFAULT
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        return unsafeBitCast(symbol, to: Mallopt.self)(arenaMaxOption, count) == 1
    }
}
