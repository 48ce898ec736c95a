/* gc.c - `psdbd gc`: removes blob files and leftover uploads that no index row references,
 * unless the index looks lost. */
#include "admin_int.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common.h"

struct walk {
    const psdbd_store *store;
    sqlite3_stmt *ref; /* is this digest referenced? */
    int64_t cutoff;    /* files newer than this are left alone */
    int dry_run, json;
    uint64_t files, orphans, orphan_bytes, removed, errors, strays;
};

static int gc_one(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct walk *w = ctx;
    int referenced;
    sqlite3_reset(w->ref);
    sqlite3_bind_text(w->ref, 1, sha, -1, SQLITE_TRANSIENT);
    referenced = sqlite3_step(w->ref) == SQLITE_ROW;
    sqlite3_reset(w->ref);
    w->files++;
    if (referenced || mtime > w->cutoff)
        return 0;
    w->orphans++;
    w->orphan_bytes += size;
    if (!w->json)
        printf("%s %s (%llu bytes)\n", w->dry_run ? "would remove" : "remove", sha,
               (unsigned long long)size);
    if (!w->dry_run) {
        char *p = psdbd_store_path(w->store, sha);
        if (unlink(p) == 0)
            w->removed++;
        else
            w->errors++;
        free(p);
    }
    return 0;
}

static void gc_stray(const char *path, void *ctx)
{
    struct walk *w = ctx;
    w->strays++;
    admin_note_stray(path, w->json);
}

static void gc_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd gc --data-dir DIR [--dry-run] [--grace SECONDS] [--json]\n"
           "                [--force-empty-index]\n\n"
           "Removes blob files that no index row references (left by a crash between storing a\n"
           "blob and indexing it, or by a refused publish), and leftover uploads in tmp/. Files\n"
           "younger than --grace (default 3600) are kept: a running server may be about to\n"
           "index them. Safe while psdbd serves.\n\n"
           "gc removes nothing while the index looks lost: no PSDB indexed but blob files older\n"
           "than an hour present, or a failed SQLite integrity check (restore the index with psdbd "
           "restore).\n"
           "--force-empty-index removes every unreferenced blob even then. A missing index or\n"
           "one that is not a psdbd index is always refused.\n");
}

/* Why the index cannot be trusted to say which blobs are garbage, or NULL. `why` receives the
 * details. */
static const char *gc_index_doubt(sqlite3 *db, const psdbd_store *store, char *why, size_t why_size)
{
    sqlite3_stmt *st = NULL;
    const char *doubt = NULL;
    int64_t psdbs = -1;
    uint64_t files = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK) {
        snprintf(why, why_size, "%s", sqlite3_errmsg(db));
        doubt = "the index cannot be checked";
        goto cleanup;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *msg = (const char *)sqlite3_column_text(st, 0);
        if (!msg || strcmp(msg, "ok") != 0) {
            snprintf(why, why_size, "%s", msg ? msg : "no answer");
            doubt = "the index fails its integrity check";
            goto cleanup;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM psdbs", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        psdbs = sqlite3_column_int64(st, 0);
    if (psdbs < 0) {
        snprintf(why, why_size, "%s", sqlite3_errmsg(db));
        doubt = "the index cannot be read";
        goto cleanup;
    }
    if (psdbs == 0) {
        int64_t old = (int64_t)time(NULL) - ADMIN_LOST_INDEX_MIN_AGE;
        if ((files = admin_blob_files(store, 0, old)) > 0) {
            snprintf(why, why_size, "0 psdbs indexed, %llu blob files older than an hour in %s",
                     (unsigned long long)files, store->blob_dir);
            doubt = "the index is empty but blobs are present";
        }
    }
cleanup:
    sqlite3_finalize(st);
    return doubt;
}

/* Leftover uploads older than the grace period belong to no running request. */
static void gc_uploads(const psdbd_store *store, const struct walk *w)
{
    DIR *d = opendir(store->tmp_dir);
    struct dirent *e;
    struct stat sb;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "upload-", 7) != 0 || fstatat(dirfd(d), e->d_name, &sb, 0) != 0 ||
            sb.st_mtime > w->cutoff)
            continue;
        if (!w->json)
            printf("%s tmp/%s (%lld bytes)\n", w->dry_run ? "would remove" : "remove", e->d_name,
                   (long long)sb.st_size);
        if (!w->dry_run)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
}

