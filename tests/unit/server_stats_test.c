/* server_stats_test.c - psdbd's demand recording: in-memory counts, the bounds (keys and bytes in
 * memory, names and bytes per day in the index, names never kept) with the day's aggregate of
 * what is over them, flushes (adding up, kept on failure, the last one at free), retention, the
 * reports and the /metrics series. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common.h"
#include "index.h"
#include "index_stats.h"
#include "stats.h"

static char *dir, *path;
static psdbd_index *ix;

static void setup(void)
{
    char err[512];
    dir = tu_mkdtemp();
    path = tu_path(dir, "index.sqlite");
    ck_assert_msg(psdbd_index_create(path, &ix, err, sizeof(err)) == 0, "%s", err);
}

static void teardown(void)
{
    psdbd_index_close(ix);
    ix = NULL;
    tu_rmtree(dir);
    free(dir);
    free(path);
}

static psdbd_stats *started_with(const psdbd_stats_options *o)
{
    char err[256];
    psdbd_stats *st = psdbd_stats_create(o);
    ck_assert_msg(psdbd_stats_start(st, ix, err, sizeof(err)) == 0, "%s", err);
    return st;
}

static psdbd_stats *started(unsigned max_keys, unsigned retention, unsigned top)
{
    psdbd_stats_options o = {
        .flush_interval = 3600, .retention_days = retention, .max_keys = max_keys, .top_apps = top};
    return started_with(&o);
}

/* An integer from one SQL query on a connection of its own (what another process sees). */
static long long sql_int(const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    long long v = -1;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    if (sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

static void sql_exec(const char *sql)
{
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
}

static void miss(psdbd_stats *st, int64_t day, const char *app, uint64_t lo, uint64_t hi)
{
    psdbd_stats_resolve(st, day, app, 1, "gfx9", 0, lo, hi, 0, 0);
}

START_TEST(test_server_stats__counts_add_up_across_flushes)
{
    psdbd_stats *st = started(1000, 30, 10);
    int64_t today = psdbd_stats_today();
    json_t *cov = NULL, *t = NULL;
    for (int i = 0; i < 3; i++)
        miss(st, today, "Game", 2, 3);
    psdbd_stats_resolve(st, today, "Game", 1, "gfx9", 1, 2, 3, 0, 0);
    /* One key per (app, version, family) for hits and misses, one per miss shape. */
    ck_assert_uint_eq(psdbd_stats_held(st), 2);
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_misses"), 0); /* nothing before a flush */
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_uint_eq(psdbd_stats_held(st), 0);
    miss(st, today, "Game", 2, 3);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(psdbd_index_stats_coverage(ix, "Game", today, 10, &cov), PSDBD_OK);
    json_t *m = json_array_get(json_object_get(cov, "missing"), 0);
    ck_assert_int_eq(json_array_size(json_object_get(cov, "missing")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "requests")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "abi_min")), 2);
    ck_assert(json_is_null(json_object_get(m, "profile_version")));
    ck_assert_int_eq(psdbd_index_stats_traffic(ix, today, today, 100, NULL, NULL, &t), PSDBD_OK);
    json_t *r = json_array_get(json_object_get(t, "resolves"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "hits")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "misses")), 4);
    json_decref(cov);
    json_decref(t);
    psdbd_stats_free(st);
}
END_TEST

START_TEST(test_server_stats__key_cap_counts_dropped_and_bounds_memory)
{
    psdbd_stats *st = started(2, 30, 10);
    int64_t today = psdbd_stats_today();
    miss(st, today, "A", 1, 1); /* two keys: the resolve and the miss */
    miss(st, today, "B", 1, 1); /* both new: no room, summed in the day's aggregate */
    miss(st, today, "A", 1, 1); /* known keys still count */
    ck_assert_uint_eq(psdbd_stats_held(st), 3); /* A's two keys and the aggregate */
    ck_assert_uint_eq(psdbd_stats_dropped(st), 2);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(sql_int("SELECT requests FROM stats_misses WHERE app = 'A'"), 2);
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_misses WHERE app = 'B'"), 0);
    /* B's miss is not lost: it is in the day's aggregate, as a miss and a miss's request. */
    ck_assert_int_eq(sql_int("SELECT misses * 100 + requests * 10 + hits FROM stats_other"), 110);
    miss(st, today, "B", 1, 1); /* a flush makes room again */
    ck_assert_uint_eq(psdbd_stats_held(st), 2);
    psdbd_stats_free(st);
}
END_TEST

