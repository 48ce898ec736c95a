/* index_stats.c - demand statistics in the index: the functions of index_stats.h, each passing to
 * the open index's engine (index_int.h), and the reports of the /v1/stats/ routes built from the
 * rows of the engine's queries.
 *
 * DESIGN
 * The reports are built here, once, from psdbd__row columns: each engine only runs a query in its
 * dialect (index_sqlite_stats.c, index_pg_stats.c), so SQLite and PostgreSQL answer the same JSON
 * in the same order with the same types. */
#include "index_int.h"
#include "index_stats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "psdb/sign.h"

/* The longest name a stored row can hold: a published application or family (what a signed
 * statement carries), or a name recorded before PSDBD_STATS_NAME_MAX was lowered. */
#define STORED_NAME_MAX PSDB_STATEMENT_STRING_MAX

const char *psdbd_format_day(int64_t day, char *buf, size_t size)
{
    struct tm tm;
    time_t t = (time_t)(day * 86400);
    if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%d", &tm) == 0)
        snprintf(buf, size, "%lld", (long long)day);
    return buf;
}

static const char *col_text(const psdbd__row *st, int i)
{
    return st->text(st->row, i);
}

static int64_t col_i64(const psdbd__row *st, int i)
{
    return st->i64(st->row, i);
}

static json_int_t col_u64(const psdbd__row *st, int i)
{
    return (json_int_t)psdbd_u64_from_db(col_i64(st, i));
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

static int shown(psdbd_stat_visible_fn visible, void *ctx, const char *app)
{
    return !visible || visible(app, ctx);
}

/* ---- adding a flush ---------------------------------------------------------------------------
 */

psdbd_rc psdbd_index_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                               int64_t keep_from_day)
{
    return ix->ops->stats_add(ix, rows, n, keep_from_day);
}

/* ---- coverage of one application ---------------------------------------------------------------
 */

/* The PSDB row a cell or range shows: the newest application version, then the larger ABI,
 * profile, serial, id (what a resolve for that version prefers). */
typedef struct best {
    int set;
    int64_t app_version, abi, profile, serial, id; /* biased, comparable */
} best;

static int better(const best *b, const psdbd__row *st, int c_ver, int c_abi, int c_prof, int c_ser,
                  int c_id)
{
    int64_t v[5] = {col_i64(st, c_ver), col_i64(st, c_abi), col_i64(st, c_prof), col_i64(st, c_ser),
                    col_i64(st, c_id)};
    int64_t o[5] = {b->app_version, b->abi, b->profile, b->serial, b->id};
    if (!b->set)
        return 1;
    for (int i = 0; i < 5; i++)
        if (v[i] != o[i])
            return v[i] > o[i];
    return 0;
}

static void take(best *b, const psdbd__row *st, int c_ver, int c_abi, int c_prof, int c_ser,
                 int c_id)
{
    b->set = 1;
    b->app_version = col_i64(st, c_ver);
    b->abi = col_i64(st, c_abi);
    b->profile = col_i64(st, c_prof);
    b->serial = col_i64(st, c_ser);
    b->id = col_i64(st, c_id);
}

/* The fields of the shown PSDB of a range or cell, from a row with PSDBD__SQ_SHOWN_COLS at `c`. */
static void set_shown(json_t *o, const psdbd__row *st, int c, int64_t now)
{
    char ver[32];
    int64_t created = col_i64(st, c + 3);
    json_object_set_new(o, "active_id", json_integer(col_i64(st, c)));
    json_object_set_new(o, "active_serial", json_integer(col_u64(st, c + 1)));
    json_object_set_new(o, "size", json_integer(col_i64(st, c + 2)));
    json_object_set_new(o, "published_at", must(time_json(created)));
    if (now)
        json_object_set_new(o, "age_s", json_integer(now > created ? now - created : 0));
    json_object_set_new(o, "signer", row(json_string(col_text(st, c + 4))));
    json_object_set_new(o, "published_by", row(json_string(col_text(st, c + 5))));
    json_object_set_new(
        o, "app_version",
        must(json_string(psdb__format_version(col_u64(st, c + 6), ver, sizeof(ver)))));
}

static json_t *profile_json(const psdbd__row *st, int c_has, int c_prof)
{
    char ver[32];
    if (!col_i64(st, c_has))
        return json_null();
    return json_string(psdb__format_version(col_u64(st, c_prof), ver, sizeof(ver)));
}

