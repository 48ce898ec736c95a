/* index_stats.c - demand statistics in the SQLite index: a flush's counts added by upsert, and the
 * reports of the /v1/stats/ routes.
 *
 * DESIGN
 * These statements run once per flush interval or per dashboard request, never per resolve, so
 * they are prepared and finalized each time instead of occupying the per-thread statement cache
 * that the hot routes rely on. */
#include "index_int.h"
#include "index_stats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

const char *psdbd_format_day(int64_t day, char *buf, size_t size)
{
    struct tm tm;
    time_t t = (time_t)(day * 86400);
    if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%d", &tm) == 0)
        snprintf(buf, size, "%lld", (long long)day);
    return buf;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

static json_int_t col_u64(sqlite3_stmt *st, int i)
{
    return (json_int_t)psdbd_u64_from_db(sqlite3_column_int64(st, i));
}

static json_t *day_json(int64_t day)
{
    char buf[32];
    return json_string(psdbd_format_day(day, buf, sizeof(buf)));
}

static json_t *time_json(int64_t t)
{
    char buf[40];
    return json_string(psdbd_format_time(t, buf, sizeof(buf)));
}

/* A report's own containers and final objects: jansson fails on them only without memory. */
static json_t *must(json_t *v)
{
    if (!v)
        psdbd_out_of_memory();
    return v;
}

/* A value built from stored text: NULL (logged) when the text cannot be JSON (a damaged row that
 * is not UTF-8). The jansson calls that meet NULL do nothing, so the report leaves the row out
 * rather than failing every request that meets it. */
static json_t *row(json_t *v)
{
    if (!v)
        psdbd_log("index stats: a stored row cannot be encoded as JSON; left out of the report");
    return v;
}

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

static psdbd_rc step_failure(psdbd_index *ix)
{
    return psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
}

static int shown(psdbd_stat_visible_fn visible, void *ctx, const char *app)
{
    return !visible || visible(app, ctx);
}

/* ---- adding a flush ----------------------------------------------------------------------------
 */

psdbd_rc psdbd_index_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
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
    static const char *const expire_sql[] = {"DELETE FROM stats_resolves WHERE day < ?1",
                                             "DELETE FROM stats_misses WHERE day < ?1",
                                             "DELETE FROM stats_downloads WHERE day < ?1"};
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st[3] = {NULL, NULL, NULL}, *del = NULL;
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
        !(st[2] = prepare(ix, download_sql)))
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
    for (int i = 0; i < 3; i++)
        sqlite3_finalize(st[i]);
    sqlite3_finalize(del);
    if (in_tx)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

/* ---- coverage of one application ---------------------------------------------------------------
 */

/* The PSDB row a cell or range shows: the newest application version, then the larger ABI,
 * profile, serial, id (what a resolve for that version prefers). */
typedef struct best {
    int set;
    int64_t app_version, abi, profile, serial, id; /* biased, comparable */
} best;

static int better(const best *b, sqlite3_stmt *st, int c_ver, int c_abi, int c_prof, int c_ser,
                  int c_id)
{
    int64_t v[5] = {sqlite3_column_int64(st, c_ver), sqlite3_column_int64(st, c_abi),
                    sqlite3_column_int64(st, c_prof), sqlite3_column_int64(st, c_ser),
                    sqlite3_column_int64(st, c_id)};
    int64_t o[5] = {b->app_version, b->abi, b->profile, b->serial, b->id};
    if (!b->set)
        return 1;
    for (int i = 0; i < 5; i++)
        if (v[i] != o[i])
            return v[i] > o[i];
    return 0;
}

static void take(best *b, sqlite3_stmt *st, int c_ver, int c_abi, int c_prof, int c_ser, int c_id)
{
    b->set = 1;
    b->app_version = sqlite3_column_int64(st, c_ver);
    b->abi = sqlite3_column_int64(st, c_abi);
    b->profile = sqlite3_column_int64(st, c_prof);
    b->serial = sqlite3_column_int64(st, c_ser);
    b->id = sqlite3_column_int64(st, c_id);
}

