/* check.c - `psdbd check`: whether the index and the blob store agree. */
#include "admin_int.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common.h"

struct check {
    const psdbd_store *store;
    sqlite3 *db;
    sqlite3_stmt *row; /* blobs row of this digest */
    FILE *out;         /* findings: stdout, or stderr when stdout carries JSON */
    int deep, json;
    uint64_t problems, psdbs, blobs, files, orphans, strays;
    uint64_t old_orphans; /* unindexed and older than ADMIN_LOST_INDEX_MIN_AGE */
    int64_t old_before;
};

static void problem(struct check *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct check *k, const char *fmt, ...)
{
    va_list ap;
    fputs("problem: ", k->out);
    va_start(ap, fmt);
    vfprintf(k->out, fmt, ap);
    va_end(ap);
    fputc('\n', k->out);
    k->problems++;
}

static int check_orphan(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct check *k = ctx;
    (void)size;
    k->files++;
    sqlite3_reset(k->row);
    sqlite3_bind_text(k->row, 1, sha, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(k->row) != SQLITE_ROW) {
        k->orphans++;
        if (mtime < k->old_before)
            k->old_orphans++;
        fprintf(k->out, "note: blob %s is not indexed (psdbd gc removes it)\n", sha);
    }
    sqlite3_reset(k->row);
    return 0;
}

static void check_stray(const char *path, void *ctx)
{
    struct check *k = ctx;
    k->strays++;
    admin_note_stray(path, k->json);
}

static void check_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd check --data-dir DIR [--deep] [--json]\n\n"
           "Checks that the index and the blob store agree: SQLite integrity, every indexed blob\n"
           "present with its size, every PSDB's blob indexed. --deep also recomputes every\n"
           "blob's SHA-256 and runs a full SQLite integrity check. A missing index, a file that\n"
           "is not a psdbd index, and an index with no PSDB beside blob files of which some are\n"
           "older than an hour (it looks lost) are problems too. Exit status 1 on a problem.\n");
}

static int check_option(int val, const char *arg, void *ctx)
{
    (void)val; /* --deep is the only one */
    (void)arg;
    ((struct check *)ctx)->deep = 1;
    return 0;
}

/* A missing or foreign index is the worst finding, reported like the others. */
static void report_unopenable(int json, const char *err)
{
    fprintf(json ? stderr : stdout, "problem: %s\n", err);
    if (json) {
        json_t *o = json_pack("{s:b, s:I, s:s}", "ok", 0, "problems", (json_int_t)1, "index", err);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("check: FAILED: the index cannot be opened, 1 problem\n");
    }
}

/* SQLite's own check (quick, or full with --deep). */
static void check_integrity(struct check *k)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(k->db, k->deep ? "PRAGMA integrity_check" : "PRAGMA quick_check", -1,
                           &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *msg = (const char *)sqlite3_column_text(st, 0);
            if (msg && strcmp(msg, "ok") != 0)
                problem(k, "index: %s", msg);
        }
    } else {
        problem(k, "index: %s", sqlite3_errmsg(k->db));
    }
    sqlite3_finalize(st);
}

/* Every PSDB names an indexed blob of its size (foreign keys are enforced, checked here anyway);
 * counts the PSDBs. */
static void check_psdbs(struct check *k)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(k->db,
                           "SELECT p.id, p.sha256 FROM psdbs p LEFT JOIN blobs b ON b.sha256 = "
                           "p.sha256 WHERE b.sha256 IS NULL OR b.size != p.size",
                           -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW)
            problem(k, "psdb %lld names blob %s, which is not indexed with its size",
                    (long long)sqlite3_column_int64(st, 0), sqlite3_column_text(st, 1));
    }
    sqlite3_finalize(st);
    st = NULL;
    sqlite3_prepare_v2(k->db, "SELECT count(*) FROM psdbs", -1, &st, NULL);
    if (st && sqlite3_step(st) == SQLITE_ROW)
        k->psdbs = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
}