START_TEST(test_server_stats__names_not_utf8_or_too_long_are_never_kept)
{
    psdbd_stats *st = started(1000, 30, 10);
    int64_t today = psdbd_stats_today();
    char *long_name = malloc(PSDBD_STATS_NAME_MAX + 2);
    memset(long_name, 'x', PSDBD_STATS_NAME_MAX + 1);
    long_name[PSDBD_STATS_NAME_MAX + 1] = '\0';
    miss(st, today, "bad\xff", 1, 1);
    miss(st, today, "overlong\xc0\xaf", 1, 1);
    miss(st, today, "surrogate\xed\xa0\x80", 1, 1);
    miss(st, today, long_name, 1, 1);
    psdbd_stats_resolve(st, today, "Game", 1, "fam\xfe", 0, 1, 1, 0, 0);
    psdbd_stats_resolve(st, today, "Rtl\xe2\x80\xae", 1, "gfx9", 1, 1, 1, 0, 0); /* U+202E */
    ck_assert_uint_eq(psdbd_stats_held(st), 1); /* only the day's aggregate */
    ck_assert_uint_eq(psdbd_stats_dropped(st), 6);
    long_name[PSDBD_STATS_NAME_MAX] = '\0'; /* exactly the limit is kept, as is UTF-8 */
    miss(st, today, long_name, 1, 1);
    miss(st, today, "Spiel \xc3\xbc \xe2\x82\xac \xf0\x9f\x8e\xae", 1, 1);
    ck_assert_uint_eq(psdbd_stats_held(st), 5);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    json_t *x = NULL;
    ck_assert_int_eq(psdbd_index_stats_missing(ix, today, today, 10, NULL, NULL, &x), PSDBD_OK);
    ck_assert_int_eq(json_array_size(json_object_get(x, "missing")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(x, "other_requests")), 5);
    json_decref(x);
    ck_assert_int_eq(sql_int("SELECT hits * 100 + misses * 10 + requests FROM stats_other"), 155);
    free(long_name);
    psdbd_stats_free(st);
}
END_TEST

/* The memory bound between two flushes is in bytes: however long the names a flood sends, the
 * held keys stay within max_memory and what did not fit is in the day's aggregate. */
START_TEST(test_server_stats__memory_bound_in_bytes_folds_the_rest)
{
    psdbd_stats_options o = {.flush_interval = 3600,
                             .retention_days = 30,
                             .max_keys = 100000,
                             .top_apps = 10,
                             .max_memory = 16384};
    psdbd_stats *st = started_with(&o);
    int64_t today = psdbd_stats_today();
    char name[PSDBD_STATS_NAME_MAX + 1];
    for (int i = 0; i < 2000; i++) {
        memset(name, 'a' + i % 26, PSDBD_STATS_NAME_MAX);
        snprintf(name, sizeof(name), "%05d", i);
        name[5] = 'x'; /* the digits, then a full-length tail */
        name[PSDBD_STATS_NAME_MAX] = '\0';
        miss(st, today, name, 1, 1);
    }
    ck_assert_uint_le(psdbd_stats_held_bytes(st), 16384 + 1024); /* + the aggregate entry */
    ck_assert_uint_lt(psdbd_stats_held(st), 60);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_uint_eq(psdbd_stats_held_bytes(st), 0);
    /* Every miss is counted once: by name, or in the aggregate. */
    ck_assert_int_eq(sql_int("SELECT (SELECT sum(misses) FROM stats_resolves) + "
                             "(SELECT misses FROM stats_other)"),
                     2000);
    ck_assert_int_eq(sql_int("SELECT (SELECT sum(requests) FROM stats_misses) + "
                             "(SELECT requests FROM stats_other)"),
                     2000);
    psdbd_stats_free(st);
}
END_TEST

/* The day's bounds in the index: at most max_names distinct application and family names, at
 * most max_day_bytes of keys; over them a count goes to the day's aggregate, a key stored earlier
 * that day is still added to, and a resolve with hits (only a published PSDB is hit) is kept. */
