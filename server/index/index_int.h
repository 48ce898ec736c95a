/* index_int.h - inside the psdbd index: the engine seam (one table of queries per engine), the
 * state each engine keeps, and what the engines share (manifests from a row of either).
 *
 * DESIGN
 * index.c holds the public functions of index.h; each one calls the open index's engine through
 * psdbd__index_ops. An engine is a pair of files: index_<engine>.c (connections, migrations,
 * failures) and index_<engine>_queries.c (the queries and the ops table). SQLite
 * (index_sqlite*.c) is the default; PostgreSQL (index_pg*.c) serves replicas that share one
 * database. A new set of queries (a new index.h function) is one member of psdbd__index_ops, one
 * wrapper in index.c and one function in each index_<engine>_queries.c. The demand statistics
 * (index_stats.h) are the exception that keeps their JSON equal: index_stats.c builds the reports
 * from rows, and each engine's index_<engine>_stats.c only adds a flush and runs the reports'
 * queries (stats_add, stats_select). */
#ifndef PSDBD_INDEX_INT_H
#define PSDBD_INDEX_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "index.h"
#include "index_stats.h"

struct psdbd__row;
/* Called with each row of a query; returns 0 to go on, non-zero to stop early (not a failure). */
typedef int (*psdbd__row_fn)(const struct psdbd__row *row, void *ctx);

/* The queries of the demand statistics' reports. index_stats.c builds every report from their
 * rows, once for all engines, so both answer the same JSON; each engine holds their SQL in its
 * dialect. The parameters (`text` first when the query takes one, then `nums`) and the columns of
 * each, in order: */
typedef enum psdbd__stats_query {
    /* app; family, abi_version, profile_version, SHOWN (7), of its active PSDBs by family, ABI */
    PSDBD__SQ_COVERED,
    /* app, from_day, limit; family, abi_min, abi_max, has_profile, profile, sum(requests),
     * max(day) of its misses that still miss, most asked first, then family, abi_min, abi_max */
    PSDBD__SQ_COVERAGE_MISSING,
    /* app; one row when it has any resolve recorded */
    PSDBD__SQ_APP_SEEN,
    /* -; app, family, abi_version, profile_version, SHOWN (7), retired_at, retired_by of every
     * PSDB by app, family, then active first, best first */
    PSDBD__SQ_MATRIX,
    /* from_day, to_day; app, family, abi_min, abi_max, has_profile, profile, day, sum(requests)
     * of the day, the range's sum(requests), max(day) of the misses that still miss */
    PSDBD__SQ_MISSING,
    /* from_day, to_day; day, app, family, sum(complete), sum(partial), sum(bytes) of downloads,
     * a blob counted for its first PSDB */
    PSDBD__SQ_DOWNLOADS,
    /* from_day, to_day; day, app, sum(hits), sum(misses) */
    PSDBD__SQ_RESOLVES,
    /* -; 'publish'|'retire', at, by, id, app, app_version, family, abi_version, serial, newest
     * first */
    PSDBD__SQ_EVENTS,
    /* from_day, to_day; day, hits, misses, requests of the demand not recorded key by key
     * (stats_other), by day */
    PSDBD__SQ_OTHER,
    /* day; kind (PSDBD_STAT_RESOLVE or _MISS), app, app_version, family, abi_min, abi_max,
     * has_profile, profile of every key stored for the day (the recorder's day budget after a
     * restart) */
    PSDBD__SQ_DAY_KEYS
} psdbd__stats_query;

/* The kinds PSDBD__SQ_DAY_KEYS writes as literals. */
#define PSDBD__SQ_KIND_RESOLVE "1"
#define PSDBD__SQ_KIND_MISS "2"
_Static_assert(PSDBD_STAT_RESOLVE == 1 && PSDBD_STAT_MISS == 2, "PSDBD__SQ_DAY_KEYS' kinds");

/* SHOWN: the columns of the PSDB a coverage range or matrix cell shows. */
#define PSDBD__SQ_SHOWN_COLS                                                                       \
    "p.id, p.serial, p.size, p.created_at, p.key_id, p.published_by, p.app_version "

/* The misses' filter: no active PSDB of that version, family, ABI range and profile answers the
 * request now (the same test as psdbd_index_resolve). Both dialects; the profile's low 32 bits
 * are zero, so adding 2^32 - 1 to it never overflows. */
#define PSDBD__SQ_STILL_MISSING                                                                    \
    "NOT EXISTS (SELECT 1 FROM psdbs p JOIN apps a ON a.id = p.app WHERE a.name = m.app "          \
    "AND p.app_version = m.app_version AND p.family = m.family AND p.retired_at IS NULL "          \
    "AND p.abi_version BETWEEN m.abi_min AND m.abi_max AND (m.has_profile = 0 OR "                 \
    "p.profile_version BETWEEN m.profile AND m.profile + 4294967295)) "

