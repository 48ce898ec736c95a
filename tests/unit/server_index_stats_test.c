/* server_index_stats_test.c - the demand statistics answer the same on both index engines: the
 * same PSDBs and the same flushed counts in a SQLite index and in a PostgreSQL one give equal JSON
 * (same order, fields and types) from every report, through the adds' upserts and the retention.
 * Needs a PostgreSQL cluster (PSDB_TEST_PG_URL, from tests/run or tests/pg/cluster); skips (77)
 * without it. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "index.h"
#include "index_stats.h"
#include "stats.h"

#include <pthread.h>
#include <sqlite3.h>

static char *dir, *path, *pg_db, *pg_url;
static psdbd_index *sq, *pg;

/* base?dbname=NAME: a later dbname parameter wins over the URL's database. */
static char *url_for(const char *db)
{
    const char *base = getenv("PSDB_TEST_PG_URL");
    char *u = NULL;
    ck_assert_int_ge(asprintf(&u, "%s%sdbname=%s", base, strchr(base, '?') ? "&" : "?", db), 0);
    return u;
}

/* Runs one statement on the SQLite file (a path) or with psql on a PostgreSQL URL: 0 or not. */
static int run_sql(const char *target, const char *sql)
{
    char *cmd = NULL;
    int rc;
    if (target[0] == '/') {
        sqlite3 *db = NULL;
        rc = sqlite3_open(target, &db) != SQLITE_OK ||
             sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK;
        sqlite3_close(db);
        return rc;
    }
    ck_assert_int_ge(asprintf(&cmd, "psql -qAt -v ON_ERROR_STOP=1 '%s' -c \"%s\"", target, sql), 0);
    rc = tu_run(cmd, NULL);
    free(cmd);
    return rc;
}

