/* index.h - the psdbd index: SQLite (WAL, one connection per thread; the default) or PostgreSQL
 * (a bounded connection pool; for replicas sharing one database), migrations, queries. */
#ifndef PSDBD_INDEX_H
#define PSDBD_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sqlite3.h>

#include "common/migrate.h"

typedef struct psdbd_index psdbd_index;

typedef enum psdbd_rc {
    PSDBD_OK = 0,
    PSDBD_NOT_FOUND,
    PSDBD_EXISTS,   /* the same thing is already there (idempotent success for publishes) */
    PSDBD_CONFLICT, /* the key is taken by something else */
    PSDBD_FULL,     /* the disk is full */
    PSDBD_ERROR,
    PSDBD_UNAVAILABLE /* the index file was removed, replaced or damaged under the server */
} psdbd_rc;

/* PRAGMA application_id of a psdbd index: 'PSDI'. */
#define PSDBD_INDEX_APPLICATION_ID 0x50534449

/* The index migrations: schema/index/NNN_name.sql, embedded by psdb_embed_sql (CMakeLists.txt)
 * and applied by the one migration runner, psdb__migrate. Step i brings the schema to
 * user_version i + 1; their count is the schema version this psdbd writes. */
extern const psdb__sql_set psdbd_index_migrations;
#define psdbd_num_migrations (psdbd_index_migrations.count)

/* Opens the existing index at `path` and applies missing migrations. It never creates one: an
 * absent file, a file that is not a psdbd index (another application_id, user_version 0) and a
 * schema newer than this binary knows are refused. The file's identity (device, inode) is
 * remembered: every later use checks it (psdbd_index_lost). 0 on success, -1 with a one-line
 * message in err. */
int psdbd_index_open(const char *path, psdbd_index **out, char *err, size_t err_size);
/* Creates a new index at `path` (refused when a file is already there) with every migration,
 * built as `path`.new and linked into place complete, then opens it. Only the initialisation of a
 * new data directory calls it (psdbd_data_open_index). */
int psdbd_index_create(const char *path, psdbd_index **out, char *err, size_t err_size);
/* The PostgreSQL index: the connection pool's default size and the default statement timeout
 * (config keys index-pool and index-statement-timeout). */
#define PSDBD_INDEX_PG_POOL_DEFAULT 8
#define PSDBD_INDEX_PG_STATEMENT_TIMEOUT_MS_DEFAULT 10000

/* True when `where` names a PostgreSQL database (postgresql:// or postgres:// URI) rather than an
 * index file. */
int psdbd_index_is_url(const char *where);
/* Opens the PostgreSQL index at `url` (libpq URI) with a pool of at most `pool` connections
 * (opened as needed, each statement limited to `statement_timeout_ms`, 0: no limit), and applies
 * missing migrations under an advisory lock, so replicas starting together migrate once. A
 * database without a psdbd schema gets one only when `may_create`; otherwise it is refused. A
 * database with another application's schema, or one newer than this binary knows, is refused.
 * 0 on success, -1 with a one-line message in err (the password of the URL is never in it). */
int psdbd_index_connect(const char *url, unsigned pool, unsigned statement_timeout_ms,
                        int may_create, psdbd_index **out, char *err, size_t err_size);
/* "sqlite" or "postgresql". */
const char *psdbd_index_engine(psdbd_index *ix);
/* Calls `changed` (from another thread) whenever another process may have changed what a resolve
 * answers, so a server's resolve cache never outlives a publish or retire made elsewhere.
 * PostgreSQL: a thread LISTENs on the database (publishes and retires NOTIFY on commit); it calls
 * `changed` on each notification, and every second while it cannot listen (so nothing is cached
 * then). SQLite: nothing to do (one server per index file). 0, or -1 with a message in err. */
int psdbd_index_watch(psdbd_index *ix, void (*changed)(void), char *err, size_t err_size);

/* Closes the calling thread's connection and frees the index. Every other thread that used it
 * must have exited. NULL is a no-op. */
void psdbd_index_close(psdbd_index *ix);
/* The calling thread's SQLite connection (opened on first use, never creating the file); NULL
 * when it cannot be opened, when the index is lost (psdbd_index_lost), or on PostgreSQL. Code
 * outside the index uses the psdbd_index_ functions, which work on both engines. */
sqlite3 *psdbd_index_db(psdbd_index *ix);
/* user_version of the open index. */
int psdbd_index_schema_version(psdbd_index *ix);
/* A cheap read: 0 when the index answers, is the file that was opened, and carries psdbd's
 * application_id and schema version. */
int psdbd_index_ping(psdbd_index *ix);
/* SQLite: true when the file at the index path is no longer the one opened (removed, or replaced
 * by another file), or a query found it damaged. PostgreSQL: true while the database cannot be
 * reached (the last connection attempt or query lost the connection). Logs one line when that state
 * begins. Safe from any thread. */
