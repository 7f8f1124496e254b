import CAvahi
import Glibc
import ShoalCore
import Synchronization
import ShoalThreads

/// DNS-SD through avahi-daemon (libavahi-client over D-Bus): publishes one service and browses
/// and resolves the others of its type. One thread of its own runs Avahi's simple poll loop; the
/// other threads only say what they want (publish or not, browse or not) and hear back through
/// `onEvent`, from that thread.
///
/// The loop reconciles what is wanted with what exists, so the daemon being absent at start,
/// dying, or restarting costs nothing but a status: the client is made with AVAHI_CLIENT_NO_FAIL
/// (it waits for the daemon), and is made again after a failure, with a growing delay. A name
/// taken by another service on the link is replaced by Avahi's alternative ("name #2") and
/// published again.
public final class DNSSD: @unchecked Sendable {  // avahi handles and their state, touched only by the loop thread
    /// One resolved service instance: a name on one interface over one IP protocol.
    public struct Found: Sendable, Equatable {
        /// Stable for the instance: interface index, protocol and name.
        public var key: String
        public var name: String
        /// A numeric address to connect to; IPv6 link-local ones carry `%interface`.
        public var host: String
        public var port: UInt16
        public var txt: [String: String]
        public var interfaceName: String
    }

    public enum Event: Sendable, Equatable {
        /// The daemon answers (with its version), or does not (with why).
        case daemon(reachable: Bool, detail: String)
        /// Our service is announced under `name` (after a collision, a new name).
        case published(name: String)
        /// Our service is not announced, and why (the daemon is gone, a failure).
        case publishFailed(String)
        case found(Found)
        case removed(key: String)
        /// Browsing failed (it is retried with the client).
        case browseFailed(String)
    }

    public let serviceType: String
    let onEvent: @Sendable (Event) -> Void

    struct Wanted {
        var publish: (name: String, port: UInt16, txt: [String: String])?
        var browse = false
        var stop = false
        /// A publish was asked for again: report the current state even if nothing changed.
        var reportPublish = false
        var reportDaemon = false
    }
    let wanted = Locked(Wanted())
    let running = Atomic<Bool>(false)
    /// The loop thread, joined by `stop`.
    let workers = WorkerGroup()

    // Loop-thread state.
    var poll: OpaquePointer?
    var client: OpaquePointer?
    var group: OpaquePointer?
    var browser: OpaquePointer?
    var resolvers: [String: OpaquePointer] = [:]
    var found: [String: Found] = [:]
    /// Instances found by an earlier browser, not yet seen by the current one: those still absent
    /// when the browser says it has all for now are reported removed.
    var stale: Set<String> = []
    /// The name we publish under now (Avahi may have picked an alternative), and what it is for.
    var publishedName: String?
    var publishedFor: (name: String, port: UInt16, txt: [String: String])?
    var groupEstablished = false
    var clientRetryAt = 0
    var clientFailures = 0
    var groupRetryAt = 0
    var browseRetryAt = 0
    var lastDaemonReport: (Bool, String)?
    var clientCallbackFired = false

    /// `serviceType` such as `_1A2B3C4D5E6F._tcp` (`GroupID.serviceType`).
    public init(serviceType: String, onEvent: @escaping @Sendable (Event) -> Void) {
        self.serviceType = serviceType
        self.onEvent = onEvent
    }

    /// Starts the loop thread. Returns false if no thread could be made.
    @discardableResult
    public func start() -> Bool {
        guard let p = avahi_simple_poll_new() else { return false }
        poll = p
        running.store(true, ordering: .relaxed)
        let ok = workers.spawn("dnssd") { self.loop() }
        if !ok {
            running.store(false, ordering: .releasing)
            avahi_simple_poll_free(p)
            poll = nil
        }
        return ok
    }

    /// Announces our service (again, if the name, port or TXT changed).
    public func publish(name: String, port: UInt16, txt: [String: String]) {
        wanted.withLock {
            $0.publish = (name, port, txt)
            $0.reportPublish = true
        }
        wake()
    }

    public func unpublish() {
        wanted.withLock { $0.publish = nil }
        wake()
    }

    /// Browses (and resolves) services of our type while `on`.
    public func browse(_ on: Bool) {
        wanted.withLock {
            $0.browse = on
            $0.reportDaemon = true
        }
        wake()
    }