static void setup(void)
{
    char err[512], *sql = NULL, *maint = url_for("postgres");
    dir = tu_mkdtemp();
    path = tu_path(dir, "index.sqlite");
    ck_assert_msg(psdbd_index_create(path, &sq, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_ge(asprintf(&pg_db, "psdbis_%ld_%ld", (long)getpid(), (long)time(NULL)), 0);
    ck_assert_int_ge(asprintf(&sql, "CREATE DATABASE %s", pg_db), 0);
    ck_assert_int_eq(run_sql(maint, sql), 0);
    pg_url = url_for(pg_db);
    ck_assert_msg(psdbd_index_connect(pg_url, 2, 10000, 1, &pg, err, sizeof(err)) == 0, "%s", err);
    free(sql);
    free(maint);
}

static void teardown(void)
{
    char *sql = NULL, *maint = url_for("postgres");
    psdbd_index_close(sq);
    psdbd_index_close(pg);
    sq = pg = NULL;
    ck_assert_int_ge(asprintf(&sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", pg_db), 0);
    run_sql(maint, sql);
    tu_rmtree(dir);
    free(sql);
    free(maint);
    free(dir);
    free(path);
    free(pg_db);
    free(pg_url);
}

/* One PSDB in both indexes (same order, so the same ids). */
static void publish(const char *app, uint64_t app_version, const char *family, uint64_t abi,
                    uint64_t profile, uint64_t serial, char blob)
{
    psdbd_record r = {0};
    psdbd_index *both[2] = {sq, pg};
    r.app_name = app;
    r.exe_filename = "game.exe";
    r.engine_name = "eng";
    r.family = family;
    r.app_version = app_version;
    r.abi_version = abi;
    r.profile_version = profile;
    r.serial = serial;
    r.size = 1000 + serial;
    memset(r.sha256, blob, 64);
    memset(r.key_id, 'k', 64);
    r.signature = "sig";
    r.published_by = "ci";
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(psdbd_index_publish(both[i], &r, NULL), PSDBD_OK);
}

/* The same stored times in both (publishes took place in different seconds), so the reports can
 * be compared whole. */
static void fix_times(void)
{
    static const char sql[] =
        "UPDATE psdbs SET created_at = 1700000000 + id * 10, retired_at = CASE WHEN retired_at "
        "IS NULL THEN NULL ELSE 1700000000 + id * 10 + 5 END, retired_by = CASE WHEN "
        "retired_at IS NULL THEN NULL ELSE 'ops' END";
    ck_assert_int_eq(run_sql(path, sql), 0);
    ck_assert_int_eq(run_sql(pg_url, sql), 0);
}

static void add(const psdbd_stat_row *rows, size_t n, int64_t keep_from)
{
    ck_assert_int_eq(psdbd_index_stats_add(sq, rows, n, keep_from), PSDBD_OK);
    ck_assert_int_eq(psdbd_index_stats_add(pg, rows, n, keep_from), PSDBD_OK);
}

/* Asserts the report is equal from both engines and returns SQLite's (the caller's). */
static json_t *same(const char *what, psdbd_rc (*fn)(psdbd_index *, void *, json_t **), void *arg,
                    psdbd_rc want)
{
    json_t *a = NULL, *b = NULL;
    char *sa, *sb;
    ck_assert_int_eq(fn(sq, arg, &a), want);
    ck_assert_int_eq(fn(pg, arg, &b), want);
    if (want != PSDBD_OK)
        return NULL;
    sa = json_dumps(a, JSON_PRESERVE_ORDER);
    sb = json_dumps(b, JSON_PRESERVE_ORDER);
    ck_assert_msg(sa && sb && strcmp(sa, sb) == 0, "%s differs:\nsqlite:     %s\npostgresql: %s",
                  what, sa, sb);
    free(sa);
    free(sb);
    json_decref(b);
    return a;
}

static int64_t today;

static int not_beta(const char *app, void *ctx)
{
    (void)ctx;
    return strcmp(app, "Beta") != 0;
}

static psdbd_rc coverage(psdbd_index *ix, void *app, json_t **out)
{
    return psdbd_index_stats_coverage(ix, app, today - 30, 10, out);
}
static psdbd_rc coverage_one(psdbd_index *ix, void *app, json_t **out)
{
    return psdbd_index_stats_coverage(ix, app, today - 30, 1, out);
}
static psdbd_rc matrix(psdbd_index *ix, void *history, json_t **out)
{
    return psdbd_index_stats_matrix(ix, history != NULL, 1700100000, 100, NULL, NULL, out);
}
static psdbd_rc matrix_one(psdbd_index *ix, void *unused, json_t **out)
{
    (void)unused;
    return psdbd_index_stats_matrix(ix, 0, 1700100000, 1, NULL, NULL, out);
}
static psdbd_rc matrix_scoped(psdbd_index *ix, void *unused, json_t **out)
{
    (void)unused;
    return psdbd_index_stats_matrix(ix, 1, 1700100000, 100, not_beta, NULL, out);
}
static psdbd_rc missing(psdbd_index *ix, void *limit, json_t **out)
{
    return psdbd_index_stats_missing(ix, today - 30, today, *(size_t *)limit, NULL, NULL, out);
}
static psdbd_rc missing_scoped(psdbd_index *ix, void *unused, json_t **out)
{
    (void)unused;
    return psdbd_index_stats_missing(ix, today - 30, today, 100, not_beta, NULL, out);
}
static psdbd_rc traffic(psdbd_index *ix, void *unused, json_t **out)
{
    (void)unused;
    return psdbd_index_stats_traffic(ix, today - 30, today, 100, NULL, NULL, out);
}
static psdbd_rc traffic_limited(psdbd_index *ix, void *limit, json_t **out)
{
    return psdbd_index_stats_traffic(ix, today - 30, today, *(size_t *)limit, NULL, NULL, out);
}
static psdbd_rc traffic_scoped(psdbd_index *ix, void *unused, json_t **out)
{
    (void)unused;
    return psdbd_index_stats_traffic(ix, today - 30, today, 100, not_beta, NULL, out);
}
static psdbd_rc events(psdbd_index *ix, void *limit, json_t **out)
{
    return psdbd_index_stats_events(ix, *(size_t *)limit, NULL, NULL, out);
}
static psdbd_rc events_scoped(psdbd_index *ix, void *unused, json_t **out)
{
    (void)unused;
    return psdbd_index_stats_events(ix, 100, not_beta, NULL, out);
}

START_TEST(test_server_index_stats__engines_answer_the_same_json)
{
    const uint64_t v1 = 0x0001000000000000ull, v2 = 0x0002000000000000ull;
    const uint64_t prof2 = 0x0002000000000000ull;
    char ones[65], twos[65];
    json_t *j;
    size_t two = 2, many = 100;
    today = psdbd_stats_today();
    /* Names that sort differently by bytes and by a locale: upper case before lower case, and
     * a UTF-8 name after every ASCII one. */
    publish("Alpha", v1, "gfx1", 1, 0, 1, '1');
    publish("Alpha", v1, "gfx1", 2, prof2, 2, '2');
    publish("Alpha", v1, "gfx1", 2, prof2, 3, '3'); /* supersedes serial 2 */
    publish("Alpha", v1, "gfx1", 4, 0, 1, '4');     /* a second range of the family */
    publish("Alpha", v2, "gfx1", 1, 0, 1, '1');     /* shares the first blob */
    publish("alpha", v1, "Gfx2", 1, 0, 1, '5');
    publish("\xc3\x89mile", v1, "gfx\xc3\xa9", 7, 0, 1, '6');
    publish("Beta", v1, "gfx3", 3, 0, 1, '7');
    publish("Beta", v1, "gfx4", 1, 0, 1, '8');
    ck_assert_int_eq(psdbd_index_retire(sq, 9, "ops", NULL), PSDBD_OK);
    ck_assert_int_eq(psdbd_index_retire(pg, 9, "ops", NULL), PSDBD_OK);
    fix_times();
    memset(ones, '1', 64);
    memset(twos, '2', 64);
    ones[64] = twos[64] = '\0';
    {
        const psdbd_stat_row rows[] = {
            {PSDBD_STAT_RESOLVE, today, "Alpha", "gfx1", v1, 0, 0, 0, 0, NULL, {5, 2, 0}},
            {PSDBD_STAT_RESOLVE, today - 1, "Alpha", "gfx1", v1, 0, 0, 0, 0, NULL, {1, 0, 0}},
            {PSDBD_STAT_RESOLVE, today, "alpha", "Gfx2", v1, 0, 0, 0, 0, NULL, {3, 0, 0}},
            {PSDBD_STAT_RESOLVE, today, "Beta", "gfx9", v1, 0, 0, 0, 0, NULL, {0, 4, 0}},
            {PSDBD_STAT_RESOLVE, today, "Hits", "gfx1", v1, 0, 0, 0, 0, NULL, {2, 0, 0}},
            {PSDBD_STAT_MISS, today, "Alpha", "gfx9", v1, 5, 6, 0, 0, NULL, {3, 0, 0}},
            {PSDBD_STAT_MISS, today - 2, "Alpha", "gfx9", v1, 5, 6, 0, 0, NULL, {1, 0, 0}},
            {PSDBD_STAT_MISS,
             today,
             "Alpha",
             "gfx1",
             v1,
             2,
             2,
             1,
             0x0003000000000000ull,
             NULL,
             {4, 0, 0}}, /* the profile no PSDB has */
            {PSDBD_STAT_MISS,
             today,
             "Alpha",
             "gfx1",
             v1,
             1,
             1,
             0,
             0,
             NULL,
             {9, 0, 0}}, /* answered now: never listed */
            {PSDBD_STAT_MISS, today, "Beta", "gfx9", v1, 1, 3, 1, prof2, NULL, {4, 0, 0}},
            {PSDBD_STAT_MISS, today, "\xc3\x89mile", "gfx9", v1, 1, 1, 0, 0, NULL, {4, 0, 0}},
            {PSDBD_STAT_MISS, today - 40, "Alpha", "gfx8", v1, 1, 1, 0, 0, NULL, {7, 0, 0}},
            {PSDBD_STAT_DOWNLOAD, today, NULL, NULL, 0, 0, 0, 0, 0, ones, {2, 1, 2500}},
            {PSDBD_STAT_DOWNLOAD, today - 1, NULL, NULL, 0, 0, 0, 0, 0, twos, {1, 0, 1002}},
            /* The days' aggregates of what was over the recording bounds. */
            {PSDBD_STAT_OTHER, today, NULL, NULL, 0, 0, 0, 0, 0, NULL, {3, 4, 5}},
            {PSDBD_STAT_OTHER, today - 1, NULL, NULL, 0, 0, 0, 0, 0, NULL, {1, 0, 2}},
            {PSDBD_STAT_OTHER, today - 40, NULL, NULL, 0, 0, 0, 0, 0, NULL, {9, 9, 9}},
        };
        add(rows, sizeof(rows) / sizeof(rows[0]), today - 60);
        /* A second flush adds to the stored rows (the upsert) and expires day today - 40. */
        add(rows, 6, today - 35);
    }

    j = same("coverage Alpha", coverage, "Alpha", PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(j, "covered")), 2);
    ck_assert_int_eq(json_array_size(json_object_get(j, "missing")), 2);
    /* 3 of today twice (the second flush adds) and 1 of today - 2: most asked first */
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(j, "missing"), 0), "requests")),
                     7);
    json_decref(j);
    json_decref(same("coverage Alpha limit 1", coverage_one, "Alpha", PSDBD_OK));
    json_decref(same("coverage of a UTF-8 name", coverage, "\xc3\x89mile", PSDBD_OK));
    json_decref(same("coverage of hits only", coverage, "Hits", PSDBD_OK));
    same("coverage of an unknown application", coverage, "Nobody", PSDBD_NOT_FOUND);

    j = same("matrix", matrix, NULL, PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(j, "cells")), 5);
    json_decref(j);
    json_decref(same("matrix with history", matrix, "", PSDBD_OK));
    json_decref(same("matrix, Beta hidden", matrix_scoped, NULL, PSDBD_OK));

    j = same("matrix, limit 1", matrix_one, NULL, PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(j, "apps")), 1);
    ck_assert(json_is_true(json_object_get(j, "truncated")));
    json_decref(j);

    j = same("missing", missing, &many, PSDBD_OK);
    /* Alpha gfx9 (7), Alpha gfx1 profile 3 (4), Beta gfx9 (4), Emile gfx9 (4); gfx8 expired */
    ck_assert_int_eq(json_array_size(json_object_get(j, "missing")), 4);
    ck_assert(json_is_false(json_object_get(j, "truncated")));
    /* the aggregates' 5 + 2 requests; today - 40's expired with its day */
    ck_assert_int_eq(json_integer_value(json_object_get(j, "other_requests")), 7);
    json_decref(j);
    j = same("missing, limit 2", missing, &two, PSDBD_OK);
    ck_assert(json_is_true(json_object_get(j, "truncated")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "other_requests")), 7 + 4 + 4);
    json_decref(j);
    json_decref(same("missing, Beta hidden", missing_scoped, NULL, PSDBD_OK));

    j = same("traffic", traffic, NULL, PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(j, "by_app")), 2);
    /* today - 1: Alpha, the aggregate; today: Alpha, Beta, Hits, alpha, the aggregate */
    ck_assert_int_eq(json_array_size(json_object_get(j, "resolves")), 7);
    ck_assert(
        json_is_null(json_object_get(json_array_get(json_object_get(j, "resolves"), 6), "app")));
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(j, "resolves"), 6), "misses")),
                     4);
    ck_assert(json_is_false(json_object_get(j, "truncated")));
    json_decref(j);
    /* One application named per list (the most resolves: Alpha with 5 + 2 + 5 + 2 + 1), the
     * others of each day in its null entry. */
    size_t one = 1;
    j = same("traffic, limit 1", traffic_limited, &one, PSDBD_OK);
    ck_assert(json_is_true(json_object_get(j, "truncated")));
    {
        json_t *res = json_object_get(j, "resolves"), *r;
        size_t i, named = 0;
        json_int_t misses = 0;
        json_array_foreach(res, i, r)
        {
            if (json_is_string(json_object_get(r, "app"))) {
                ck_assert_str_eq(json_string_value(json_object_get(r, "app")), "Alpha");
                named++;
            }
            misses += json_integer_value(json_object_get(r, "misses"));
        }
        ck_assert_uint_eq(named, 2);
        ck_assert_uint_eq(json_array_size(res), 4);
        ck_assert_int_eq(misses, 2 * 2 + 4 * 2 + 4); /* every miss is still there */
    }
    json_decref(j);
    json_decref(same("traffic, Beta hidden", traffic_scoped, NULL, PSDBD_OK));

    j = same("events", events, &many, PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(j, "events")), 10);
    json_decref(j);
    json_decref(same("events, limit 2", events, &two, PSDBD_OK));
    json_decref(same("events, Beta hidden", events_scoped, NULL, PSDBD_OK));
}
END_TEST