int psdbd_index_lost(psdbd_index *ix);
/* The PSDBD_ERROR or PSDBD_UNAVAILABLE that an index failure is, as psdbd_index_lost says. */
psdbd_rc psdbd_index_failure(psdbd_index *ix);

/* One PSDB to index: identity and target as read from the file, digest, signature. */
typedef struct psdbd_record {
    const char *app_name, *exe_filename, *engine_name, *family;
    uint64_t app_version, engine_version;
    uint8_t app_guid[16];
    uint64_t abi_version, compiler_version, profile_version, serial, size;
    char sha256[65];
    char key_id[65];
    const char *signature;
    const char *published_by; /* token name */
    int statement_version;    /* 1, or 2: signed naming sodb_sha256 */
    char sodb_sha256[65];     /* the source SODB of a version 2 statement; "" otherwise */
} psdbd_record;

/* Looks up the row with r's identity + target + serial: PSDBD_EXISTS when it has the same
 * sha256 (manifest in *out when out is non-NULL), PSDBD_CONFLICT when it has other bytes,
 * PSDBD_NOT_FOUND, PSDBD_ERROR. */
psdbd_rc psdbd_index_find_identity(psdbd_index *ix, const psdbd_record *r, json_t **out);
/* Inserts r in one BEGIN IMMEDIATE transaction (the blob file must already be in place):
 * PSDBD_OK (created), PSDBD_EXISTS (same content already there), PSDBD_CONFLICT, PSDBD_FULL,
 * PSDBD_ERROR. *out receives the manifest on OK and EXISTS. */
psdbd_rc psdbd_index_publish(psdbd_index *ix, const psdbd_record *r, json_t **out);
psdbd_rc psdbd_index_get(psdbd_index *ix, int64_t id, json_t **out);
/* The publish time (Unix seconds) of a blob: the earliest created_at of the PSDB rows naming it,
 * retired ones included. PSDBD_NOT_FOUND when no row names it. */
psdbd_rc psdbd_index_blob_published(psdbd_index *ix, const char *sha256, int64_t *out);
/* Marks a PSDB retired (kept for GET, never resolved). Retiring twice is PSDBD_OK. */
psdbd_rc psdbd_index_retire(psdbd_index *ix, int64_t id, const char *by, json_t **out);

typedef struct psdbd_query {
    const char *app;
    uint64_t app_version;
    const char *family;
    uint64_t abi_min, abi_max;
    int has_profile;
    uint64_t profile_version;
} psdbd_query;
/* The best compatible, non-retired PSDB (MODEL A3): family equal, ABI in [abi_min, abi_max],
 * profile top 32 bits equal when given; larger ABI, then profile, then serial wins. */
psdbd_rc psdbd_index_resolve(psdbd_index *ix, const psdbd_query *q, json_t **out);
psdbd_rc psdbd_index_list_apps(psdbd_index *ix, json_t **out);
/* Calls fn with the application name of every PSDB whose blob is `sha256` until fn returns
 * non-zero: PSDBD_OK when fn accepted one, PSDBD_NOT_FOUND when none was accepted (or no PSDB
 * names the blob), PSDBD_ERROR / PSDBD_UNAVAILABLE. */
psdbd_rc psdbd_index_blob_apps(psdbd_index *ix, const char *sha256,
                               int (*fn)(const char *app, void *ctx), void *ctx);
/* PSDBD_NOT_FOUND when the application is unknown. */
psdbd_rc psdbd_index_list_app_psdbs(psdbd_index *ix, const char *name, json_t **out);

typedef struct psdbd_token_row {
    char *name, *role, *scope;
    uint8_t hash[32];
    int64_t expires_at; /* 0: never */
    int revoked;
} psdbd_token_row;
psdbd_rc psdbd_index_token_find(psdbd_index *ix, const char *selector, psdbd_token_row *out);
void psdbd_token_row_free(psdbd_token_row *t);
/* PSDBD_EXISTS when the name is taken. */
psdbd_rc psdbd_index_token_add(psdbd_index *ix, const char *name, const char *selector,
                               const uint8_t hash[32], const char *role, const char *scope,
                               int64_t expires_at);

/* Publisher keys. *pem, *scope and *families (the families it may sign PSDBs for; may be NULL
 * when not wanted) are malloc'd. */
psdbd_rc psdbd_index_key_find(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                              char **families);
/* PSDBD_EXISTS when the name or the key is already registered. */
psdbd_rc psdbd_index_key_add(psdbd_index *ix, const char *name, const char *key_id, const char *pem,
                             const char *scope, const char *families);

/* ---- the compile farm (index_farm.c; schema/INDEX.md, Farm) -------------------------------- */