/* The fields of the shown PSDB of a range or cell, from a row selected with SHOWN_COLS at `c`. */
#define SHOWN_COLS "p.id, p.serial, p.size, p.created_at, p.key_id, p.published_by, p.app_version "
static void set_shown(json_t *o, sqlite3_stmt *st, int c, int64_t now)
{
    char ver[32];
    int64_t created = sqlite3_column_int64(st, c + 3);
    json_object_set_new(o, "active_id", json_integer(sqlite3_column_int64(st, c)));
    json_object_set_new(o, "active_serial", json_integer(col_u64(st, c + 1)));
    json_object_set_new(o, "size", json_integer(sqlite3_column_int64(st, c + 2)));
    json_object_set_new(o, "published_at", must(time_json(created)));
    if (now)
        json_object_set_new(o, "age_s", json_integer(now > created ? now - created : 0));
    json_object_set_new(o, "signer", row(json_string(col_text(st, c + 4))));
    json_object_set_new(o, "published_by", row(json_string(col_text(st, c + 5))));
    json_object_set_new(
        o, "app_version",
        must(json_string(psdb__format_version(col_u64(st, c + 6), ver, sizeof(ver)))));
}

static json_t *profile_json(sqlite3_stmt *st, int c_has, int c_prof)
{
    char ver[32];
    if (!sqlite3_column_int(st, c_has))
        return json_null();
    return json_string(psdb__format_version(col_u64(st, c_prof), ver, sizeof(ver)));
}

/* The misses' filter: no active PSDB of that version, family, ABI range and profile answers the
 * request now (the same test as psdbd_index_resolve). */
#define STILL_MISSING                                                                              \
    "NOT EXISTS (SELECT 1 FROM psdbs p JOIN apps a ON a.id = p.app WHERE a.name = m.app "          \
    "AND p.app_version = m.app_version AND p.family = m.family AND p.retired_at IS NULL "          \
    "AND p.abi_version BETWEEN m.abi_min AND m.abi_max AND (m.has_profile = 0 OR "                 \
    "p.profile_version BETWEEN m.profile AND m.profile + 4294967295)) "

