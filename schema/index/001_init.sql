-- 001_init.sql - the psdbd index, first version: applications, blobs, PSDBs (with retirement),
-- tokens and publisher keys. Unsigned 64-bit numbers are stored with the top bit flipped
-- (schema/INDEX.md) so SQLite's signed ordering is their unsigned ordering.

CREATE TABLE apps (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE CHECK (length(name) > 0),
    created_at  INTEGER NOT NULL
);

-- One row per blob file in blobs/<aa>/<sha256>. A row exists only once its file was fsynced and
-- renamed into place.
CREATE TABLE blobs (
    sha256      TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    size        INTEGER NOT NULL CHECK (size >= 0),
    created_at  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE psdbs (
    id               INTEGER PRIMARY KEY,
    app              INTEGER NOT NULL REFERENCES apps(id),
    exe_filename     TEXT NOT NULL,
    app_version      INTEGER NOT NULL,
    engine_name      TEXT NOT NULL,
    engine_version   INTEGER NOT NULL,
    app_guid         BLOB NOT NULL CHECK (length(app_guid) = 16),
    family           TEXT NOT NULL CHECK (length(family) > 0),
    abi_version      INTEGER NOT NULL,
    compiler_version INTEGER NOT NULL,
    profile_version  INTEGER NOT NULL,
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
-- Identity + target + serial names one PSDB: a second upload with other bytes is a conflict.
CREATE UNIQUE INDEX psdbs_identity ON psdbs (app, app_version, exe_filename, engine_name,
    engine_version, app_guid, family, abi_version, compiler_version, profile_version, serial);
CREATE INDEX psdbs_resolve ON psdbs (app, app_version, family, abi_version);
CREATE INDEX psdbs_sha256 ON psdbs (sha256);

-- Bearer tokens "psdb_<selector>_<secret>": the selector finds the row, the SHA-256 of the whole
-- token is compared in constant time. The token itself is never stored.
CREATE TABLE tokens (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    selector    TEXT NOT NULL UNIQUE,
    hash        BLOB NOT NULL CHECK (length(hash) = 32),
    role        TEXT NOT NULL CHECK (role IN ('admin', 'publisher', 'reader')),
    scope       TEXT NOT NULL DEFAULT '*',
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    revoked_at  INTEGER
);

-- Publisher public keys (Ed25519, SubjectPublicKeyInfo PEM). key_id as in schema/STATEMENT.md.
CREATE TABLE keys (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    key_id      TEXT NOT NULL UNIQUE CHECK (length(key_id) = 64),
    public_key  TEXT NOT NULL,
    scope       TEXT NOT NULL DEFAULT '*',
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
