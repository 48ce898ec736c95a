/* sodb_test.c - the SODB container: header, entries in order, duplicates, validation, threads. */
#include "rt_fixture.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "format/desc.h"
#include "format/sodb.h"
#include "common/buf.h"
#include "common/hash.h"

static const uint8_t RS[] = {1, 2, 3, 4};

static psdb_app_identity identity(const char *name)
{
    psdb_app_identity id = {
        {"game.exe", name, PSDB_VERSION(1, 2, 3, 4), "engine", PSDB_VERSION(5, 0, 0, 0)}, {0}};
    for (int i = 0; i < 16; i++)
        id.app_id[i] = (uint8_t)(0xA0 + i);
    return id;
}

/* Encodes a compute pipeline whose CS is `n` bytes of value `fill`. */
static psdb__buf compute_desc(uint8_t fill, size_t n)
{
    uint8_t *cs = malloc(n);
    memset(cs, fill, n);
    psdb_compute_pipeline_desc d = {RS, sizeof(RS), {cs, n}, NULL};
    psdb__buf b = {0};
    ck_assert_hr(psdb__desc_encode_compute(&d, &b), PSDB_S_OK);
    free(cs);
    return b;
}

typedef struct seen {
    int n;
    uint32_t kinds[64];
    uint64_t versions[64];
    uint8_t keys[64][32];
    size_t sizes[64];
    int stop_after;
} seen;

static int collect(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                   size_t size, void *ctx)
{
    seen *s = ctx;
    uint8_t h[32];
    psdb__sha256(desc, size, h);
    ck_assert_mem_eq(h, key, 32);
    if (s->n < 64) {
        s->kinds[s->n] = kind;
        s->versions[s->n] = version;
        memcpy(s->keys[s->n], key, 32);
        s->sizes[s->n] = size;
    }
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

static int pragma(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int v = -1;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

START_TEST(test_sodb__write_and_read_back)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    psdb__buf a = compute_desc(1, 100), b = compute_desc(2, 50);
    psdb_graphics_pipeline_desc g = {
        .root_signature = RS, .root_signature_size = sizeof(RS), .vs = {RS, sizeof(RS)}};
    psdb__buf c = {0};
    ck_assert_hr(psdb__desc_encode_graphics(&g, &c), PSDB_S_OK);

    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_GRAPHICS, 1, c.data, c.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_FALSE);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 2, a.data, a.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, UINT64_MAX, b.data, b.len), PSDB_S_OK);
    /* The magic must match the kind. */
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_GRAPHICS, 1, a.data, a.len), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, 4, 1, a.data, a.len), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, NULL, 4), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(NULL, PSDB_SODB_COMPUTE, 1, a.data, a.len),
                 PSDB_E_INVALIDARG);

    /* Durable adds: a reader sees them while the writer is still open. */
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    seen got = {0};
    ck_assert_hr(psdb_sodb_foreach(s, collect, &got), PSDB_S_OK);
    ck_assert_int_eq(got.n, 4);
    psdb_sodb_release(s);
    psdb_sodb_writer_release(w);

    ck_assert_int_eq(pragma(path, "PRAGMA application_id"), 0x50534F44);
    ck_assert_int_eq(pragma(path, "PRAGMA user_version"), 1);
    /* Released: back to a rollback journal, the file stands alone (no -wal beside it). */
    char *wal = tu_path(dir, "app.sodb-wal");
    ck_assert_int_ne(access(wal, F_OK), 0);
    ck_assert_int_eq(
        pragma(path, "SELECT 1 FROM pragma_journal_mode WHERE journal_mode = 'delete'"), 1);
    free(wal);

    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    psdb_app_identity rid;
    ck_assert_hr(psdb_sodb_get_identity(s, &rid), PSDB_S_OK);
    ck_assert_str_eq(rid.desc.name, "Game");
    ck_assert_str_eq(rid.desc.exe_filename, "game.exe");
    ck_assert_str_eq(rid.desc.engine_name, "engine");
    ck_assert_uint_eq(rid.desc.version, PSDB_VERSION(1, 2, 3, 4));
    ck_assert_uint_eq(rid.desc.engine_version, PSDB_VERSION(5, 0, 0, 0));
    ck_assert_mem_eq(rid.app_id, id.app_id, 16);
    memset(&got, 0, sizeof(got));
    ck_assert_hr(psdb_sodb_foreach(s, collect, &got), PSDB_S_OK);
    ck_assert_int_eq(got.n, 4);
    /* Insertion order, kinds, versions (the full 64 bits survive), keys = SHA-256. */
    ck_assert_uint_eq(got.kinds[0], PSDB_SODB_COMPUTE);
    ck_assert_uint_eq(got.kinds[1], PSDB_SODB_GRAPHICS);
    ck_assert_uint_eq(got.versions[2], 2);
    ck_assert_uint_eq(got.versions[3], UINT64_MAX);
    ck_assert_mem_eq(got.keys[0], got.keys[2], 32);
    ck_assert_uint_eq(got.sizes[3], b.len);
    uint64_t count = 0;
    ck_assert_hr(psdb__sodb_count(s, &count), PSDB_S_OK);
    ck_assert_uint_eq(count, 4);
    memset(&got, 0, sizeof(got));
    got.stop_after = 2;
    ck_assert_hr(psdb_sodb_foreach(s, collect, &got), PSDB_S_FALSE);
    ck_assert_int_eq(got.n, 2);
    psdb_sodb_release(s);

    psdb__buf_free(&a);
    psdb__buf_free(&b);
    psdb__buf_free(&c);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* psdb_sodb_foreach_by_key: the same entries as the insertion-order walk, in key order (then
 * version), whatever the order of capture. */
