/* gc.c - `psdbd gc`: removes blob files and leftover uploads that no index row references, the
 * value maps of the blobs it removes and of blobs already gone, and leftover temporaries of value
 * maps, unless the index does not match the store (psdbd check finds a problem). */
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
#include "valuemaps.h"

#include "common/status_map.h"

struct walk {
    const psdbd_store *store;
    psdbd_index *ix;
    int64_t cutoff; /* files newer than this are left alone */
    int dry_run, json;
    uint64_t files, orphans, orphan_bytes, removed, errors, strays;
    uint64_t maps, map_bytes, map_temps; /* value maps and temporaries removed (or to remove) */
};

/* Removes (or, in a dry run, reports) one file of valuemaps/: `temp` a leftover temporary. */
static void gc_valuemap_file(struct walk *w, const char *path, const char *name, uint64_t size,
                             int temp)
{
    if (!w->json)
        printf("%s valuemaps/%s (%s, %llu bytes)\n", w->dry_run ? "would remove" : "remove", name,
               temp ? "leftover temporary" : "value map", (unsigned long long)size);
    if (!w->dry_run && unlink(path) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
        fprintf(stderr, "psdbd gc: remove %s: %s\n", path, strerror(errno));
        w->errors++;
    } else if (temp) {
        w->map_temps++;
    } else {
        w->maps++;
        w->map_bytes += size;
    }
}

/* The value maps of a blob gc removes (or would): nothing derives them again without the blob. */
static void gc_maps_of(struct walk *w, const char *sha)
{
    for (unsigned v = 1; v <= 2; v++) {
        char *p = psdbd_valuemap_path(w->store, sha, v);
        const char *name = strrchr(p, '/') + 1;
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            gc_valuemap_file(w, p, name, (uint64_t)sb.st_size, 0);
        free(p);
    }
}

static int gc_one(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct walk *w = ctx;
    psdbd_rc ref;
    w->files++;
    if (mtime > w->cutoff)
        return 0;
    /* Anything but a clear "no row names it" keeps the file: a failed read is no evidence. */
    if ((ref = psdbd_index_blob_referenced(w->ix, sha)) != PSDBD_NOT_FOUND) {
        if (ref != PSDBD_OK)
            w->errors++;
        return 0;
    }
    w->orphans++;
    w->orphan_bytes += size;
    if (!w->json)
        printf("%s %s (%llu bytes)\n", w->dry_run ? "would remove" : "remove", sha,
               (unsigned long long)size);
    if (!w->dry_run) {
        char *p = psdbd_store_path(w->store, sha);
        int gone = unlink(p) == 0;
        free(p);
        if (!gone) {
            w->errors++;
            return 0; /* the blob stays, and its maps with it */
        }
        w->removed++;
    }
    gc_maps_of(w, sha);
    return 0;
}

/* valuemaps/ after the blob walk: maps whose blob is gone (removed by a gc before value maps were
 * collected, or by hand), and temporaries left by a killed derivation. A temporary is written
 * throughout its derivation, so one not modified for the grace period belongs to none running. */