static int key_line(const psdbd_stat_row *k, void *ctx)
{
    char line[256];
    snprintf(line, sizeof(line), "%d %s %s %llx %llx %llx %d %llx", (int)k->kind, k->app, k->family,
             (unsigned long long)k->app_version, (unsigned long long)k->abi_min,
             (unsigned long long)k->abi_max, k->has_profile, (unsigned long long)k->profile);
    json_array_append_new(ctx, json_string(line));
    return 0;
}

/* The keys of a day read back for the recorder's day budget: the same on both engines, each with
 * the fields it was recorded with (unbiased), and nothing of other days. */
START_TEST(test_server_index_stats__day_keys_read_back_as_recorded)
{
    const uint64_t big = 0xFFFF000000000001ull, prof = 0x0003000400000000ull;
    psdbd_index *both[2] = {sq, pg};
    json_t *got[2];
    today = psdbd_stats_today();
    const psdbd_stat_row rows[] = {
        {PSDBD_STAT_RESOLVE, today, "Alpha", "gfx1", big, 0, 0, 0, 0, NULL, {1, 2, 0}},
        {PSDBD_STAT_MISS, today, "Alpha", "gfx1", big, 5, big, 1, prof, NULL, {2, 0, 0}},
        {PSDBD_STAT_MISS, today, "\xc3\x89mile", "gfx9", 1, 0, 7, 0, 0, NULL, {1, 0, 0}},
        {PSDBD_STAT_MISS, today - 1, "Other", "day", 1, 1, 1, 0, 0, NULL, {1, 0, 0}},
        {PSDBD_STAT_OTHER, today, NULL, NULL, 0, 0, 0, 0, 0, NULL, {1, 1, 1}},
    };
    add(rows, sizeof(rows) / sizeof(rows[0]), today - 30);
    for (int i = 0; i < 2; i++) {
        got[i] = json_array();
        ck_assert_int_eq(psdbd_index_stats_day_keys(both[i], today, key_line, got[i]), PSDBD_OK);
        ck_assert_uint_eq(json_array_size(got[i]), 3);
    }
    ck_assert_msg(json_equal(got[0], got[1]), "sqlite %s, postgresql %s", json_dumps(got[0], 0),
                  json_dumps(got[1], 0));
    ck_assert_str_eq(json_string_value(json_array_get(got[0], 0)),
                     "1 Alpha gfx1 ffff000000000001 0 0 0 0");
    ck_assert_str_eq(json_string_value(json_array_get(got[0], 1)),
                     "2 Alpha gfx1 ffff000000000001 5 ffff000000000001 1 3000400000000");
    json_decref(got[0]);
    json_decref(got[1]);
}
END_TEST