/* ---- the farm's queries (index_farm.c) ---------------------------------------------------------
 * Like the statistics, the farm's logic (SODBs, jobs, workers) is written once, in index_farm.c,
 * over two primitives each engine provides: a transaction, and one statement run inside it. The
 * statements are written once too, in the SQL both dialects share, with $1..$N parameters
 * (SQLite binds them by name); where the dialects differ (PostgreSQL's FOR UPDATE SKIP LOCKED),
 * index_farm.c picks the text by psdbd__index_ops.engine. */

/* One parameter of a farm statement. */
typedef struct psdbd__arg {
    enum { PSDBD__ARG_NULL, PSDBD__ARG_I64, PSDBD__ARG_TEXT, PSDBD__ARG_BLOB } type;
    int64_t i;
    const char *s; /* TEXT (NUL-terminated) or BLOB bytes */
    size_t len;    /* BLOB */
} psdbd__arg;

/* An open farm transaction: the engine's connection for it. */
typedef struct psdbd__tx {
    psdbd_index *ix;
    void *conn;      /* PostgreSQL: its psdbd__pgc; SQLite: unused (the thread's connection) */
    int64_t changes; /* rows the last statement wrote */
} psdbd__tx;
typedef psdbd_rc (*psdbd__tx_fn)(psdbd__tx *tx, void *ctx);

typedef struct psdbd__index_ops {
    const char *engine; /* "sqlite", "postgresql": for messages */
    void (*close)(psdbd_index *ix);
    int (*ping)(psdbd_index *ix);
    int (*lost)(psdbd_index *ix);
    psdbd_rc (*find_identity)(psdbd_index *ix, const psdbd_record *r, json_t **out);
    psdbd_rc (*publish)(psdbd_index *ix, const psdbd_record *r, json_t **out);
    psdbd_rc (*get)(psdbd_index *ix, int64_t id, json_t **out);
    psdbd_rc (*blob_published)(psdbd_index *ix, const char *sha256, int64_t *out);
    psdbd_rc (*retire)(psdbd_index *ix, int64_t id, const char *by, json_t **out);
    psdbd_rc (*resolve)(psdbd_index *ix, const psdbd_query *q, json_t **out);
    psdbd_rc (*list_apps)(psdbd_index *ix, json_t **out);
    psdbd_rc (*blob_apps)(psdbd_index *ix, const char *sha256,
                          int (*fn)(const char *app, void *ctx), void *ctx);
    psdbd_rc (*list_app_psdbs)(psdbd_index *ix, const char *name, json_t **out);
    psdbd_rc (*token_find)(psdbd_index *ix, const char *selector, psdbd_token_row *out);
    psdbd_rc (*token_add)(psdbd_index *ix, const char *name, const char *selector,
                          const uint8_t hash[32], const char *role, const char *scope,
                          int64_t expires_at);
    psdbd_rc (*key_find)(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                         char **families);
    psdbd_rc (*key_add)(psdbd_index *ix, const char *name, const char *key_id, const char *pem,
                        const char *scope, const char *families);
    /* admin commands */
    psdbd_rc (*credential_revoke)(psdbd_index *ix, psdbd_credential what, const char *name);
    psdbd_rc (*credential_list)(psdbd_index *ix, psdbd_credential what, json_t **out);
    psdbd_rc (*integrity)(psdbd_index *ix, int deep, void (*fn)(const char *msg, void *ctx),
                          void *ctx);
    psdbd_rc (*count_psdbs)(psdbd_index *ix, int64_t *out);
    psdbd_rc (*blob_referenced)(psdbd_index *ix, const char *sha256);
    psdbd_rc (*blob_indexed)(psdbd_index *ix, const char *sha256);
    psdbd_rc (*each_blob)(psdbd_index *ix, void (*fn)(const char *sha256, uint64_t size, void *ctx),
                          void *ctx);
    psdbd_rc (*each_unbacked_psdb)(psdbd_index *ix,
                                   void (*fn)(int64_t id, const char *sha256, void *ctx),
                                   void *ctx);
    psdbd_rc (*delete_orphan_blob_rows)(psdbd_index *ix, int64_t created_before);
    psdbd_rc (*snapshot)(psdbd_index *ix, int begin);
    psdbd_rc (*gc_lock)(psdbd_index *ix, int lock);
    int (*watch)(psdbd_index *ix, void (*changed)(void), char *err, size_t err_size);
    /* demand statistics (index_stats.h) */
    psdbd_rc (*stats_add)(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                          int64_t keep_from_day);
    psdbd_rc (*stats_select)(psdbd_index *ix, psdbd__stats_query q, const char *text,
                             const int64_t *nums, size_t n_nums, psdbd__row_fn fn, void *ctx);
    /* the farm (index_farm.c): fn runs inside one transaction (write: SQLite's BEGIN IMMEDIATE,
     * PostgreSQL's BEGIN; read: a snapshot), committed when fn returns PSDBD_OK, rolled back
     * otherwise; farm_run runs one statement of it (`sql` a static text: each engine prepares
     * each distinct one once per connection, SQLite keyed by its address, PostgreSQL by its
     * text), fn (may be NULL) called with each row. */
    psdbd_rc (*farm_tx)(psdbd_index *ix, int write, psdbd__tx_fn fn, void *ctx);
    psdbd_rc (*farm_run)(psdbd__tx *tx, const char *sql, const psdbd__arg *args, size_t n,
                         psdbd__row_fn fn, void *ctx);
} psdbd__index_ops;