START_TEST(test_server_stats__day_caps_names_and_bytes_across_flushes)
{
    psdbd_stats_options o = {.flush_interval = 3600,
                             .retention_days = 30,
                             .max_keys = 100000,
                             .top_apps = 10,
                             .max_names = 10};
    psdbd_stats *st = started_with(&o);
    int64_t today = psdbd_stats_today();
    char name[32];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "Flood%02d", i);
        miss(st, today, name, 1, 1);
    }
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    /* "gfx9" and nine applications. */
    ck_assert_int_eq(sql_int("SELECT count(DISTINCT app) FROM stats_resolves"), 9);
    ck_assert_int_eq(sql_int("SELECT count(DISTINCT app) FROM stats_misses"), 9);
    ck_assert_int_eq(sql_int("SELECT misses FROM stats_other"), 41);
    /* A later flush of the same day: stored keys are added to, new names still go nowhere. */
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "Flood%02d", i);
        miss(st, today, name, 1, 1);
    }
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(sql_int("SELECT count(DISTINCT app) FROM stats_resolves"), 9);
    ck_assert_int_eq(sql_int("SELECT min(misses) * 10 + max(misses) FROM stats_resolves"), 22);
    ck_assert_int_eq(sql_int("SELECT misses FROM stats_other"), 82);
    /* A hit is kept past the cap. */
    psdbd_stats_resolve(st, today, "Published", 1, "gfx1", 1, 1, 1, 0, 0);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(sql_int("SELECT hits FROM stats_resolves WHERE app = 'Published'"), 1);
    /* Another day has a budget of its own. */
    miss(st, today - 1, "Yesterday", 1, 1);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_misses WHERE app = 'Yesterday'"), 1);
    psdbd_stats_free(st);

    /* The byte budget: one name, distinct miss shapes (ABI ranges), each key costing twice its
     * names plus 128 bytes. */
    psdbd_stats_options b = {.flush_interval = 3600,
                             .retention_days = 30,
                             .max_keys = 100000,
                             .top_apps = 10,
                             .max_day_bytes = 4096};
    sql_exec("DELETE FROM stats_resolves; DELETE FROM stats_misses; DELETE FROM stats_other");
    st = started_with(&b);
    for (int i = 0; i < 500; i++)
        miss(st, today, "Shapes", 1, 1 + (uint64_t)i);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    /* (2 * (6 + 4) + 128) = 148 bytes a key: 27 keys in 4096 bytes, the resolve key among them. */
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_misses") +
                         sql_int("SELECT count(*) FROM stats_resolves"),
                     4096 / 148);
    ck_assert_int_eq(sql_int("SELECT (SELECT sum(requests) FROM stats_misses) + "
                             "(SELECT requests FROM stats_other)"),
                     500);
    psdbd_stats_free(st);
}
END_TEST

/* A restart does not grant a new budget: the recorder reads what the index holds of the day
 * before it admits a new key of it. */
START_TEST(test_server_stats__restart_keeps_the_days_budget)
{
    psdbd_stats_options o = {.flush_interval = 3600,
                             .retention_days = 30,
                             .max_keys = 100000,
                             .top_apps = 10,
                             .max_names = 5};
    psdbd_stats *st = started_with(&o);
    int64_t today = psdbd_stats_today();
    char name[32];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "First%d", i);
        miss(st, today, name, 1, 1);
    }
    psdbd_stats_free(st); /* flushes: gfx9 and 4 applications, the cap */
    ck_assert_int_eq(sql_int("SELECT count(DISTINCT app) FROM stats_misses"), 4);
    st = started_with(&o);
    miss(st, today, "Second", 1, 1);
    miss(st, today, "First0", 1, 1); /* stored before the restart: added to */
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_misses WHERE app = 'Second'"), 0);
    ck_assert_int_eq(sql_int("SELECT requests FROM stats_misses WHERE app = 'First0'"), 2);
    ck_assert_int_eq(sql_int("SELECT misses FROM stats_other"), 1);
    psdbd_stats_free(st);
}
END_TEST