/* What the coverage report's row callbacks share. */
struct coverage {
    json_t *covered, *missing, *range;
    best b;
    int known;
    char family[STORED_NAME_MAX + 1];
    int64_t last_abi, count;
};

/* Rows come by family and ABI: a range is a run of consecutive ABI versions of one family, every
 * version of it answered by some PSDB. */
static int covered_row(const psdbd__row *st, void *ctx)
{
    struct coverage *cv = ctx;
    const char *f = col_text(st, 0);
    int64_t abi = col_i64(st, 1);
    cv->known = 1;
    if (!cv->range || strcmp(f, cv->family) != 0 ||
        (abi != cv->last_abi && abi != cv->last_abi + 1)) {
        if (cv->range)
            json_object_set_new(cv->range, "psdbs", json_integer(cv->count));
        cv->range = row(json_pack("{s:s, s:I, s:I}", "family", f, "abi_min", col_u64(st, 1),
                                  "abi_max", col_u64(st, 1)));
        json_array_append_new(cv->covered, cv->range);
        snprintf(cv->family, sizeof(cv->family), "%s", f);
        memset(&cv->b, 0, sizeof(cv->b));
        cv->count = 0;
    }
    json_object_set_new(cv->range, "abi_max", json_integer(col_u64(st, 1)));
    cv->last_abi = abi;
    cv->count++;
    /* columns: 3 id, 4 serial, 9 app_version; profile 2 */
    if (better(&cv->b, st, 9, 1, 2, 4, 3)) {
        take(&cv->b, st, 9, 1, 2, 4, 3);
        set_shown(cv->range, st, 3, 0);
        json_object_del(cv->range, "published_by");
        json_object_del(cv->range, "app_version");
    }
    return 0;
}

static int coverage_missing_row(const psdbd__row *st, void *ctx)
{
    struct coverage *cv = ctx;
    cv->known = 1;
    json_array_append_new(
        cv->missing,
        row(json_pack("{s:s, s:I, s:I, s:o, s:I, s:o}", "family", col_text(st, 0), "abi_min",
                      col_u64(st, 1), "abi_max", col_u64(st, 2), "profile_version",
                      must(profile_json(st, 3, 4)), "requests", (json_int_t)col_i64(st, 5),
                      "last_seen", must(day_json(col_i64(st, 6))))));
    return 0;
}

static int seen_row(const psdbd__row *st, void *ctx)
{
    (void)st;
    ((struct coverage *)ctx)->known = 1;
    return 1;
}

psdbd_rc psdbd_index_stats_coverage(psdbd_index *ix, const char *app, int64_t from_day,
                                    size_t limit, json_t **out)
{
    struct coverage cv = {.covered = must(json_array()), .missing = must(json_array())};
    int64_t args[2] = {from_day, limit > INT64_MAX ? INT64_MAX : (int64_t)limit};
    psdbd_rc rc;
    if ((rc = ix->ops->stats_select(ix, PSDBD__SQ_COVERED, app, NULL, 0, covered_row, &cv)) !=
        PSDBD_OK)
        goto cleanup;
    if (cv.range)
        json_object_set_new(cv.range, "psdbs", json_integer(cv.count));
    if ((rc = ix->ops->stats_select(ix, PSDBD__SQ_COVERAGE_MISSING, app, args, 2,
                                    coverage_missing_row, &cv)) != PSDBD_OK)
        goto cleanup;
    /* An application that only ever resolved with hits still has stats rows; one with none of
     * anything is unknown. */
    if (!cv.known && (rc = ix->ops->stats_select(ix, PSDBD__SQ_APP_SEEN, app, NULL, 0, seen_row,
                                                 &cv)) != PSDBD_OK)
        goto cleanup;
    if (!cv.known) {
        rc = PSDBD_NOT_FOUND;
        goto cleanup;
    }
    *out = must(
        json_pack("{s:s, s:O, s:O}", "app", app, "covered", cv.covered, "missing", cv.missing));
    rc = PSDBD_OK;
cleanup:
    json_decref(cv.covered);
    json_decref(cv.missing);
    return rc;
}

/* ---- the coverage matrix -----------------------------------------------------------------------
 */