    /// Stops the loop and frees everything; joins the thread for up to 3 s and returns those it
    /// had to abandon.
    @discardableResult
    public func stop() -> [String] {
        wanted.withLock { $0.stop = true }
        wake()
        return workers.join(timeoutMillis: 3000)
    }

    private func wake() {
        // avahi_simple_poll_wakeup is safe from another thread (it writes to the loop's pipe).
        if running.load(ordering: .acquiring), let poll { avahi_simple_poll_wakeup(poll) }
    }

    // MARK: the loop thread

    private func loop() {
        while true {
            let w = wanted.withLock { w -> Wanted in
                let copy = w
                w.reportPublish = false
                w.reportDaemon = false
                return copy
            }
            if w.stop { break }
            reconcile(w)
            // Wakes for commands (the pipe), Avahi's own timers, and at least once a second for
            // the retry timers.
            if avahi_simple_poll_iterate(poll, 1000) != 0 { SystemCall.pause(millis: 100) }
        }
        teardownClient()
        if let poll { avahi_simple_poll_free(poll) }
        poll = nil
        running.store(false, ordering: .releasing)
    }

    private func reportDaemon(_ reachable: Bool, _ detail: String, force: Bool = false) {
        if !force, let last = lastDaemonReport, last.0 == reachable, last.1 == detail { return }
        lastDaemonReport = (reachable, detail)
        onEvent(.daemon(reachable: reachable, detail: detail))
    }

    private func reconcile(_ w: Wanted) {
        let now = monotonicMillis()
        if client == nil {
            guard now >= clientRetryAt else {
                if w.reportPublish, w.publish != nil { onEvent(.publishFailed(lastDaemonReport?.1 ?? "avahi-daemon is not reachable")) }
                return
            }
            var error: Int32 = 0
            let me = Unmanaged.passUnretained(self).toOpaque()
            client = avahi_client_new(avahi_simple_poll_get(poll), AVAHI_CLIENT_NO_FAIL, { _, _, user in
                guard let user else { return }
                Unmanaged<DNSSD>.fromOpaque(user).takeUnretainedValue().clientCallbackFired = true
            }, me, &error)
            if client == nil {
                clientFailures += 1
                clientRetryAt = now + min(30_000, 1000 << min(clientFailures - 1, 5))
                let why = "avahi-daemon is not reachable: \(String(cString: avahi_strerror(error))) (D-Bus system bus)"
                reportDaemon(false, why)
                if w.publish != nil { onEvent(.publishFailed(why)) }
                return
            }
        }
        guard let client else { return }
        let state = avahi_client_get_state(client)
        if state == AVAHI_CLIENT_FAILURE {
            let why = "avahi-daemon went away: \(String(cString: avahi_strerror(avahi_client_errno(client))))"
            teardownClient()
            clientFailures += 1
            clientRetryAt = now + min(30_000, 1000 << min(clientFailures - 1, 5))
            reportDaemon(false, why)
            if w.publish != nil { onEvent(.publishFailed(why)) }
            return
        }
        if state == AVAHI_CLIENT_CONNECTING {
            let why = "avahi-daemon is not running (waiting for it on the D-Bus system bus)"
            reportDaemon(false, why)
            if groupEstablished || publishedName != nil { freeGroup() }
            if w.reportPublish, w.publish != nil { onEvent(.publishFailed(why)) }
            return
        }
        if state == AVAHI_CLIENT_S_COLLISION || state == AVAHI_CLIENT_S_REGISTERING {
            // The host name is being (re)registered: our records must be withdrawn and added again.
            if group != nil { freeGroup() }
            return
        }
        // AVAHI_CLIENT_S_RUNNING
        clientFailures = 0
        let version = avahi_client_get_version_string(client).map { String(cString: $0) } ?? "avahi"
        reportDaemon(true, version)
        reconcilePublish(w, client: client, now: now)
        reconcileBrowse(w, client: client, now: now)
    }

