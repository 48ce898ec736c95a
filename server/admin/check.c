/* check.c - `psdbd check`: whether the index and the blob store agree. */
#include "admin_int.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/valuemap.h"

#include "common.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/status_map.h"
#include "valuemaps.h"

struct check {
    const psdbd_store *store;
    psdbd_index *ix;
    FILE *out; /* findings: stdout, or stderr when stdout carries JSON; NULL: counted only (gc) */
    int deep, json;
    uint64_t problems, psdbs, blobs, files, orphans, strays;
    uint64_t maps, orphan_maps; /* files of valuemaps/ that are maps, and those without a blob */
    uint64_t old_orphans;       /* unindexed and older than ADMIN_LOST_INDEX_MIN_AGE */
    int64_t old_before;
    char first[1024]; /* the first problem, for a caller that reports one line (gc) */
};

static void problem(struct check *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct check *k, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (k->problems++ == 0)
        snprintf(k->first, sizeof(k->first), "%s", line);
    if (k->out)
        fprintf(k->out, "problem: %s\n", line);
}

static void note(struct check *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct check *k, const char *fmt, ...)
{
    va_list ap;
    if (!k->out)
        return;
    fputs("note: ", k->out);
    va_start(ap, fmt);
    vfprintf(k->out, fmt, ap);
    va_end(ap);
    fputc('\n', k->out);
}

static int check_orphan(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct check *k = ctx;
    (void)size;
    psdbd_rc rc;
    k->files++;
    if ((rc = psdbd_index_blob_indexed(k->ix, sha)) == PSDBD_NOT_FOUND) {
        k->orphans++;
        if (mtime < k->old_before)
            k->old_orphans++;
        note(k, "blob %s is not indexed (psdbd gc removes it)", sha);
    } else if (rc != PSDBD_OK) {
        problem(k, "index: cannot look up blob %s", sha);
    }
    return 0;
}

static void check_stray(const char *path, void *ctx)
{
    struct check *k = ctx;
    k->strays++;
    if (k->out)
        admin_note_stray(path, k->json);
}

static void check_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd check --data-dir DIR [--index URL] [--deep] [--json]\n\n"
           "Checks that the index and the blob store agree: SQLite integrity (PostgreSQL: its\n"
           "schema version), every indexed blob\n"
           "present with its size, every PSDB's blob indexed. --deep also recomputes every\n"
           "blob's SHA-256 and runs a full SQLite integrity check. A missing index, a file that\n"
           "is not a psdbd index, and an index with no PSDB beside blob files of which some are\n"
           "older than an hour (it looks lost) are problems too. Value maps (valuemaps/): one\n"
           "without its blob is a note (psdbd gc removes it); with --deep, one whose header does\n"
           "not describe its blob is a problem. Exit status 1 on a problem. psdbd gc removes\n"
           "nothing while check (without --deep) finds a problem.\n");
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

static void integrity_problem(const char *msg, void *ctx)
{
    problem(ctx, "index: %s", msg);
}

/* The engine's own check (SQLite: quick, or full with --deep). */
static void check_integrity(struct check *k)
{
    if (psdbd_index_integrity(k->ix, k->deep, integrity_problem, k) != PSDBD_OK && k->problems == 0)
        problem(k, "index: the integrity check failed (the log above says why)");
}

static void unbacked_psdb(int64_t id, const char *sha256, void *ctx)
{
    problem(ctx, "psdb %lld names blob %s, which is not indexed with its size", (long long)id,
            sha256);
}

