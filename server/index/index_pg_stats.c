/* index_pg_stats.c - the PostgreSQL engine's half of the demand statistics: a flush's counts added
 * by upsert, and the reports' queries in PostgreSQL's dialect (index_stats.c builds the reports
 * from their rows, the same code as on SQLite, so both engines answer the same JSON).
 *
 * DESIGN
 * Several replicas flush into one database. INSERT ... ON CONFLICT DO UPDATE adds to a row another
 * replica wrote, atomically, so no count is lost between them; the retention delete runs in the
 * same transaction, as on SQLite. The rows are upserted in the order of their keys, the same on
 * every replica, so two flushes of the same keys wait for each other rather than deadlock. sum() of
 * BIGINT is NUMERIC in PostgreSQL: its text is a plain integer, which psdbd__pg_int reads like any
 * BIGINT. */
#include "index_pg_int.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Runs one statement on c and drops its result: 0, or -1 with *rc the failure. */
static int run(psdbd_index *ix, psdbd__pgc *c, const char *sql, const psdbd__pgp *p, psdbd_rc *rc)
{
    PGresult *res = psdbd__pg_exec(ix, c, sql, p, rc);
    if (!res) {
        if (*rc == PSDBD_OK)
            *rc = PSDBD_ERROR;
        return -1;
    }
    PQclear(res);
    return 0;
}