    private func reconcilePublish(_ w: Wanted, client: OpaquePointer, now: Int) {
        guard let want = w.publish else {
            if group != nil { freeGroup() }
            publishedFor = nil
            publishedName = nil
            return
        }
        if let p = publishedFor, p.name != want.name || p.port != want.port || p.txt != want.txt {
            freeGroup()
            publishedName = nil
        }
        if let group {
            let s = avahi_entry_group_get_state(group)
            if s == Int32(AVAHI_ENTRY_GROUP_ESTABLISHED.rawValue) {
                if !groupEstablished || w.reportPublish {
                    groupEstablished = true
                    onEvent(.published(name: publishedName ?? want.name))
                }
            } else if s == Int32(AVAHI_ENTRY_GROUP_COLLISION.rawValue) {
                // Another service on the link has our name: take Avahi's alternative and go again.
                let current = publishedName ?? want.name
                if let alt = avahi_alternative_service_name(current) {
                    publishedName = String(cString: alt)
                    avahi_free(alt)
                }
                avahi_entry_group_reset(group)
                groupEstablished = false
                if let error = addService(group, want) {
                    onEvent(.publishFailed(error))
                    freeGroup()
                    groupRetryAt = now + 5000
                }
            } else if s == Int32(AVAHI_ENTRY_GROUP_FAILURE.rawValue) {
                let why = "publishing failed: \(String(cString: avahi_strerror(avahi_client_errno(client))))"
                freeGroup()
                groupRetryAt = now + 5000
                onEvent(.publishFailed(why))
            }
            // Otherwise still registering: the answer comes once Avahi has probed the name.
            return
        }
        guard now >= groupRetryAt else {
            if w.reportPublish { onEvent(.publishFailed("publishing failed; retrying")) }
            return
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard let g = avahi_entry_group_new(client, { _, _, user in
            // The loop reads the group's state after this iteration.
            _ = user
        }, me) else {
            groupRetryAt = now + 5000
            onEvent(.publishFailed("avahi_entry_group_new: \(String(cString: avahi_strerror(avahi_client_errno(client))))"))
            return
        }
        group = g
        publishedFor = want
        if publishedName == nil { publishedName = want.name }
        if let error = addService(g, want) {
            freeGroup()
            groupRetryAt = now + 5000
            onEvent(.publishFailed(error))
        }
    }

    /// Adds our service to an empty group and commits it; returns an error text on failure.
    private func addService(_ g: OpaquePointer, _ want: (name: String, port: UInt16, txt: [String: String])) -> String? {
        var list: UnsafeMutablePointer<AvahiStringList>? = nil
        for (k, v) in want.txt.sorted(by: { $0.key < $1.key }) { list = avahi_string_list_add(list, "\(k)=\(v)") }
        defer { avahi_string_list_free(list) }
        let name = publishedName ?? want.name
        var rc = avahi_entry_group_add_service_strlst(g, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(0), name, serviceType, nil, nil, want.port, list)
        if rc == Int32(AVAHI_ERR_COLLISION) {
            if let alt = avahi_alternative_service_name(name) {
                publishedName = String(cString: alt)
                avahi_free(alt)
            }
            rc = avahi_entry_group_add_service_strlst(g, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(0), publishedName ?? name, serviceType, nil, nil, want.port, list)
        }
        if rc < 0 { return "cannot add service \(name) (\(serviceType)): \(String(cString: avahi_strerror(rc)))" }
        rc = avahi_entry_group_commit(g)
        if rc < 0 { return "cannot commit service \(name): \(String(cString: avahi_strerror(rc)))" }
        return nil
    }

    private func freeGroup() {
        if let group { avahi_entry_group_free(group) }
        group = nil
        groupEstablished = false
    }

    private func reconcileBrowse(_ w: Wanted, client: OpaquePointer, now: Int) {
        if !w.browse {
            if browser != nil { freeBrowser() }
            return
        }
        guard browser == nil, now >= browseRetryAt else { return }
        let me = Unmanaged.passUnretained(self).toOpaque()
        browser = avahi_service_browser_new(client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), serviceType, nil, AvahiLookupFlags(0), { b, interface, proto, event, name, type, domain, flags, user in
            guard let user else { return }
            Unmanaged<DNSSD>.fromOpaque(user).takeUnretainedValue().browsed(b, interface, proto, event, name, type, domain, flags)
        }, me)
        if browser == nil {
            browseRetryAt = now + 5000
            onEvent(.browseFailed("avahi_service_browser_new: \(String(cString: avahi_strerror(avahi_client_errno(client))))"))
        }
    }

    private func freeBrowser() {
        stale.formUnion(found.keys)
        for r in resolvers.values { avahi_service_resolver_free(r) }
        resolvers.removeAll()
        if let browser { avahi_service_browser_free(browser) }
        browser = nil
    }

    private func teardownClient() {
        freeBrowser()
        freeGroup()
        publishedFor = nil
        if let client { avahi_client_free(client) }
        client = nil
        // What we found stays found: the mesh decides when a peer is lost (a daemon restart is not
        // every peer leaving).
    }

