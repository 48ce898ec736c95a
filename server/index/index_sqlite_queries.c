/* index_sqlite_queries.c - the SQLite engine's queries: manifests, publish, resolve, listings,
 * retirement, tokens and keys, the admin commands' reads, each on this thread's connection
 * (index_sqlite.c), and the engine's ops table. */
#include "index_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

/* ---- manifests ------------------------------------------------------------------------------- */

#define PSDB_COLS PSDBD__PSDB_COLS

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

static const char *row_text(void *row, int i)
{
    return col_text(row, i);
}

static int64_t row_i64(void *row, int i)
{
    return sqlite3_column_int64(row, i);
}

static int row_is_null(void *row, int i)
{
    return sqlite3_column_type(row, i) == SQLITE_NULL;
}

static size_t row_blob(void *row, int i, uint8_t *buf, size_t size)
{
    int n = sqlite3_column_bytes(row, i);
    if (n <= 0 || (size_t)n > size)
        return 0;
    memcpy(buf, sqlite3_column_blob(row, i), (size_t)n);
    return (size_t)n;
}

static json_t *manifest_of(sqlite3_stmt *st)
{
    psdbd__row row = {row_text, row_i64, row_is_null, row_blob, st};
    return psdbd__manifest_of(&row);
}

/* Steps st once: PSDBD_OK with the manifest, PSDBD_NOT_FOUND, PSDBD_ERROR. Resets st. */
static psdbd_rc one_manifest(psdbd_index *ix, sqlite3_stmt *st, json_t **out)
{
    psdbd_rc rc = PSDBD_NOT_FOUND;
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        if (out)
            *out = manifest_of(st);
        rc = PSDBD_OK;
    } else if (s != SQLITE_DONE) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    }
    sqlite3_reset(st);
    return rc;
}

static void bind_identity(sqlite3_stmt *st, const psdbd_record *r)
{
    sqlite3_bind_text(st, 1, r->app_name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, psdbd_u64_to_db(r->app_version));
    sqlite3_bind_text(st, 3, r->exe_filename ? r->exe_filename : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->engine_name ? r->engine_name : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, psdbd_u64_to_db(r->engine_version));
    sqlite3_bind_blob(st, 6, r->app_guid, 16, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, r->family, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 8, psdbd_u64_to_db(r->abi_version));
    sqlite3_bind_int64(st, 9, psdbd_u64_to_db(r->compiler_version));
    sqlite3_bind_int64(st, 10, psdbd_u64_to_db(r->profile_version));
    sqlite3_bind_int64(st, 11, psdbd_u64_to_db(r->serial));
}

static const char find_identity_sql[] =
    "SELECT " PSDB_COLS
    "WHERE a.name = ?1 AND p.app_version = ?2 AND p.exe_filename = ?3 AND p.engine_name = ?4 "
    "AND p.engine_version = ?5 AND p.app_guid = ?6 AND p.family = ?7 AND p.abi_version = ?8 "
    "AND p.compiler_version = ?9 AND p.profile_version = ?10 AND p.serial = ?11";

static psdbd_rc sq_find_identity(psdbd_index *ix, const psdbd_record *r, json_t **out)
{
    sqlite3_stmt *st = psdbd__index_prep(ix, find_identity_sql);
    json_t *m = NULL;
    if (!st)
        return psdbd_index_failure(ix);
    bind_identity(st, r);
    psdbd_rc rc = one_manifest(ix, st, &m);
    if (rc == PSDBD_OK) {
        const char *sha = json_string_value(json_object_get(m, "sha256"));
        rc = sha && strcmp(sha, r->sha256) == 0 ? PSDBD_EXISTS : PSDBD_CONFLICT;
        if (out && rc == PSDBD_EXISTS) {
            *out = m;
            m = NULL;
        }
    }
    json_decref(m);
    return rc;
}

/* The end of a write transaction, whatever happened: the statement reset, a transaction still
 * open rolled back, and a PSDBD_ERROR turned into what the index's state says it is. */