static int str_cmp(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

static int num_cmp(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

/* The rows in one total order of their keys. Two replicas flushing the same keys at once then
 * lock them in the same order, so one waits for the other instead of both deadlocking. */
static int row_cmp(const void *pa, const void *pb)
{
    const psdbd_stat_row *a = *(const psdbd_stat_row *const *)pa;
    const psdbd_stat_row *b = *(const psdbd_stat_row *const *)pb;
    int c;
    if ((c = num_cmp((uint64_t)a->kind, (uint64_t)b->kind)) != 0 ||
        (c = num_cmp((uint64_t)a->day, (uint64_t)b->day)) != 0 ||
        (c = str_cmp(a->app, b->app)) != 0 || (c = str_cmp(a->family, b->family)) != 0 ||
        (c = str_cmp(a->sha256, b->sha256)) != 0 ||
        (c = num_cmp(a->app_version, b->app_version)) != 0 ||
        (c = num_cmp(a->abi_min, b->abi_min)) != 0 || (c = num_cmp(a->abi_max, b->abi_max)) != 0 ||
        (c = num_cmp((uint64_t) !!a->has_profile, (uint64_t) !!b->has_profile)) != 0)
        return c;
    return num_cmp(a->profile, b->profile);
}

psdbd_rc psdbd__pg_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                             int64_t keep_from_day)
{
    static const char resolve_sql[] =
        "INSERT INTO stats_resolves AS s (day, app, app_version, family, hits, misses) "
        "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (day, app, app_version, family) DO UPDATE "
        "SET hits = s.hits + excluded.hits, misses = s.misses + excluded.misses";
    static const char miss_sql[] =
        "INSERT INTO stats_misses AS s (day, app, app_version, family, abi_min, abi_max, "
        "has_profile, profile, requests) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "ON CONFLICT (day, app, app_version, family, abi_min, abi_max, has_profile, profile) "
        "DO UPDATE SET requests = s.requests + excluded.requests";
    static const char download_sql[] =
        "INSERT INTO stats_downloads AS s (day, sha256, complete, partial, bytes) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (day, sha256) DO UPDATE SET "
        "complete = s.complete + excluded.complete, partial = s.partial + excluded.partial, "
        "bytes = s.bytes + excluded.bytes";
    static const char other_sql[] =
        "INSERT INTO stats_other AS s (day, hits, misses, requests) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (day) DO UPDATE SET hits = s.hits + excluded.hits, "
        "misses = s.misses + excluded.misses, requests = s.requests + excluded.requests";
    static const char *const expire_sql[] = {
        "DELETE FROM stats_resolves WHERE day < $1", "DELETE FROM stats_misses WHERE day < $1",
        "DELETE FROM stats_downloads WHERE day < $1", "DELETE FROM stats_other WHERE day < $1"};
    psdbd__pgc c = {NULL, -1, 0};
    psdbd__pgp p;
    psdbd_rc rc = PSDBD_ERROR;
    const psdbd_stat_row **order = NULL;
    int got = 0;
    if (n > 0) {
        order = xcalloc(n, sizeof(*order));
        for (size_t i = 0; i < n; i++)
            order[i] = &rows[i];
        qsort(order, n, sizeof(*order), row_cmp);
    }
    if (psdbd__pg_get(ix, &c, &rc) != 0)
        goto cleanup;
    got = 1;
    if (run(ix, &c, "BEGIN", NULL, &rc) != 0)
        goto cleanup;
    for (size_t i = 0; i < n; i++) {
        const psdbd_stat_row *r = order[i];
        const char *sql = NULL;
        memset(&p, 0, sizeof(p));
        psdbd__pgp_i64(&p, r->day);
        switch (r->kind) {
        case PSDBD_STAT_RESOLVE:
            sql = resolve_sql;
            psdbd__pgp_text(&p, r->app);
            psdbd__pgp_i64(&p, psdbd_u64_to_db(r->app_version));
            psdbd__pgp_text(&p, r->family);
            psdbd__pgp_i64(&p, (int64_t)r->n[0]);
            psdbd__pgp_i64(&p, (int64_t)r->n[1]);
            break;
        case PSDBD_STAT_MISS:
            sql = miss_sql;
            psdbd__pgp_text(&p, r->app);
            psdbd__pgp_i64(&p, psdbd_u64_to_db(r->app_version));
            psdbd__pgp_text(&p, r->family);
            psdbd__pgp_i64(&p, psdbd_u64_to_db(r->abi_min));
            psdbd__pgp_i64(&p, psdbd_u64_to_db(r->abi_max));
            psdbd__pgp_i64(&p, r->has_profile ? 1 : 0);
            psdbd__pgp_i64(&p, psdbd_u64_to_db(r->has_profile ? r->profile : 0));
            psdbd__pgp_i64(&p, (int64_t)r->n[0]);
            break;
        case PSDBD_STAT_DOWNLOAD:
            sql = download_sql;
            psdbd__pgp_text(&p, r->sha256);
            psdbd__pgp_i64(&p, (int64_t)r->n[0]);
            psdbd__pgp_i64(&p, (int64_t)r->n[1]);
            psdbd__pgp_i64(&p, (int64_t)r->n[2]);
            break;
        case PSDBD_STAT_OTHER:
            sql = other_sql;
            psdbd__pgp_i64(&p, (int64_t)r->n[0]);
            psdbd__pgp_i64(&p, (int64_t)r->n[1]);
            psdbd__pgp_i64(&p, (int64_t)r->n[2]);
            break;
        }
        if (sql && run(ix, &c, sql, &p, &rc) != 0)
            goto cleanup;
    }
    for (size_t i = 0; i < sizeof(expire_sql) / sizeof(expire_sql[0]); i++) {
        memset(&p, 0, sizeof(p));
        psdbd__pgp_i64(&p, keep_from_day);
        if (run(ix, &c, expire_sql[i], &p, &rc) != 0)
            goto cleanup;
    }
    if (run(ix, &c, "COMMIT", NULL, &rc) != 0)
        goto cleanup;
    rc = PSDBD_OK;
cleanup:
    if (got)
        psdbd__pg_put(ix, &c); /* rolls back a transaction left open: nothing of the flush stays */
    free(order);
    return rc;
}

/* The reports' statements, by psdbd__stats_query (index_int.h gives each one's columns): the
 * SQLite ones with PostgreSQL's placeholders. The stats tables' names are COLLATE "C" and so are
 * those of psdbs and apps, so ORDER BY a name sorts bytewise as on SQLite. */
static const char *const select_sql[] = {
    [PSDBD__SQ_COVERED] = "SELECT p.family, p.abi_version, p.profile_version, " PSDBD__SQ_SHOWN_COLS
                          "FROM psdbs p JOIN apps a ON a.id = p.app WHERE a.name = $1 AND "
                          "p.retired_at IS NULL ORDER BY p.family, p.abi_version",
    [PSDBD__SQ_COVERAGE_MISSING] =
        "SELECT m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, sum(m.requests), "
        "max(m.day) FROM stats_misses m WHERE m.app = $1 AND m.day >= $2 "
        "AND " PSDBD__SQ_STILL_MISSING
        "GROUP BY m.family, m.abi_min, m.abi_max, m.has_profile, m.profile "
        "ORDER BY 6 DESC, 1, 2, 3 LIMIT $3",
    [PSDBD__SQ_APP_SEEN] = "SELECT 1 FROM stats_resolves WHERE app = $1 LIMIT 1",
    [PSDBD__SQ_MATRIX] =
        "SELECT a.name, p.family, p.abi_version, p.profile_version, " PSDBD__SQ_SHOWN_COLS
        ", p.retired_at, p.retired_by "
        "FROM psdbs p JOIN apps a ON a.id = p.app ORDER BY a.name, p.family, "
        "p.retired_at IS NOT NULL, p.app_version DESC, p.abi_version DESC, "
        "p.profile_version DESC, p.serial DESC, p.id DESC",
    [PSDBD__SQ_MISSING] =
        "SELECT m.app, m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, m.day, "
        "sum(m.requests), sum(sum(m.requests)) OVER w, max(m.day) OVER w "
        "FROM stats_misses m WHERE m.day BETWEEN $1 AND $2 AND " PSDBD__SQ_STILL_MISSING
        "GROUP BY m.app, m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, m.day "
        "WINDOW w AS (PARTITION BY m.app, m.family, m.abi_min, m.abi_max, m.has_profile, "
        "m.profile) ORDER BY 9 DESC, 1, 2, 3, 4, 5, 6, 7",
    [PSDBD__SQ_DOWNLOADS] =
        "SELECT d.day, a.name, p.family, sum(d.complete), sum(d.partial), sum(d.bytes) "
        "FROM stats_downloads d JOIN psdbs p ON p.id = (SELECT min(q.id) FROM psdbs q "
        "WHERE q.sha256 = d.sha256) JOIN apps a ON a.id = p.app "
        "WHERE d.day BETWEEN $1 AND $2 GROUP BY d.day, a.name, p.family ORDER BY 1, 2, 3",
    [PSDBD__SQ_RESOLVES] = "SELECT day, app, sum(hits), sum(misses) FROM stats_resolves "
                           "WHERE day BETWEEN $1 AND $2 GROUP BY day, app ORDER BY 1, 2",
    [PSDBD__SQ_EVENTS] =
        "SELECT 'publish', p.created_at, p.published_by, p.id, a.name, p.app_version, p.family, "
        "p.abi_version, p.serial, 0 FROM psdbs p JOIN apps a ON a.id = p.app "
        "UNION ALL SELECT 'retire', p.retired_at, p.retired_by, p.id, a.name, p.app_version, "
        "p.family, p.abi_version, p.serial, 1 FROM psdbs p JOIN apps a ON a.id = p.app "
        "WHERE p.retired_at IS NOT NULL ORDER BY 2 DESC, 10 DESC, 4 DESC",
    [PSDBD__SQ_OTHER] = "SELECT day, hits, misses, requests FROM stats_other "
                        "WHERE day BETWEEN $1 AND $2 ORDER BY day",
    [PSDBD__SQ_DAY_KEYS] =
        "SELECT " PSDBD__SQ_KIND_RESOLVE ", app, app_version, family, 0, 0, 0, 0 "
        "FROM stats_resolves WHERE day = $1 UNION ALL SELECT " PSDBD__SQ_KIND_MISS
        ", app, app_version, family, abi_min, abi_max, has_profile, profile "
        "FROM stats_misses WHERE day = $1",
};

struct pgrow {
    const PGresult *res;
    int r;
};

static const char *row_text(void *row, int i)
{
    struct pgrow *p = row;
    return PQgetvalue(p->res, p->r, i); /* "" for NULL */
}

static int64_t row_i64(void *row, int i)
{
    struct pgrow *p = row;
    return PQgetisnull(p->res, p->r, i) ? 0 : psdbd__pg_int(PQgetvalue(p->res, p->r, i));
}

static int row_is_null(void *row, int i)
{
    struct pgrow *p = row;
    return PQgetisnull(p->res, p->r, i);
}

/* No report reads bytes. */
static size_t row_blob(void *row, int i, uint8_t *buf, size_t size)
{
    (void)row;
    (void)i;
    (void)buf;
    (void)size;
    return 0;
}

psdbd_rc psdbd__pg_stats_select(psdbd_index *ix, psdbd__stats_query q, const char *text,
                                const int64_t *nums, size_t n_nums, psdbd__row_fn fn, void *ctx)
{
    psdbd__pgc c = {NULL, -1, 0};
    psdbd__pgp p = {0};
    PGresult *res = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    struct pgrow pr = {NULL, 0};
    psdbd__row row = {row_text, row_i64, row_is_null, row_blob, &pr};
    int got = 0;
    if ((size_t)q >= sizeof(select_sql) / sizeof(select_sql[0]) || !select_sql[q]) {
        psdbd_log("index stats: query %d: no such report query", (int)q);
        goto cleanup;
    }
    if (n_nums + (text ? 1 : 0) > PSDBD__PG_MAX_PARAMS) {
        psdbd_log("index stats: query %d: %zu parameters, more than a query takes", (int)q, n_nums);
        goto cleanup;
    }
    if (text)
        psdbd__pgp_text(&p, text);
    for (size_t i = 0; i < n_nums; i++)
        psdbd__pgp_i64(&p, nums[i]);
    if (psdbd__pg_get(ix, &c, &rc) != 0)
        goto cleanup;
    got = 1;
    if (!(res = psdbd__pg_exec(ix, &c, select_sql[q], &p, &rc))) {
        if (rc == PSDBD_OK)
            rc = PSDBD_ERROR;
        goto cleanup;
    }
    /* The connection goes back before the rows are read: the callbacks build JSON only. */
    psdbd__pg_put(ix, &c);
    got = 0;
    pr.res = res;
    for (int r = 0; r < PQntuples(res); r++) {
        pr.r = r;
        if (fn(&row, ctx) != 0)
            break;
    }
    rc = PSDBD_OK;
cleanup:
    if (got)
        psdbd__pg_put(ix, &c);
    PQclear(res);
    return rc;
}
