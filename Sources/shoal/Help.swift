/// The text of `shoal --help` and of each command's `--help`.
enum Help {
    /// Every command, in the order help lists them: the one list that help and the unknown-command
    /// message both read, so neither can leave a command out. Each line after a summary's first is
    /// indented under it.
    static let commandSummaries: [(name: String, summary: [String])] = [
        ("run", ["Run the gateway until stopped (store, status console, control socket)"]),
        ("status", ["Show the running gateway's state"]),
        ("doc", ["Write, read and query documents: put | import | get | delete | list | query | index | indexes"]),
        ("changes", ["Show the change feed; --follow keeps streaming"]),
        ("conflicts", ["The conflict log: each conflict replication resolved, and how"]),
        ("peers", ["Peers this gateway knows: online, transports, link, activity, neighbours"]),
        ("peer", ["One peer in full (PeerInfo), certificate included"]),
        ("mesh", ["The mesh: state, counters, links; --dot prints Graphviz, --svg FILE renders it"]),
        ("events", ["Mesh events (state, transports, peer discovery, peer replicators); --follow"]),
        ("radios", ["The radios (Wi-Fi, Bluetooth, rfkill) and whether each transport is usable;",
                    "radios retry: retry advertising and discovery now (retryNetworks)"]),
        ("log", ["Log levels of a running gateway: level DOMAIN LEVEL | levels"]),
        ("identity", ["The gateway's TLS identity: create | show | delete"]),
        ("http", ["The local HTTP API: token (the bearer token other addresses than loopback need)"]),
        ("mqtt", ["The MQTT bridge: status (brokers, subscriptions, messages in and out, drops)"]),
        ("uplink", ["The NATS JetStream uplink (the hub): status (connection, push, pull, lags, skipped)"]),
        ("trust", ["The fleet's trust: status | pending | keygen | allow | revoke | add-root | remove-root |",
                   "add-admin-key | remove-admin-key | checkpoint | import | export | crl"]),
        ("release", ["Updates of Shoal over the mesh: keygen | sign | publish | status (every gateway's outcome)"]),
        ("update", ["The unit's ExecStartPre: boot-check (starts a new binary once, rolls back one that failed)"]),
        ("doctor", ["Check this gateway before trusting it in the field (board, LED, radios, avahi,",
                    "identity, store, clock, free space)"]),
        ("blob", ["Blobs on the running gateway: put FILE | get DIGEST | ls | gc"]),
        ("backup", ["Copy the running gateway's store to FILE while it keeps writing (online backup)"]),
        ("restore", ["Replace a stopped gateway's store with a checked backup; it catches up from the mesh"]),
        ("board", ["Board files: list | show NAME | check FILE"]),
        ("bench", ["Benchmarks that print figures: all (one table), store, tls, replication, http, mqtt, uplink, backup, query,",
                   "live-query, blob-store, blob, storage, stall, instructions; --storage sd-card: as on an SD card"]),
        ("sim", ["Simulate a mesh of gateways (virtual time, real stores): plan a site"]),
        ("demo", ["Five gateways in this process on a simulated radio: the mesh at work"]),
        ("version", ["Versions of shoal and of the C libraries it uses"]),
        ("help", ["This text, or `shoal help COMMAND`"]),
    ]

    static var commandNames: [String] { commandSummaries.map(\.name) }