START_TEST(test_server_stats__failed_flush_keeps_the_counts)
{
    psdbd_stats *st = started(1000, 30, 10);
    int64_t today = psdbd_stats_today();
    miss(st, today, "Game", 4, 5);
    sql_exec("ALTER TABLE stats_misses RENAME TO stats_misses_away");
    ck_assert_int_eq(psdbd_stats_flush(st), -1);
    ck_assert_uint_eq(psdbd_stats_held(st), 2); /* put back for the next flush */
    miss(st, today, "Game", 4, 5);
    sql_exec("ALTER TABLE stats_misses_away RENAME TO stats_misses");
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    ck_assert_int_eq(sql_int("SELECT requests FROM stats_misses"), 2);
    ck_assert_int_eq(sql_int("SELECT misses FROM stats_resolves"), 2);
    psdbd_stats_free(st);
}
END_TEST

START_TEST(test_server_stats__free_flushes_what_it_holds)
{
    psdbd_stats *st = started(1000, 30, 10);
    int64_t today = psdbd_stats_today();
    char sha[65];
    memset(sha, 'a', 64);
    sha[64] = '\0';
    miss(st, today, "Game", 1, 2);
    psdbd_stats_download(st, today, sha, "Game", 1, 1000);
    psdbd_stats_download(st, today, sha, "Game", 0, 10);
    psdbd_stats_download(st, today, "not-a-digest", "Game", 1, 5); /* never recorded */
    psdbd_stats_free(st);                                          /* no explicit flush */
    ck_assert_int_eq(sql_int("SELECT requests FROM stats_misses"), 1);
    ck_assert_int_eq(sql_int("SELECT complete * 1000000 + partial * 10000 + bytes FROM "
                             "stats_downloads"),
                     1000000 + 10000 + 1010);
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_downloads"), 1);
}
END_TEST

START_TEST(test_server_stats__retention_deletes_old_days)
{
    psdbd_stats *st = started(1000, 5, 10);
    int64_t today = psdbd_stats_today();
    miss(st, today - 10, "Game", 1, 1);
    miss(st, today - 5, "Game", 1, 1);
    miss(st, today - 4, "Game", 1, 1);
    miss(st, today, "Game", 1, 1);
    ck_assert_int_eq(psdbd_stats_flush(st), 0);
    /* Five days kept: today and the four before it. */
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_misses"), 2);
    ck_assert_int_eq(sql_int("SELECT count(*) FROM stats_resolves"), 2);
    char q[128];
    snprintf(q, sizeof(q), "SELECT min(day) FROM stats_misses");
    ck_assert_int_eq(sql_int(q), today - 4);
    psdbd_stats_free(st);
}
END_TEST

START_TEST(test_server_stats__metrics_name_top_apps_and_fold_the_rest)
{
    psdbd_stats *st = started(1000, 30, 1);
    int64_t today = psdbd_stats_today();
    char *text = NULL;
    size_t len = 0;
    for (int i = 0; i < 3; i++)
        psdbd_stats_resolve(st, today, "Big \"Game\"", 1, "gfx9", 1, 1, 1, 0, 0);
    miss(st, today, "Small", 1, 1);
    miss(st, today, "Tiny", 1, 1);
    FILE *f = open_memstream(&text, &len);
    psdbd_stats_render_metrics(st, f);
    fclose(f);
    ck_assert_ptr_nonnull(
        strstr(text, "psdbd_demand_resolves_total{app=\"Big \\\"Game\\\"\",result=\"hit\"} 3\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "psdbd_demand_resolves_total{app=\"other\",result=\"miss\"} 2\n"));
    ck_assert_ptr_null(strstr(text, "Small"));
    ck_assert_ptr_null(strstr(text, "Tiny"));
    free(text);
    psdbd_stats_free(st);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_stats");
    TCase *tc = tcase_create("stats");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_server_stats__counts_add_up_across_flushes);
    tcase_add_test(tc, test_server_stats__key_cap_counts_dropped_and_bounds_memory);
    tcase_add_test(tc, test_server_stats__names_not_utf8_or_too_long_are_never_kept);
    tcase_add_test(tc, test_server_stats__memory_bound_in_bytes_folds_the_rest);
    tcase_add_test(tc, test_server_stats__day_caps_names_and_bytes_across_flushes);
    tcase_add_test(tc, test_server_stats__restart_keeps_the_days_budget);
    tcase_add_test(tc, test_server_stats__failed_flush_keeps_the_counts);
    tcase_add_test(tc, test_server_stats__free_flushes_what_it_holds);
    tcase_add_test(tc, test_server_stats__retention_deletes_old_days);
    tcase_add_test(tc, test_server_stats__metrics_name_top_apps_and_fold_the_rest);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
