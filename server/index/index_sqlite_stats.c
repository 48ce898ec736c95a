/* index_sqlite_stats.c - the SQLite engine's half of the demand statistics: a flush's counts added
 * by upsert, and the reports' queries (index_stats.c builds the reports from their rows).
 *
 * DESIGN
 * These statements run once per flush interval or per dashboard request, never per resolve, so
 * they are prepared and finalized each time instead of occupying the per-thread statement cache
 * that the hot routes rely on. */
#include "index_int.h"

#include <string.h>

#include "common.h"

/* A prepared statement on this thread's connection, or NULL (logged). */
static sqlite3_stmt *prepare(psdbd_index *ix, const char *sql)
{
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st = NULL;
    if (!db)
        return NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        psdbd_log("index stats: prepare: %s", sqlite3_errmsg(db));
        psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        return NULL;
    }
    return st;
}

psdbd_rc psdbd__sqlite_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                                 int64_t keep_from_day)
{
    static const char resolve_sql[] =
        "INSERT INTO stats_resolves (day, app, app_version, family, hits, misses) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO UPDATE SET "
        "hits = hits + excluded.hits, misses = misses + excluded.misses";
    static const char miss_sql[] =
        "INSERT INTO stats_misses (day, app, app_version, family, abi_min, abi_max, has_profile, "
        "profile, requests) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO UPDATE "
        "SET requests = requests + excluded.requests";
    static const char download_sql[] =
        "INSERT INTO stats_downloads (day, sha256, complete, partial, bytes) "
        "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO UPDATE SET complete = complete + "
        "excluded.complete, partial = partial + excluded.partial, bytes = bytes + excluded.bytes";
    static const char other_sql[] =
        "INSERT INTO stats_other (day, hits, misses, requests) VALUES (?1, ?2, ?3, ?4) "
        "ON CONFLICT DO UPDATE SET hits = hits + excluded.hits, misses = misses + "
        "excluded.misses, requests = requests + excluded.requests";
    static const char *const expire_sql[] = {
        "DELETE FROM stats_resolves WHERE day < ?1", "DELETE FROM stats_misses WHERE day < ?1",
        "DELETE FROM stats_downloads WHERE day < ?1", "DELETE FROM stats_other WHERE day < ?1"};
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st[4] = {NULL, NULL, NULL, NULL}, *del = NULL;
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
    if (!(st[0] = prepare(ix, resolve_sql)) || !(st[1] = prepare(ix, miss_sql)) ||
        !(st[2] = prepare(ix, download_sql)) || !(st[3] = prepare(ix, other_sql)))
        goto cleanup;
    for (size_t i = 0; i < n; i++) {
        const psdbd_stat_row *r = &rows[i];
        sqlite3_stmt *s = NULL;
        switch (r->kind) {
        case PSDBD_STAT_RESOLVE:
            s = st[0];
            sqlite3_bind_text(s, 2, r->app, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 3, psdbd_u64_to_db(r->app_version));
            sqlite3_bind_text(s, 4, r->family, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 5, (int64_t)r->n[0]);
            sqlite3_bind_int64(s, 6, (int64_t)r->n[1]);
            break;
        case PSDBD_STAT_MISS:
            s = st[1];
            sqlite3_bind_text(s, 2, r->app, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 3, psdbd_u64_to_db(r->app_version));
            sqlite3_bind_text(s, 4, r->family, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 5, psdbd_u64_to_db(r->abi_min));
            sqlite3_bind_int64(s, 6, psdbd_u64_to_db(r->abi_max));
            sqlite3_bind_int(s, 7, r->has_profile ? 1 : 0);
            sqlite3_bind_int64(s, 8, psdbd_u64_to_db(r->has_profile ? r->profile : 0));
            sqlite3_bind_int64(s, 9, (int64_t)r->n[0]);
            break;
        case PSDBD_STAT_DOWNLOAD:
            s = st[2];
            sqlite3_bind_text(s, 2, r->sha256, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 3, (int64_t)r->n[0]);
            sqlite3_bind_int64(s, 4, (int64_t)r->n[1]);
            sqlite3_bind_int64(s, 5, (int64_t)r->n[2]);
            break;
        case PSDBD_STAT_OTHER:
            s = st[3];
            sqlite3_bind_int64(s, 2, (int64_t)r->n[0]);
            sqlite3_bind_int64(s, 3, (int64_t)r->n[1]);
            sqlite3_bind_int64(s, 4, (int64_t)r->n[2]);
            break;
        }
        if (!s)
            continue;
        sqlite3_bind_int64(s, 1, r->day);
        if (sqlite3_step(s) != SQLITE_DONE) {
            rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
            goto cleanup;
        }
        sqlite3_reset(s);
    }
    for (size_t i = 0; i < sizeof(expire_sql) / sizeof(expire_sql[0]); i++) {
        if (!(del = prepare(ix, expire_sql[i])))
            goto cleanup;
        sqlite3_bind_int64(del, 1, keep_from_day);
        if (sqlite3_step(del) != SQLITE_DONE) {
            rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
            goto cleanup;
        }
        sqlite3_finalize(del);
        del = NULL;
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(db));
        goto cleanup;
    }
    in_tx = 0;
    rc = PSDBD_OK;
cleanup:
    for (int i = 0; i < 4; i++)
        sqlite3_finalize(st[i]);
    sqlite3_finalize(del);
    if (in_tx)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