psdbd_rc psdbd_index_stats_coverage(psdbd_index *ix, const char *app, int64_t from_day,
                                    size_t limit, json_t **out)
{
    static const char covered_sql[] =
        "SELECT p.family, p.abi_version, p.profile_version, " SHOWN_COLS
        "FROM psdbs p JOIN apps a ON a.id = p.app WHERE a.name = ?1 AND p.retired_at IS NULL "
        "ORDER BY p.family, p.abi_version";
    static const char missing_sql[] =
        "SELECT m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, sum(m.requests), "
        "max(m.day) FROM stats_misses m WHERE m.app = ?1 AND m.day >= ?2 AND " STILL_MISSING
        "GROUP BY m.family, m.abi_min, m.abi_max, m.has_profile, m.profile "
        "ORDER BY 6 DESC, 1, 2, 3 LIMIT ?3";
    sqlite3_stmt *st = NULL;
    json_t *covered = must(json_array()), *missing = must(json_array()), *range = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    best b = {0};
    int s, known = 0;
    char family[PSDBD_STATS_NAME_MAX + 1] = "";
    int64_t last_abi = 0, count = 0;
    if (!(st = prepare(ix, covered_sql)))
        goto cleanup;
    sqlite3_bind_text(st, 1, app, -1, SQLITE_STATIC);
    /* Rows come by family and ABI: a range is a run of consecutive ABI versions of one family,
     * every version of it answered by some PSDB. */
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *f = col_text(st, 0);
        int64_t abi = sqlite3_column_int64(st, 1);
        known = 1;
        if (!range || strcmp(f, family) != 0 || (abi != last_abi && abi != last_abi + 1)) {
            if (range)
                json_object_set_new(range, "psdbs", json_integer(count));
            range = row(json_pack("{s:s, s:I, s:I}", "family", f, "abi_min", col_u64(st, 1),
                                  "abi_max", col_u64(st, 1)));
            json_array_append_new(covered, range);
            snprintf(family, sizeof(family), "%s", f);
            memset(&b, 0, sizeof(b));
            count = 0;
        }
        json_object_set_new(range, "abi_max", json_integer(col_u64(st, 1)));
        last_abi = abi;
        count++;
        /* columns: 3 id, 4 serial, 9 app_version; profile 2 */
        if (better(&b, st, 9, 1, 2, 4, 3)) {
            take(&b, st, 9, 1, 2, 4, 3);
            set_shown(range, st, 3, 0);
            json_object_del(range, "published_by");
            json_object_del(range, "app_version");
        }
    }
    if (range)
        json_object_set_new(range, "psdbs", json_integer(count));
    if (s != SQLITE_DONE) {
        rc = step_failure(ix);
        goto cleanup;
    }
    sqlite3_finalize(st);
    if (!(st = prepare(ix, missing_sql)))
        goto cleanup;
    sqlite3_bind_text(st, 1, app, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, from_day);
    sqlite3_bind_int64(st, 3, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        known = 1;
        json_array_append_new(
            missing, row(json_pack("{s:s, s:I, s:I, s:o, s:I, s:o}", "family", col_text(st, 0),
                                   "abi_min", col_u64(st, 1), "abi_max", col_u64(st, 2),
                                   "profile_version", must(profile_json(st, 3, 4)), "requests",
                                   (json_int_t)sqlite3_column_int64(st, 5), "last_seen",
                                   must(day_json(sqlite3_column_int64(st, 6))))));
    }
    if (s != SQLITE_DONE) {
        rc = step_failure(ix);
        goto cleanup;
    }
    if (!known) {
        /* An application that only ever resolved with hits still has stats rows; one with none
         * of anything is unknown. */
        sqlite3_finalize(st);
        if (!(st = prepare(ix, "SELECT 1 FROM stats_resolves WHERE app = ?1 LIMIT 1")))
            goto cleanup;
        sqlite3_bind_text(st, 1, app, -1, SQLITE_STATIC);
        if ((s = sqlite3_step(st)) == SQLITE_ROW)
            known = 1;
        else if (s != SQLITE_DONE) {
            rc = step_failure(ix);
            goto cleanup;
        }
    }
    if (!known) {
        rc = PSDBD_NOT_FOUND;
        goto cleanup;
    }
    *out = must(json_pack("{s:s, s:O, s:O}", "app", app, "covered", covered, "missing", missing));
    rc = PSDBD_OK;
cleanup:
    sqlite3_finalize(st);
    json_decref(covered);
    json_decref(missing);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

/* ---- the coverage matrix -----------------------------------------------------------------------
 */