START_TEST(test_sodb__foreach_by_key_visits_in_key_order)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    for (int i = 0; i < 24; i++) {
        psdb__buf d = compute_desc((uint8_t)(i * 7 + 1), 16 + (size_t)i);
        ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 3, d.data, d.len), PSDB_S_OK);
        if (i % 5 == 0) /* the same key again, an earlier version, added later */
            ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, d.data, d.len), PSDB_S_OK);
        psdb__buf_free(&d);
    }
    psdb_sodb_writer_release(w);
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    seen ins = {0}, ord = {0};
    ck_assert_hr(psdb_sodb_foreach(s, collect, &ins), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_foreach_by_key(s, collect, &ord), PSDB_S_OK);
    ck_assert_int_eq(ins.n, 29);
    ck_assert_int_eq(ord.n, ins.n);
    int unsorted_capture = 0;
    for (int i = 1; i < ord.n; i++) {
        int c = memcmp(ord.keys[i - 1], ord.keys[i], 32);
        ck_assert_int_le(c, 0);
        if (c == 0)
            ck_assert_uint_lt(ord.versions[i - 1], ord.versions[i]);
        unsorted_capture |= memcmp(ins.keys[i - 1], ins.keys[i], 32) > 0;
    }
    ck_assert(unsorted_capture); /* else the test would not tell the two orders apart */
    /* The same (key, version) pairs. */
    for (int i = 0; i < ins.n; i++) {
        int found = 0;
        for (int j = 0; j < ord.n && !found; j++)
            found = memcmp(ins.keys[i], ord.keys[j], 32) == 0 && ins.versions[i] == ord.versions[j];
        ck_assert(found);
    }
    seen stop = {.stop_after = 3};
    ck_assert_hr(psdb_sodb_foreach_by_key(s, collect, &stop), PSDB_S_FALSE);
    ck_assert_int_eq(stop.n, 3);
    ck_assert_hr(psdb_sodb_foreach_by_key(NULL, collect, &stop), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_foreach_by_key(s, NULL, &stop), PSDB_E_INVALIDARG);
    psdb_sodb_release(s);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_sodb__reopen_appends_same_app_only)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb");
    psdb_app_identity id = identity("Game"), other = identity("Other");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    psdb__buf a = compute_desc(1, 10), b = compute_desc(2, 10);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    w = (void *)1;
    ck_assert_hr(psdb_sodb_writer_open(path, &other, &w), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(w);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_FALSE);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, b.data, b.len), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    seen got = {0};
    ck_assert_hr(psdb_sodb_foreach(s, collect, &got), PSDB_S_OK);
    ck_assert_int_eq(got.n, 2);
    psdb_sodb_release(s);

    /* Identity rules (MODEL A2). */
    psdb_app_identity bad = identity(NULL);
    ck_assert_hr(psdb_sodb_writer_open(path, &bad, &w), PSDB_E_INVALIDARG);
    bad = identity("Game");
    bad.desc.version = 0;
    ck_assert_hr(psdb_sodb_writer_open(path, &bad, &w), PSDB_E_INVALIDARG);
    bad = identity("Game");
    bad.desc.engine_name = NULL;
    ck_assert_hr(psdb_sodb_writer_open(path, &bad, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_open(NULL, &id, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, NULL), PSDB_E_INVALIDARG);
    psdb__buf_free(&a);
    psdb__buf_free(&b);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_sodb__not_an_sodb_is_corrupt)
{
    char *dir = tu_mkdtemp();
    char *junk = tu_path(dir, "junk"), *other = tu_path(dir, "other.db");
    char *v2 = tu_path(dir, "v2.sodb"), *tampered = tu_path(dir, "t.sodb");
    char *missing = tu_path(dir, "missing.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = (void *)1;

    char bytes[8192];
    memset(bytes, 'x', sizeof(bytes));
    ck_assert_int_eq(tu_write_file(junk, bytes, sizeof(bytes)), 0);
    ck_assert_hr(psdb_sodb_open(junk, &s), PSDB_E_CACHE_CORRUPT);
    ck_assert_ptr_null(s);
    ck_assert_hr(psdb_sodb_writer_open(junk, &id, &w), PSDB_E_CACHE_CORRUPT);

    exec_sql(other, "PRAGMA application_id = 7; CREATE TABLE t (x);");
    ck_assert_hr(psdb_sodb_open(other, &s), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_sodb_writer_open(other, &id, &w), PSDB_E_CACHE_CORRUPT);

    ck_assert_hr(psdb_sodb_writer_open(v2, &id, &w), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    exec_sql(v2, "PRAGMA user_version = 2");
    ck_assert_hr(psdb_sodb_open(v2, &s), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_sodb_writer_open(v2, &id, &w), PSDB_E_CACHE_CORRUPT);

    /* A key that does not name its bytes. */
    psdb__buf a = compute_desc(3, 10);
    ck_assert_hr(psdb_sodb_writer_open(tampered, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    exec_sql(tampered, "UPDATE entries SET object_key = zeroblob(32)");
    ck_assert_hr(psdb_sodb_open(tampered, &s), PSDB_S_OK);
    seen got = {0};
    ck_assert_hr(psdb_sodb_foreach(s, collect, &got), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_sodb_foreach_by_key(s, collect, &got), PSDB_E_CACHE_CORRUPT);
    psdb_sodb_release(s);
    exec_sql(tampered, "DELETE FROM header");
    ck_assert_hr(psdb_sodb_open(tampered, &s), PSDB_E_CACHE_CORRUPT);

    ck_assert_hr(psdb_sodb_open(missing, &s), PSDB_E_IO);
    ck_assert_hr(psdb_sodb_open(NULL, &s), PSDB_E_INVALIDARG);
    psdb__buf_free(&a);
    tu_rmtree(dir);
    free(junk);
    free(other);
    free(v2);
    free(tampered);
    free(missing);
    free(dir);
}
END_TEST

/* libpsdb's embedded schema and schema/sodb.sql create the same tables. */
START_TEST(test_sodb__schema_file_matches_library)
{
    char *dir = tu_mkdtemp(), *lib = tu_path(dir, "lib.sodb"), *doc = tu_path(dir, "doc.sodb");
    char *sql = tu_read_file(PSDB_TEST_DATA "/../../schema/sodb.sql", NULL);
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    ck_assert_ptr_nonnull(sql);
    ck_assert_hr(psdb_sodb_writer_open(lib, &id, &w), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    exec_sql(doc, sql);
    ck_assert_int_eq(pragma(doc, "PRAGMA application_id"), 0x50534F44);
    const char *q = "SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_master "
                    "WHERE sql IS NOT NULL ORDER BY name)";
    sqlite3 *a = NULL, *b = NULL;
    sqlite3_stmt *sa = NULL, *sb = NULL;
    ck_assert_int_eq(sqlite3_open(lib, &a), SQLITE_OK);
    ck_assert_int_eq(sqlite3_open(doc, &b), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(a, q, -1, &sa, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(b, q, -1, &sb, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(sa), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_step(sb), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(sa, 0),
                     (const char *)sqlite3_column_text(sb, 0));
    sqlite3_finalize(sa);
    sqlite3_finalize(sb);
    sqlite3_close(a);
    sqlite3_close(b);
    free(sql);
    tu_rmtree(dir);
    free(lib);
    free(doc);
    free(dir);
}
END_TEST

typedef struct adder {
    psdb_sodb_writer *w;
    int thread;
    int added;
} adder;

static void *add_many(void *arg)
{
    adder *a = arg;
    for (int i = 0; i < 25; i++) {
        psdb__buf b = compute_desc((uint8_t)(a->thread * 25 + i), 64);
        /* Every thread also adds one description all threads share. */
        psdb__buf shared = compute_desc(0xFF, 32);
        if (psdb_sodb_writer_add(a->w, PSDB_SODB_COMPUTE, 1, b.data, b.len) == PSDB_S_OK)
            a->added++;
        if (psdb_sodb_writer_add(a->w, PSDB_SODB_COMPUTE, 1, shared.data, shared.len) == PSDB_S_OK)
            a->added++;
        psdb__buf_free(&b);
        psdb__buf_free(&shared);
    }
    return NULL;
}

START_TEST(test_sodb__concurrent_adds)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    pthread_t th[4];
    adder ad[4];
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    for (int i = 0; i < 4; i++) {
        ad[i] = (adder){w, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, add_many, &ad[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += ad[i].added;
    }
    psdb_sodb_writer_release(w);
    ck_assert_int_eq(total, 101); /* 100 distinct + the shared one exactly once */
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    uint64_t n = 0;
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 101);
    psdb_sodb_release(s);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_sodb__bulk_commit_and_discard)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "bulk.sodb"), *gone = tu_path(dir, "g.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    psdb__buf a = compute_desc(1, 10);
    uint64_t n = 9;
    ck_assert_hr(psdb__sodb_writer_open_bulk(path, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_writer_commit(w), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_writer_commit(w), PSDB_E_INVALIDARG);
    psdb_sodb_writer_release(w);
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 1);
    psdb_sodb_release(s);
    ck_assert_hr(psdb__sodb_writer_open_bulk(gone, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_OK);
    psdb_sodb_writer_release(w); /* not committed */
    ck_assert_hr(psdb_sodb_open(gone, &s), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 0);
    psdb_sodb_release(s);
    psdb__buf_free(&a);
    tu_rmtree(dir);
    free(path);
    free(gone);
    free(dir);
}
END_TEST

START_TEST(test_sodb__two_writers_one_file)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb"), *wal = tu_path(dir, "app.sodb-wal");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w1 = NULL, *w2 = NULL;
    psdb_sodb *s = NULL;
    psdb__buf a = compute_desc(1, 10), b = compute_desc(2, 10);
    uint64_t n = 0;
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w1), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w2), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w1, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w2, PSDB_SODB_COMPUTE, 1, a.data, a.len), PSDB_S_FALSE);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    psdb_sodb_writer_release(w1); /* the other writer still has the file: no wait */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert(t1.tv_sec - t0.tv_sec < 2);
    ck_assert_hr(psdb_sodb_writer_add(w2, PSDB_SODB_COMPUTE, 1, b.data, b.len), PSDB_S_OK);
    psdb_sodb_writer_release(w2);
    ck_assert_int_ne(access(wal, F_OK), 0);
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 2);
    psdb_sodb_release(s);
    psdb__buf_free(&a);
    psdb__buf_free(&b);
    tu_rmtree(dir);
    free(path);
    free(wal);
    free(dir);
}
END_TEST

/* ---- The typed adds of psdb/sodb.h ------------------------------------------------------------
 */

/* The entries of the SODB at path (the first 16), with their bytes. */
typedef struct entries {
    int n;
    uint32_t kinds[16];
    uint64_t versions[16];
    uint8_t keys[16][32];
    psdb__buf bytes[16];
} entries;

static int keep_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                      size_t size, void *ctx)
{
    entries *e = ctx;
    e->kinds[e->n] = kind;
    e->versions[e->n] = version;
    memcpy(e->keys[e->n], key, 32);
    psdb__buf_append(&e->bytes[e->n], desc, size);
    e->n++;
    return e->n == 16; /* the first 16 are kept */
}

