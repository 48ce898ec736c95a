/* server_valuemaps_test.c - psdbd's value maps beside the store: the names start-up and gc go by,
 * one derivation however many threads ask at once, and the worker's queue. */
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "metrics.h"
#include "store.h"
#include "valuemaps.h"

static char *dir;
static psdbd_store store;

static void setup(void)
{
    char err[512];
    dir = tu_mkdtemp();
    char *data = tu_path(dir, "data");
    ck_assert_msg(psdbd_store_open(&store, data, 0, err, sizeof(err)) == 0, "%s", err);
    free(data);
}

static void teardown(void)
{
    psdbd_store_close(&store);
    tu_rmtree(dir);
    free(dir);
}

/* A PSDB of `values` values of 64 KiB stored as a blob; its digest in sha[65]. */
static void put_blob(int values, char sha[65])
{
    char *path = tu_path(dir, "in.psdb");
    psdb_app_identity id = {.desc = {.exe_filename = "game.exe",
                                     .name = "Game",
                                     .version = PSDB_VERSION(1, 0, 0, 0),
                                     .engine_name = "Engine"}};
    psdb_target t = {.family = "gfx9", .abi_version = 1};
    psdb_writer *w = NULL;
    static uint8_t buf[64 * 1024];
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    for (int k = 0; k < values; k++) {
        char key[16];
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = (uint8_t)((i * 131u + (unsigned)k * 7919u) >> 3);
        snprintf(key, sizeof(key), "k%06d", k);
        ck_assert_hr(
            psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, sizeof(buf)),
            PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    ck_assert_int_eq(psdbd_sha256_file(path, sha, NULL), 0);
    char *sub = NULL, *dst = psdbd_store_path(&store, sha);
    ck_assert_int_ge(asprintf(&sub, "%s/%.2s", store.blob_dir, sha), 0);
    mkdir(sub, 0750);
    ck_assert_int_eq(rename(path, dst), 0);
    free(sub);
    free(dst);
    free(path);
}

/* psdbd_valuemaps_derived_total{version="V"} of this process. */
static long long derived(unsigned version)
{
    char series[96], *text = psdbd_metrics_render();
    snprintf(series, sizeof(series), "psdbd_valuemaps_derived_total{version=\"%u\"} ", version);
    const char *line = strstr(text, series);
    long long n = line ? atoll(line + strlen(series)) : -1;
    free(text);
    return n;
}

START_TEST(test_server_valuemaps__names_of_maps_temporaries_and_strays)
{
    const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    char got[65], name[128];
    unsigned v = 0;
    snprintf(name, sizeof(name), "%s.valuemap", sha);
    ck_assert_int_eq(psdbd_valuemap_classify(name, got, &v), PSDBD_VALUEMAP_MAP);
    ck_assert_str_eq(got, sha);
    ck_assert_uint_eq(v, 1);
    snprintf(name, sizeof(name), "%s.v2.valuemap", sha);
    ck_assert_int_eq(psdbd_valuemap_classify(name, got, &v), PSDBD_VALUEMAP_MAP);
    ck_assert_uint_eq(v, 2);
    /* This psdbd's temporaries (mkstemp, libpsdb's .tmp) and an older psdbd's (.<pid>.<n>). */
    const char *temps[] = {".v2.valuemap.aB3xYz", ".v2.valuemap.aB3xYz.tmp", ".valuemap.4242.0",
                           ".valuemap.4242.0.tmp", ".valuemap."};
    for (size_t i = 0; i < sizeof(temps) / sizeof(temps[0]); i++) {
        snprintf(name, sizeof(name), "%s%s", sha, temps[i]);
        ck_assert_msg(psdbd_valuemap_classify(name, got, &v) == PSDBD_VALUEMAP_TEMPORARY, "%s",
                      name);
    }
    /* Not psdbd's: left alone by start-up and gc. */
    const char *strays[] = {
        "NOTES",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde.valuemap",
        "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef.valuemap",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.v3.valuemap",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.valuemapx",
        ""};
    for (size_t i = 0; i < sizeof(strays) / sizeof(strays[0]); i++)
        ck_assert_msg(psdbd_valuemap_classify(strays[i], got, &v) == PSDBD_VALUEMAP_STRAY, "%s",
                      strays[i]);
}
END_TEST

struct asker {
    psdbd_valuemaps *vm;
    const char *sha;
    unsigned version;
    pthread_barrier_t *gate;
    psdb_hr hr;
};

static void *ask(void *arg)
{
    struct asker *a = arg;
    pthread_barrier_wait(a->gate);
    a->hr = psdbd_valuemaps_ensure(a->vm, a->sha, a->version);
    return NULL;
}

START_TEST(test_server_valuemaps__concurrent_ensures_derive_each_map_once)
{
    enum { THREADS = 12 };
    char sha[65], err[256];
    put_blob(200, sha); /* 13 MB: a derivation long enough for the threads to meet it */
    psdbd_valuemaps *vm = psdbd_valuemaps_start(&store, 1, err, sizeof(err));
    ck_assert_msg(vm != NULL, "%s", err);
    long long before[2] = {derived(1), derived(2)};
    pthread_barrier_t gate;
    pthread_t th[THREADS];
    struct asker a[THREADS];
    /* Version 2: the worker (queued first) and the threads; version 1: the threads only. */
    psdbd_valuemaps_enqueue(vm, sha);
    for (unsigned version = 2; version >= 1; version--) {
        pthread_barrier_init(&gate, NULL, THREADS);
        for (int i = 0; i < THREADS; i++) {
            a[i] = (struct asker){vm, sha, version, &gate, PSDB_E_FAIL};
            ck_assert_int_eq(pthread_create(&th[i], NULL, ask, &a[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) {
            pthread_join(th[i], NULL);
            ck_assert_hr(a[i].hr, PSDB_S_OK);
        }
        pthread_barrier_destroy(&gate);
        char *p = psdbd_valuemap_path(&store, sha, version);
        ck_assert_int_eq(access(p, F_OK), 0);
        free(p);
    }
    psdbd_valuemaps_stop(vm); /* joins the worker: its derivation, if any, has ended */
    ck_assert_int_eq(derived(1) - before[0], 1);
    ck_assert_int_eq(derived(2) - before[1], 1);
}
END_TEST

START_TEST(test_server_valuemaps__a_blob_that_is_no_psdb_fails_and_leaves_nothing)
{
    char sha[65], err[256];
    put_blob(1, sha);
    char *blob = psdbd_store_path(&store, sha);
    ck_assert_int_eq(tu_write_file(blob, "not a psdb", 10), 0);
    psdbd_valuemaps *vm = psdbd_valuemaps_start(&store, 0, err, sizeof(err));
    ck_assert_ptr_nonnull(vm);
    ck_assert(PSDB_FAILED(psdbd_valuemaps_ensure(vm, sha, 2)));
    psdbd_valuemaps_stop(vm);
    /* Nothing under valuemaps/: no map, no temporary. */
    char *vd = psdbd_valuemap_dir(&store);
    int n = 0;
    DIR *d = opendir(vd);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    ck_assert_int_eq(n, 0);
    free(vd);
    free(blob);
}
END_TEST

/* The backfill gives every blob without a version 2 map one, derives no map that exists, and
 * goes past a blob that cannot have one. */
START_TEST(test_server_valuemaps__backfill_derives_the_maps_old_blobs_lack)
{
    char old1[65], old2[65], mapped[65], bad[65], err[256];
    put_blob(3, old1);
    put_blob(4, old2);
    put_blob(5, mapped);
    put_blob(6, bad);
    char *bad_blob = psdbd_store_path(&store, bad);
    ck_assert_int_eq(tu_write_file(bad_blob, "not a psdb", 10), 0);
    psdbd_valuemaps *vm = psdbd_valuemaps_start(&store, 1, err, sizeof(err));
    ck_assert_msg(vm != NULL, "%s", err);
    ck_assert_hr(psdbd_valuemaps_ensure(vm, mapped, 2), PSDB_S_OK);
    long long before = derived(2);
    char *p1 = psdbd_valuemap_path(&store, old1, 2), *p2 = psdbd_valuemap_path(&store, old2, 2);
    ck_assert_int_ne(access(p1, F_OK), 0);
    ck_assert_int_ne(access(p2, F_OK), 0);
    psdbd_valuemaps_backfill(vm);
    ck_assert_msg(tu_wait_file(p1, 60) && tu_wait_file(p2, 60),
                  "the backfill derived no map in 60 s");
    psdbd_valuemaps_stop(vm); /* joins the worker: the walk has ended or stopped */
    ck_assert_int_eq(derived(2) - before, 2);
    char *pb = psdbd_valuemap_path(&store, bad, 2);
    ck_assert_int_ne(access(pb, F_OK), 0);
    free(pb);
    free(p1);
    free(p2);
    free(bad_blob);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_valuemaps");
    TCase *tc = tcase_create("valuemaps");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_server_valuemaps__names_of_maps_temporaries_and_strays);
    tcase_add_test(tc, test_server_valuemaps__concurrent_ensures_derive_each_map_once);
    tcase_add_test(tc, test_server_valuemaps__a_blob_that_is_no_psdb_fails_and_leaves_nothing);
    tcase_add_test(tc, test_server_valuemaps__backfill_derives_the_maps_old_blobs_lack);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
