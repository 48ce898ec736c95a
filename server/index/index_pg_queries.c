/* index_pg_queries.c - the PostgreSQL engine's queries (the same as index_sqlite_queries.c's, in
 * PostgreSQL's dialect), each on a connection borrowed from the pool (index_pg.c), and the
 * engine's ops table. */
#include "index_pg_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "common/hash.h"

/* ---- result rows ------------------------------------------------------------------------------
 */

struct pgrow {
    const PGresult *res;
    int r;
};

/* A column past the row's reads as NULL, as SQLite's do: libpq would write "column number out
 * of range" on stderr for each (the farm's one_row reads up to 4 columns of any row). */
static int row_is_null(void *row, int i)
{
    struct pgrow *p = row;
    return i < 0 || i >= PQnfields(p->res) || PQgetisnull(p->res, p->r, i);
}

static const char *row_text(void *row, int i)
{
    struct pgrow *p = row;
    return row_is_null(row, i) ? "" : PQgetvalue(p->res, p->r, i); /* "" for NULL */
}

static int64_t row_i64(void *row, int i)
{
    struct pgrow *p = row;
    return row_is_null(row, i) ? 0 : psdbd__pg_int(PQgetvalue(p->res, p->r, i));
}

/* bytea comes back in text results as "\x" and two hex digits a byte. */
static size_t row_blob(void *row, int i, uint8_t *buf, size_t size)
{
    const char *v = row_text(row, i);
    size_t n = strlen(v);
    if (row_is_null(row, i) || n < 2 || v[0] != '\\' || v[1] != 'x' || (n - 2) % 2 ||
        (n - 2) / 2 > size || psdb__unhex(v + 2, buf, (n - 2) / 2) != 0)
        return 0;
    return (n - 2) / 2;
}

static json_t *manifest_of(const PGresult *res, int r)
{
    struct pgrow pr = {res, r};
    psdbd__row row = {row_text, row_i64, row_is_null, row_blob, &pr};
    return psdbd__manifest_of(&row);
}

/* ---- the prepared statements (psdbd__pg_stmt) -------------------------------------------------
 */

const char *const psdbd__pg_stmt_sql[PSDBD__PG_STMTS] = {
    /* As in SQLite (MODEL A3): larger ABI, then profile, then serial, then the later publish.
     * The index psdbs_resolve_active (005_resolve_index.sql) holds the active rows of a cell in
     * this order: the newest matching row is the first one read, however many serials the cell
     * has. The application's id comes from a subquery, not from a join: the planner then knows
     * the cell before it reads psdbs and scans the index backward under the LIMIT (a join's
     * order would need a sort of the whole cell), and the executor runs no join. The name
     * column is $1 itself: names compare bytewise (COLLATE "C"), so the row's name is $1. */
    [PSDBD__PG_RESOLVE] =
        "SELECT p.id, $1::text, " PSDBD__PSDB_ROW_COLS
        "FROM psdbs p WHERE p.app = (SELECT id FROM apps WHERE name = $1) "
        "AND p.app_version = $2 AND p.family = $3 "
        "AND p.abi_version BETWEEN $4 AND $5 AND p.profile_version BETWEEN $6 AND $7 "
        "AND p.retired_at IS NULL "
        "ORDER BY p.abi_version DESC, p.profile_version DESC, p.serial DESC, p.id DESC LIMIT 1",
    [PSDBD__PG_GET] = "SELECT " PSDBD__PSDB_COLS "WHERE p.id = $1",
    [PSDBD__PG_FIND_IDENTITY] =
        "SELECT " PSDBD__PSDB_COLS
        "WHERE a.name = $1 AND p.app_version = $2 AND p.exe_filename = $3 AND p.engine_name = $4 "
        "AND p.engine_version = $5 AND p.app_guid = $6 AND p.family = $7 AND p.abi_version = $8 "
        "AND p.compiler_version = $9 AND p.profile_version = $10 AND p.serial = $11",
    /* Retired rows count: the blob was public from its first publish on. */
    [PSDBD__PG_BLOB_PUBLISHED] = "SELECT min(created_at) FROM psdbs WHERE sha256 = $1",
    [PSDBD__PG_BLOB_APPS] = "SELECT DISTINCT a.name FROM psdbs p JOIN apps a ON a.id = p.app "
                            "WHERE p.sha256 = $1",
    [PSDBD__PG_APP_ID] = "SELECT id FROM apps WHERE name = $1",
    [PSDBD__PG_APP_PSDBS] = "SELECT " PSDBD__PSDB_COLS "WHERE a.name = $1 ORDER BY p.id",
    [PSDBD__PG_TOKEN_FIND] = "SELECT name, role, scope, hash, expires_at, revoked_at "
                             "FROM tokens WHERE selector = $1",
    [PSDBD__PG_KEY_FIND] = "SELECT public_key, scope, families FROM keys WHERE key_id = $1 AND "
                           "revoked_at IS NULL",
};