static void gc_valuemaps(struct walk *w)
{
    char *dir = psdbd_valuemap_dir(w->store);
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d && !psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
        fprintf(stderr, "psdbd gc: open %s: %s\n", dir, strerror(errno));
        w->errors++;
    }
    while (d && (e = readdir(d)) != NULL) {
        char sha[65], *path = NULL, *blob = NULL;
        unsigned version;
        struct stat sb;
        if (e->d_name[0] == '.')
            continue;
        path = xasprintf("%s/%s", dir, e->d_name);
        psdbd_valuemap_kind kind = psdbd_valuemap_classify(e->d_name, sha, &version);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || kind == PSDBD_VALUEMAP_STRAY) {
            w->strays++;
            fprintf(w->json ? stderr : stdout, "stray %s (not a value map; left alone)\n", path);
        } else if (kind == PSDBD_VALUEMAP_TEMPORARY) {
            if (sb.st_mtime <= w->cutoff)
                gc_valuemap_file(w, path, e->d_name, (uint64_t)sb.st_size, 1);
        } else if (access((blob = psdbd_store_path(w->store, sha)), F_OK) != 0 &&
                   psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
            gc_valuemap_file(w, path, e->d_name, (uint64_t)sb.st_size, 0);
        }
        free(blob);
        free(path);
    }
    if (d)
        closedir(d);
    free(dir);
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
    printf("usage: psdbd gc --data-dir DIR [--index URL] [--dry-run] [--grace SECONDS] [--json]\n"
           "                [--force]\n\n"
           "Removes blob files that no index row references (left by a crash between storing a\n"
           "blob and indexing it, or by a refused publish), and leftover uploads in tmp/. Files\n"
           "younger than --grace (default 3600) are kept: a running server may be about to\n"
           "index them. Also removes the value maps (valuemaps/) of the blobs it removes and of\n"
           "blobs already gone, and value map temporaries not modified for --grace seconds (a\n"
           "running derivation writes its temporary until it is renamed). --dry-run reports all\n"
           "of them and removes nothing. Safe while psdbd serves.\n\n"
           "gc first runs the checks of psdbd check (without --deep) and removes nothing when\n"
           "the index does not match the store: any problem check would report, such as an\n"
           "indexed blob missing from blobs/ (another instance's index, an old copy), a failed\n"
           "integrity check, or no PSDB indexed beside blob files older than an hour (a lost\n"
           "index). It says why in one line and exits 1; psdbd check lists every problem.\n"
           "Restore the right index (psdbd restore, or pg_restore for a PostgreSQL index).\n"
           "--force removes every unreferenced blob even then (--force-empty-index is the same\n"
           "option under its old name). A missing index or one that is not a psdbd index is\n"
           "always refused.\n"
           "With --index URL (a PostgreSQL index shared by replicas) one gc runs at a time\n"
           "across replicas (an advisory lock).\n");
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
        json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "blob_files",
                              (json_int_t)w->files, "unreferenced", (json_int_t)w->orphans,
                              "unreferenced_bytes", (json_int_t)w->orphan_bytes, "removed",
                              (json_int_t)w->removed, "valuemaps", (json_int_t)w->maps,
                              "valuemap_bytes", (json_int_t)w->map_bytes, "valuemap_temporaries",
                              (json_int_t)w->map_temps, "dry_run", w->dry_run);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("gc: %llu blob files, %llu unreferenced (%llu bytes), %llu removed%s\n",
               (unsigned long long)w->files, (unsigned long long)w->orphans,
               (unsigned long long)w->orphan_bytes, (unsigned long long)w->removed,
               w->dry_run ? " (dry run)" : "");
        printf("gc: %llu value maps (%llu bytes) and %llu leftover value map temporaries %s\n",
               (unsigned long long)w->maps, (unsigned long long)w->map_bytes,
               (unsigned long long)w->map_temps, w->dry_run ? "to remove (dry run)" : "removed");
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
                                         {"force", no_argument, NULL, 'F'},
                                         {"force-empty-index", no_argument, NULL, 'F'},
                                         {NULL, 0, NULL, 0}};
    struct gc_opts o = {0, 0, 3600};
    admin_args a = {0};
    int rc = 1;
    uint64_t problems;
    char why[1024];
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    struct walk w = {0};
    int locked = 0;
    if ((rc = admin_parse("gc", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, gc_option, &o,
                          gc_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    w.dry_run = o.dry_run;
    w.json = a.json;
    if (admin_open_data("gc", &a, 0, &store, &ix) != 0)
        goto cleanup;
    /* Replicas sharing one index and one blob store: one gc at a time (schema/INDEX.md). */
    if (psdbd_index_gc_lock(ix, 1) != PSDBD_OK) {
        rc = admin_fail("gc", "index: cannot take the gc lock (the log above says why)");
        goto cleanup;
    }
    locked = 1;
    /* An index that does not describe this store (lost rows, another instance's, an old copy)
     * makes live blobs look unreferenced: whatever check would call a problem stops gc. */
    if ((problems = admin_check_problems(&store, ix, why, sizeof(why))) > 0) {
        if (!o.force) {
            rc = admin_fail("gc",
                            "the index does not match the blob store (%s; %llu problem%s, psdbd "
                            "check lists them): removing nothing; restore the right index, or "
                            "pass --force to remove every unreferenced blob anyway",
                            why, (unsigned long long)problems, problems == 1 ? "" : "s");
            goto cleanup;
        }
        fprintf(stderr,
                "psdbd gc: warning: the index does not match the blob store (%s; %llu "
                "problem%s); going on (--force)\n",
                why, (unsigned long long)problems, problems == 1 ? "" : "s");
    }
    w.store = &store;
    w.ix = ix;
    w.cutoff = (int64_t)time(NULL) - (int64_t)o.grace;
    /* Rows first: a blobs row whose PSDB never committed is as orphaned as its file. A failure
     * leaves rows that only cost space, and the walk below still asks about each file. */
    if (!w.dry_run)
        psdbd_index_delete_orphan_blob_rows(ix, w.cutoff);
    psdbd_store_walk(&store, gc_one, gc_stray, &w);
    gc_valuemaps(&w);
    gc_uploads(&store, &w);
    gc_report(&w);
    rc = w.errors ? 1 : 0;
cleanup:
    if (locked)
        psdbd_index_gc_lock(ix, 0);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}