struct matrix {
    int history, truncated;
    int64_t now;
    size_t limit;
    psdbd_stat_visible_fn visible;
    void *ctx;
    json_t *cells, *apps, *families, *cell;
    char app[STORED_NAME_MAX + 1], family[STORED_NAME_MAX + 1];
};

/* Active rows come first in each cell, best first, so the cell's first row is what it shows. */
static int matrix_row(const psdbd__row *st, void *ctx)
{
    struct matrix *mx = ctx;
    const char *a = col_text(st, 0), *f = col_text(st, 1);
    int retired = !st->is_null(st->row, 11);
    json_t *cell;
    if (!shown(mx->visible, mx->ctx, a))
        return 0;
    if (strcmp(a, mx->app) != 0) {
        if (json_array_size(mx->apps) >= mx->limit) {
            mx->truncated = 1;
            return 1;
        }
        json_array_append_new(mx->apps, row(json_string(a)));
        snprintf(mx->app, sizeof(mx->app), "%s", a);
        mx->family[0] = '\0';
        mx->cell = NULL;
    }
    if (!mx->cell || strcmp(f, mx->family) != 0) {
        mx->cell = row(json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "app", a, "family", f, "psdbs",
                                 (json_int_t)0, "retired", (json_int_t)0, "abi_min", col_u64(st, 2),
                                 "abi_max", col_u64(st, 2)));
        if (mx->history)
            json_object_set_new(mx->cell, "history", must(json_array()));
        json_array_append_new(mx->cells, mx->cell);
        snprintf(mx->family, sizeof(mx->family), "%s", f);
        json_object_set_new(mx->families, f, json_true());
        if (!retired)
            set_shown(mx->cell, st, 4, mx->now);
    }
    cell = mx->cell;
    if (!retired) {
        json_int_t abi = col_u64(st, 2);
        json_object_set_new(cell, "psdbs",
                            json_integer(json_integer_value(json_object_get(cell, "psdbs")) + 1));
        if (abi < json_integer_value(json_object_get(cell, "abi_min")))
            json_object_set_new(cell, "abi_min", json_integer(abi));
        if (abi > json_integer_value(json_object_get(cell, "abi_max")))
            json_object_set_new(cell, "abi_max", json_integer(abi));
    } else {
        json_object_set_new(cell, "retired",
                            json_integer(json_integer_value(json_object_get(cell, "retired")) + 1));
    }
    /* A cell's first row is the one it shows; every other row is history: retired, or
     * superseded by the shown one. */
    if (mx->history && json_integer_value(json_object_get(cell, "active_id")) != col_i64(st, 4)) {
        char ver[32];
        json_t *h = row(json_pack(
            "{s:I, s:s, s:I, s:I, s:s, s:o, s:s}", "id", (json_int_t)col_i64(st, 4), "state",
            retired ? "retired" : "superseded", "abi_version", col_u64(st, 2), "serial",
            col_u64(st, 5), "app_version", psdb__format_version(col_u64(st, 10), ver, sizeof(ver)),
            "published_at", must(time_json(col_i64(st, 7))), "published_by", col_text(st, 9)));
        if (retired) {
            json_object_set_new(h, "retired_at", must(time_json(col_i64(st, 11))));
            json_object_set_new(h, "retired_by", row(json_string(col_text(st, 12))));
        }
        json_array_append_new(json_object_get(cell, "history"), h);
    }
    return 0;
}

psdbd_rc psdbd_index_stats_matrix(psdbd_index *ix, int history, int64_t now, size_t limit,
                                  psdbd_stat_visible_fn visible, void *ctx, json_t **out)
{
    struct matrix mx = {
        .history = history, .now = now, .limit = limit, .visible = visible, .ctx = ctx};
    json_t *fam_list = NULL;
    psdbd_rc rc;
    mx.cells = must(json_array());
    mx.apps = must(json_array());
    mx.families = must(json_object());
    if ((rc = ix->ops->stats_select(ix, PSDBD__SQ_MATRIX, NULL, NULL, 0, matrix_row, &mx)) !=
        PSDBD_OK)
        goto cleanup;
    fam_list = must(json_array());
    {
        const char *k;
        json_t *v;
        json_object_foreach(mx.families, k, v) json_array_append_new(fam_list, row(json_string(k)));
    }
    *out = must(json_pack("{s:O, s:O, s:O, s:b}", "apps", mx.apps, "families", fam_list, "cells",
                          mx.cells, "truncated", mx.truncated));
    rc = PSDBD_OK;
cleanup:
    json_decref(mx.cells);
    json_decref(mx.apps);
    json_decref(mx.families);
    json_decref(fam_list);
    return rc;
}