psdbd_rc psdbd_index_stats_matrix(psdbd_index *ix, int history, int64_t now,
                                  psdbd_stat_visible_fn visible, void *ctx, json_t **out)
{
    /* Active rows first in each cell, best first, so the cell's first row is what it shows. */
    static const char sql[] =
        "SELECT a.name, p.family, p.abi_version, p.profile_version, " SHOWN_COLS
        ", p.retired_at, p.retired_by "
        "FROM psdbs p JOIN apps a ON a.id = p.app ORDER BY a.name, p.family, "
        "p.retired_at IS NOT NULL, p.app_version DESC, p.abi_version DESC, "
        "p.profile_version DESC, p.serial DESC, p.id DESC";
    sqlite3_stmt *st = NULL;
    json_t *cells = must(json_array()), *apps = must(json_array()), *families = must(json_object());
    json_t *cell = NULL, *fam_list = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    char app[PSDBD_STATS_NAME_MAX + 1] = "", family[PSDBD_STATS_NAME_MAX + 1] = "";
    int s;
    if (!(st = prepare(ix, sql)))
        goto cleanup;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *a = col_text(st, 0), *f = col_text(st, 1);
        int retired = sqlite3_column_type(st, 11) != SQLITE_NULL;
        if (!shown(visible, ctx, a))
            continue;
        if (strcmp(a, app) != 0) {
            json_array_append_new(apps, row(json_string(a)));
            snprintf(app, sizeof(app), "%s", a);
            family[0] = '\0';
            cell = NULL;
        }
        if (!cell || strcmp(f, family) != 0) {
            cell = row(json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "app", a, "family", f, "psdbs",
                                 (json_int_t)0, "retired", (json_int_t)0, "abi_min", col_u64(st, 2),
                                 "abi_max", col_u64(st, 2)));
            if (history)
                json_object_set_new(cell, "history", must(json_array()));
            json_array_append_new(cells, cell);
            snprintf(family, sizeof(family), "%s", f);
            json_object_set_new(families, f, json_true());
            if (!retired)
                set_shown(cell, st, 4, now);
        }
        if (!retired) {
            json_int_t abi = col_u64(st, 2);
            json_object_set_new(
                cell, "psdbs",
                json_integer(json_integer_value(json_object_get(cell, "psdbs")) + 1));
            if (abi < json_integer_value(json_object_get(cell, "abi_min")))
                json_object_set_new(cell, "abi_min", json_integer(abi));
            if (abi > json_integer_value(json_object_get(cell, "abi_max")))
                json_object_set_new(cell, "abi_max", json_integer(abi));
        } else {
            json_object_set_new(
                cell, "retired",
                json_integer(json_integer_value(json_object_get(cell, "retired")) + 1));
        }
        /* A cell's first row is the one it shows; every other row is history: retired, or
         * superseded by the shown one. */
        if (history &&
            json_integer_value(json_object_get(cell, "active_id")) != sqlite3_column_int64(st, 4)) {
            char ver[32];
            json_t *h = row(json_pack("{s:I, s:s, s:I, s:I, s:s, s:o, s:s}", "id",
                                      (json_int_t)sqlite3_column_int64(st, 4), "state",
                                      retired ? "retired" : "superseded", "abi_version",
                                      col_u64(st, 2), "serial", col_u64(st, 5), "app_version",
                                      psdb__format_version(col_u64(st, 10), ver, sizeof(ver)),
                                      "published_at", must(time_json(sqlite3_column_int64(st, 7))),
                                      "published_by", col_text(st, 9)));
            if (retired) {
                json_object_set_new(h, "retired_at", must(time_json(sqlite3_column_int64(st, 11))));
                json_object_set_new(h, "retired_by", row(json_string(col_text(st, 12))));
            }
            json_array_append_new(json_object_get(cell, "history"), h);
        }
    }
    if (s != SQLITE_DONE) {
        rc = step_failure(ix);
        goto cleanup;
    }
    fam_list = must(json_array());
    {
        const char *k;
        json_t *v;
        json_object_foreach(families, k, v) json_array_append_new(fam_list, row(json_string(k)));
    }
    *out = must(json_pack("{s:O, s:O, s:O}", "apps", apps, "families", fam_list, "cells", cells));
    rc = PSDBD_OK;
cleanup:
    sqlite3_finalize(st);
    json_decref(cells);
    json_decref(apps);
    json_decref(families);
    json_decref(fam_list);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

/* ---- missing coverage, traffic, events ----------------------------------------------------------
 */