    static func key(_ interface: AvahiIfIndex, _ proto: AvahiProtocol, _ name: String) -> String { "\(interface)/\(proto)/\(name)" }

    private func browsed(_ b: OpaquePointer?, _ interface: AvahiIfIndex, _ proto: AvahiProtocol, _ event: AvahiBrowserEvent,
                         _ name: UnsafePointer<CChar>?, _ type: UnsafePointer<CChar>?, _ domain: UnsafePointer<CChar>?, _ flags: AvahiLookupResultFlags) {
        guard let client else { return }
        if event == AVAHI_BROWSER_FAILURE {
            onEvent(.browseFailed("browsing \(serviceType) failed: \(String(cString: avahi_strerror(avahi_client_errno(client))))"))
            freeBrowser()
            browseRetryAt = monotonicMillis() + 5000
            return
        }
        if event == AVAHI_BROWSER_ALL_FOR_NOW {
            // What an earlier browse found and this one did not left while we were not looking.
            for k in stale.sorted() where found.removeValue(forKey: k) != nil { onEvent(.removed(key: k)) }
            stale.removeAll()
            return
        }
        guard let name, let type, let domain else { return }
        let text = String(cString: name)
        let k = DNSSD.key(interface, proto, text)
        if event == AVAHI_BROWSER_NEW {
            if flags.rawValue & AVAHI_LOOKUP_RESULT_OUR_OWN.rawValue != 0 { return }
            // Seen again: resolving it reports it found again (the mesh hears it is still there).
            if stale.remove(k) != nil { found.removeValue(forKey: k) }
            guard resolvers[k] == nil else { return }
            let me = Unmanaged.passUnretained(self).toOpaque()
            // The resolver stays while the service exists: Avahi tells it when the address, port or
            // TXT change (a peer restarted on another port).
            let r = avahi_service_resolver_new(client, interface, proto, name, type, domain, proto, AvahiLookupFlags(0), { r, interface, proto, event, name, _, _, _, address, port, txt, _, user in
                guard let user else { return }
                Unmanaged<DNSSD>.fromOpaque(user).takeUnretainedValue().resolved(r, interface, proto, event, name, address, port, txt)
            }, me)
            if let r { resolvers[k] = r }
        } else if event == AVAHI_BROWSER_REMOVE {
            stale.remove(k)
            if let r = resolvers.removeValue(forKey: k) { avahi_service_resolver_free(r) }
            if found.removeValue(forKey: k) != nil { onEvent(.removed(key: k)) }
        }
    }

    private func resolved(_ r: OpaquePointer?, _ interface: AvahiIfIndex, _ proto: AvahiProtocol, _ event: AvahiResolverEvent,
                          _ name: UnsafePointer<CChar>?, _ address: UnsafePointer<AvahiAddress>?, _ port: UInt16, _ txt: UnsafeMutablePointer<AvahiStringList>?) {
        guard let name else { return }
        let text = String(cString: name)
        let k = DNSSD.key(interface, proto, text)
        guard event == AVAHI_RESOLVER_FOUND, let address else {
            // Timed out (the peer left before answering): forget it; a later NEW resolves again.
            if let r = resolvers.removeValue(forKey: k) { avahi_service_resolver_free(r) }
            return
        }
        var buffer = [CChar](repeating: 0, count: 64)
        avahi_address_snprint(&buffer, buffer.count, address)
        var host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var ifname = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        let interfaceName = if_indextoname(UInt32(bitPattern: interface), &ifname) != nil
            ? String(decoding: ifname.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "\(interface)"
        if host.lowercased().hasPrefix("fe80:") { host += "%" + interfaceName }
        var pairs: [String: String] = [:]
        var item = txt
        while let i = item {
            var key: UnsafeMutablePointer<CChar>?
            var value: UnsafeMutablePointer<CChar>?
            var size = 0
            if avahi_string_list_get_pair(i, &key, &value, &size) == 0, let key {
                pairs[String(cString: key)] = value.map { String(cString: $0) } ?? ""
                avahi_free(key)
                if let value { avahi_free(value) }
            }
            item = avahi_string_list_get_next(i)
        }
        let f = Found(key: k, name: text, host: host, port: port, txt: pairs, interfaceName: interfaceName)
        if found[k] != f {
            found[k] = f
            onEvent(.found(f))
        }
    }
}