    static let main: String = {
        var lines = ["shoal — a peer-to-peer data runtime for Linux IoT gateways", "", "Usage: shoal <command> [options]", "", "Commands:"]
        for (name, summary) in commandSummaries {
            for (i, text) in summary.enumerated() {
                let head = i == 0 ? name : ""
                lines.append("  " + head + String(repeating: " ", count: max(1, 11 - head.count)) + text)
            }
        }
        return (lines + mainFooter.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)).joined(separator: "\n")
    }()

    private static let mainFooter = """

        Commands that talk to a running gateway take --socket PATH (default: $SHOAL_SOCKET,
        then /run/shoal/control.sock, then .shoal/sim/control.sock if they exist).
        Read commands take --json for machine-readable output.

        Exit codes:
          0  success
          1  failure (the gateway's root supervisor gave up, or an unexpected error)
          2  usage error (unknown command or option, missing argument)
          3  configuration error (board or site file; each error names file:line: key)
          4  not found (document, collection, board or board file)
          5  no running gateway answers on the control socket (or, under --follow, it stopped)
          6  request rejected (invalid document or JSON, bad request)
          7  shoal run: another shoal run holds the data directory (its lock, DIR/shoal.lock)
         75  shoal run: a release was installed; start the unit again (systemd's Restart= does)
        """

    static let commands: [String: String] = [
        "doctor": """
            Usage: shoal doctor [--board NAME|PATH|auto] [--config FILE] [--data-dir DIR] [--board-dir DIR] [--json]

            Checks a gateway before it is trusted in the field, changing nothing: the board and site
            files load and the board matches this hardware's model; the status LED exists and is free
            (a GPIO line not held by another program, or a writable sysfs LED); the Wi-Fi interface
            and Bluetooth adapter are present; avahi-daemon answers (when Wi-Fi is a transport); the
            identity exists and is not near expiry (30 days); the gateway can link to someone (it
            trusts a peer and can find or reach one: a warning otherwise); the MQTT brokers and the
            uplink's servers resolve and accept connections (a warning otherwise: the gateway
            connects once they do) and the files the uplink reads can be read; the store passes PRAGMA integrity_check
            (opened read-only); the clock is plausible; the data partition has free space. Each check
            passes, warns or fails and says what to do. Exit 0 if nothing failed, 1 otherwise.
            """,
        "run": """
            Usage: shoal run [--board NAME|PATH|auto] [--config FILE] [--data-dir DIR] [--socket PATH]
                             [--log-level LEVEL] [--board-dir DIR]

            Runs the gateway: the supervision tree (store, control socket, status console,
            replication, radios, and the local HTTP API: REST, SSE, /metrics and the web console
            on 127.0.0.1:8470 and DIR/http.sock unless the site file's http: says otherwise; see
            `shoal help http`) until SIGTERM or SIGINT, which stop it gracefully
            (a second signal exits at once, with 1).

              --board NAME|PATH|auto  board file (default auto: match /proc/device-tree/model,
                                      else generic-linux). Names are looked up in --board-dir
                                      (default /etc/shoal/boards), then in the built-in boards.
              --config FILE           site file (default /etc/shoal/shoal.yaml if present, else
                                      the built-in demo site: group shoal.demo)
              --data-dir DIR          overrides the board's storage.path; the control socket
                                      moves to DIR/control.sock unless --socket is given
              --socket PATH           control socket path (default: the board's control.socket)
              --log-level LEVEL       debug, verbose, info, warning, error or none, all domains
              --board-dir DIR         where board files are looked up first

            Under systemd (Type=notify) it sends READY=1 once every part started, and WATCHDOG=1
            only while the supervision tree is healthy. Exit: 0 stopped, 1 gave up, 3 bad config, 4 no
            such board, 7 the data directory is locked by another shoal run (one gateway per data
            directory).
            """,
        "status": """
            Usage: shoal status [--json] [--socket PATH]

            The running gateway's state, board, group, store figures and supervision tree; while a
            sync is pulled, its progress (documents received/announced so far, rate, time left).
            """,
        "doc": """
            Usage: shoal doc put <collection> <id> <json|->   [--socket PATH] [--json]
                   shoal doc import <collection> [FILE|-]     [--socket PATH] [--json]
                   shoal doc get <collection> <id>            [--socket PATH] [--json]
                   shoal doc delete <collection> <id>         [--socket PATH] [--json]
                   shoal doc list <collection> [--limit N] [--after ID] [--deleted] [--socket PATH] [--json]
                   shoal doc expire <collection> <id> --in DURATION | --at UNIX | --never [--socket PATH] [--json]
                   shoal doc query <collection> ['FILTER'] [--order F,-F] [--limit N] [--offset N] [--after CURSOR]
                                  [--fields F,F] [--aggregate count,avg(F)] [--group-by F,F] [--explain] [--follow] [--json]
                   shoal doc index create|drop <collection> FIELD[,FIELD…]   shoal doc indexes [collection]

            A collection is `scope.collection`, or `collection` in the default scope (`_default`
            alone is `_default._default`). A body is a JSON object of at most 1 MiB; `-` reads it
            from standard input. import reads lines of `ID<TAB>JSON` (a file, or standard input)
            and writes them 500 to a transaction. get prints the body; --json prints the whole record. delete
            leaves a tombstone, so the deletion replicates. list --deleted includes tombstones;
            list gives up to --limit documents (default 100, at most 10,000) in id order after
            --after ID, fetched in as many pages as their size needs. expire sets when the document
            is purged on this gateway only (--in 90s/10m/12h/7d, --at a unix time, --never clears
            it): no tombstone, nothing replicated, other gateways keep their copies; an update keeps
            the expiry, a delete clears it. The site file's per-collection ttl, maxDocuments and
            maxBytes purge alike (README "Expiration").

            query: the live documents whose FILTER holds (README "Queries and indexes"), e.g.
              shoal doc query sensors.readings 'site = "east" and pressure > 2.5' --order -updatedAt --limit 20
            FILTER: fields `a` or `a.b.c` (`odd name` in backticks; id and updatedAt are the
            document's id and last write), =, !=, <, <=, >, >=, in [..], exists, starts "prefix",
            and, or, not, parentheses; values "string", numbers, true, false, null. A string never
            equals a number; a missing field fails every comparison (so != holds). --order: fields,
            `-` for descending; ties go by id. --limit: default 100, at most 10,000; a full page prints
            its --after cursor on standard error. --fields: only these fields. --aggregate with
            --group-by: count, min, max, sum, avg over numbers, per group. --explain: SQLite's plan
            and whether an index is used. index create|drop: an expression index over the fields
            (letters, digits, _ and dots), as `indexes:` in the site file makes; indexes lists them.
            query --follow: a live query; prints the whole result, then each update that changes
            it (+ added, ~ changed, - removed; --json: one JSON line per update) until ^C. It is
            evaluated again only when the collection changes, at most 10 times a second.
            """,
        "changes": """
            Usage: shoal changes [--since SEQ] [--limit N] [--follow] [--json] [--socket PATH]

            The change feed: the latest change of each document changed after SEQ, in sequence
            order (at most --limit, default 1000, up to 10,000). --follow keeps the connection open
            and prints changes as they commit (Ctrl-C ends it). With --json: one object
            {changes, lastSequence}; with --follow --json, one JSON object per change, a line each.
            """,
        "http": """
            Usage: shoal http token [--socket PATH | --config FILE --board NAME --data-dir DIR]

            The gateway serves its local API (REST under /v1, the change feed and mesh events over
            server-sent events, Prometheus /metrics, the web console at /) on the site file's
            http.listen addresses (default 127.0.0.1:8470) and on the Unix socket
            <data dir>/http.sock. An address other than loopback needs the header
            `Authorization: Bearer TOKEN`; `shoal http token` prints TOKEN, which the gateway
            makes on its first start (<data dir>/http.token, mode 0600: run it as the gateway's
            user or root). It asks the running gateway where its data directory is; with
            --config/--board/--data-dir it looks where those say. See docs/http-api.md.
            """,
        "mqtt": """
            Usage: shoal mqtt status [--json] [--socket PATH]

            The running gateway's MQTT bridge (the site file's mqtt: section), per broker: its
            state (connecting, connected, disconnected, refused) and last error, the subscriptions,
            messages received, written as documents, unchanged (a redelivery or a message that
            changes nothing) and dropped by reason (not_json, not_utf8, too_large, bad_id,
            bad_time, empty, no_rule, bad_topic, publish_refused), series documents expired by their keep, and
            changes published, acknowledged by the broker, in flight, not sent back to the topic
            they came from, and the lag (changes the broker has not acknowledged yet). The same
            is under "mqtt" in `shoal status --json` and as shoal_mqtt_* in /metrics.
            """,
        "uplink": """
            Usage: shoal uplink status [--json] [--socket PATH]

            The running gateway's uplink to its NATS JetStream hub (the site file's uplink:
            section): its state (connecting, connected, reconnecting, disconnected, refused) since when,
            the server it is connected to, connects and disconnects, the last error and when, the
            last push or pull that succeeded; push: versions published, already on the hub, and
            compare-and-set retries (the hub held a version this gateway had not seen), with the
            lag (local changes not yet on the hub, and the age of the oldest); pull: hub messages
            received, applied, unchanged, the lag (messages not yet applied) and those skipped by
            reason (foreign: not written by a Shoal gateway; refused: a filter or the purge
            horizon; concurrent: a push-only collection's hub version is concurrent); conflicts;
            then each collection: its stream, push and pull on or off, their lags and checkpoints
            (the change feed's sequence pushed up to, the stream's sequence pulled up to). The
            same is under "uplink" in `shoal status --json` and as shoal_uplink_* in /metrics;
            connections and disconnections are in `shoal events`.
            """,
        "trust": """
            Usage: shoal trust [status] [--json]          what the gateway trusts now
                   shoal trust pending [--json]           peers refused because nothing trusts them yet
                   shoal trust keygen --out FILE          a new admin key (FILE private, FILE.pub public)
                   shoal trust allow PEER --admin-key FILE [--note TEXT] [--out FILE]
                   shoal trust revoke PEER --admin-key FILE [--note TEXT] [--out FILE]
                   shoal trust add-root CA.pem | remove-root CA.pem --admin-key FILE [--out FILE]
                   shoal trust add-admin-key KEY | remove-admin-key KEY --admin-key FILE [--out FILE]
                   shoal trust checkpoint --admin-key FILE [--next-update-days N (30)] [--out FILE]
                   shoal trust import FILE...             hand signed entries to the running gateway
                   shoal trust export [--out FILE]        every entry the gateway holds, one per line
                   shoal trust crl --ca-key K --ca-cert C [--revoke CERT] ... [--out FILE]

            Trust is a replicated, signed fact of the mesh: entries in the _system._trust
            collection, each signed by an admin key (ECDSA P-256) that the site file's
            trust.adminKeys lists. They replicate first on every link; an entry with a bad
            signature, an unknown signer, a replayed serial, a signing time ahead of our clock by
            more than 5 minutes, or older than the entry held is refused and logged. A revoked
            peer's links close at once on every gateway the entry reaches, it is refused at the
            handshake on every transport, and what it writes after its revocation is refused by
            every gateway. Without --out, a signing subcommand imports the entry to the running
            gateway (--socket); with --out it only writes the entry (the key need never be on a
            gateway), for `shoal trust import` on any gateway. PEER may be 8+ first hex digits of
            a pending peer. Serials continue from FILE.serial beside the key (and the gateway's).
            """,
        "release": """
            Usage: shoal release keygen --out FILE          a new release key (FILE private, FILE.pub public)
                   shoal release sign --key FILE --binary FILE --version V [--min-version V]
                                      [--rollout 25% | --peers ID,...] [--notes TEXT] --out MANIFEST
                   shoal release publish MANIFEST --binary FILE   hand a release to the running gateway
                   shoal release status [--json]          every gateway's update status, and the releases held

            A release is a signed manifest in the _system._releases collection: version,
            architecture, size and SHA-256 of the binary (a blob reference), the oldest version
            that may take it, and a rollout (all, a percentage of the fleet by a stable hash of
            each peer id, or a list of peer ids), signed with a release key (ECDSA P-256) that the
            site file's updates.releaseKeys lists. `sign` works offline: the key need never be on
            a gateway. A gateway with updates.enabled takes the newest release meant for it,
            checks size, digest, signature and the binary's ELF machine, installs it under
            updates.installDir, and exits with status 75 so systemd starts it again; the new
            binary must reach READY and stay healthy within updates.confirmSeconds, or the next
            boot check (`shoal update boot-check`) rolls back to the previous one. Each gateway
            writes its outcome to _system._status; `status` shows every gateway's from any.
            """,
        "update": """
            Usage: shoal update boot-check [--config FILE] [--dir DIR] [--packaged FILE] [--confirm-seconds N]

            Run by the unit's ExecStartPre with the packaged (known-good) binary before every
            start: makes <installDir>/current exist (pointing at the packaged binary at first),
            gives a newly installed release its one start, and rolls back to the previous binary
            when a release already had its start without confirming, or its deadline passed. DIR
            and N default to the site file's updates.installDir and updates.confirmSeconds.
            """,
        "conflicts": """
            Usage: shoal conflicts [--limit N] [--json] [--socket PATH]

            The conflict log, newest first (--limit N, default 100, at most 10,000): when (local
            time, then UTC; once if the local zone is UTC), collection and document id, the resolver and what it chose (local,
            remote, merged, deleted), the peer the other version came from, and both bodies as
            they were (the loser's too; cut at 200 characters, whole with --json, which also has
            both versions). The log keeps the newest 10,000 entries within 64 MiB of bodies, and
            none older than the board's txLogMaxAgeSeconds.
            """,
        "blob": """
            Usage: shoal blob put FILE [--content-type TYPE] [--doc COLLECTION/ID [--field FIELD]]
                   shoal blob get DIGEST [--out FILE] [--wait SECONDS]
                   shoal blob ls [--json]
                   shoal blob gc [--json]
            (each takes --socket PATH)

            Blobs are binary content kept beside the documents, named by their SHA-256 and
            referenced from a document by {"@blob": "sha256-…", "length": N, "contentType": "…"}.
            put sends FILE to the running gateway in pieces of 256 KiB and prints the reference;
            with --doc it also writes it into that document's FIELD (default "blob"), creating
            the document or keeping its other fields. Over storage.maxBlobSize it is refused and
            nothing is kept. get writes the blob to FILE (FILE.tmp, fsynced, renamed once its
            SHA-256 matched the digest) or to standard output; a blob a document refers to but not
            held here is asked for from the mesh, and --wait SECONDS waits for it to arrive. ls lists the blobs held (state,
            bytes, documents referring to each). gc runs the blob GC now: unreferenced blobs and
            unwanted partial ones older than 10 minutes go; over storage.blobBudget, blobs only
            `blobs: onDemand` collections refer to go, least recently used first; a blob an eager
            collection refers to never goes.
            """,
        "backup": """
            Usage: shoal backup FILE [--json] [--socket PATH]

            The running gateway copies its store to FILE through SQLite's online backup API while
            writes go on (a relative FILE is relative to this shell's directory; the gateway
            process writes it). The copy is the store at one committed point: written to FILE.tmp
            (mode 0600), fsynced, then renamed. Prints the size, pages, seconds and MB/s.
            """,
        "restore": """
            Usage: shoal restore FILE [--config FILE] [--data-dir DIR] [--board NAME] [--force]

            Replaces the store of a STOPPED gateway (the options `shoal run` takes find it) with a
            backup from `shoal backup`. Refused, with the reason and nothing changed, when the
            gateway runs, or the file is truncated, not a database, fails SQLite's integrity
            check, is not a Shoal store, has a newer schema than this shoal, or is from another
            group. The current store is kept as STORE.before-restore-<unix time>. On its next start
            the gateway takes a new store epoch, so peers compare everything again: it catches up
            from the mesh, and deletes made since the backup stay deleted (tombstones win) while
            the peers still hold their tombstones: a backup older than the mesh's txLogMaxAgeSeconds
            (8 hours by default) is refused, since a deletion the peers have purged would come back;
            --force restores it anyway.
            """,
        "help": """
            Usage: shoal help [COMMAND]

            The list of commands and the exit codes, or one command's help (as `shoal COMMAND --help`).
            """,
        "log": """
            Usage: shoal log level DOMAIN|all LEVEL [--socket PATH]
                   shoal log levels [--json] [--socket PATH]

            Changes a running gateway's log level. Domains: peerDiscovery, mesh, replication,
            store, tls, board, status, supervision, control, runtime. Levels: debug, verbose,
            info, warning, error, none. Logs name message kinds and ids, never document bodies.
            """,
        "board": """
            Usage: shoal board list [--json] [--board-dir DIR]
                   shoal board show NAME|PATH [--config SITE] [--json] [--board-dir DIR]
                   shoal board check NAME|PATH [--config SITE] [--board-dir DIR]

            list: every board shoal knows (built-in and in --board-dir). show: a board after its
            `extends:` chain is merged and, with --config, the site's mesh: and log: applied; each
            value with the file:line it came from (or default). check: validates a board file and,
            with --config, a site file and the files it names (rootCertificates); every error is
            reported as file:line: key (at most 20). Exit 3 if invalid, 4 if there is no such board
            or file.
            """,
        "peers": """
            Usage: shoal peers [--json] [--socket PATH]

            Every peer the running gateway knows — heard in discovery, linked, or known through the
            mesh's gossip: whether it is online, the transports it was heard on, the link to it (and
            who dialled), what its replicator is doing (connecting, idle, busy, offline), the
            address it is dialled at, and its own neighbours; under a peer we pull a sync from, its
            progress. Peer ids are shown by their first 8 hex digits; --json gives them whole.
            """,
        "peer": """
            Usage: shoal peer ID [--json] [--socket PATH]

            One peer's PeerInfo: id, online, transports heard on, the link in use, activity, address,
            its certificate (subject and expiry, while linked), its neighbours, and the sync pulled
            from it while one runs. ID is the whole
            peer id or at least its first 4 hex digits.
            """,
        "mesh": """
            Usage: shoal mesh [--dot | --svg FILE | --json] [--socket PATH]

            The mesh as this gateway sees it: state (Created, Discovering, FullyConnected, Stopped,
            Dead), the ObjectBox seed's counters, and the links gossip reports. --dot prints the
            topology as Graphviz (this gateway bold, its tree links thick, its other links dashed);
            --svg FILE renders it with Graphviz's `dot` when that is installed.
            """,
        "events": """
            Usage: shoal events [--since N] [--follow] [--json] [--socket PATH]

            The mesh's recent events (the last 1000), numbered: state changes, transport status,
            peer discovery (online/offline per transport), peer replicator status (connecting,
            idle, busy, offline, stopped, with errors), and the MQTT brokers' and the uplink's
            connections and disconnections (with why). --follow keeps printing new ones.
            """,
        "radios": """
            Usage: shoal radios [status] [--json] [--socket PATH]
                   shoal radios retry [--socket PATH]

            status (the default): what the radio manager sees — the Wi-Fi interface (up, down, no
            carrier, missing), the Bluetooth adapter (present, up), rfkill blocks (soft, hard) — and
            whether each transport is usable, and if not, why.

            retry: the seed's retryNetworks(): starts advertising and a discovery phase at once and forgets
            connection backoffs — after fixing a radio (rfkill, a cable, permissions) there is no
            need to wait for the next phase.
            """,
        "demo": """
            Usage: shoal demo [--nodes N] [--seed X] [--fast] [--dir DIR]

            Runs N gateways (default 5) in this process on a simulated Wi-Fi radio, in a ring: real
            SQLite stores (in DIR, default /dev/shm), a certificate each and real mutual TLS on every
            link, real replication and mesh manager, in virtual time. Tells what happens: the mesh
            forms; a write travels hop by hop; a link fails and the write goes round the other way;
            a second failure splits the mesh and both halves edit one document; the radio recovers
            and everything converges, the conflict resolved alike everywhere. A status view (state,
            links, documents, LED pattern per gateway) follows each step, and a summary ends it.
            Needs no root, radio or daemon. Paced for a terminal; --fast (or a pipe) runs straight
            through. Exit status 1 if the gateways did not converge.
            """,
        "sim": """
            Usage: shoal sim [--nodes N] [--topology full|line|ring|grid|random] [--kind wifi|ble]
                             [--seconds S] [--seed X] [--seeds K] [--loss P] [--partitions] [--crashes]
                             [--skew MS] [--writes N] [--body BYTES] [--burst N] [--edits on|off]
                             [--resolver fieldMerge|lastWriteWins] [--field-edits] [--max-connections N]
                             [--tls] [--trust] [--dot] [--dir DIR] [--duplicate P] [--reorder P]
                             [--blobs N] [--blob-bytes MIN-MAX] [--max-control-share P] [--quiet]

            Runs N gateways (default 10) in one process on a simulated radio in virtual time: real
            SQLite stores (in DIR, default /dev/shm), the real replicator and the real mesh manager.
            The topology says who hears whom (full: everyone; line: neighbours; grid: 4 neighbours;
            random: nearby points). The mesh forms; one write from node 0 is timed until every node
            holds it; then --writes documents (some edits and deletes) are written on random nodes.
            With --partitions, --crashes or --skew, faults come and go for the first half of
            --seconds (default 300) and the second half shows the healing. Prints when the mesh
            formed, the probe's time against the sum of per-hop latencies, convergence time, bytes
            sent against the ideal (one body per node), links per node, and whether every invariant
            held (connected mesh, budget, one link per pair, convergence, no lost write). --seeds K
            runs K seeds from --seed and prints a summary; a failing seed prints the command that
            replays it exactly (with --tls and --trust too: simulated keys come from the seed).
            Exit status 1 when an invariant failed. --dot prints the final topology as Graphviz.
            --tls runs a real mutual-TLS session (mbedTLS) on every simulated link. --trust (full
            topology only) adds fleet trust: an operator revokes one gateway on another at a seeded
            time and again with a second admin key on a third; the run checks that nobody keeps
            or makes a link to it, that every other gateway ends with the same entries, and that
            its writes from the revocation on are refused (--field-edits then leaves out fields
            whose newest write is the revoked gateway's). With --tls a duplicated frame is a
            replayed record: the session refuses it and the link closes. --burst N
            writes N documents at once on one gateway; --edits off writes only new
            documents (no edits or deletes, so no conflicts); --resolver picks how concurrent edits
            resolve (default fieldMerge, field by field; lastWriteWins, whole documents); with
            --field-edits an edit sets one of four fields of the document as its gateway holds it,
            and each field of every document never deleted must end with its newest write
            everywhere (with fieldMerge). --duplicate P and --reorder P
            duplicate and reorder frames with probability P; --quiet leaves the report out (the first
            line and failed seeds only). --blobs N keeps N blobs (sizes between --blob-bytes MIN and
            MAX, default 64000-4000000) on random nodes with documents referencing them; every node
            must fetch every blob, and the report adds blob bytes against one copy per node and
            chunks sent to a node that had them already. The report also gives control traffic
            (frames with no document or blob data) per link direction against the link's capacity,
            per virtual second and over each link's life; --max-control-share P makes "no second
            over P of a link's capacity" an invariant (0.1: a tenth).
            """,
        "bench": """
            Usage: shoal bench [all] [--baseline-binary PATH] [--dir DIR] [--port P]
                   shoal bench store [--docs N] [--batch N] [--rounds N] [--durability full|normal] [--dir DIR]
                   shoal bench tls [--handshakes N] [--megabytes N] [--rounds N]
                   shoal bench replication [--docs N] [--rounds N] [--durability full|normal] [--port P]
                   shoal bench latency [--rounds N] [--port P] [--dir DIR]
                   shoal bench http [--seconds N] [--connections N] [--dir DIR]
                   shoal bench mqtt [--docs N] [--changes N] [--burst N] [--publisher PATH] [--dir DIR]
                   shoal bench uplink [--count N] [--body-bytes N] [--dir DIR]
                   shoal bench backup [--docs N] [--rounds N] [--dir DIR]
                   shoal bench query [--docs N] [--rounds N] [--seconds S] [--dir DIR]
                   shoal bench live-query [--docs N] [--samples N] [--dir DIR]
                   shoal bench blob-store [--rounds N] [--durability full|normal] [--dir DIR]
                   shoal bench blob [--megabytes N] [--rounds N] [--durability full|normal] [--port P] [--dir DIR]
                   shoal bench storage [--storage P] [--samples N] [--dir DIR]
                   shoal bench stall [--storage P] [--samples N] [--dir DIR]
                   shoal bench instructions [--docs N] [--port P] [--from DIR]

            --storage sd-card|sync=MS[,stall=MS][,every=S] on any of them: the stores of this
            process go through a SQLite VFS that waits before every sync and stalls now and then
            (sd-card: +20 ms per sync, a 2 s stall every ~30 s); gateways started as child
            processes keep the disk as it is. storage: this disk's fdatasync, durable commits,
            batches and 8 concurrent writers (one commit each vs group commit), on the disk and
            through the profile. stall: `status` from a gateway in this process while its storage
            stalls (--samples stalls, default 20). instructions: instructions per replicated
            document on each side under valgrind's callgrind, by where they go (needs valgrind and
            shoal-bench-gateway beside this binary; SHOAL_BENCH_KEEP=1 keeps the files, --from DIR
            reads them again).

            latency: 1,000 and 10,000 documents imported into a `shoal run` child (its control
            socket, 500 per request) until its peer in this process holds them all; the import's
            time and the arrival's, medians of --rounds (default 5).

            all (the default): every figure below plus the simulator's and memory's, each beside a
            baseline measured in the same run, then one table with the date and machine: store
            writes vs bare SQLite; TLS bulk vs bare mbedTLS; a 2-process pull of 10,000 × 1 KB
            documents vs bare SQLite writes; latency (above) vs the import; the SD-card profile's
            store writes, group commit, pull and status during 20 stalls; instructions per
            document on each side (when valgrind is installed) vs the counts of 79f1b51; bytes
            per replicated document vs one body per node (10-node simulated mesh); a write across
            a 20-node simulated line vs the sum of hop latencies; a gateway's RSS holding 100,000
            documents vs idle; the HTTP API's, the MQTT bridge's and the uplink's figures; this
            binary's size vs --baseline-binary (`make bench` builds a trivial FoundationEssentials
            program). ~4 min.

            Writes N (default 20000) ~1 KB JSON documents in transactions of --batch (default 100)
            through the store, and the same statement through a bare SQLite C-API loop, alternately
            on fresh files in DIR (default /tmp), --rounds times (default 3); prints documents per
            second for both (medians) and their ratio. Figures, not a pass/fail test.

            blob-store: one 10 MB blob and 100 blobs of 64 KB written through the store (64 KiB
            chunk rows in SQLite, 1 MiB per transaction, digest and manifest computed on the way)
            against the same bytes written as files (FILE.tmp, fsync, rename, fsync of the
            directory), alternately, --rounds times: MB/s both and the ratio; and SHA-256 MB/s of
            Shoal's own hasher against mbedTLS's on the same 8 MB.

            blob: a `shoal run` child on 127.0.0.1:P (default 47913) holds a 10 MiB and a
            --megabytes (default 64) MiB blob, each referenced by one document; a replication node
            in this process (fresh store, durability full) pulls them over TLS, timed from dialling
            until the blob is complete, --rounds times (default 3): MB/s against TLS bulk data
            between two sessions in this process (an in-memory pipe) in the same run, and the ratio.

            tls: CPU time of full and resumed mutual-TLS handshakes (both sides together), and bulk
            MB/s through Shoal's TLS session against a bare mbedtls_ssl_write/read loop on the same
            sessions and pipe, alternately, and their ratio.

            http: a `shoal run` child on a free loopback port; wrk (Debian's wrk) GET of one
            document and PUT of ~1 KB documents (a new id each, durability full) for --seconds each
            (default 8) with --connections (default 16, the control socket's most), beside the same
            operations from as many control-socket client threads: requests/s, p99 and the ratios
            http/control; write → event latency on /v1/changes?feed=sse (median, p99, 1,000
            writes); the gateway's RSS added by 100 open SSE clients. About 1 minute.

            mqtt: `shoal run` children (sim board) and a mosquitto of their own per part (free
            loopback port). Ingest: a paho-mqtt publisher (Tests/MQTT/bench_publish.py, or
            --publisher PATH) sends --docs messages (default 50000) at QoS 1 on topics
            bench/<i>/state, 100 in flight; msg/s from the first publish until the gateway has
            committed them all (durability full, then normal), beside the same publisher into
            `mosquitto_sub -q 1` (the baseline). Publish rate of changes: --changes documents
            (default 20000) written at once through the control socket, until mosquitto_sub has
            them from the outbound rule. RSS: the gateway's VmRSS every 50 ms during a --burst
            (default 100000) of messages: before, peak, after. The baseline runs before and after
            the gateways (the faster counts). Without mosquitto, mosquitto_sub, python3 or
            paho-mqtt the figures that need them are skipped, saying so. About 1 minute.

            uplink: a nats-server of its own (/usr/sbin/nats-server, JetStream in DIR, a free
            loopback port; `make deps` installs it). Baseline: --count (default 10000) messages of
            --body-bytes (default 1024) through a raw JetStream publish loop, each acknowledged,
            batches of 256, to a stream of its own (before and after; the faster counts). Then
            gateway A (a store and the uplink's bridge) writes --count documents while gateway B
            (another) pulls: docs/s of A's push (until A's board says all published) and end to
            end (until B holds all), each against the baseline; bytes per document each way from
            the server's /connz, against the body and the uplink's headers. About 15 s.

            query: --docs (default 100000) ~1 KB documents in one collection; the query
            'site = "east" and pressure > 2.5' --order -updatedAt --limit 20, queries/s through the
            store vs the same compiled SQL through the bare SQLite C API (prepared once), --rounds
            (default 3) of --seconds (default 2) each side, alternately: without an index, then
            with one over (site, pressure). Prints each plan and the ratio (goal >= 0.80).

            live-query: the same documents and index; that query kept live by a thread of its own;
            --samples (default 100) writes of a matching document, each timed until the update
            holding it reaches the live query's thread: median and p99, with the standard pacing
            (coalesce 25 ms, at most 10 evaluations/s) and with none.
            """,
        "identity": """
            Usage: shoal identity create [--label L] [--days N] [--cn NAME] [--ca-key K --ca-cert C] [--force [--new-key | --self-signed]] [--json]
                   shoal identity show [--label L] [--json]
                   shoal identity delete [--label L]
            Where: [--dir DIR] or the directory `shoal run` uses: [--board B] [--config F] [--data-dir D];
                   with none of these, the running gateway's (found as `shoal status` finds it,
                   [--socket S]), else the stock board's.

            An identity is an EC P-256 key (file mode 0600) and an X.509 certificate with both
            clientAuth and serverAuth, stored under a label (default: the site file's
            identity.label, else "shoal") in <storage>/identities. create makes a self-signed one,
            or one signed by your CA with --ca-key and --ca-cert (PEM or DER). Over an existing
            identity it needs --force and then re-issues the certificate over the same key: the
            peer id, which other gateways' allowedPeers name, stays. --new-key makes a new key
            instead (a new peer id: update the allow-lists). A CA-signed identity is re-issued
            with --ca-key and --ca-cert; --force alone refuses it unless --self-signed says to
            drop the CA (peers that trust only the CA would refuse it). show prints the peer id (SHA-256 of
            the public key), subject, issuer, validity and key usages; of a running gateway, the
            identity it uses. `shoal run` creates a self-signed identity on first boot and renews
            its certificate, same key, a day before it expires.
            """,
        "version": """
            Usage: shoal version [--json]
            """,
    ]
}