static void read_entries(const char *path, entries *out)
{
    psdb_sodb *s = NULL;
    memset(out, 0, sizeof(*out));
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    psdb_hr hr = psdb_sodb_foreach(s, keep_entry, out);
    ck_assert(hr == PSDB_S_OK || (hr == PSDB_S_FALSE && out->n == 16));
    psdb_sodb_release(s);
}

static void free_entries(entries *e)
{
    for (int i = 0; i < e->n; i++)
        psdb__buf_free(&e->bytes[i]);
}

START_TEST(test_sodb__typed_adds_record_what_a_device_captures)
{
    char *dir = tu_mkdtemp(), *captured = tu_path(dir, "captured.sodb");
    char *recorded = tu_path(dir, "recorded.sodb");
    psdb_device_desc dd = {.adapter = rt_adapter(),
                           .identity = &rt_identity,
                           .capture_sodb_path = captured,
                           .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    psdb_device *dev = NULL;
    psdb_pipeline *p = NULL;
    psdb_state_object *so = NULL;
    psdb_sodb_writer *w = NULL;
    rt_compute c;
    rt_graphics g;
    rt_state_object rt;
    entries a, b;
    uint8_t key[32];
    rt_compute_init(&c, 1, NULL);
    rt_graphics_init(&g, 2, NULL);
    g.desc.blend.render_target[0].render_target_write_mask = PSDB_COLOR_WRITE_ENABLE_RED;
    g.desc.rasterizer.depth_bias_clamp = -0.0f; /* a float kept by its bits */
    rt_state_object_init(&rt, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 3, NULL, NULL);

    ck_assert_hr(psdb_device_create(&dd, &dev), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &p), PSDB_S_OK);
    psdb_pipeline_release(p);
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g.desc, &p), PSDB_S_OK);
    psdb_pipeline_release(p);
    ck_assert_hr(psdb_device_create_state_object(dev, &rt.desc, &so), PSDB_S_OK);
    psdb_state_object_release(so);
    psdb_device_release(dev);

    /* The same creations recorded by an engine through the public calls. */
    ck_assert_hr(psdb_sodb_writer_open(recorded, &rt_identity, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add_compute(w, 1, &c.desc), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add_graphics(w, 1, &g.desc), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add_state_object(w, 1, &rt.desc), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add_graphics(w, 1, &g.desc), PSDB_S_FALSE);
    ck_assert_hr(psdb_sodb_writer_add_graphics(w, 7, &g.desc), PSDB_S_OK); /* another version */
    psdb_sodb_writer_release(w);

    read_entries(captured, &a);
    read_entries(recorded, &b);
    ck_assert_int_eq(a.n, 3);
    ck_assert_int_eq(b.n, 4);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(a.kinds[i], b.kinds[i]);
        ck_assert_uint_eq(a.versions[i], b.versions[i]);
        ck_assert_mem_eq(a.keys[i], b.keys[i], 32);
        ck_assert_uint_eq(a.bytes[i].len, b.bytes[i].len);
        ck_assert_mem_eq(a.bytes[i].data, b.bytes[i].data, a.bytes[i].len);
    }
    ck_assert_uint_eq(b.versions[3], 7);
    /* The key calls name the entries, and the group a PSDB stores each under (the planner's). */
    psdb__plan plan = {0};
    ck_assert_hr(psdb_sodb_compute_key(&c.desc, key), PSDB_S_OK);
    ck_assert_mem_eq(key, a.keys[0], 32);
    ck_assert_hr(psdb_sodb_graphics_key(&g.desc, key), PSDB_S_OK);
    ck_assert_mem_eq(key, a.keys[1], 32);
    ck_assert_hr(psdb__plan_graphics(&g.desc, &plan), PSDB_S_OK);
    ck_assert_mem_eq(key, plan.group_key, 32);
    psdb__plan_free(&plan);
    ck_assert_hr(psdb_sodb_state_object_key(&rt.desc, key), PSDB_S_OK);
    ck_assert_mem_eq(key, a.keys[2], 32);
    /* A decoded entry is the description again: its key is the entry's. */
    psdb_sodb_entry *e = NULL;
    ck_assert_hr(psdb_sodb_decode(b.kinds[1], b.bytes[1].data, b.bytes[1].len, &e), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_graphics_key(e->graphics, key), PSDB_S_OK);
    ck_assert_mem_eq(key, b.keys[1], 32);
    psdb_sodb_entry_release(e);
    free_entries(&a);
    free_entries(&b);
    tu_rmtree(dir);
    free(captured);
    free(recorded);
    free(dir);
}
END_TEST