/* ---- missing coverage, traffic, events ----------------------------------------------------------
 */

/* The day aggregate's counts (stats_other) over a range, by day: hits, misses, requests. */
struct other_day {
    int64_t day;
    json_int_t n[3];
};

struct others {
    struct other_day *days;
    size_t n, cap;
};

static int other_row(const psdbd__row *st, void *ctx)
{
    struct others *o = ctx;
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 16;
        struct other_day *grown = realloc(o->days, o->cap * sizeof(*o->days));
        if (!grown)
            psdbd_out_of_memory();
        o->days = grown;
    }
    o->days[o->n++] =
        (struct other_day){col_i64(st, 0), {col_i64(st, 1), col_i64(st, 2), col_i64(st, 3)}};
    return 0;
}

/* The aggregate of [from_day, to_day] when the reader sees every application: a scoped reader
 * cannot tell whose demand it was, so it is never shown one. */
static psdbd_rc others_of(psdbd_index *ix, int64_t from_day, int64_t to_day,
                          psdbd_stat_visible_fn visible, struct others *o)
{
    int64_t args[2] = {from_day, to_day};
    if (visible)
        return PSDBD_OK;
    return ix->ops->stats_select(ix, PSDBD__SQ_OTHER, NULL, args, 2, other_row, o);
}

struct missing {
    size_t limit;
    psdbd_stat_visible_fn visible;
    void *ctx;
    json_t *list, *entry;
    int64_t key[5];
    json_int_t other_requests;
    int started, truncated;
    char app[STORED_NAME_MAX + 1], family[STORED_NAME_MAX + 1];
};

/* Rows come by entry (most asked first), one per day of it: the first `limit` entries are listed,
 * the requests of the rest summed into other_requests. */
static int missing_row(const psdbd__row *st, void *ctx)
{
    struct missing *ms = ctx;
    const char *a = col_text(st, 0), *f = col_text(st, 1);
    int64_t k[5] = {col_i64(st, 2), col_i64(st, 3), col_i64(st, 4), col_i64(st, 5), 0};
    if (!shown(ms->visible, ms->ctx, a))
        return 0;
    if (!ms->started || strcmp(a, ms->app) != 0 || strcmp(f, ms->family) != 0 ||
        memcmp(k, ms->key, sizeof(k)) != 0) {
        ms->started = 1;
        snprintf(ms->app, sizeof(ms->app), "%s", a);
        snprintf(ms->family, sizeof(ms->family), "%s", f);
        memcpy(ms->key, k, sizeof(ms->key));
        ms->entry = NULL;
        if (json_array_size(ms->list) >= ms->limit) {
            ms->truncated = 1;
            ms->other_requests += (json_int_t)col_i64(st, 8);
            return 0;
        }
        ms->entry =
            row(json_pack("{s:s, s:s, s:I, s:I, s:o, s:I, s:o, s:[]}", "app", a, "family", f,
                          "abi_min", col_u64(st, 2), "abi_max", col_u64(st, 3), "profile_version",
                          must(profile_json(st, 4, 5)), "requests", (json_int_t)col_i64(st, 8),
                          "last_seen", must(day_json(col_i64(st, 9))), "days"));
        json_array_append_new(ms->list, ms->entry);
    }
    if (ms->entry)
        json_array_append_new(json_object_get(ms->entry, "days"),
                              row(json_pack("{s:o, s:I}", "day", must(day_json(col_i64(st, 6))),
                                            "requests", (json_int_t)col_i64(st, 7))));
    return 0;
}

