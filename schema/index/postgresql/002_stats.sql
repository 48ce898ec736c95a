-- postgresql/002_stats.sql - 002_stats.sql in PostgreSQL's dialect: the same tables, columns,
-- constraints and indexes. BIGINT for SQLite's 64-bit INTEGER; PostgreSQL has no WITHOUT ROWID
-- (its tables are heaps with the primary key as a separate index). Names the reports list in order
-- sort bytewise (COLLATE "C"), as SQLite sorts them, so both engines answer in the same order.
-- `day` is days since 1970-01-01 UTC; unsigned 64-bit numbers are biased as in the other tables.

CREATE TABLE stats_resolves (
    day          BIGINT NOT NULL,
    app          TEXT COLLATE "C" NOT NULL,
    app_version  BIGINT NOT NULL,
    family       TEXT COLLATE "C" NOT NULL,
    hits         BIGINT NOT NULL DEFAULT 0 CHECK (hits >= 0),
    misses       BIGINT NOT NULL DEFAULT 0 CHECK (misses >= 0),
    PRIMARY KEY (day, app, app_version, family)
);

CREATE TABLE stats_misses (
    day          BIGINT NOT NULL,
    app          TEXT COLLATE "C" NOT NULL,
    app_version  BIGINT NOT NULL,
    family       TEXT COLLATE "C" NOT NULL,
    abi_min      BIGINT NOT NULL,
    abi_max      BIGINT NOT NULL,
    has_profile  INTEGER NOT NULL CHECK (has_profile IN (0, 1)),
    profile      BIGINT NOT NULL,
    requests     BIGINT NOT NULL CHECK (requests >= 0),
    PRIMARY KEY (day, app, app_version, family, abi_min, abi_max, has_profile, profile)
);
CREATE INDEX stats_misses_app ON stats_misses (app, family);

CREATE TABLE stats_downloads (
    day          BIGINT NOT NULL,
    sha256       TEXT COLLATE "C" NOT NULL CHECK (length(sha256) = 64),
    complete     BIGINT NOT NULL DEFAULT 0 CHECK (complete >= 0),
    partial      BIGINT NOT NULL DEFAULT 0 CHECK (partial >= 0),
    bytes        BIGINT NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    PRIMARY KEY (day, sha256)
);