/* One SODB to index: identity as read from the file, digest, signature. */
typedef struct psdbd_sodb_record {
    const char *app_name, *exe_filename, *engine_name;
    uint64_t app_version, engine_version;
    uint8_t app_guid[16];
    uint64_t serial, size;
    char sha256[65];
    char key_id[65];
    const char *signature;
    const char *published_by;
} psdbd_sodb_record;
/* Inserts r (its blob already in place) in one write transaction: PSDBD_OK (created),
 * PSDBD_EXISTS (identity + serial already there with these bytes), PSDBD_CONFLICT (other bytes),
 * or a failure. *out: the SODB manifest on OK and EXISTS. */
psdbd_rc psdbd_index_sodb_publish(psdbd_index *ix, const psdbd_sodb_record *r, json_t **out);
/* {"sodbs":[manifest...]} of an application (every version, or app_version when has_version),
 * newest version, then newest serial first; retired ones left out. */
psdbd_rc psdbd_index_sodb_list(psdbd_index *ix, const char *app, int has_version,
                               uint64_t app_version, json_t **out);
/* The manifest of the newest non-retired SODB whose blob is sha256: PSDBD_NOT_FOUND when none. */
psdbd_rc psdbd_index_sodb_find(psdbd_index *ix, const char *sha256, json_t **out);
/* The SODB manifest of `id` (retired or not); PSDBD_NOT_FOUND when there is none. */
psdbd_rc psdbd_index_sodb_get(psdbd_index *ix, int64_t id, json_t **out);
/* Retires SODB `id` (once: retiring it again changes nothing) for `by`, and holds its queued
 * jobs: a retired SODB is not listed, makes no job and is claimed by no worker. *out its
 * manifest; *retired_now (may be NULL) 1 when this call retired it, 0 when it was retired
 * already; *held (may be NULL) how many queued jobs this call held. PSDBD_NOT_FOUND when there
 * is none. */
psdbd_rc psdbd_index_sodb_retire(psdbd_index *ix, int64_t id, const char *by, int *retired_now,
                                 int64_t *held, json_t **out);
/* `psdbd sodb list`: {"sodbs":[manifest...]} of application `app` (NULL: every application; at
 * version app_version when has_version), retired ones too when with_retired; by application
 * name, then newest version, newest serial first. */
psdbd_rc psdbd_index_sodb_list_admin(psdbd_index *ix, const char *app, int has_version,
                                     uint64_t app_version, int with_retired, json_t **out);

/* A compile target: a worker's (announce, claim). */
typedef struct psdbd_farm_target {
    const char *worker, *family;
    uint64_t abi_version, compiler_version, profile_version;
} psdbd_farm_target;
/* A job's cell: the newest non-retired SODB of app + app_version, for family, ABI range and
 * profile (0: any). */
typedef struct psdbd_job_key {
    const char *app;
    uint64_t app_version;
    const char *family;
    uint64_t abi_min, abi_max, profile_version;
} psdbd_job_key;
/* How many jobs resolve misses may keep open (queued or leased) per SODB and family, and per
 * SODB over every family (config job-max-queued-per-family, -per-sodb); 0: no bound. */
typedef struct psdbd_job_bounds {
    int64_t per_family, per_sodb;
} psdbd_job_bounds;
/* Creates the job of k, or adds `demand` to the existing one (a done job is queued again: a miss
 * says its PSDB does not answer now). *created: 1 when it was created, 0 when it existed, -1 when
 * creating it would pass `bounds` (NULL: none): then the demand went to the open job of the same
 * SODB and family whose ABI range is nearest k's (*out that job), or, with none, nowhere (*out
 * NULL). *out (may be NULL): the JOB. PSDBD_NOT_FOUND when the application version has no
 * published SODB. */
psdbd_rc psdbd_index_job_demand(psdbd_index *ix, const psdbd_job_key *k, int64_t demand,
                                const psdbd_job_bounds *bounds, int *created, json_t **out);
/* Records the worker (its target, last seen) and creates a job for every application covered by
 * `scope` whose newest SODB has no PSDB for the target's family and ABI: *created of them. */
psdbd_rc psdbd_index_worker_announce(psdbd_index *ix, const psdbd_farm_target *t, const char *scope,
                                     int64_t *created);
/* Claims the highest-demand job for t (schema/HTTP.md, Farm) of an application `scope` covers:
 * *out {"job","lease","serial","base"}. Jobs whose cell has a PSDB already are marked done on
 * the way; a job whose lease expired for the max_attempts-th time is held. PSDBD_NOT_FOUND: none.
 */
psdbd_rc psdbd_index_job_claim(psdbd_index *ix, const psdbd_farm_target *t, const char *scope,
                               int64_t lease_s, int64_t max_attempts, json_t **out);