/* Borrows a connection, runs the prepared statement st (PSDBD__PG_STMTS: the text sql instead),
 * gives the connection back: *out (PQclear it) on PSDBD_OK. */
static psdbd_rc query_on(psdbd_index *ix, psdbd__pg_stmt st, const char *sql, const psdbd__pgp *p,
                         PGresult **out)
{
    psdbd__pgc c;
    psdbd_rc rc = PSDBD_OK;
    *out = NULL;
    if (psdbd__pg_get(ix, &c, &rc) != 0)
        return rc;
    *out = st < PSDBD__PG_STMTS ? psdbd__pg_exec_stmt(ix, &c, st, p, &rc)
                                : psdbd__pg_exec(ix, &c, sql, p, &rc);
    if (!*out && rc == PSDBD_OK)
        rc = PSDBD_ERROR;
    psdbd__pg_put(ix, &c);
    return rc;
}

static psdbd_rc query(psdbd_index *ix, const char *sql, const psdbd__pgp *p, PGresult **out)
{
    return query_on(ix, PSDBD__PG_STMTS, sql, p, out);
}

/* A read by key: as query(), but PSDBD_NOT_FOUND without asking when a text parameter is not
 * UTF-8. The database is UTF-8, so no stored row holds such a key, and PostgreSQL would refuse
 * the statement itself (SQLSTATE 22021): SQLite answers that lookup with no row, and so must this
 * engine (a resolve of such a name is a 404, not a 500). */
static psdbd_rc lookup_on(psdbd_index *ix, psdbd__pg_stmt st, const char *sql, const psdbd__pgp *p,
                          PGresult **out)
{
    *out = NULL;
    for (int i = 0; p && i < p->n; i++)
        if (p->fmt[i] == 0 && p->v[i] && !psdbd__utf8_ok(p->v[i]))
            return PSDBD_NOT_FOUND;
    return query_on(ix, st, sql, p, out);
}

static psdbd_rc lookup(psdbd_index *ix, psdbd__pg_stmt st, const psdbd__pgp *p, PGresult **out)
{
    return lookup_on(ix, st, NULL, p, out);
}

/* The first row's manifest: PSDBD_OK, PSDBD_NOT_FOUND, or the failure. */
static psdbd_rc one_manifest(psdbd_index *ix, psdbd__pg_stmt st, const psdbd__pgp *p, json_t **out)
{
    PGresult *res = NULL;
    psdbd_rc rc = lookup(ix, st, p, &res);
    if (rc == PSDBD_OK && PQntuples(res) == 0)
        rc = PSDBD_NOT_FOUND;
    else if (rc == PSDBD_OK && out)
        *out = manifest_of(res, 0);
    PQclear(res);
    return rc;
}

/* ---- PSDBs ------------------------------------------------------------------------------------
 */