struct psdbd__pg; /* index_pg.c */

struct psdbd_index {
    const psdbd__index_ops *ops;
    int version; /* schema version of the open index */
    /* SQLite (index_sqlite.c): the file, this thread's connection, what was found wrong. */
    char *path;
    pthread_key_t key;
    dev_t dev;
    ino_t ino;
    atomic_int lost;    /* the last check's finding, a LOST_ value (logged when it changes) */
    atomic_int damaged; /* a query met a damaged file (psdb__sqlite_hr: corrupt): until restart */
    /* PostgreSQL (index_pg.c) */
    struct psdbd__pg *pg;
};

extern const psdbd__index_ops psdbd__sqlite_ops;
extern const psdbd__index_ops psdbd__pg_ops;

/* The PostgreSQL migrations: schema/index/postgresql/NNN_name.sql, each replacing the shared
 * schema/index/ file of the same name where the dialects differ. */
extern const psdb__sql_set psdbd_index_pg_migrations;

/* ---- SQLite engine (index_sqlite.c) -------------------------------------------------------- */

/* This thread's connection as it is (no check, no open): for error messages; may be NULL. */
sqlite3 *psdbd__index_this_db(psdbd_index *ix);

/* A cached prepared statement of this thread's connection (opened on first use), reset and
 * unbound; NULL when the index is lost or the statement cannot be prepared (logged). `sql` must
 * be a string literal: the cache is keyed by its address. */
sqlite3_stmt *psdbd__index_prep(psdbd_index *ix, const char *sql);

/* A SQLite failure (extended code) as the index's status, logged; marks the index damaged when
 * the file is corrupt. */
psdbd_rc psdbd__index_rc_of(psdbd_index *ix, int rc);

void psdbd__sqlite_close(psdbd_index *ix);
/* index_sqlite_stats.c */
psdbd_rc psdbd__sqlite_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                                 int64_t keep_from_day);
psdbd_rc psdbd__sqlite_stats_select(psdbd_index *ix, psdbd__stats_query q, const char *text,
                                    const int64_t *nums, size_t n_nums, psdbd__row_fn fn,
                                    void *ctx);
int psdbd__sqlite_ping(psdbd_index *ix);
int psdbd__sqlite_lost(psdbd_index *ix);

/* ---- PostgreSQL engine (index_pg.c) -------------------------------------------------------- */

/* index_pg.c implements psdbd_index_connect (index.h); its queries are in index_pg_queries.c. */

/* ---- shared by the engines (index.c) ------------------------------------------------------- */

/* One result row of either engine, read column by column. Columns are those of PSDBD__PSDB_COLS
 * for psdbd__manifest_of. */
struct psdbd__row {
    const char *(*text)(void *row, int i); /* "" for NULL */
    int64_t (*i64)(void *row, int i);      /* 0 for NULL */
    int (*is_null)(void *row, int i);
    size_t (*blob)(void *row, int i, uint8_t *buf, size_t size); /* bytes copied; 0 for NULL */
    void *row;
};
typedef struct psdbd__row psdbd__row;

/* Non-zero when s is well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF): what a PostgreSQL database in UTF-8 accepts as text. */
int psdbd__utf8_ok(const char *s);

/* The columns a manifest is built from, both dialects: the id, the application's name, then
 * PSDBD__PSDB_ROW_COLS, psdbs' own. */
#define PSDBD__PSDB_ROW_COLS                                                                       \
    "p.exe_filename, p.app_version, p.engine_name, p.engine_version, p.app_guid, p.family, "       \
    "p.abi_version, p.compiler_version, p.profile_version, p.serial, p.sha256, p.size, p.key_id, " \
    "p.signature, p.created_at, p.retired_at, p.statement_version, p.sodb_sha256 "
#define PSDBD__PSDB_COLS                                                                           \
    "p.id, a.name, " PSDBD__PSDB_ROW_COLS "FROM psdbs p JOIN apps a ON a.id = p.app "

/* The manifest (schema/HTTP.md, Manifest) of a row selected with PSDBD__PSDB_COLS. */
json_t *psdbd__manifest_of(const psdbd__row *row);

/* One row of a credential listing (psdbd_index_credential_list) from the columns name,
 * role-or-key_id, scope, created_at, expires_at, revoked_at. */
json_t *psdbd__credential_of(const psdbd__row *row, psdbd_credential what);

#endif