psdbd_rc psdbd_index_stats_missing(psdbd_index *ix, int64_t from_day, int64_t to_day, size_t limit,
                                   psdbd_stat_visible_fn visible, void *ctx, json_t **out)
{
    struct missing ms = {.limit = limit, .visible = visible, .ctx = ctx};
    struct others o = {0};
    int64_t args[2] = {from_day, to_day};
    psdbd_rc rc;
    ms.list = must(json_array());
    if ((rc = ix->ops->stats_select(ix, PSDBD__SQ_MISSING, NULL, args, 2, missing_row, &ms)) !=
            PSDBD_OK ||
        (rc = others_of(ix, from_day, to_day, visible, &o)) != PSDBD_OK)
        goto cleanup;
    for (size_t i = 0; i < o.n; i++)
        ms.other_requests += o.days[i].n[2];
    *out = must(json_pack("{s:o, s:o, s:O, s:I, s:b}", "from", must(day_json(from_day)), "to",
                          must(day_json(to_day)), "missing", ms.list, "other_requests",
                          ms.other_requests, "truncated", ms.truncated));
    rc = PSDBD_OK;
cleanup:
    json_decref(ms.list);
    free(o.days);
    return rc;
}

/* One row of a traffic list before it is summed: a day, a name (NULL: the day's other entry) and
 * up to three counts. */
struct tally {
    int64_t day;
    char *name;
    json_int_t v[3];
};

struct tallies {
    struct tally *t;
    size_t n, cap;
};

static void tally_add(struct tallies *ts, int64_t day, const char *name, const json_int_t *v,
                      size_t nv)
{
    struct tally *t;
    if (ts->n == ts->cap) {
        ts->cap = ts->cap ? ts->cap * 2 : 64;
        struct tally *grown = realloc(ts->t, ts->cap * sizeof(*ts->t));
        if (!grown)
            psdbd_out_of_memory();
        ts->t = grown;
    }
    t = &ts->t[ts->n++];
    memset(t, 0, sizeof(*t));
    t->day = day;
    t->name = xstrdup(name);
    memcpy(t->v, v, nv * sizeof(*v));
}

static void tallies_free(struct tallies *ts)
{
    for (size_t i = 0; i < ts->n; i++)
        free(ts->t[i].name);
    free(ts->t);
}

/* A name's total over the range, for choosing the names a list shows. */
struct total {
    const char *name;
    json_int_t rank[2];
};

static int by_total_name(const void *a, const void *b)
{
    return strcmp(((const struct total *)a)->name, ((const struct total *)b)->name);
}