static void bind_identity(psdbd__pgp *p, const psdbd_record *r)
{
    psdbd__pgp_text(p, r->app_name);
    psdbd__pgp_i64(p, psdbd_u64_to_db(r->app_version));
    psdbd__pgp_text(p, r->exe_filename ? r->exe_filename : "");
    psdbd__pgp_text(p, r->engine_name ? r->engine_name : "");
    psdbd__pgp_i64(p, psdbd_u64_to_db(r->engine_version));
    psdbd__pgp_bytes(p, r->app_guid, 16);
    psdbd__pgp_text(p, r->family);
    psdbd__pgp_i64(p, psdbd_u64_to_db(r->abi_version));
    psdbd__pgp_i64(p, psdbd_u64_to_db(r->compiler_version));
    psdbd__pgp_i64(p, psdbd_u64_to_db(r->profile_version));
    psdbd__pgp_i64(p, psdbd_u64_to_db(r->serial));
}

static psdbd_rc pg_find_identity(psdbd_index *ix, const psdbd_record *r, json_t **out)
{
    psdbd__pgp p = {0};
    json_t *m = NULL;
    bind_identity(&p, r);
    psdbd_rc rc = one_manifest(ix, PSDBD__PG_FIND_IDENTITY, &p, &m);
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

static psdbd_rc pg_get(psdbd_index *ix, int64_t id, json_t **out)
{
    psdbd__pgp p = {0};
    psdbd__pgp_i64(&p, id);
    return one_manifest(ix, PSDBD__PG_GET, &p, out);
}

static psdbd_rc pg_publish(psdbd_index *ix, const psdbd_record *r, json_t **out)
{
    static const char app_sql[] =
        "INSERT INTO apps (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
    static const char blob_sql[] = "INSERT INTO blobs (sha256, size, created_at) VALUES ($1, $2, "
                                   "$3) ON CONFLICT (sha256) DO NOTHING";
    static const char psdb_sql[] =
        "INSERT INTO psdbs (app, app_version, exe_filename, engine_name, engine_version, "
        "app_guid, family, abi_version, compiler_version, profile_version, serial, sha256, size, "
        "key_id, signature, created_at, published_by, statement_version, sodb_sha256) "
        "SELECT id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, "
        "$19 FROM apps WHERE name = $1 RETURNING id";
    psdbd__pgc c = {NULL, -1, 0};
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    int64_t now = (int64_t)time(NULL), id = 0;
    if (psdbd__pg_get(ix, &c, &rc) != 0)
        return rc;
    if (!(res = psdbd__pg_exec(ix, &c, "BEGIN", NULL, &rc)))
        goto cleanup;
    PQclear(res);
    psdbd__pgp_text(&p, r->app_name);
    psdbd__pgp_i64(&p, now);
    if (!(res = psdbd__pg_exec(ix, &c, app_sql, &p, &rc)))
        goto cleanup;
    PQclear(res);
    memset(&p, 0, sizeof(p));
    psdbd__pgp_text(&p, r->sha256);
    psdbd__pgp_i64(&p, (int64_t)r->size);
    psdbd__pgp_i64(&p, now);
    if (!(res = psdbd__pg_exec(ix, &c, blob_sql, &p, &rc)))
        goto cleanup;
    PQclear(res);
    memset(&p, 0, sizeof(p));
    bind_identity(&p, r);
    psdbd__pgp_text(&p, r->sha256);
    psdbd__pgp_i64(&p, (int64_t)r->size);
    psdbd__pgp_text(&p, r->key_id);
    psdbd__pgp_text(&p, r->signature);
    psdbd__pgp_i64(&p, now);
    psdbd__pgp_text(&p, r->published_by ? r->published_by : "");
    psdbd__pgp_i64(&p, r->statement_version == 2 ? 2 : 1);
    if (r->statement_version == 2)
        psdbd__pgp_text(&p, r->sodb_sha256);
    else
        psdbd__pgp_null(&p);
    /* Another replica publishing this identity makes this insert wait for its commit, then fail
     * with a unique violation: never a second row. */
    if (!(res = psdbd__pg_exec(ix, &c, psdb_sql, &p, &rc)))
        goto cleanup;
    if (PQntuples(res) != 1) {
        psdbd_log("index: publish of %s: the application row is missing", r->app_name);
        rc = PSDBD_ERROR;
        goto cleanup;
    }
    id = psdbd__pg_int(PQgetvalue(res, 0, 0));
    PQclear(res);
    /* Delivered at commit: the other replicas drop their resolve caches. */
    if (!(res = psdbd__pg_exec(ix, &c, "NOTIFY " PSDBD__PG_CHANNEL, NULL, &rc)))
        goto cleanup;
    PQclear(res);
    if (!(res = psdbd__pg_exec(ix, &c, "COMMIT", NULL, &rc)))
        goto cleanup;
    rc = PSDBD_OK;
cleanup:
    PQclear(res);
    psdbd__pg_put(ix, &c); /* rolls back a transaction left open */
    if (rc == PSDBD_CONFLICT) {
        /* The winner's row is committed: the same bytes are a repeat, other bytes a conflict. */
        rc = pg_find_identity(ix, r, out);
        if (rc == PSDBD_NOT_FOUND)
            rc = PSDBD_CONFLICT; /* another unique key (the blob row is ON CONFLICT) */
    } else if (rc == PSDBD_OK && out && pg_get(ix, id, out) != PSDBD_OK) {
        rc = PSDBD_ERROR; /* committed, but the answer could not be built */
    }
    return rc;
}

static psdbd_rc pg_blob_published(psdbd_index *ix, const char *sha256, int64_t *out)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, sha256);
    psdbd_rc rc = lookup(ix, PSDBD__PG_BLOB_PUBLISHED, &p, &res);
    if (rc == PSDBD_OK) {
        if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
            *out = psdbd__pg_int(PQgetvalue(res, 0, 0));
        else
            rc = PSDBD_NOT_FOUND;
    }
    PQclear(res);
    return rc;
}

