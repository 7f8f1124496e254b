/// The store's schema, as numbered migrations. `PRAGMA user_version` holds the number of the last
/// one applied; each runs in its own transaction, so a crash mid-migration leaves the previous
/// version intact. Never edit a shipped migration: add the next one.
enum Schema {
    static let migrations: [(version: Int, sql: String)] = [
        (1, """
        CREATE TABLE meta(
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE collections(
            id         INTEGER PRIMARY KEY,
            scope      TEXT NOT NULL,
            name       TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            UNIQUE(scope, name)
        );
        INSERT INTO collections(id, scope, name, created_at) VALUES (1, '_default', '_default', 0);
        -- One row per document: its current body (NULL for a tombstone), its revision (local
        -- write count), its version (opaque here; the replicator stores a version vector) and
        -- the node-local sequence of its last change.
        CREATE TABLE documents(
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            doc_id        TEXT NOT NULL,
            body          TEXT,
            deleted       INTEGER NOT NULL DEFAULT 0,
            revision      INTEGER NOT NULL,
            version       BLOB NOT NULL DEFAULT x'',
            sequence      INTEGER NOT NULL,
            updated_at    INTEGER NOT NULL,
            UNIQUE(collection_id, doc_id)
        );
        """),
        (2, """
        -- The change feed reads documents by sequence; the sequence is unique per node.
        CREATE UNIQUE INDEX documents_by_sequence ON documents(sequence);
        -- How far each peer's changes to a collection have been received (pull) or acknowledged
        -- by that peer (push).
        CREATE TABLE checkpoints(
            peer_id       TEXT NOT NULL,
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            direction     TEXT NOT NULL CHECK (direction IN ('push', 'pull')),
            sequence      INTEGER NOT NULL,
            updated_at    INTEGER NOT NULL,
            PRIMARY KEY(peer_id, collection_id, direction)
        );
        """),
        (3, """
        -- Every conflict the replicator resolved: both versions, who sent the remote one, the
        -- resolver and what it decided. `shoal conflicts` lists them.
        CREATE TABLE conflicts(
            id             INTEGER PRIMARY KEY,
            collection_id  INTEGER NOT NULL REFERENCES collections(id),
            doc_id         TEXT NOT NULL,
            local_version  BLOB NOT NULL,
            remote_version BLOB NOT NULL,
            peer_id        TEXT NOT NULL,
            resolver       TEXT NOT NULL,
            outcome        TEXT NOT NULL,
            at             INTEGER NOT NULL
        );
        CREATE INDEX documents_by_collection_sequence ON documents(collection_id, sequence);
        """),
        (4, """
        -- Tombstones per collection, for counting them (and live documents: all rows, from the
        -- covering index above, less these) without visiting every row.
        CREATE INDEX documents_tombstones ON documents(collection_id) WHERE deleted = 1;
        """),
        (5, """
        -- The conflict log keeps both bodies (NULL: a tombstone, or not known when it was
        -- refused before its body came), so it is an inbox one can act on. body_bytes (both
        -- bodies' size) comes before them in each row: the retention's sum reads no overflow page.
        ALTER TABLE conflicts ADD COLUMN body_bytes INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE conflicts ADD COLUMN local_body TEXT;
        ALTER TABLE conflicts ADD COLUMN remote_body TEXT;
        CREATE INDEX conflicts_by_at ON conflicts(at);
        """),
        (6, """
        -- Changes that came from outside the mesh through a bridge (the MQTT bridge: which broker,
        -- which topic), so the bridge never sends one back where it came from. A row goes once
        -- the bridge's outbound checkpoints have passed its sequence.
        CREATE TABLE change_sources(
            sequence INTEGER PRIMARY KEY,
            bridge   TEXT NOT NULL,
            source   TEXT NOT NULL
        );
        """),
        (7, """
        -- What the uplink knows a hub holds of each document: the hub's stream sequence of the
        -- document's last message and the version it carries. A push whose version is already
        -- there is not sent again; a publish expects that sequence (compare-and-set).
        CREATE TABLE hub_heads(
            hub          TEXT NOT NULL,
            collection   TEXT NOT NULL,
            doc_id       TEXT NOT NULL,
            hub_sequence INTEGER NOT NULL,
            version      BLOB NOT NULL,
            PRIMARY KEY(hub, collection, doc_id)
        ) WITHOUT ROWID;
        """),
        (8, """
        -- Expiration (see DocumentStore+Expiry). expires_at: a local expiry time set on this
        -- gateway only (wall ms; NULL: none). written_at: the physical HLC time (ms) of the
        -- document's last write, from its version: it travels with the document, so a collection's
        -- TTL is computed alike on every gateway. body_bytes: the body's size, for byte budgets.
        ALTER TABLE documents ADD COLUMN expires_at INTEGER;
        ALTER TABLE documents ADD COLUMN written_at INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE documents ADD COLUMN body_bytes INTEGER NOT NULL DEFAULT 0;
        UPDATE documents SET written_at = updated_at, body_bytes = coalesce(length(CAST(body AS BLOB)), 0);
        CREATE INDEX documents_expiring ON documents(expires_at) WHERE expires_at IS NOT NULL;
        -- Oldest first per collection (TTL and budgets), covering the byte sum.
        CREATE INDEX documents_by_written_at ON documents(collection_id, written_at, body_bytes) WHERE deleted = 0;
        -- Versions this gateway purged by its own decision (a local expiry, a budget): never
        -- replicated; a peer that sends the same version again (or an older one) is refused.
        -- Trimmed by age and count (DocumentStore.purgeRecordsMax*).
        CREATE TABLE purged_documents(
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            doc_id        TEXT NOT NULL,
            version       BLOB NOT NULL,
            reason        TEXT NOT NULL,
            purged_at     INTEGER NOT NULL,
            PRIMARY KEY(collection_id, doc_id)
        ) WITHOUT ROWID;
        CREATE INDEX purged_documents_by_at ON purged_documents(purged_at);
        """),
        (9, """
        -- Blobs (see DocumentStore+Blobs). One row per blob held, whole or in part: its digest
        -- (32 bytes; NULL while a local upload is still being written), length, content type,
        -- manifest (the chunks' SHA-256s, 32 bytes each, in order), state, the bytes of its chunks
        -- held, when it came and when it was last read (the budget drops the least recently used).
        CREATE TABLE blobs(
            id           INTEGER PRIMARY KEY,
            digest       BLOB UNIQUE,
            length       INTEGER NOT NULL,
            content_type TEXT,
            manifest     BLOB NOT NULL DEFAULT x'',
            state        TEXT NOT NULL CHECK(state IN ('writing', 'partial', 'complete')),
            held_bytes   INTEGER NOT NULL DEFAULT 0,
            created_at   INTEGER NOT NULL,
            used_at      INTEGER NOT NULL
        );
        -- Verified chunks, 64 KiB each (the last shorter).
        CREATE TABLE blob_chunks(
            blob_id INTEGER NOT NULL REFERENCES blobs(id) ON DELETE CASCADE,
            idx     INTEGER NOT NULL,
            data    BLOB NOT NULL,
            UNIQUE(blob_id, idx)
        );
        -- Which live document refers to which blob: kept in the transaction of every document
        -- write (a tombstone or a purge removes its rows).
        CREATE TABLE blob_refs(
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            doc_id        TEXT NOT NULL,
            digest        BLOB NOT NULL,
            length        INTEGER NOT NULL,
            content_type  TEXT,
            at            INTEGER NOT NULL,
            PRIMARY KEY(collection_id, doc_id, digest)
        ) WITHOUT ROWID;
        CREATE INDEX blob_refs_by_digest ON blob_refs(digest, collection_id);
        -- Blobs a reader asked for (on-demand collections): fetched like eager ones until complete.
        CREATE TABLE blob_wants(
            digest       BLOB PRIMARY KEY,
            length       INTEGER NOT NULL,
            content_type TEXT,
            wanted_at    INTEGER NOT NULL
        ) WITHOUT ROWID;
        """),
    ]

    static var latestVersion: Int { migrations.last!.version }
}
