-- psdb.sql - PSDB schema version 1 (described in PSDB.md). The writer executes
-- this text verbatim on an empty file; readers compare every statement it
-- stores in sqlite_schema with those of the file they open (PSDB.md, rule 5).
PRAGMA page_size = 4096;
PRAGMA application_id = 1347634242; -- 0x50534442, 'PSDB'
PRAGMA user_version = 1;

-- Exactly one row: who the PSDB is for, what it was compiled for, and derived counts.
CREATE TABLE header (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    exe_filename     TEXT,
    app_name         TEXT NOT NULL,
    app_version      INTEGER NOT NULL,
    engine_name      TEXT,
    engine_version   INTEGER NOT NULL,
    app_id           BLOB NOT NULL CHECK (length(app_id) = 16),
    family           TEXT NOT NULL,
    abi_version      INTEGER NOT NULL,
    compiler_version INTEGER NOT NULL,
    profile_version  INTEGER NOT NULL,
    num_values       INTEGER NOT NULL,
    num_groups       INTEGER NOT NULL,
    num_blobs        INTEGER NOT NULL,
    blob_bytes       INTEGER NOT NULL,
    content_digest   BLOB NOT NULL CHECK (length(content_digest) = 32)
);

-- Distinct value bytes, stored once, numbered 1..N in order of first use.
CREATE TABLE blobs (
    id     INTEGER PRIMARY KEY,
    sha256 BLOB NOT NULL UNIQUE CHECK (length(sha256) = 32),
    data   BLOB NOT NULL
);

-- Values: a value key holds at most one blob per value type. size repeats the
-- blob's length so that a size query reads this table only.
CREATE TABLE value_entries (
    key     BLOB NOT NULL,
    type    INTEGER NOT NULL CHECK (type BETWEEN 0 AND 3),
    blob_id INTEGER NOT NULL REFERENCES blobs (id),
    size    INTEGER NOT NULL CHECK (size > 0),
    PRIMARY KEY (key, type)
) WITHOUT ROWID;

-- Groups: one per compiled object, keyed by the group key; one version per key.
CREATE TABLE value_groups (
    key     BLOB NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
) WITHOUT ROWID;

-- The value keys of each group, in the order the compiler gave them.
CREATE TABLE group_members (
    group_key BLOB NOT NULL REFERENCES value_groups (key),
    idx       INTEGER NOT NULL,
    value_key BLOB NOT NULL,
    PRIMARY KEY (group_key, idx)
) WITHOUT ROWID;