static psdbd_rc pg_retire(psdbd_index *ix, int64_t id, const char *by, json_t **out)
{
    /* One statement, so one implicit transaction: the notification goes out with the change. */
    static const char sql[] = "WITH r AS (UPDATE psdbs SET retired_at = $2, retired_by = $3 "
                              "WHERE id = $1 AND retired_at IS NULL RETURNING id) "
                              "SELECT pg_notify('" PSDBD__PG_CHANNEL "', '') FROM r";
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_i64(&p, id);
    psdbd__pgp_i64(&p, (int64_t)time(NULL));
    psdbd__pgp_text(&p, by ? by : "");
    psdbd_rc rc = query(ix, sql, &p, &res);
    PQclear(res);
    return rc == PSDBD_OK ? pg_get(ix, id, out) : rc;
}

static psdbd_rc pg_resolve(psdbd_index *ix, const psdbd_query *q, json_t **out)
{
    psdbd__pgp p = {0};
    uint64_t lo = 0, hi = UINT64_MAX;
    if (q->has_profile) {
        lo = q->profile_version & 0xFFFFFFFF00000000ull;
        hi = lo | 0xFFFFFFFFull;
    }
    psdbd__pgp_text(&p, q->app);
    psdbd__pgp_i64(&p, psdbd_u64_to_db(q->app_version));
    psdbd__pgp_text(&p, q->family);
    psdbd__pgp_i64(&p, psdbd_u64_to_db(q->abi_min));
    psdbd__pgp_i64(&p, psdbd_u64_to_db(q->abi_max));
    psdbd__pgp_i64(&p, psdbd_u64_to_db(lo));
    psdbd__pgp_i64(&p, psdbd_u64_to_db(hi));
    return one_manifest(ix, PSDBD__PG_RESOLVE, &p, out);
}