static psdbd_rc write_end(psdbd_index *ix, sqlite3 *db, sqlite3_stmt *st, int in_tx, psdbd_rc rc)
{
    if (st)
        sqlite3_reset(st);
    if (in_tx)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

/* Steps a write statement to its end and resets it. 0, or -1 with *rc the index's status for the
 * failure (the statement is reset when next prepared). */
static int step_done(psdbd_index *ix, sqlite3 *db, sqlite3_stmt *st, psdbd_rc *rc)
{
    if (sqlite3_step(st) != SQLITE_DONE) {
        *rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        return -1;
    }
    sqlite3_reset(st);
    return 0;
}

static psdbd_rc sq_publish(psdbd_index *ix, const psdbd_record *r, json_t **out)
{
    static const char app_sql[] = "INSERT OR IGNORE INTO apps (name, created_at) VALUES (?1, ?2)";
    static const char blob_sql[] =
        "INSERT OR IGNORE INTO blobs (sha256, size, created_at) VALUES (?1, ?2, ?3)";
    static const char psdb_sql[] =
        "INSERT INTO psdbs (app, app_version, exe_filename, engine_name, engine_version, "
        "app_guid, family, abi_version, compiler_version, profile_version, serial, sha256, size, "
        "key_id, signature, created_at, published_by, statement_version, sodb_sha256) "
        "SELECT id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
        "?19 FROM apps WHERE name = ?1";
    static const char by_id_sql[] = "SELECT " PSDB_COLS "WHERE p.id = ?1";
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    int s, in_tx = 0;
    int64_t now = (int64_t)time(NULL), id = 0;
    if (!db) {
        rc = psdbd_index_failure(ix);
        goto cleanup;
    }
    if ((s = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 1;
    /* Re-checked under the write lock: a concurrent publish of the same identity may have won. */
    rc = sq_find_identity(ix, r, out);
    if (rc != PSDBD_NOT_FOUND)
        goto cleanup;
    rc = PSDBD_ERROR;
    if (!(st = psdbd__index_prep(ix, app_sql)))
        goto cleanup;
    sqlite3_bind_text(st, 1, r->app_name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    if (step_done(ix, db, st, &rc) != 0)
        goto cleanup;
    if (!(st = psdbd__index_prep(ix, blob_sql)))
        goto cleanup;
    sqlite3_bind_text(st, 1, r->sha256, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (int64_t)r->size);
    sqlite3_bind_int64(st, 3, now);
    if (step_done(ix, db, st, &rc) != 0)
        goto cleanup;
    if (!(st = psdbd__index_prep(ix, psdb_sql)))
        goto cleanup;
    bind_identity(st, r);
    sqlite3_bind_text(st, 12, r->sha256, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 13, (int64_t)r->size);
    sqlite3_bind_text(st, 14, r->key_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 15, r->signature, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 16, now);
    sqlite3_bind_text(st, 17, r->published_by ? r->published_by : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 18, r->statement_version == 2 ? 2 : 1);
    if (r->statement_version == 2)
        sqlite3_bind_text(st, 19, r->sodb_sha256, -1, SQLITE_STATIC);
    if (step_done(ix, db, st, &rc) != 0)
        goto cleanup;
    id = sqlite3_last_insert_rowid(db);
    if ((s = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 0;
    rc = PSDBD_OK;
    if (out) {
        if (!(st = psdbd__index_prep(ix, by_id_sql)) ||
            (sqlite3_bind_int64(st, 1, id), one_manifest(ix, st, out)) != PSDBD_OK)
            rc = PSDBD_ERROR; /* committed, but the answer could not be built */
    }
cleanup:
    return write_end(ix, db, st, in_tx, rc);
}

static psdbd_rc sq_blob_published(psdbd_index *ix, const char *sha256, int64_t *out)
{
    /* Retired rows count: the blob was public from its first publish on. */
    static const char sql[] = "SELECT min(created_at) FROM psdbs WHERE sha256 = ?1";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_ERROR;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        *out = sqlite3_column_int64(st, 0);
        rc = PSDBD_OK;
    } else if (s == SQLITE_ROW) {
        rc = PSDBD_NOT_FOUND;
    } else {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    }
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_get(psdbd_index *ix, int64_t id, json_t **out)
{
    static const char sql[] = "SELECT " PSDB_COLS "WHERE p.id = ?1";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_int64(st, 1, id);
    return one_manifest(ix, st, out);
}

static psdbd_rc sq_retire(psdbd_index *ix, int64_t id, const char *by, json_t **out)
{
    static const char sql[] = "UPDATE psdbs SET retired_at = ?2, retired_by = ?3 "
                              "WHERE id = ?1 AND retired_at IS NULL";
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    int in_tx = 0;
    if (!db) {
        rc = psdbd_index_failure(ix);
        goto cleanup;
    }
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 1;
    if (!(st = psdbd__index_prep(ix, sql)))
        goto cleanup;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, (int64_t)time(NULL));
    sqlite3_bind_text(st, 3, by ? by : "", -1, SQLITE_STATIC);
    if (step_done(ix, db, st, &rc) != 0)
        goto cleanup;
    st = NULL;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 0;
    rc = sq_get(ix, id, out);
cleanup:
    return write_end(ix, db, st, in_tx, rc);
}

static psdbd_rc sq_resolve(psdbd_index *ix, const psdbd_query *q, json_t **out)
{
    /* The profile range is the biased image of [top << 32, top << 32 | 0xFFFFFFFF]: the bias
     * flips only the top bit, so it keeps the top 32 bits' equality and the order. */
    static const char sql[] =
        "SELECT " PSDB_COLS "WHERE a.name = ?1 AND p.app_version = ?2 AND p.family = ?3 "
        "AND p.abi_version BETWEEN ?4 AND ?5 AND p.profile_version BETWEEN ?6 AND ?7 "
        "AND p.retired_at IS NULL "
        "ORDER BY p.abi_version DESC, p.profile_version DESC, p.serial DESC, p.id DESC LIMIT 1";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    uint64_t lo = 0, hi = UINT64_MAX;
    if (!st)
        return psdbd_index_failure(ix);
    if (q->has_profile) {
        lo = q->profile_version & 0xFFFFFFFF00000000ull;
        hi = lo | 0xFFFFFFFFull;
    }
    sqlite3_bind_text(st, 1, q->app, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, psdbd_u64_to_db(q->app_version));
    sqlite3_bind_text(st, 3, q->family, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, psdbd_u64_to_db(q->abi_min));
    sqlite3_bind_int64(st, 5, psdbd_u64_to_db(q->abi_max));
    sqlite3_bind_int64(st, 6, psdbd_u64_to_db(lo));
    sqlite3_bind_int64(st, 7, psdbd_u64_to_db(hi));
    return one_manifest(ix, st, out);
}

static psdbd_rc sq_list_apps(psdbd_index *ix, json_t **out)
{
    static const char sql[] =
        "SELECT a.name, a.created_at, count(p.id), count(p.id) - count(p.retired_at) "
        "FROM apps a LEFT JOIN psdbs p ON p.app = a.id GROUP BY a.id ORDER BY a.name";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    json_t *list = NULL;
    psdbd_rc rc = PSDBD_OK;
    int s;
    char when[40];
    if (!st)
        return psdbd_index_failure(ix);
    list = json_array();
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:I, s:I}", "name", col_text(st, 0), "created_at",
                            psdbd_format_time(sqlite3_column_int64(st, 1), when, sizeof(when)),
                            "psdbs", (json_int_t)sqlite3_column_int64(st, 2), "active",
                            (json_int_t)sqlite3_column_int64(st, 3)));
    if (s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    if (rc == PSDBD_OK)
        *out = json_pack("{s:o}", "apps", list);
    else
        json_decref(list);
    return rc;
}

static psdbd_rc sq_blob_apps(psdbd_index *ix, const char *sha256,
                             int (*fn)(const char *app, void *ctx), void *ctx)
{
    static const char sql[] = "SELECT DISTINCT a.name FROM psdbs p JOIN apps a ON a.id = p.app "
                              "WHERE p.sha256 = ?1";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_NOT_FOUND;
    int s;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (fn(col_text(st, 0), ctx)) {
            rc = PSDBD_OK;
            break;
        }
    }
    if (s != SQLITE_ROW && s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_list_app_psdbs(psdbd_index *ix, const char *name, json_t **out)
{
    static const char app_sql[] = "SELECT id FROM apps WHERE name = ?1";
    static const char sql[] = "SELECT " PSDB_COLS "WHERE a.name = ?1 ORDER BY p.id";
    sqlite3_stmt *st = psdbd__index_prep(ix, app_sql);
    json_t *list = NULL;
    psdbd_rc rc = PSDBD_OK;
    int s;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    s = sqlite3_step(st);
    sqlite3_reset(st);
    if (s == SQLITE_DONE)
        return PSDBD_NOT_FOUND;
    if (s != SQLITE_ROW)
        return psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    if (!(st = psdbd__index_prep(ix, sql)))
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    list = json_array();
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(list, manifest_of(st));
    if (s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    if (rc == PSDBD_OK)
        *out = json_pack("{s:s, s:o}", "app", name, "psdbs", list);
    else
        json_decref(list);
    return rc;
}

/* ---- tokens and keys ------------------------------------------------------------------------- */

static psdbd_rc sq_token_find(psdbd_index *ix, const char *selector, psdbd_token_row *out)
{
    static const char sql[] = "SELECT name, role, scope, hash, expires_at, revoked_at "
                              "FROM tokens WHERE selector = ?1";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_NOT_FOUND;
    int s;
    memset(out, 0, sizeof(*out));
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, selector, -1, SQLITE_STATIC);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW && sqlite3_column_bytes(st, 3) == 32) {
        out->name = xstrdup(col_text(st, 0));
        out->role = xstrdup(col_text(st, 1));
        out->scope = xstrdup(col_text(st, 2));
        memcpy(out->hash, sqlite3_column_blob(st, 3), 32);
        out->expires_at = sqlite3_column_int64(st, 4);
        out->revoked = sqlite3_column_type(st, 5) != SQLITE_NULL;
        rc = PSDBD_OK;
    } else if (s != SQLITE_ROW && s != SQLITE_DONE) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    }
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_token_add(psdbd_index *ix, const char *name, const char *selector,
                             const uint8_t hash[32], const char *role, const char *scope,
                             int64_t expires_at)
{
    static const char sql[] = "INSERT INTO tokens (name, selector, hash, role, scope, created_at, "
                              "expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_OK;
    int s;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, selector, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, hash, 32, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, role, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, scope, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, (int64_t)time(NULL));
    if (expires_at)
        sqlite3_bind_int64(st, 7, expires_at);
    s = sqlite3_step(st);
    if (s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    if (rc == PSDBD_CONFLICT)
        rc = PSDBD_EXISTS;
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_key_find(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                            char **families)
{
    static const char sql[] =
        "SELECT public_key, scope, families FROM keys WHERE key_id = ?1 AND revoked_at IS NULL";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_NOT_FOUND;
    int s;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, key_id, -1, SQLITE_STATIC);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        *pem = xstrdup(col_text(st, 0));
        *scope = xstrdup(col_text(st, 1));
        *families = xstrdup(col_text(st, 2));
        rc = PSDBD_OK;
    } else if (s != SQLITE_DONE) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    }
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_key_add(psdbd_index *ix, const char *name, const char *key_id, const char *pem,
                           const char *scope, const char *families)
{
    static const char sql[] =
        "INSERT INTO keys (name, key_id, public_key, scope, created_at, families) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_OK;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, pem, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, scope, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (int64_t)time(NULL));
    sqlite3_bind_text(st, 6, families, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    if (rc == PSDBD_CONFLICT)
        rc = PSDBD_EXISTS;
    sqlite3_reset(st);
    return rc;
}

/* ---- the admin commands' reads and writes ---------------------------------------------------- */

/* Steps a one-shot statement's rows into fn; PSDBD_OK, or the failure's status. */
static psdbd_rc each_row(psdbd_index *ix, sqlite3_stmt *st, void (*fn)(sqlite3_stmt *, void *),
                         void *ctx)
{
    psdbd_rc rc = PSDBD_OK;
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        fn(st, ctx);
    if (s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_credential_revoke(psdbd_index *ix, psdbd_credential what, const char *name)
{
    static const char token_sql[] = "UPDATE tokens SET revoked_at = ?2 WHERE name = ?1";
    static const char key_sql[] = "UPDATE keys SET revoked_at = ?2 WHERE name = ?1";
    sqlite3_stmt *st = psdbd__index_prep(ix, what == PSDBD_CREDENTIAL_TOKEN ? token_sql : key_sql);
    psdbd_rc rc = PSDBD_OK;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (int64_t)time(NULL));
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    else if (sqlite3_changes(psdbd__index_this_db(ix)) == 0)
        rc = PSDBD_NOT_FOUND;
    sqlite3_reset(st);
    return rc;
}

struct credential_rows {
    json_t *list;
    psdbd_credential what;
};

static void credential_row(sqlite3_stmt *st, void *ctx)
{
    struct credential_rows *cr = ctx;
    psdbd__row row = {row_text, row_i64, row_is_null, row_blob, st};
    json_array_append_new(cr->list, psdbd__credential_of(&row, cr->what));
}

static psdbd_rc sq_credential_list(psdbd_index *ix, psdbd_credential what, json_t **out)
{
    static const char token_sql[] = "SELECT name, role, scope, created_at, expires_at, revoked_at "
                                    "FROM tokens ORDER BY name";
    static const char key_sql[] = "SELECT name, key_id, scope, created_at, NULL, revoked_at "
                                  "FROM keys ORDER BY name";
    sqlite3_stmt *st = psdbd__index_prep(ix, what == PSDBD_CREDENTIAL_TOKEN ? token_sql : key_sql);
    struct credential_rows cr = {NULL, what};
    psdbd_rc rc;
    if (!st)
        return psdbd_index_failure(ix);
    cr.list = json_array();
    if ((rc = each_row(ix, st, credential_row, &cr)) == PSDBD_OK)
        *out = cr.list;
    else
        json_decref(cr.list);
    return rc;
}

static psdbd_rc sq_integrity(psdbd_index *ix, int deep, void (*fn)(const char *msg, void *ctx),
                             void *ctx)
{
    /* Not cached: a check runs once per command, and the pragma's rows depend on the file. */
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st = NULL;
    psdbd_rc rc = PSDBD_OK;
    int s;
    if (!db)
        return psdbd_index_failure(ix);
    if (sqlite3_prepare_v2(db, deep ? "PRAGMA integrity_check" : "PRAGMA quick_check", -1, &st,
                           NULL) != SQLITE_OK) {
        fn(sqlite3_errmsg(db), ctx);
        return PSDBD_ERROR;
    }
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *msg = (const char *)sqlite3_column_text(st, 0);
        if (!msg || strcmp(msg, "ok") != 0)
            fn(msg ? msg : "no answer", ctx);
    }
    if (s != SQLITE_DONE) {
        fn(sqlite3_errmsg(db), ctx);
        rc = PSDBD_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

static psdbd_rc sq_count_psdbs(psdbd_index *ix, int64_t *out)
{
    static const char sql[] = "SELECT count(*) FROM psdbs";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_OK;
    if (!st)
        return psdbd_index_failure(ix);
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    return rc;
}

/* PSDBD_OK when the one-parameter query st has a row, PSDBD_NOT_FOUND when not. */
static psdbd_rc any_row(psdbd_index *ix, sqlite3_stmt *st, const char *sha256)
{
    psdbd_rc rc = PSDBD_NOT_FOUND;
    int s;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
    if ((s = sqlite3_step(st)) == SQLITE_ROW)
        rc = PSDBD_OK;
    else if (s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_blob_referenced(psdbd_index *ix, const char *sha256)
{
    /* An SODB's blob is referenced like a PSDB's: gc keeps both. */
    static const char sql[] = "SELECT 1 FROM psdbs WHERE sha256 = ?1 UNION ALL "
                              "SELECT 1 FROM sodbs WHERE sha256 = ?1 LIMIT 1";
    return any_row(ix, psdbd__index_prep(ix, sql), sha256);
}

static psdbd_rc sq_blob_indexed(psdbd_index *ix, const char *sha256)
{
    static const char sql[] = "SELECT 1 FROM blobs WHERE sha256 = ?1";
    return any_row(ix, psdbd__index_prep(ix, sql), sha256);
}

struct blob_rows {
    void (*fn)(const char *sha256, uint64_t size, void *ctx);
    void (*psdb_fn)(int64_t id, const char *sha256, void *ctx);
    void *ctx;
};

static void blob_row(sqlite3_stmt *st, void *ctx)
{
    struct blob_rows *br = ctx;
    br->fn((const char *)sqlite3_column_text(st, 0), (uint64_t)sqlite3_column_int64(st, 1),
           br->ctx);
}

static psdbd_rc sq_each_blob(psdbd_index *ix,
                             void (*fn)(const char *sha256, uint64_t size, void *ctx), void *ctx)
{
    static const char sql[] = "SELECT sha256, size FROM blobs";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    struct blob_rows br = {fn, NULL, ctx};
    if (!st)
        return psdbd_index_failure(ix);
    return each_row(ix, st, blob_row, &br);
}

static void unbacked_row(sqlite3_stmt *st, void *ctx)
{
    struct blob_rows *br = ctx;
    br->psdb_fn(sqlite3_column_int64(st, 0), col_text(st, 1), br->ctx);
}

static psdbd_rc sq_each_unbacked_psdb(psdbd_index *ix,
                                      void (*fn)(int64_t id, const char *sha256, void *ctx),
                                      void *ctx)
{
    /* Foreign keys are enforced; checked anyway, with the size, which they do not cover. */
    static const char sql[] = "SELECT p.id, p.sha256 FROM psdbs p LEFT JOIN blobs b ON b.sha256 = "
                              "p.sha256 WHERE b.sha256 IS NULL OR b.size != p.size";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    struct blob_rows br = {NULL, fn, ctx};
    if (!st)
        return psdbd_index_failure(ix);
    return each_row(ix, st, unbacked_row, &br);
}

static psdbd_rc sq_delete_orphan_blob_rows(psdbd_index *ix, int64_t created_before)
{
    static const char sql[] =
        "DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM psdbs) AND sha256 NOT IN "
        "(SELECT sha256 FROM sodbs) AND created_at < ?1";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd_rc rc = PSDBD_OK;
    if (!st)
        return psdbd_index_failure(ix);
    sqlite3_bind_int64(st, 1, created_before);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    sqlite3_reset(st);
    return rc;
}

static psdbd_rc sq_snapshot(psdbd_index *ix, int begin)
{
    sqlite3 *db = psdbd_index_db(ix);
    if (!db)
        return psdbd_index_failure(ix);
    if (sqlite3_exec(db, begin ? "BEGIN" : "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        return psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
    return PSDBD_OK;
}

static psdbd_rc sq_gc_lock(psdbd_index *ix, int lock)
{
    (void)ix;
    (void)lock;
    return PSDBD_OK;
}

static int sq_watch(psdbd_index *ix, void (*changed)(void), char *err, size_t err_size)
{
    /* Every writer of the file is this process (the data directory's lock): its own commits
     * invalidate the cache where they happen. */
    (void)ix;
    (void)changed;
    (void)err;
    (void)err_size;
    return 0;
}

/* ---- the farm's primitives (index_int.h) ---------------------------------------------------- */

static psdbd_rc sq_farm_tx(psdbd_index *ix, int write, psdbd__tx_fn fn, void *ctx)
{
    sqlite3 *db = psdbd_index_db(ix);
    psdbd__tx tx = {ix, NULL, 0};
    psdbd_rc rc = PSDBD_ERROR;
    int in_tx = 0;
    if (!db) {
        rc = psdbd_index_failure(ix);
        goto cleanup;
    }
    if (sqlite3_exec(db, write ? "BEGIN IMMEDIATE" : "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 1;
    if ((rc = fn(&tx, ctx)) != PSDBD_OK)
        goto cleanup;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 0;
cleanup:
    if (in_tx)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static psdbd_rc sq_farm_run(psdbd__tx *tx, const char *sql, const psdbd__arg *args, size_t n,
                            psdbd__row_fn fn, void *ctx)
{
    psdbd_index *ix = tx->ix;
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    psdbd__row row = {row_text, row_i64, row_is_null, row_blob, st};
    psdbd_rc rc = PSDBD_OK;
    char name[24];
    int s = SQLITE_DONE, stop = 0;
    if (!st)
        return psdbd_index_failure(ix);
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "$%zu", i + 1);
        int k = sqlite3_bind_parameter_index(st, name);
        if (k == 0)
            continue; /* a parameter this statement does not use */
        switch (args[i].type) {
        case PSDBD__ARG_NULL:
            sqlite3_bind_null(st, k);
            break;
        case PSDBD__ARG_I64:
            sqlite3_bind_int64(st, k, args[i].i);
            break;
        case PSDBD__ARG_TEXT:
            sqlite3_bind_text(st, k, args[i].s, -1, SQLITE_STATIC);
            break;
        case PSDBD__ARG_BLOB:
            sqlite3_bind_blob(st, k, args[i].s, (int)args[i].len, SQLITE_STATIC);
            break;
        }
    }
    while (!stop && (s = sqlite3_step(st)) == SQLITE_ROW)
        if (fn)
            stop = fn(&row, ctx);
    if (!stop && s != SQLITE_DONE)
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    tx->changes = sqlite3_changes(psdbd__index_this_db(ix));
    sqlite3_reset(st);
    return rc;
}

const psdbd__index_ops psdbd__sqlite_ops = {
    .engine = "sqlite",
    .close = psdbd__sqlite_close,
    .ping = psdbd__sqlite_ping,
    .lost = psdbd__sqlite_lost,
    .find_identity = sq_find_identity,
    .publish = sq_publish,
    .get = sq_get,
    .blob_published = sq_blob_published,
    .retire = sq_retire,
    .resolve = sq_resolve,
    .list_apps = sq_list_apps,
    .blob_apps = sq_blob_apps,
    .list_app_psdbs = sq_list_app_psdbs,
    .token_find = sq_token_find,
    .token_add = sq_token_add,
    .key_find = sq_key_find,
    .key_add = sq_key_add,
    .credential_revoke = sq_credential_revoke,
    .credential_list = sq_credential_list,
    .integrity = sq_integrity,
    .count_psdbs = sq_count_psdbs,
    .blob_referenced = sq_blob_referenced,
    .blob_indexed = sq_blob_indexed,
    .each_blob = sq_each_blob,
    .each_unbacked_psdb = sq_each_unbacked_psdb,
    .delete_orphan_blob_rows = sq_delete_orphan_blob_rows,
    .snapshot = sq_snapshot,
    .gc_lock = sq_gc_lock,
    .watch = sq_watch,
    .stats_add = psdbd__sqlite_stats_add,
    .stats_select = psdbd__sqlite_stats_select,
    .farm_tx = sq_farm_tx,
    .farm_run = sq_farm_run,
};
