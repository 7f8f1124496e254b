import Glibc

/// rtnetlink link and address notifications, for the radio manager. In a file of its own: a file
/// that imports CBlueZ (whose header includes <sys/socket.h>) and names SOCK_* constants made
/// those constants vanish from the module's other files in whole-module (release) builds.
enum LinkEvents {
    /// A socket that becomes readable on link and address changes (no bytes are sent anywhere).
    static func socket() -> Int32 {
        guard let fd = try? SystemCall.run("socket(AF_NETLINK)", {
            Glibc.socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0 /* NETLINK_ROUTE */)
        }) else { return -1 }
        // struct sockaddr_nl (linux/netlink.h, not in Swift's Glibc): u16 family, u16 pad, u32 pid,
        // u32 groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR.
        let groups: UInt32 = 0x1 | 0x10 | 0x100
        var addr = [UInt8](repeating: 0, count: 12)
        withUnsafeBytes(of: UInt16(AF_NETLINK)) { for (i, b) in $0.enumerated() { addr[i] = b } }
        withUnsafeBytes(of: groups) { for (i, b) in $0.enumerated() { addr[8 + i] = b } }
        let bound = try? SystemCall.run("bind(AF_NETLINK)") {
            addr.withUnsafeBytes { raw in bind(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(12)) }
        }
        if bound == nil { close(fd); return -1 }
        return fd
    }

}