/* The reports' statements, by psdbd__stats_query (index_int.h gives each one's columns). */
static const char *const select_sql[] = {
    [PSDBD__SQ_COVERED] = "SELECT p.family, p.abi_version, p.profile_version, " PSDBD__SQ_SHOWN_COLS
                          "FROM psdbs p JOIN apps a ON a.id = p.app WHERE a.name = ?1 AND "
                          "p.retired_at IS NULL ORDER BY p.family, p.abi_version",
    [PSDBD__SQ_COVERAGE_MISSING] =
        "SELECT m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, sum(m.requests), "
        "max(m.day) FROM stats_misses m WHERE m.app = ?1 AND m.day >= ?2 "
        "AND " PSDBD__SQ_STILL_MISSING
        "GROUP BY m.family, m.abi_min, m.abi_max, m.has_profile, m.profile "
        "ORDER BY 6 DESC, 1, 2, 3 LIMIT ?3",
    [PSDBD__SQ_APP_SEEN] = "SELECT 1 FROM stats_resolves WHERE app = ?1 LIMIT 1",
    [PSDBD__SQ_MATRIX] =
        "SELECT a.name, p.family, p.abi_version, p.profile_version, " PSDBD__SQ_SHOWN_COLS
        ", p.retired_at, p.retired_by "
        "FROM psdbs p JOIN apps a ON a.id = p.app ORDER BY a.name, p.family, "
        "p.retired_at IS NOT NULL, p.app_version DESC, p.abi_version DESC, "
        "p.profile_version DESC, p.serial DESC, p.id DESC",
    [PSDBD__SQ_MISSING] =
        "SELECT m.app, m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, m.day, "
        "sum(m.requests), sum(sum(m.requests)) OVER w, max(m.day) OVER w "
        "FROM stats_misses m WHERE m.day BETWEEN ?1 AND ?2 AND " PSDBD__SQ_STILL_MISSING
        "GROUP BY m.app, m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, m.day "
        "WINDOW w AS (PARTITION BY m.app, m.family, m.abi_min, m.abi_max, m.has_profile, "
        "m.profile) ORDER BY 9 DESC, 1, 2, 3, 4, 5, 6, 7",
    [PSDBD__SQ_DOWNLOADS] =
        "SELECT d.day, a.name, p.family, sum(d.complete), sum(d.partial), sum(d.bytes) "
        "FROM stats_downloads d JOIN psdbs p ON p.id = (SELECT min(q.id) FROM psdbs q "
        "WHERE q.sha256 = d.sha256) JOIN apps a ON a.id = p.app "
        "WHERE d.day BETWEEN ?1 AND ?2 GROUP BY d.day, a.name, p.family ORDER BY 1, 2, 3",
    [PSDBD__SQ_RESOLVES] = "SELECT day, app, sum(hits), sum(misses) FROM stats_resolves "
                           "WHERE day BETWEEN ?1 AND ?2 GROUP BY day, app ORDER BY 1, 2",
    [PSDBD__SQ_EVENTS] =
        "SELECT 'publish', p.created_at, p.published_by, p.id, a.name, p.app_version, p.family, "
        "p.abi_version, p.serial, 0 FROM psdbs p JOIN apps a ON a.id = p.app "
        "UNION ALL SELECT 'retire', p.retired_at, p.retired_by, p.id, a.name, p.app_version, "
        "p.family, p.abi_version, p.serial, 1 FROM psdbs p JOIN apps a ON a.id = p.app "
        "WHERE p.retired_at IS NOT NULL ORDER BY 2 DESC, 10 DESC, 4 DESC",
    [PSDBD__SQ_OTHER] = "SELECT day, hits, misses, requests FROM stats_other "
                        "WHERE day BETWEEN ?1 AND ?2 ORDER BY day",
    [PSDBD__SQ_DAY_KEYS] =
        "SELECT " PSDBD__SQ_KIND_RESOLVE ", app, app_version, family, 0, 0, 0, 0 "
        "FROM stats_resolves WHERE day = ?1 UNION ALL SELECT " PSDBD__SQ_KIND_MISS
        ", app, app_version, family, abi_min, abi_max, has_profile, profile "
        "FROM stats_misses WHERE day = ?1",
};

static const char *row_text(void *row, int i)
{
    const unsigned char *s = sqlite3_column_text(row, i);
    return s ? (const char *)s : "";
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

psdbd_rc psdbd__sqlite_stats_select(psdbd_index *ix, psdbd__stats_query q, const char *text,
                                    const int64_t *nums, size_t n_nums, psdbd__row_fn fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    psdbd__row row = {row_text, row_i64, row_is_null, row_blob, NULL};
    int s, p = 1;
    if ((size_t)q >= sizeof(select_sql) / sizeof(select_sql[0]) || !select_sql[q]) {
        psdbd_log("index stats: query %d: no such report query", (int)q);
        goto cleanup;
    }
    if (!(st = prepare(ix, select_sql[q])))
        goto cleanup;
    if (text)
        sqlite3_bind_text(st, p++, text, -1, SQLITE_STATIC);
    for (size_t i = 0; i < n_nums; i++)
        sqlite3_bind_int64(st, p++, nums[i]);
    row.row = st;
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        if (fn(&row, ctx) != 0)
            break;
    if (s != SQLITE_DONE && s != SQLITE_ROW) {
        rc = psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
        goto cleanup;
    }
    rc = PSDBD_OK;
cleanup:
    sqlite3_finalize(st);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}