START_TEST(test_sodb__typed_adds_refuse_what_the_encoding_cannot_hold)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    rt_compute c;
    rt_graphics g;
    rt_state_object rt;
    uint64_t n = 1;
    uint8_t key[32];
    rt_compute_init(&c, 1, NULL);
    rt_graphics_init(&g, 1, NULL);
    /* A collection is a run-time object: the SODB cannot name it. The handle is never read. */
    rt_state_object_init(&rt, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 1, NULL,
                         (psdb_state_object *)&rt);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);

    ck_assert_hr(psdb_sodb_writer_add_compute(NULL, 1, &c.desc), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "NULL writer"));
    ck_assert_hr(psdb_sodb_writer_add_compute(w, 1, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add_graphics(w, 1, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add_state_object(w, 1, NULL), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "NULL description"));
    ck_assert_hr(psdb_sodb_writer_add_state_object(w, 1, &rt.desc), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "existing collection"));
    ck_assert_hr(psdb_sodb_state_object_key(&rt.desc, key), PSDB_E_INVALIDARG);
    c.desc.cs.code = NULL; /* with a size */
    ck_assert_hr(psdb_sodb_writer_add_compute(w, 1, &c.desc), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_compute_key(&c.desc, key), PSDB_E_INVALIDARG);
    g.desc.input_layout.num_elements = 2; /* elements NULL */
    ck_assert_hr(psdb_sodb_writer_add_graphics(w, 1, &g.desc), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_graphics_key(&g.desc, key), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_graphics_key(NULL, key), PSDB_E_INVALIDARG);
    rt_graphics_init(&g, 1, NULL);
    ck_assert_hr(psdb_sodb_graphics_key(&g.desc, NULL), PSDB_E_INVALIDARG);
    psdb_sodb_writer_release(w);

    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 0); /* nothing was recorded */
    psdb_sodb_release(s);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* Writes the same three descriptions through a bulk writer; returns it uncommitted. */