/* One indexed blob is present, whole, and (deep) has the bytes its name says. */
static void check_blob(struct check *k, const char *sha, uint64_t want)
{
    uint64_t got = 0;
    int fd = -1, e;
    char actual[65];
    if (!sha || !psdbd_is_digest(sha)) {
        problem(k, "blobs row with a malformed digest");
        return;
    }
    if ((e = psdbd_store_open_blob(k->store, sha, &fd, &got)) != 0) {
        problem(k, "blob %s is indexed but %s", sha, e == ENOENT ? "missing" : strerror(e));
        return;
    }
    close(fd);
    if (got != want) {
        problem(k, "blob %s has %llu bytes, the index says %llu", sha, (unsigned long long)got,
                (unsigned long long)want);
        return;
    }
    if (k->deep) {
        char *p = psdbd_store_path(k->store, sha);
        e = psdbd_sha256_file(p, actual, NULL);
        free(p);
        if (e != 0 || strcmp(actual, sha) != 0)
            problem(k, "blob %s: %s", sha, e ? strerror(e) : "its bytes do not hash to its name");
    }
}

static void check_blobs(struct check *k)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(k->db, "SELECT sha256, size FROM blobs", -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            k->blobs++;
            check_blob(k, (const char *)sqlite3_column_text(st, 0),
                       (uint64_t)sqlite3_column_int64(st, 1));
        }
    }
    sqlite3_finalize(st);
}

static void check_report(const struct check *k)
{
    if (k->json) {
        json_t *o =
            json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:b}", "ok", k->problems == 0, "problems",
                      (json_int_t)k->problems, "psdbs", (json_int_t)k->psdbs, "blobs",
                      (json_int_t)k->blobs, "unindexed_files", (json_int_t)k->orphans, "strays",
                      (json_int_t)k->strays, "deep", k->deep);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("check: %s: %llu psdbs, %llu blobs, %llu unindexed files, %llu problems\n",
               k->problems ? "FAILED" : "ok", (unsigned long long)k->psdbs,
               (unsigned long long)k->blobs, (unsigned long long)k->orphans,
               (unsigned long long)k->problems);
    }
}

int psdbd_cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {{"deep", no_argument, NULL, 'D'}, {NULL, 0, NULL, 0}};
    admin_args a = {0};
    int rc = 1;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    struct check k = {0};
    char err[1024];
    if ((rc = admin_parse("check", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, check_option, &k,
                          check_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    k.json = a.json;
    k.out = k.json ? stderr : stdout;
    if (psdbd_store_open(&store, a.dir, 0, err, sizeof(err)) != 0) {
        rc = admin_fail("check", "%s", err);
        goto cleanup;
    }
    if (psdbd_data_open_index(&store, 0, &ix, err, sizeof(err)) != 0) {
        report_unopenable(k.json, err);
        goto cleanup;
    }
    k.store = &store;
    k.db = psdbd_index_db(ix);
    k.old_before = (int64_t)time(NULL) - ADMIN_LOST_INDEX_MIN_AGE;
    /* One read transaction: a consistent snapshot even while a server publishes. */
    sqlite3_exec(k.db, "BEGIN", NULL, NULL, NULL);
    check_integrity(&k);
    check_psdbs(&k);
    check_blobs(&k);
    if (sqlite3_prepare_v2(k.db, "SELECT 1 FROM blobs WHERE sha256 = ?1", -1, &k.row, NULL) ==
        SQLITE_OK)
        psdbd_store_walk(&store, check_orphan, check_stray, &k);
    sqlite3_exec(k.db, "COMMIT", NULL, NULL, NULL);
    /* An index that lost its rows reads as "every blob unindexed": that is a problem, not a
     * note, since gc would then delete them all. Young ones alone are a killed first publish. */
    if (k.psdbs == 0 && k.old_orphans > 0)
        problem(&k,
                "the index has no PSDBs but blobs/ holds %llu blob files (%llu older than an "
                "hour): it looks lost; restore it (psdbd restore) before running psdbd gc",
                (unsigned long long)k.orphans, (unsigned long long)k.old_orphans);
    check_report(&k);
    rc = k.problems ? 1 : 0;
cleanup:
    sqlite3_finalize(k.row);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(a.dir);
    return rc;
}
