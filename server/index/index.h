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

/* Publisher keys. *pem and *scope are malloc'd. */
psdbd_rc psdbd_index_key_find(psdbd_index *ix, const char *key_id, char **pem, char **scope);
/* PSDBD_EXISTS when the name or the key is already registered. */
psdbd_rc psdbd_index_key_add(psdbd_index *ix, const char *name, const char *key_id, const char *pem,
                             const char *scope);

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