static psdb_sodb_writer *bulk_three(const char *path)
{
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    rt_compute c;
    ck_assert_hr(psdb_sodb_writer_open_ex(path, &id, PSDB_SODB_WRITER_BULK, &w), PSDB_S_OK);
    for (int i = 0; i < 3; i++) {
        rt_compute_init(&c, i, NULL);
        ck_assert_hr(psdb_sodb_writer_add_compute(w, 1, &c.desc), PSDB_S_OK);
    }
    return w;
}

static uint64_t count_of(const char *path)
{
    psdb_sodb *s = NULL;
    uint64_t n = 0;
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    psdb_sodb_release(s);
    return n;
}

START_TEST(test_sodb__bulk_writer_commits_once_and_gives_the_same_bytes)
{
    char *dir = tu_mkdtemp(), *a = tu_path(dir, "a.sodb"), *b = tu_path(dir, "b.sodb");
    char *gone = tu_path(dir, "gone.sodb"), *durable = tu_path(dir, "durable.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = bulk_three(a), *out = (psdb_sodb_writer *)&id;
    /* Nothing is visible before the commit, everything after it. */
    ck_assert_uint_eq(count_of(a), 0);
    ck_assert_hr(psdb_sodb_writer_commit(w), PSDB_S_OK);
    ck_assert_uint_eq(count_of(a), 3);
    ck_assert_hr(psdb_sodb_writer_commit(w), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "no bulk transaction"));
    psdb_sodb_writer_release(w);
    /* The same adds give the same file. */
    w = bulk_three(b);
    ck_assert_hr(psdb_sodb_writer_commit(w), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    size_t na = 0, nb = 0;
    char *ba = tu_read_file(a, &na), *bb = tu_read_file(b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(ba, bb, na);
    free(ba);
    free(bb);
    /* Released without a commit: the adds are gone, the header stays. */
    w = bulk_three(gone);
    psdb_sodb_writer_release(w);
    ck_assert_uint_eq(count_of(gone), 0);
    /* A writer without the flag has nothing to commit; an unknown flag opens nothing. */
    ck_assert_hr(psdb_sodb_writer_open_ex(durable, &id, PSDB_SODB_WRITER_DURABLE, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_commit(w), PSDB_E_INVALIDARG);
    psdb_sodb_writer_release(w);
    ck_assert_hr(psdb_sodb_writer_open_ex(durable, &id, 0x2, &out), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "unknown flags"));
    ck_assert_hr(psdb_sodb_writer_commit(NULL), PSDB_E_INVALIDARG);
    tu_rmtree(dir);
    free(a);
    free(b);
    free(gone);
    free(durable);
    free(dir);
}
END_TEST

/* Each thread adds 25 compute descriptions of its own and one graphics description all share. */
typedef struct typed_adder {
    psdb_sodb_writer *w;
    int id, added;
} typed_adder;

static void *add_typed(void *arg)
{
    typed_adder *a = arg;
    rt_compute c;
    rt_graphics g;
    rt_graphics_init(&g, 999, NULL);
    for (int i = 0; i < 25; i++) {
        rt_compute_init(&c, a->id * 1000 + i, NULL);
        if (psdb_sodb_writer_add_compute(a->w, 1, &c.desc) == PSDB_S_OK)
            a->added++;
        if (psdb_sodb_writer_add_graphics(a->w, 1, &g.desc) == PSDB_S_OK)
            a->added++;
    }
    return NULL;
}

START_TEST(test_sodb__typed_adds_from_many_threads)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "app.sodb");
    psdb_app_identity id = identity("Game");
    psdb_sodb_writer *w = NULL;
    pthread_t th[4];
    typed_adder ad[4];
    entries e;
    int total = 0;
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    for (int i = 0; i < 4; i++) {
        ad[i] = (typed_adder){w, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, add_typed, &ad[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += ad[i].added;
    }
    psdb_sodb_writer_release(w);
    ck_assert_int_eq(total, 101); /* 100 distinct + the shared one exactly once */
    /* Every entry is whole: its key names its bytes (checked by the reader) and it decodes. */
    psdb_sodb *s = NULL;
    uint64_t n = 0;
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb__sodb_count(s, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 101);
    psdb_sodb_release(s);
    read_entries(path, &e); /* the first 16 */
    for (int i = 0; i < e.n; i++) {
        psdb_sodb_entry *d = NULL;
        ck_assert_hr(psdb_sodb_decode(e.kinds[i], e.bytes[i].data, e.bytes[i].len, &d), PSDB_S_OK);
        psdb_sodb_entry_release(d);
    }
    free_entries(&e);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sodb");
    TCase *tc = tcase_create("sodb");
    tcase_add_test(tc, test_sodb__write_and_read_back);
    tcase_add_test(tc, test_sodb__foreach_by_key_visits_in_key_order);
    tcase_add_test(tc, test_sodb__reopen_appends_same_app_only);
    tcase_add_test(tc, test_sodb__not_an_sodb_is_corrupt);
    tcase_add_test(tc, test_sodb__schema_file_matches_library);
    tcase_add_test(tc, test_sodb__concurrent_adds);
    tcase_add_test(tc, test_sodb__bulk_commit_and_discard);
    tcase_add_test(tc, test_sodb__two_writers_one_file);
    tcase_add_test(tc, test_sodb__typed_adds_record_what_a_device_captures);
    tcase_add_test(tc, test_sodb__typed_adds_refuse_what_the_encoding_cannot_hold);
    tcase_add_test(tc, test_sodb__bulk_writer_commits_once_and_gives_the_same_bytes);
    tcase_add_test(tc, test_sodb__typed_adds_from_many_threads);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
