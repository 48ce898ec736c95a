-- 004_farm.sql - the compile farm (schema/INDEX.md, Farm): published SODBs, the job queue, the
-- workers, a compiler role for tokens, a family scope for keys, and the statement version and
-- source SODB of each PSDB. Unsigned 64-bit numbers are stored with the top bit flipped, as in
-- psdbs.

-- An SODB a studio published: its blob is in blobs (content-addressed like a PSDB's). Identity
-- + serial names one SODB; the newest serial of an application version is the one compiled.
CREATE TABLE sodbs (
    id               INTEGER PRIMARY KEY,
    app              INTEGER NOT NULL REFERENCES apps(id),
    exe_filename     TEXT NOT NULL,
    app_version      INTEGER NOT NULL,
    engine_name      TEXT NOT NULL,
    engine_version   INTEGER NOT NULL,
    app_guid         BLOB NOT NULL CHECK (length(app_guid) = 16),
    serial           INTEGER NOT NULL,
    sha256           TEXT NOT NULL REFERENCES blobs(sha256),
    size             INTEGER NOT NULL CHECK (size >= 0),
    key_id           TEXT NOT NULL,
    signature        TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    published_by     TEXT NOT NULL,
    retired_at       INTEGER,
    retired_by       TEXT
);
CREATE UNIQUE INDEX sodbs_identity ON sodbs (app, app_version, exe_filename, engine_name,
    engine_version, app_guid, serial);
CREATE INDEX sodbs_sha256 ON sodbs (sha256);

-- A PSDB signed with a version 2 statement names the SODB it was compiled from.
ALTER TABLE psdbs ADD COLUMN statement_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE psdbs ADD COLUMN sodb_sha256 TEXT;

-- The families a key may sign PSDBs for (fnmatch pattern, like scope).
ALTER TABLE keys ADD COLUMN families TEXT NOT NULL DEFAULT '*';

-- One compile to do: an SODB for a family and ABI range (and profile, 0: any). demand counts the
-- resolve misses that asked for it. A lease is held by one worker until lease_expires.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY,
    sodb             INTEGER NOT NULL REFERENCES sodbs(id),
    family           TEXT NOT NULL CHECK (length(family) > 0),
    abi_min          INTEGER NOT NULL,
    abi_max          INTEGER NOT NULL,
    profile_version  INTEGER NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'done', 'held')),
    demand           INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    worker           TEXT,
    lease            TEXT,
    lease_expires    INTEGER,
    claimed_at       INTEGER,
    psdb_id          INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (sodb, family, abi_min, abi_max, profile_version)
);
CREATE INDEX jobs_claim ON jobs (family, state);

-- Workers that announced themselves or claimed: their target and their record.
CREATE TABLE workers (
    name             TEXT PRIMARY KEY,
    family           TEXT NOT NULL,
    abi_version      INTEGER NOT NULL,
    compiler_version INTEGER NOT NULL,
    profile_version  INTEGER NOT NULL,
    last_seen        INTEGER NOT NULL,
    jobs_done        INTEGER NOT NULL DEFAULT 0
);
-- The compile time (claim to done, seconds) of each finished job, for a worker's median.
CREATE TABLE job_times (
    id               INTEGER PRIMARY KEY,
    worker           TEXT NOT NULL,
    seconds          INTEGER NOT NULL,
    done_at          INTEGER NOT NULL
);
CREATE INDEX job_times_worker ON job_times (worker, id);

-- The compiler role: SQLite cannot change a CHECK, so tokens is rebuilt with the wider one.
CREATE TABLE tokens_new (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    selector    TEXT NOT NULL UNIQUE,
    hash        BLOB NOT NULL CHECK (length(hash) = 32),
    role        TEXT NOT NULL CHECK (role IN ('admin', 'publisher', 'reader', 'compiler')),
    scope       TEXT NOT NULL DEFAULT '*',
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    revoked_at  INTEGER
);
INSERT INTO tokens_new SELECT id, name, selector, hash, role, scope, created_at, expires_at,
    revoked_at FROM tokens;
DROP TABLE tokens;
ALTER TABLE tokens_new RENAME TO tokens;
