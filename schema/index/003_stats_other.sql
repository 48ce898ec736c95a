-- 003_stats_other.sql - demand over the recording bounds, per UTC day: the counts psdbd did not
-- record key by key (a name longer than the recorded limit, the day's cap on distinct names or its
-- byte budget spent, the memory bound between two flushes), summed so that no count is lost and
-- nothing a client sends grows the index without bound (schema/INDEX.md, Demand statistics). One
-- file for both engines: BIGINT is a 64-bit integer in each.

CREATE TABLE stats_other (
    day          BIGINT NOT NULL PRIMARY KEY,
    hits         BIGINT NOT NULL DEFAULT 0 CHECK (hits >= 0),     -- resolves answered with a PSDB
    misses       BIGINT NOT NULL DEFAULT 0 CHECK (misses >= 0),   -- resolves answered 404
    requests     BIGINT NOT NULL DEFAULT 0 CHECK (requests >= 0)  -- misses whose shape was not kept
);
