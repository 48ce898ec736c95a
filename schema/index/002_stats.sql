-- 002_stats.sql - demand statistics: what clients asked for and downloaded, per UTC day. psdbd
-- aggregates in memory and adds its counts here every flush interval (schema/INDEX.md, Demand
-- statistics); rows older than the retention are deleted by the same flush. `day` is days since
-- 1970-01-01 UTC. Unsigned 64-bit numbers are biased as in the other tables.

-- Resolves by application, version and family: hits and misses.
CREATE TABLE stats_resolves (
    day          INTEGER NOT NULL,
    app          TEXT NOT NULL,
    app_version  INTEGER NOT NULL,
    family       TEXT NOT NULL,
    hits         INTEGER NOT NULL DEFAULT 0 CHECK (hits >= 0),
    misses       INTEGER NOT NULL DEFAULT 0 CHECK (misses >= 0),
    PRIMARY KEY (day, app, app_version, family)
) WITHOUT ROWID;

-- What the misses asked for: the ABI range and, when given, the profile version (its top 32 bits,
-- the part resolution compares; has_profile 0 and profile 0 when the request named none).
CREATE TABLE stats_misses (
    day          INTEGER NOT NULL,
    app          TEXT NOT NULL,
    app_version  INTEGER NOT NULL,
    family       TEXT NOT NULL,
    abi_min      INTEGER NOT NULL,
    abi_max      INTEGER NOT NULL,
    has_profile  INTEGER NOT NULL CHECK (has_profile IN (0, 1)),
    profile      INTEGER NOT NULL,
    requests     INTEGER NOT NULL CHECK (requests >= 0),
    PRIMARY KEY (day, app, app_version, family, abi_min, abi_max, has_profile, profile)
) WITHOUT ROWID;
CREATE INDEX stats_misses_app ON stats_misses (app, family);

-- Blob downloads by blob (a blob is the bytes of one or more PSDBs): complete responses (200),
-- partial ones (206, or a response the client broke off), and the body bytes that were sent.
CREATE TABLE stats_downloads (
    day          INTEGER NOT NULL,
    sha256       TEXT NOT NULL CHECK (length(sha256) = 64),
    complete     INTEGER NOT NULL DEFAULT 0 CHECK (complete >= 0),
    partial      INTEGER NOT NULL DEFAULT 0 CHECK (partial >= 0),
    bytes        INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    PRIMARY KEY (day, sha256)
) WITHOUT ROWID;