/* PostgreSQL refuses text that is not UTF-8 (SQLSTATE 22021) where SQLite compares it: every
 * lookup by such a key finds nothing on both engines (a 404 or 401), never a server error. */
START_TEST(test_server_index_stats__lookups_by_names_not_utf8_find_nothing)
{
    psdbd_index *both[2] = {sq, pg};
    const char *bad = "bad\xff";
    publish("Alpha", 1, "gfx1", 1, 0, 1, '1');
    for (int i = 0; i < 2; i++) {
        psdbd_query q = {bad, 1, "gfx1", 0, 10, 0, 0};
        psdbd_query qf = {"Alpha", 1, "gfx\xfe", 0, 10, 0, 0};
        psdbd_token_row t;
        psdbd_record r = {0};
        char *pem = NULL, *scope = NULL;
        json_t *out = NULL;
        const char *engine = psdbd_index_engine(both[i]);
        r.app_name = bad;
        r.family = "gfx1";
        ck_assert_msg(psdbd_index_resolve(both[i], &q, &out) == PSDBD_NOT_FOUND, "%s", engine);
        ck_assert_msg(psdbd_index_resolve(both[i], &qf, &out) == PSDBD_NOT_FOUND, "%s", engine);
        ck_assert_msg(psdbd_index_find_identity(both[i], &r, &out) == PSDBD_NOT_FOUND, "%s",
                      engine);
        ck_assert_msg(psdbd_index_list_app_psdbs(both[i], bad, &out) == PSDBD_NOT_FOUND, "%s",
                      engine);
        ck_assert_msg(psdbd_index_token_find(both[i], bad, &t) == PSDBD_NOT_FOUND, "%s", engine);
        ck_assert_msg(psdbd_index_key_find(both[i], bad, &pem, &scope, NULL) == PSDBD_NOT_FOUND,
                      "%s", engine);
        ck_assert_msg(psdbd_index_credential_revoke(both[i], PSDBD_CREDENTIAL_TOKEN, bad) ==
                          PSDBD_NOT_FOUND,
                      "%s", engine);
        ck_assert_ptr_null(out);
    }
}
END_TEST