static psdbd_rc pg_list_apps(psdbd_index *ix, json_t **out)
{
    static const char sql[] =
        "SELECT a.name, a.created_at, count(p.id), count(p.id) - count(p.retired_at) "
        "FROM apps a LEFT JOIN psdbs p ON p.app = a.id GROUP BY a.id ORDER BY a.name";
    PGresult *res = NULL;
    char when[40];
    psdbd_rc rc = query(ix, sql, NULL, &res);
    json_t *list;
    if (rc != PSDBD_OK)
        return rc;
    list = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        struct pgrow r = {res, i};
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:I, s:I}", "name", row_text(&r, 0), "created_at",
                            psdbd_format_time(row_i64(&r, 1), when, sizeof(when)), "psdbs",
                            (json_int_t)row_i64(&r, 2), "active", (json_int_t)row_i64(&r, 3)));
    }
    PQclear(res);
    *out = json_pack("{s:o}", "apps", list);
    return PSDBD_OK;
}

static psdbd_rc pg_blob_apps(psdbd_index *ix, const char *sha256,
                             int (*fn)(const char *app, void *ctx), void *ctx)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, sha256);
    psdbd_rc rc = lookup(ix, PSDBD__PG_BLOB_APPS, &p, &res);
    if (rc != PSDBD_OK)
        return rc;
    rc = PSDBD_NOT_FOUND;
    for (int i = 0; i < PQntuples(res) && rc == PSDBD_NOT_FOUND; i++)
        if (fn(PQgetvalue(res, i, 0), ctx))
            rc = PSDBD_OK;
    PQclear(res);
    return rc;
}

static psdbd_rc pg_list_app_psdbs(psdbd_index *ix, const char *name, json_t **out)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    json_t *list;
    psdbd__pgp_text(&p, name);
    psdbd_rc rc = lookup(ix, PSDBD__PG_APP_ID, &p, &res);
    if (rc == PSDBD_OK && PQntuples(res) == 0)
        rc = PSDBD_NOT_FOUND;
    PQclear(res);
    if (rc != PSDBD_OK || (rc = lookup(ix, PSDBD__PG_APP_PSDBS, &p, &res)) != PSDBD_OK)
        return rc;
    list = json_array();
    for (int i = 0; i < PQntuples(res); i++)
        json_array_append_new(list, manifest_of(res, i));
    PQclear(res);
    *out = json_pack("{s:s, s:o}", "app", name, "psdbs", list);
    return PSDBD_OK;
}

/* ---- tokens and keys --------------------------------------------------------------------------
 */

static psdbd_rc pg_token_find(psdbd_index *ix, const char *selector, psdbd_token_row *out)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    memset(out, 0, sizeof(*out));
    psdbd__pgp_text(&p, selector);
    psdbd_rc rc = lookup(ix, PSDBD__PG_TOKEN_FIND, &p, &res);
    if (rc == PSDBD_OK) {
        struct pgrow r = {res, 0};
        rc = PSDBD_NOT_FOUND;
        if (PQntuples(res) == 1 && row_blob(&r, 3, out->hash, sizeof(out->hash)) == 32) {
            out->name = xstrdup(row_text(&r, 0));
            out->role = xstrdup(row_text(&r, 1));
            out->scope = xstrdup(row_text(&r, 2));
            out->expires_at = row_i64(&r, 4);
            out->revoked = !row_is_null(&r, 5);
            rc = PSDBD_OK;
        }
    }
    PQclear(res);
    return rc;
}