psdbd_rc psdbd_index_stats_missing(psdbd_index *ix, int64_t from_day, int64_t to_day, size_t limit,
                                   psdbd_stat_visible_fn visible, void *ctx, json_t **out)
{
    static const char sql[] =
        "SELECT m.app, m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, m.day, "
        "sum(m.requests), sum(sum(m.requests)) OVER w, max(m.day) OVER w "
        "FROM stats_misses m WHERE m.day BETWEEN ?1 AND ?2 AND " STILL_MISSING
        "GROUP BY m.app, m.family, m.abi_min, m.abi_max, m.has_profile, m.profile, m.day "
        "WINDOW w AS (PARTITION BY m.app, m.family, m.abi_min, m.abi_max, m.has_profile, "
        "m.profile) ORDER BY 9 DESC, 1, 2, 3, 4, 5, 6, 7";
    sqlite3_stmt *st = NULL;
    json_t *list = must(json_array()), *entry = NULL;
    psdbd_rc rc = PSDBD_ERROR;
    int s;
    int64_t key[5] = {0};
    char app[PSDBD_STATS_NAME_MAX + 1] = "", family[PSDBD_STATS_NAME_MAX + 1] = "";
    if (!(st = prepare(ix, sql)))
        goto cleanup;
    sqlite3_bind_int64(st, 1, from_day);
    sqlite3_bind_int64(st, 2, to_day);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *a = col_text(st, 0), *f = col_text(st, 1);
        int64_t k[5] = {sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
                        sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5), 0};
        if (!shown(visible, ctx, a))
            continue;
        if (!entry || strcmp(a, app) != 0 || strcmp(f, family) != 0 ||
            memcmp(k, key, sizeof(k)) != 0) {
            if (json_array_size(list) >= limit)
                break;
            entry = row(json_pack("{s:s, s:s, s:I, s:I, s:o, s:I, s:o, s:[]}", "app", a, "family",
                                  f, "abi_min", col_u64(st, 2), "abi_max", col_u64(st, 3),
                                  "profile_version", must(profile_json(st, 4, 5)), "requests",
                                  (json_int_t)sqlite3_column_int64(st, 8), "last_seen",
                                  must(day_json(sqlite3_column_int64(st, 9))), "days"));
            json_array_append_new(list, entry);
            snprintf(app, sizeof(app), "%s", a);
            snprintf(family, sizeof(family), "%s", f);
            memcpy(key, k, sizeof(key));
        }
        json_array_append_new(
            json_object_get(entry, "days"),
            row(json_pack("{s:o, s:I}", "day", must(day_json(sqlite3_column_int64(st, 6))),
                          "requests", (json_int_t)sqlite3_column_int64(st, 7))));
    }
    if (s != SQLITE_DONE && s != SQLITE_ROW) {
        rc = step_failure(ix);
        goto cleanup;
    }
    *out = must(json_pack("{s:o, s:o, s:O}", "from", must(day_json(from_day)), "to",
                          must(day_json(to_day)), "missing", list));
    rc = PSDBD_OK;
cleanup:
    sqlite3_finalize(st);
    json_decref(list);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

/* Adds a row's counts into the entry of (day, name) in `map` (a key -> row object), appending a
 * new entry to `list` in first-seen order. */
static void sum_into(json_t *map, json_t *list, const char *day, const char *field,
                     const char *name, const char *const *counts, const json_int_t *values,
                     size_t n)
{
    char *key = xasprintf("%s\x1f%s", day, name);
    json_t *entry = json_object_get(map, key);
    if (!entry) {
        entry = row(json_pack("{s:s, s:s}", "day", day, field, name));
        for (size_t i = 0; i < n; i++)
            json_object_set_new(entry, counts[i], json_integer(0));
        json_object_set(map, key, entry);
        json_array_append_new(list, entry);
    }
    for (size_t i = 0; i < n; i++)
        json_object_set_new(
            entry, counts[i],
            json_integer(json_integer_value(json_object_get(entry, counts[i])) + values[i]));
    free(key);
}