/* Two replicas flushing the same keys at once, the keys in opposite orders: every flush commits
 * (no deadlock between the two transactions) and every count is added once. */
#define FLUSH_KEYS 40
#define FLUSHES 15

struct flusher {
    psdbd_index *ix;
    int reverse;
    int failures;
    char names[FLUSH_KEYS][8];
};

static void *flush_loop(void *arg)
{
    struct flusher *f = arg;
    psdbd_stat_row rows[FLUSH_KEYS];
    for (int i = 0; i < FLUSH_KEYS; i++) {
        int k = f->reverse ? FLUSH_KEYS - 1 - i : i;
        snprintf(f->names[k], sizeof(f->names[k]), "app%02d", k);
        rows[i] = (psdbd_stat_row){
            PSDBD_STAT_RESOLVE, today, f->names[k], "gfx1", 1, 0, 0, 0, 0, NULL, {1, 0, 0}};
    }
    for (int j = 0; j < FLUSHES; j++)
        if (psdbd_index_stats_add(f->ix, rows, FLUSH_KEYS, today - 30) != PSDBD_OK)
            f->failures++;
    return NULL;
}

START_TEST(test_server_index_stats__replicas_flushing_together_add_every_count)
{
    char err[512];
    psdbd_index *other = NULL;
    struct flusher a = {pg, 0, 0, {{0}}}, b = {NULL, 1, 0, {{0}}};
    pthread_t ta, tb;
    json_t *t = NULL, *r;
    size_t i;
    today = psdbd_stats_today();
    ck_assert_msg(psdbd_index_connect(pg_url, 2, 10000, 0, &other, err, sizeof(err)) == 0, "%s",
                  err);
    b.ix = other;
    ck_assert_int_eq(pthread_create(&ta, NULL, flush_loop, &a), 0);
    ck_assert_int_eq(pthread_create(&tb, NULL, flush_loop, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ck_assert_int_eq(a.failures + b.failures, 0);
    ck_assert_int_eq(psdbd_index_stats_traffic(pg, today, today, 100, NULL, NULL, &t), PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(t, "resolves")), FLUSH_KEYS);
    json_array_foreach(json_object_get(t, "resolves"), i, r)
        ck_assert_int_eq(json_integer_value(json_object_get(r, "hits")), 2 * FLUSHES);
    json_decref(t);
    psdbd_index_close(other);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_index_stats");
    TCase *tc = tcase_create("engines");
    if (!getenv("PSDB_TEST_PG_URL")) {
        printf("server_index_stats_test: skipped: PSDB_TEST_PG_URL is not set "
               "(eval \"$(tests/pg/cluster start)\")\n");
        return 77;
    }
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_server_index_stats__engines_answer_the_same_json);
    tcase_add_test(tc, test_server_index_stats__day_keys_read_back_as_recorded);
    tcase_add_test(tc, test_server_index_stats__lookups_by_names_not_utf8_find_nothing);
    tcase_add_test(tc, test_server_index_stats__replicas_flushing_together_add_every_count);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