/* The lease operations: PSDBD_NOT_FOUND no such job, PSDBD_CONFLICT the lease is not (or no
 * longer) this job's. done: PSDBD_EXISTS when psdb_id is no PSDB compiled from the job's SODB for
 * its family; *seconds the compile time. fail: *held when the job is held now. */
psdbd_rc psdbd_index_job_extend(psdbd_index *ix, int64_t id, const char *lease, int64_t lease_s,
                                int64_t *expires);
psdbd_rc psdbd_index_job_done(psdbd_index *ix, int64_t id, const char *lease, int64_t psdb_id,
                              int64_t *seconds);
psdbd_rc psdbd_index_job_fail(psdbd_index *ix, int64_t id, const char *lease, const char *error,
                              int64_t max_attempts, int *held);
/* `psdbd job requeue`: held job `id` queued again, its attempts at 0 and its last error cleared;
 * *out the JOB. PSDBD_NOT_FOUND: no such job. PSDBD_CONFLICT: not requeued, *out the JOB as it
 * is: not held, or held because its SODB is retired (no claim takes those). */
psdbd_rc psdbd_index_job_requeue(psdbd_index *ix, int64_t id, json_t **out);
/* {"jobs":[JOB...],"workers":[...]}: state NULL every job, "failed" those with a last error,
 * else those in that state; newest first. */
psdbd_rc psdbd_index_jobs_list(psdbd_index *ix, const char *state, json_t **out);
/* The number of jobs in each state: queued, leased, done, held. */
psdbd_rc psdbd_index_job_counts(psdbd_index *ix, int64_t out[4]);
/* The cells farm-built PSDBs fill (version 2 statements, not retired; schema/HTTP.md, Statistics,
 * /v1/stats/farm): *out {"cells":[{"app","app_version","family","abi_version","psdbs",
 * "newest_id","worker"}...],"truncated"}, by application, newest version first, at most `limit`
 * of those whose application `visible` accepts (NULL: all). */
psdbd_rc psdbd_index_farm_cells(psdbd_index *ix, size_t limit,
                                int (*visible)(const char *app, void *ctx), void *ctx,
                                json_t **out);

/* ---- admin commands (psdbd token, key, check, gc) ------------------------------------------ */

typedef enum psdbd_credential { PSDBD_CREDENTIAL_TOKEN, PSDBD_CREDENTIAL_KEY } psdbd_credential;

/* Revokes the token or key called `name`: PSDBD_OK, PSDBD_NOT_FOUND when there is none. */
psdbd_rc psdbd_index_credential_revoke(psdbd_index *ix, psdbd_credential what, const char *name);
/* *out: a JSON array of every token or key, by name: name, role (tokens) or key_id (keys), scope,
 * created_at, expires_at (tokens that have one), revoked. Never a secret. */
psdbd_rc psdbd_index_credential_list(psdbd_index *ix, psdbd_credential what, json_t **out);
/* The engine's own consistency check (SQLite: quick_check, integrity_check when deep;
 * PostgreSQL: the schema version and that every table answers): fn gets one line per problem. */
psdbd_rc psdbd_index_integrity(psdbd_index *ix, int deep, void (*fn)(const char *msg, void *ctx),
                               void *ctx);
psdbd_rc psdbd_index_count_psdbs(psdbd_index *ix, int64_t *out);
/* PSDBD_OK when a PSDB row (retired ones too) names the blob, PSDBD_NOT_FOUND when none. */
psdbd_rc psdbd_index_blob_referenced(psdbd_index *ix, const char *sha256);
/* PSDBD_OK when the blob has a blobs row, PSDBD_NOT_FOUND when not. */
psdbd_rc psdbd_index_blob_indexed(psdbd_index *ix, const char *sha256);
/* Calls fn with every blobs row. */
psdbd_rc psdbd_index_each_blob(psdbd_index *ix,
                               void (*fn)(const char *sha256, uint64_t size, void *ctx), void *ctx);
/* Calls fn with every PSDB whose blob has no blobs row of its size. */
psdbd_rc psdbd_index_each_unbacked_psdb(psdbd_index *ix,
                                        void (*fn)(int64_t id, const char *sha256, void *ctx),
                                        void *ctx);
/* Deletes the blobs rows no PSDB names that were created before `created_before`. */
psdbd_rc psdbd_index_delete_orphan_blob_rows(psdbd_index *ix, int64_t created_before);
/* begin 1: the calling thread's reads from here on see one snapshot; begin 0: that ends. */
psdbd_rc psdbd_index_snapshot(psdbd_index *ix, int begin);
/* lock 1: waits until this process is the only gc on the index (PostgreSQL: a session advisory
 * lock that every replica's gc takes, so two gc runs never interleave); lock 0: releases it.
 * SQLite: PSDBD_OK at once (the index is one machine's file; gc runs there). */
psdbd_rc psdbd_index_gc_lock(psdbd_index *ix, int lock);

#endif