static psdbd_rc pg_token_add(psdbd_index *ix, const char *name, const char *selector,
                             const uint8_t hash[32], const char *role, const char *scope,
                             int64_t expires_at)
{
    static const char sql[] = "INSERT INTO tokens (name, selector, hash, role, scope, created_at, "
                              "expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, name);
    psdbd__pgp_text(&p, selector);
    psdbd__pgp_bytes(&p, hash, 32);
    psdbd__pgp_text(&p, role);
    psdbd__pgp_text(&p, scope);
    psdbd__pgp_i64(&p, (int64_t)time(NULL));
    if (expires_at)
        psdbd__pgp_i64(&p, expires_at);
    else
        psdbd__pgp_null(&p);
    psdbd_rc rc = query(ix, sql, &p, &res);
    PQclear(res);
    return rc == PSDBD_CONFLICT ? PSDBD_EXISTS : rc;
}

static psdbd_rc pg_key_find(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                            char **families)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, key_id);
    psdbd_rc rc = lookup(ix, PSDBD__PG_KEY_FIND, &p, &res);
    if (rc == PSDBD_OK && PQntuples(res) == 0)
        rc = PSDBD_NOT_FOUND;
    if (rc == PSDBD_OK) {
        *pem = xstrdup(PQgetvalue(res, 0, 0));
        *scope = xstrdup(PQgetvalue(res, 0, 1));
        *families = xstrdup(PQgetvalue(res, 0, 2));
    }
    PQclear(res);
    return rc;
}

static psdbd_rc pg_key_add(psdbd_index *ix, const char *name, const char *key_id, const char *pem,
                           const char *scope, const char *families)
{
    static const char sql[] =
        "INSERT INTO keys (name, key_id, public_key, scope, created_at, families) "
        "VALUES ($1, $2, $3, $4, $5, $6)";
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, name);
    psdbd__pgp_text(&p, key_id);
    psdbd__pgp_text(&p, pem);
    psdbd__pgp_text(&p, scope);
    psdbd__pgp_i64(&p, (int64_t)time(NULL));
    psdbd__pgp_text(&p, families);
    psdbd_rc rc = query(ix, sql, &p, &res);
    PQclear(res);
    return rc == PSDBD_CONFLICT ? PSDBD_EXISTS : rc;
}

/* ---- the admin commands' reads and writes -----------------------------------------------------
 */

static psdbd_rc pg_credential_revoke(psdbd_index *ix, psdbd_credential what, const char *name)
{
    static const char token_sql[] = "UPDATE tokens SET revoked_at = $2 WHERE name = $1";
    static const char key_sql[] = "UPDATE keys SET revoked_at = $2 WHERE name = $1";
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, name);
    psdbd__pgp_i64(&p, (int64_t)time(NULL));
    psdbd_rc rc = lookup_on(ix, PSDBD__PG_STMTS,
                            what == PSDBD_CREDENTIAL_TOKEN ? token_sql : key_sql, &p, &res);
    if (rc == PSDBD_OK && strcmp(PQcmdTuples(res), "0") == 0)
        rc = PSDBD_NOT_FOUND;
    PQclear(res);
    return rc;
}

static psdbd_rc pg_credential_list(psdbd_index *ix, psdbd_credential what, json_t **out)
{
    static const char token_sql[] = "SELECT name, role, scope, created_at, expires_at, revoked_at "
                                    "FROM tokens ORDER BY name";
    static const char key_sql[] = "SELECT name, key_id, scope, created_at, NULL, revoked_at "
                                  "FROM keys ORDER BY name";
    PGresult *res = NULL;
    psdbd_rc rc = query(ix, what == PSDBD_CREDENTIAL_TOKEN ? token_sql : key_sql, NULL, &res);
    json_t *list;
    if (rc != PSDBD_OK)
        return rc;
    list = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        struct pgrow pr = {res, i};
        psdbd__row row = {row_text, row_i64, row_is_null, row_blob, &pr};
        json_array_append_new(list, psdbd__credential_of(&row, what));
    }
    PQclear(res);
    *out = list;
    return PSDBD_OK;
}

static psdbd_rc pg_count_psdbs(psdbd_index *ix, int64_t *out)
{
    PGresult *res = NULL;
    psdbd_rc rc = query(ix, "SELECT count(*) FROM psdbs", NULL, &res);
    if (rc == PSDBD_OK)
        *out = psdbd__pg_int(PQgetvalue(res, 0, 0));
    PQclear(res);
    return rc;
}