psdbd_rc psdbd_index_stats_traffic(psdbd_index *ix, int64_t from_day, int64_t to_day,
                                   psdbd_stat_visible_fn visible, void *ctx, json_t **out)
{
    static const char downloads_sql[] =
        "SELECT d.day, a.name, p.family, sum(d.complete), sum(d.partial), sum(d.bytes) "
        "FROM stats_downloads d JOIN psdbs p ON p.id = (SELECT min(q.id) FROM psdbs q "
        "WHERE q.sha256 = d.sha256) JOIN apps a ON a.id = p.app "
        "WHERE d.day BETWEEN ?1 AND ?2 GROUP BY d.day, a.name, p.family ORDER BY 1, 2, 3";
    static const char resolves_sql[] =
        "SELECT day, app, sum(hits), sum(misses) FROM stats_resolves "
        "WHERE day BETWEEN ?1 AND ?2 GROUP BY day, app ORDER BY 1, 2";
    static const char *const dl_counts[] = {"complete", "partial", "bytes"};
    sqlite3_stmt *st = NULL;
    json_t *by_app = must(json_array()), *by_family = must(json_array()),
           *resolves = must(json_array());
    json_t *app_map = must(json_object()), *family_map = must(json_object());
    psdbd_rc rc = PSDBD_ERROR;
    int s;
    char day[32];
    if (!(st = prepare(ix, downloads_sql)))
        goto cleanup;
    sqlite3_bind_int64(st, 1, from_day);
    sqlite3_bind_int64(st, 2, to_day);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *a = col_text(st, 1);
        json_int_t v[3] = {sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
                           sqlite3_column_int64(st, 5)};
        if (!shown(visible, ctx, a))
            continue;
        psdbd_format_day(sqlite3_column_int64(st, 0), day, sizeof(day));
        sum_into(app_map, by_app, day, "app", a, dl_counts, v, 3);
        sum_into(family_map, by_family, day, "family", col_text(st, 2), dl_counts, v, 3);
    }
    if (s != SQLITE_DONE) {
        rc = step_failure(ix);
        goto cleanup;
    }
    sqlite3_finalize(st);
    if (!(st = prepare(ix, resolves_sql)))
        goto cleanup;
    sqlite3_bind_int64(st, 1, from_day);
    sqlite3_bind_int64(st, 2, to_day);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *a = col_text(st, 1);
        if (!shown(visible, ctx, a))
            continue;
        json_array_append_new(resolves,
                              row(json_pack("{s:o, s:s, s:I, s:I}", "day",
                                            must(day_json(sqlite3_column_int64(st, 0))), "app", a,
                                            "hits", (json_int_t)sqlite3_column_int64(st, 2),
                                            "misses", (json_int_t)sqlite3_column_int64(st, 3))));
    }
    if (s != SQLITE_DONE) {
        rc = step_failure(ix);
        goto cleanup;
    }
    *out = must(json_pack("{s:o, s:o, s:O, s:O, s:O}", "from", must(day_json(from_day)), "to",
                          must(day_json(to_day)), "by_app", by_app, "by_family", by_family,
                          "resolves", resolves));
    rc = PSDBD_OK;
cleanup:
    sqlite3_finalize(st);
    json_decref(by_app);
    json_decref(by_family);
    json_decref(resolves);
    json_decref(app_map);
    json_decref(family_map);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}

psdbd_rc psdbd_index_stats_events(psdbd_index *ix, size_t limit, psdbd_stat_visible_fn visible,
                                  void *ctx, json_t **out)
{
    static const char sql[] =
        "SELECT 'publish', p.created_at, p.published_by, p.id, a.name, p.app_version, p.family, "
        "p.abi_version, p.serial, 0 FROM psdbs p JOIN apps a ON a.id = p.app "
        "UNION ALL SELECT 'retire', p.retired_at, p.retired_by, p.id, a.name, p.app_version, "
        "p.family, p.abi_version, p.serial, 1 FROM psdbs p JOIN apps a ON a.id = p.app "
        "WHERE p.retired_at IS NOT NULL ORDER BY 2 DESC, 10 DESC, 4 DESC";
    sqlite3_stmt *st = NULL;
    json_t *list = must(json_array());
    psdbd_rc rc = PSDBD_ERROR;
    int s = SQLITE_DONE;
    char ver[32];
    if (!(st = prepare(ix, sql)))
        goto cleanup;
    while (json_array_size(list) < limit && (s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *a = col_text(st, 4);
        if (!shown(visible, ctx, a))
            continue;
        json_array_append_new(
            list, row(json_pack(
                      "{s:s, s:o, s:s, s:I, s:s, s:s, s:s, s:I, s:I}", "event", col_text(st, 0),
                      "at", must(time_json(sqlite3_column_int64(st, 1))), "by", col_text(st, 2),
                      "id", (json_int_t)sqlite3_column_int64(st, 3), "app", a, "app_version",
                      psdb__format_version(col_u64(st, 5), ver, sizeof(ver)), "family",
                      col_text(st, 6), "abi_version", col_u64(st, 7), "serial", col_u64(st, 8))));
    }
    if (s != SQLITE_DONE && s != SQLITE_ROW) {
        rc = step_failure(ix);
        goto cleanup;
    }
    *out = must(json_pack("{s:O}", "events", list));
    rc = PSDBD_OK;
cleanup:
    sqlite3_finalize(st);
    json_decref(list);
    return rc == PSDBD_ERROR ? psdbd_index_failure(ix) : rc;
}