/* Every PSDB names an indexed blob of its size; counts the PSDBs. */
static void check_psdbs(struct check *k)
{
    int64_t n = 0;
    if (psdbd_index_each_unbacked_psdb(k->ix, unbacked_psdb, k) != PSDBD_OK)
        problem(k, "index: cannot read the psdbs (the log above says why)");
    if (psdbd_index_count_psdbs(k->ix, &n) == PSDBD_OK)
        k->psdbs = (uint64_t)n;
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
        problem(k, "blob %s is indexed but %s", sha,
                psdb__errno_is(e, PSDB__ERRNO_ABSENT) ? "missing" : strerror(e));
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

static void indexed_blob(const char *sha256, uint64_t size, void *ctx)
{
    struct check *k = ctx;
    k->blobs++;
    check_blob(k, sha256, size);
}

static void check_blobs(struct check *k)
{
    if (psdbd_index_each_blob(k->ix, indexed_blob, k) != PSDBD_OK)
        problem(k, "index: cannot read the blobs (the log above says why)");
}

/* One map of valuemaps/: its blob exists, and (deep) its header describes that blob: magic,
 * reserved field zero, the version of its name, the blob's size and SHA-256, read by libpsdb's
 * value-map reader. A map
 * of other bytes would be served for this blob, and launchers would fall back to full downloads. */
static void check_valuemap(struct check *k, const char *dir, const char *name, const char *sha,
                           unsigned version)
{
    char *blob = psdbd_store_path(k->store, sha), *path = NULL, named[65];
    psdb_value_map_info info;
    struct stat bs;
    k->maps++;
    if (stat(blob, &bs) != 0) {
        k->orphan_maps++;
        note(k, "value map valuemaps/%s has no blob (psdbd gc removes it)", name);
        goto cleanup;
    }
    if (!k->deep)
        goto cleanup;
    path = xasprintf("%s/%s", dir, name);
    int read = PSDB_SUCCEEDED(psdb_value_map_read_info(path, &info));
    if (read)
        psdb__hex(info.psdb_sha256, 32, named);
    if (!read || info.version != version || info.psdb_size != (uint64_t)bs.st_size ||
        strcmp(named, sha) != 0) {
        problem(k,
                "value map valuemaps/%s does not describe blob %s (remove it: psdbd derives it "
                "again on the next request)",
                name, sha);
    }
cleanup:
    free(path);
    free(blob);
}

static void check_valuemaps(struct check *k)
{
    char *dir = psdbd_valuemap_dir(k->store), sha[65];
    unsigned version = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d && !psdb__errno_is(errno, PSDB__ERRNO_ABSENT))
        problem(k, "cannot read %s: %s", dir, strerror(errno));
    while (d && (e = readdir(d)) != NULL)
        if (psdbd_valuemap_classify(e->d_name, sha, &version) == PSDBD_VALUEMAP_MAP)
            check_valuemap(k, dir, e->d_name, sha, version);
    if (d)
        closedir(d);
    free(dir);
}

static void check_report(const struct check *k)
{
    if (k->json) {
        json_t *o = json_pack(
            "{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "ok", k->problems == 0, "problems",
            (json_int_t)k->problems, "psdbs", (json_int_t)k->psdbs, "blobs", (json_int_t)k->blobs,
            "unindexed_files", (json_int_t)k->orphans, "strays", (json_int_t)k->strays, "valuemaps",
            (json_int_t)k->maps, "orphan_valuemaps", (json_int_t)k->orphan_maps, "deep", k->deep);
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

/* Every check, the index's in one read snapshot (consistent even while a server publishes). */
static void check_run(struct check *k)
{
    k->old_before = (int64_t)time(NULL) - ADMIN_LOST_INDEX_MIN_AGE;
    if (psdbd_index_snapshot(k->ix, 1) != PSDBD_OK)
        problem(k, "index: cannot begin a read snapshot (the log above says why)");
    check_integrity(k);
    check_psdbs(k);
    check_blobs(k);
    psdbd_store_walk(k->store, check_orphan, check_stray, k);
    psdbd_index_snapshot(k->ix, 0);
    check_valuemaps(k);
    /* An index that lost its rows reads as "every blob unindexed": that is a problem, not a
     * note, since gc would then delete them all. Young ones alone are a killed first publish. */
    if (k->psdbs == 0 && k->old_orphans > 0)
        problem(k,
                "the index has no PSDBs but blobs/ holds %llu blob files (%llu older than an "
                "hour): it looks lost; restore it (psdbd restore) before running psdbd gc",
                (unsigned long long)k->orphans, (unsigned long long)k->old_orphans);
}

uint64_t admin_check_problems(const psdbd_store *store, psdbd_index *ix, char *first,
                              size_t first_size)
{
    struct check k = {0};
    k.store = store;
    k.ix = ix;
    check_run(&k);
    snprintf(first, first_size, "%s", k.first);
    return k.problems;
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
    if (psdbd_data_open_index_at(&store, a.index, 0, PSDBD_INDEX_PG_STATEMENT_TIMEOUT_MS_DEFAULT, 0,
                                 &ix, err, sizeof(err)) != 0) {
        report_unopenable(k.json, err);
        goto cleanup;
    }
    k.store = &store;
    k.ix = ix;
    check_run(&k);
    check_report(&k);
    rc = k.problems ? 1 : 0;
cleanup:
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}