/* PSDBD_OK when the one-parameter query has a row, PSDBD_NOT_FOUND when not. */
static psdbd_rc any_row(psdbd_index *ix, const char *sql, const char *sha256)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_text(&p, sha256);
    psdbd_rc rc = lookup_on(ix, PSDBD__PG_STMTS, sql, &p, &res);
    if (rc == PSDBD_OK && PQntuples(res) == 0)
        rc = PSDBD_NOT_FOUND;
    PQclear(res);
    return rc;
}

static psdbd_rc pg_blob_referenced(psdbd_index *ix, const char *sha256)
{
    /* An SODB's blob is referenced like a PSDB's: gc keeps both. */
    return any_row(ix,
                   "SELECT 1 FROM psdbs WHERE sha256 = $1 UNION ALL SELECT 1 FROM sodbs WHERE "
                   "sha256 = $1 LIMIT 1",
                   sha256);
}

static psdbd_rc pg_blob_indexed(psdbd_index *ix, const char *sha256)
{
    return any_row(ix, "SELECT 1 FROM blobs WHERE sha256 = $1", sha256);
}

static psdbd_rc pg_each_blob(psdbd_index *ix,
                             void (*fn)(const char *sha256, uint64_t size, void *ctx), void *ctx)
{
    PGresult *res = NULL;
    psdbd_rc rc = query(ix, "SELECT sha256, size FROM blobs", NULL, &res);
    for (int i = 0; rc == PSDBD_OK && i < PQntuples(res); i++)
        fn(PQgetvalue(res, i, 0), (uint64_t)psdbd__pg_int(PQgetvalue(res, i, 1)), ctx);
    PQclear(res);
    return rc;
}

static psdbd_rc pg_each_unbacked_psdb(psdbd_index *ix,
                                      void (*fn)(int64_t id, const char *sha256, void *ctx),
                                      void *ctx)
{
    static const char sql[] = "SELECT p.id, p.sha256 FROM psdbs p LEFT JOIN blobs b ON b.sha256 = "
                              "p.sha256 WHERE b.sha256 IS NULL OR b.size != p.size";
    PGresult *res = NULL;
    psdbd_rc rc = query(ix, sql, NULL, &res);
    for (int i = 0; rc == PSDBD_OK && i < PQntuples(res); i++)
        fn(psdbd__pg_int(PQgetvalue(res, i, 0)), PQgetvalue(res, i, 1), ctx);
    PQclear(res);
    return rc;
}

static psdbd_rc pg_delete_orphan_blob_rows(psdbd_index *ix, int64_t created_before)
{
    /* NOT EXISTS rather than NOT IN: the row a concurrent publish is inserting is seen once it
     * commits, and the blob row it needs is then kept (the foreign key waits for it). */
    static const char sql[] = "DELETE FROM blobs b WHERE b.created_at < $1 AND NOT EXISTS "
                              "(SELECT 1 FROM psdbs p WHERE p.sha256 = b.sha256) AND NOT EXISTS "
                              "(SELECT 1 FROM sodbs s WHERE s.sha256 = b.sha256)";
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd__pgp_i64(&p, created_before);
    psdbd_rc rc = query(ix, sql, &p, &res);
    PQclear(res);
    return rc;
}

/* ---- the farm's primitives (index_int.h) ---------------------------------------------------- */