static int by_rank(const void *a, const void *b)
{
    const struct total *x = a, *y = b;
    for (int i = 0; i < 2; i++)
        if (x->rank[i] != y->rank[i])
            return x->rank[i] < y->rank[i] ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* By day; in a day the named entries by name, then the other entry (NULL name). */
static int by_day_name(const void *a, const void *b)
{
    const struct tally *x = a, *y = b;
    if (x->day != y->day)
        return x->day < y->day ? -1 : 1;
    if (!x->name || !y->name)
        return !x->name - !y->name;
    return strcmp(x->name, y->name);
}

/* One list of the traffic report. The `limit` names with the largest totals over the range
 * (v[rank[0]] + v[rank[1]], then v[rank[2]]; -1: none) keep their own entries; every other row of
 * a day is summed into that day's entry whose `field` is null, so the answer holds at most
 * (limit + 1) entries per day whatever clients asked for. *truncated is set when a name was
 * folded so. */
static json_t *traffic_list(struct tallies *ts, const char *field, const char *const *counts,
                            size_t nv, const int rank[3], size_t limit, int *truncated)
{
    json_t *list = must(json_array());
    struct total *totals = ts->n ? xcalloc(ts->n, sizeof(*totals)) : NULL;
    size_t nt = 0, w = 0;
    /* The totals per name: the rows sorted by day and name, then their names sorted and run
     * together. */
    for (size_t i = 0; i < ts->n; i++) {
        const struct tally *t = &ts->t[i];
        if (!t->name)
            continue;
        totals[nt++] = (struct total){
            t->name,
            {t->v[rank[0]] + (rank[1] >= 0 ? t->v[rank[1]] : 0), rank[2] >= 0 ? t->v[rank[2]] : 0}};
    }
    if (nt > 1)
        qsort(totals, nt, sizeof(*totals), by_total_name);
    for (size_t i = 0; i < nt; i++) {
        if (w > 0 && strcmp(totals[w - 1].name, totals[i].name) == 0) {
            totals[w - 1].rank[0] += totals[i].rank[0];
            totals[w - 1].rank[1] += totals[i].rank[1];
            continue;
        }
        totals[w++] = totals[i];
    }
    nt = w;
    if (nt > 1)
        qsort(totals, nt, sizeof(*totals), by_rank);
    if (nt > limit) {
        *truncated = 1;
        nt = limit;
    }
    /* The shown names, sorted for the lookup; every other name becomes NULL. */
    if (nt > 1)
        qsort(totals, nt, sizeof(*totals), by_total_name);
    for (size_t i = 0; i < ts->n; i++) {
        struct tally *t = &ts->t[i];
        struct total key = {t->name, {0, 0}};
        if (t->name && (nt == 0 || !bsearch(&key, totals, nt, sizeof(*totals), by_total_name))) {
            free(t->name);
            t->name = NULL;
        }
    }
    free(totals);
    /* The rows of one (day, name) summed into one entry, in the report's order. */
    if (ts->n > 1)
        qsort(ts->t, ts->n, sizeof(*ts->t), by_day_name);
    w = 0;
    for (size_t i = 0; i < ts->n; i++) {
        if (w > 0 && by_day_name(&ts->t[w - 1], &ts->t[i]) == 0) {
            for (size_t k = 0; k < nv; k++)
                ts->t[w - 1].v[k] += ts->t[i].v[k];
            free(ts->t[i].name);
            continue;
        }
        ts->t[w++] = ts->t[i];
    }
    ts->n = w;
    for (size_t i = 0; i < ts->n; i++) {
        const struct tally *t = &ts->t[i];
        json_t *e = row(json_pack("{s:o, s:o}", "day", must(day_json(t->day)), field,
                                  t->name ? json_string(t->name) : json_null()));
        for (size_t k = 0; e && k < nv; k++)
            json_object_set_new(e, counts[k], json_integer(t->v[k]));
        json_array_append_new(list, e);
    }
    return list;
}

struct traffic {
    psdbd_stat_visible_fn visible;
    void *ctx;
    struct tallies by_app, by_family, resolves;
};

static int download_row(const psdbd__row *st, void *ctx)
{
    struct traffic *tr = ctx;
    const char *a = col_text(st, 1);
    json_int_t v[3] = {col_i64(st, 3), col_i64(st, 4), col_i64(st, 5)};
    if (!shown(tr->visible, tr->ctx, a))
        return 0;
    tally_add(&tr->by_app, col_i64(st, 0), a, v, 3);
    tally_add(&tr->by_family, col_i64(st, 0), col_text(st, 2), v, 3);
    return 0;
}

static int resolves_row(const psdbd__row *st, void *ctx)
{
    struct traffic *tr = ctx;
    const char *a = col_text(st, 1);
    json_int_t v[2] = {col_i64(st, 2), col_i64(st, 3)};
    if (!shown(tr->visible, tr->ctx, a))
        return 0;
    tally_add(&tr->resolves, col_i64(st, 0), a, v, 2);
    return 0;
}

psdbd_rc psdbd_index_stats_traffic(psdbd_index *ix, int64_t from_day, int64_t to_day, size_t limit,
                                   psdbd_stat_visible_fn visible, void *ctx, json_t **out)
{
    static const char *const dl_counts[] = {"complete", "partial", "bytes"};
    static const char *const res_counts[] = {"hits", "misses"};
    /* Downloads rank by responses, then bytes; resolves by hits + misses. */
    static const int dl_rank[3] = {0, 1, 2}, res_rank[3] = {0, 1, -1};
    struct traffic tr = {.visible = visible, .ctx = ctx};
    struct others o = {0};
    int64_t args[2] = {from_day, to_day};
    json_t *by_app = NULL, *by_family = NULL, *resolves = NULL;
    int truncated = 0;
    psdbd_rc rc;
    if ((rc = ix->ops->stats_select(ix, PSDBD__SQ_DOWNLOADS, NULL, args, 2, download_row, &tr)) !=
            PSDBD_OK ||
        (rc = ix->ops->stats_select(ix, PSDBD__SQ_RESOLVES, NULL, args, 2, resolves_row, &tr)) !=
            PSDBD_OK ||
        (rc = others_of(ix, from_day, to_day, visible, &o)) != PSDBD_OK)
        goto cleanup;
    for (size_t i = 0; i < o.n; i++)
        if (o.days[i].n[0] || o.days[i].n[1])
            tally_add(&tr.resolves, o.days[i].day, NULL, o.days[i].n, 2);
    by_app = traffic_list(&tr.by_app, "app", dl_counts, 3, dl_rank, limit, &truncated);
    by_family = traffic_list(&tr.by_family, "family", dl_counts, 3, dl_rank, limit, &truncated);
    resolves = traffic_list(&tr.resolves, "app", res_counts, 2, res_rank, limit, &truncated);
    *out = must(json_pack("{s:o, s:o, s:O, s:O, s:O, s:b}", "from", must(day_json(from_day)), "to",
                          must(day_json(to_day)), "by_app", by_app, "by_family", by_family,
                          "resolves", resolves, "truncated", truncated));
    rc = PSDBD_OK;
cleanup:
    json_decref(by_app);
    json_decref(by_family);
    json_decref(resolves);
    tallies_free(&tr.by_app);
    tallies_free(&tr.by_family);
    tallies_free(&tr.resolves);
    free(o.days);
    return rc;
}

struct events {
    size_t limit;
    psdbd_stat_visible_fn visible;
    void *ctx;
    json_t *list;
    int truncated;
};

static int event_row(const psdbd__row *st, void *ctx)
{
    struct events *ev = ctx;
    const char *a = col_text(st, 4);
    char ver[32];
    if (!shown(ev->visible, ev->ctx, a))
        return 0;
    if (json_array_size(ev->list) >= ev->limit) {
        ev->truncated = 1; /* one more event the reader may see: the list is not all of them */
        return 1;
    }
    json_array_append_new(
        ev->list,
        row(json_pack("{s:s, s:o, s:s, s:I, s:s, s:s, s:s, s:I, s:I}", "event", col_text(st, 0),
                      "at", must(time_json(col_i64(st, 1))), "by", col_text(st, 2), "id",
                      (json_int_t)col_i64(st, 3), "app", a, "app_version",
                      psdb__format_version(col_u64(st, 5), ver, sizeof(ver)), "family",
                      col_text(st, 6), "abi_version", col_u64(st, 7), "serial", col_u64(st, 8))));
    return 0;
}

psdbd_rc psdbd_index_stats_events(psdbd_index *ix, size_t limit, psdbd_stat_visible_fn visible,
                                  void *ctx, json_t **out)
{
    struct events ev = {.limit = limit, .visible = visible, .ctx = ctx};
    psdbd_rc rc;
    ev.list = must(json_array());
    if ((rc = ix->ops->stats_select(ix, PSDBD__SQ_EVENTS, NULL, NULL, 0, event_row, &ev)) !=
        PSDBD_OK)
        goto cleanup;
    *out = must(json_pack("{s:O, s:b}", "events", ev.list, "truncated", ev.truncated));
    rc = PSDBD_OK;
cleanup:
    json_decref(ev.list);
    return rc;
}

/* ---- the recorder's day budget ------------------------------------------------------------------
 */

struct day_keys {
    int64_t day;
    int (*fn)(const psdbd_stat_row *key, void *ctx);
    void *ctx;
};

static int day_key_row(const psdbd__row *st, void *ctx)
{
    struct day_keys *dk = ctx;
    psdbd_stat_row k = {.kind = (psdbd_stat_kind)col_i64(st, 0),
                        .day = dk->day,
                        .app = col_text(st, 1),
                        .app_version = psdbd_u64_from_db(col_i64(st, 2)),
                        .family = col_text(st, 3)};
    if (k.kind == PSDBD_STAT_MISS) {
        k.abi_min = psdbd_u64_from_db(col_i64(st, 4));
        k.abi_max = psdbd_u64_from_db(col_i64(st, 5));
        k.has_profile = col_i64(st, 6) != 0;
        k.profile = k.has_profile ? psdbd_u64_from_db(col_i64(st, 7)) : 0;
    }
    return dk->fn(&k, dk->ctx);
}

psdbd_rc psdbd_index_stats_day_keys(psdbd_index *ix, int64_t day,
                                    int (*fn)(const psdbd_stat_row *key, void *ctx), void *ctx)
{
    struct day_keys dk = {day, fn, ctx};
    return ix->ops->stats_select(ix, PSDBD__SQ_DAY_KEYS, NULL, &day, 1, day_key_row, &dk);
}