static void gc_report(const struct walk *w)
{
    if (w->json) {
        json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:b}", "blob_files", (json_int_t)w->files,
                              "unreferenced", (json_int_t)w->orphans, "unreferenced_bytes",
                              (json_int_t)w->orphan_bytes, "removed", (json_int_t)w->removed,
                              "dry_run", w->dry_run);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("gc: %llu blob files, %llu unreferenced (%llu bytes), %llu removed%s\n",
               (unsigned long long)w->files, (unsigned long long)w->orphans,
               (unsigned long long)w->orphan_bytes, (unsigned long long)w->removed,
               w->dry_run ? " (dry run)" : "");
    }
}

struct gc_opts {
    int dry_run, force;
    uint64_t grace;
};

static int gc_option(int val, const char *arg, void *ctx)
{
    struct gc_opts *o = ctx;
    if (val == 'n') {
        o->dry_run = 1;
    } else if (val == 'F') {
        o->force = 1;
    } else {
        assert(val == 'g');
        if (psdb__parse_u64(arg, &o->grace) != 0 || o->grace > INT32_MAX)
            return admin_fail("gc", "bad --grace '%s'", arg);
    }
    return 0;
}

int psdbd_cmd_gc(int argc, char **argv)
{
    static const struct option opts[] = {{"dry-run", no_argument, NULL, 'n'},
                                         {"grace", required_argument, NULL, 'g'},
                                         {"force-empty-index", no_argument, NULL, 'F'},
                                         {NULL, 0, NULL, 0}};
    static const char ref_sql[] = "SELECT 1 FROM psdbs WHERE sha256 = ?1 LIMIT 1";
    static const char orphan_rows_sql[] =
        "DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM psdbs) AND created_at < ?1";
    struct gc_opts o = {0, 0, 3600};
    admin_args a = {0};
    int rc = 1;
    const char *doubt;
    char why[512];
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    struct walk w = {0};
    sqlite3 *db;
    if ((rc = admin_parse("gc", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, gc_option, &o,
                          gc_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    w.dry_run = o.dry_run;
    w.json = a.json;
    if (admin_open_data("gc", a.dir, 0, &store, &ix) != 0)
        goto cleanup;
    db = psdbd_index_db(ix);
    /* An index that lost its rows would make every blob look unreferenced. */
    if ((doubt = gc_index_doubt(db, &store, why, sizeof(why))) != NULL) {
        if (!o.force) {
            rc = admin_fail("gc",
                            "%s (%s): removing nothing; restore the index (psdbd restore), or "
                            "pass --force-empty-index to remove every unreferenced blob anyway",
                            doubt, why);
            goto cleanup;
        }
        fprintf(stderr, "psdbd gc: warning: %s (%s); going on (--force-empty-index)\n", doubt, why);
    }
    w.store = &store;
    w.cutoff = (int64_t)time(NULL) - (int64_t)o.grace;
    if (sqlite3_prepare_v2(db, ref_sql, -1, &w.ref, NULL) != SQLITE_OK) {
        rc = admin_fail("gc", "index: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    /* Rows first: a blobs row whose PSDB never committed is as orphaned as its file. */
    if (!w.dry_run) {
        sqlite3_stmt *del = NULL;
        if (sqlite3_prepare_v2(db, orphan_rows_sql, -1, &del, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(del, 1, w.cutoff);
            sqlite3_step(del);
        }
        sqlite3_finalize(del);
    }
    psdbd_store_walk(&store, gc_one, gc_stray, &w);
    gc_uploads(&store, &w);
    gc_report(&w);
    rc = w.errors ? 1 : 0;
cleanup:
    sqlite3_finalize(w.ref);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(a.dir);
    return rc;
}