static psdbd_rc pg_farm_tx(psdbd_index *ix, int write, psdbd__tx_fn fn, void *ctx)
{
    psdbd__pgc c = {NULL, -1, 0};
    psdbd__tx tx = {ix, &c, 0};
    PGresult *res = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    if (psdbd__pg_get(ix, &c, &rc) != 0)
        return rc;
    /* Read committed: a claim's FOR UPDATE SKIP LOCKED passes over rows another transaction
     * holds instead of waiting for them, and each statement sees what committed before it. */
    if (!(res = psdbd__pg_exec(ix, &c, write ? "BEGIN" : "BEGIN READ ONLY", NULL, &rc)))
        goto cleanup;
    PQclear(res);
    if ((rc = fn(&tx, ctx)) != PSDBD_OK)
        goto cleanup;
    if (!(res = psdbd__pg_exec(ix, &c, "COMMIT", NULL, &rc))) {
        if (rc == PSDBD_OK)
            rc = PSDBD_ERROR;
        goto cleanup;
    }
    PQclear(res);
    rc = PSDBD_OK;
cleanup:
    psdbd__pg_put(ix, &c); /* rolls back a transaction left open */
    return rc;
}

static psdbd_rc pg_farm_run(psdbd__tx *tx, const char *sql, const psdbd__arg *args, size_t n,
                            psdbd__row_fn fn, void *ctx)
{
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd_rc rc = PSDBD_OK;
    if (n > PSDBD__PG_MAX_PARAMS)
        return PSDBD_ERROR;
    for (size_t i = 0; i < n; i++) {
        switch (args[i].type) {
        case PSDBD__ARG_NULL:
            psdbd__pgp_null(&p);
            break;
        case PSDBD__ARG_I64:
            psdbd__pgp_i64(&p, args[i].i);
            break;
        case PSDBD__ARG_TEXT:
            psdbd__pgp_text(&p, args[i].s);
            break;
        case PSDBD__ARG_BLOB:
            psdbd__pgp_bytes(&p, args[i].s, args[i].len);
            break;
        }
    }
    /* Prepared once per pooled connection: a claim runs about ten statements, each parsed and
     * planned anew when sent as text (tests/bench/farm_results.md). */
    if (!(res = psdbd__pg_exec_farm(tx->ix, tx->conn, sql, &p, &rc)))
        return rc == PSDBD_OK ? PSDBD_ERROR : rc;
    tx->changes = psdbd__pg_int(PQcmdTuples(res));
    for (int r = 0; fn && r < PQntuples(res); r++) {
        struct pgrow pr = {res, r};
        psdbd__row row = {row_text, row_i64, row_is_null, row_blob, &pr};
        if (fn(&row, ctx))
            break;
    }
    PQclear(res);
    return rc;
}

const psdbd__index_ops psdbd__pg_ops = {
    .engine = "postgresql",
    .close = psdbd__pg_close,
    .ping = psdbd__pg_ping,
    .lost = psdbd__pg_lost,
    .find_identity = pg_find_identity,
    .publish = pg_publish,
    .get = pg_get,
    .blob_published = pg_blob_published,
    .retire = pg_retire,
    .resolve = pg_resolve,
    .list_apps = pg_list_apps,
    .blob_apps = pg_blob_apps,
    .list_app_psdbs = pg_list_app_psdbs,
    .token_find = pg_token_find,
    .token_add = pg_token_add,
    .key_find = pg_key_find,
    .key_add = pg_key_add,
    .credential_revoke = pg_credential_revoke,
    .credential_list = pg_credential_list,
    .integrity = psdbd__pg_integrity,
    .count_psdbs = pg_count_psdbs,
    .blob_referenced = pg_blob_referenced,
    .blob_indexed = pg_blob_indexed,
    .each_blob = pg_each_blob,
    .each_unbacked_psdb = pg_each_unbacked_psdb,
    .delete_orphan_blob_rows = pg_delete_orphan_blob_rows,
    .snapshot = psdbd__pg_snapshot,
    .gc_lock = psdbd__pg_gc_lock,
    .watch = psdbd__pg_watch,
    .stats_add = psdbd__pg_stats_add,
    .stats_select = psdbd__pg_stats_select,
    .farm_tx = pg_farm_tx,
    .farm_run = pg_farm_run,
};
