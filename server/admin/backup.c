/* backup.c - psdbd backup and restore: a consistent copy of a data directory, and back. */
#include "backup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "admin_int.h"
#include "common.h"
#include "config.h"
#include "index.h"
#include "store.h"

#include "common/status_map.h"

#define BACKUP_FORMAT "psdbd-backup"
#define BACKUP_FORMAT_VERSION 1
#define COPY_CHUNK (1u << 20)

/* What one backup or restore did, for the summary line and backup.json. */
typedef struct transfer {
    uint64_t psdbs, blobs, bytes, linked, copied;
    int schema_version;
} transfer;

static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC), rc = 0;
    if (fd < 0)
        rc = errno;
    else if (fsync(fd) != 0)
        rc = errno;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* 0 when `path` is absent or an empty directory (a safe target), 1 when it holds something or is
 * not a directory, -1 with errno on an error. */
static int target_in_use(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int rc = 0;
    if (!d) {
        rc = psdb__errno_is(errno, PSDB__ERRNO_ABSENT)    ? 0
             : psdb__errno_is(errno, PSDB__ERRNO_NOT_DIR) ? 1
                                                          : -1;
        goto cleanup;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            rc = 1;
            break;
        }
    }
cleanup:
    if (d)
        closedir(d);
    return rc;
}

/* Creates an absent or empty target directory and its blobs/ (mode 0750). */
static int make_target(const char *cmd, const char *dir)
{
    int used = target_in_use(dir);
    char *blobs = NULL;
    int rc = 1;
    if (used < 0) {
        admin_fail(cmd, "%s: %s", dir, strerror(errno));
        goto cleanup;
    }
    if (used > 0) {
        admin_fail(cmd, "%s exists and is not an empty directory: refusing to write into it", dir);
        goto cleanup;
    }
    blobs = xasprintf("%s/blobs", dir);
    if ((mkdir(dir, 0750) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS)) ||
        (mkdir(blobs, 0750) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS))) {
        admin_fail(cmd, "create %s: %s", dir, strerror(errno));
        goto cleanup;
    }
    rc = 0;
cleanup:
    free(blobs);
    return rc;
}

static char *blob_path(const char *dir, const char *sha)
{
    return xasprintf("%s/blobs/%.2s/%s", dir, sha, sha);
}

/* Copies src to a new file dst (O_EXCL), fsynced. 0 or an errno value; dst removed on failure. */
static int copy_file(const char *src, const char *dst)
{
    int in = -1, out = -1, rc = 0;
    char *buf = xmalloc(COPY_CHUNK);
    if ((in = open(src, O_RDONLY | O_CLOEXEC)) < 0 ||
        (out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640)) < 0) {
        rc = errno;
        goto cleanup;
    }
    for (;;) {
        ssize_t n = read(in, buf, COPY_CHUNK);
        if (n < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
            continue;
        if (n < 0) {
            rc = errno;
            goto cleanup;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
                continue;
            if (w < 0) {
                rc = errno;
                goto cleanup;
            }
            off += w;
        }
    }
    if (fsync(out) != 0)
        rc = errno;
cleanup:
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0 && rc == 0)
        rc = errno;
    if (rc != 0 && out >= 0)
        unlink(dst);
    free(buf);
    return rc;
}

/* Puts blob `sha` of `size` bytes from src_dir into dst_dir: a hard link unless `copy` (or the
 * link is impossible, e.g. another filesystem), then checks the result has the indexed size. */
static int place_blob(const char *cmd, const char *src_dir, const char *dst_dir, const char *sha,
                      uint64_t size, int copy, transfer *t)
{
    char *src = blob_path(src_dir, sha), *dst = blob_path(dst_dir, sha), *sub = NULL;
    struct stat st;
    int rc = 1, e = 0, linked = 0;
    if (stat(src, &st) != 0) {
        admin_fail(cmd, "blob %s is indexed but %s", sha, strerror(errno));
        goto cleanup;
    }
    if ((uint64_t)st.st_size != size) {
        admin_fail(cmd, "blob %s has %llu bytes, the index says %llu", sha,
                   (unsigned long long)st.st_size, (unsigned long long)size);
        goto cleanup;
    }
    sub = xasprintf("%s/blobs/%.2s", dst_dir, sha);
    if (mkdir(sub, 0750) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS)) {
        admin_fail(cmd, "create %s: %s", sub, strerror(errno));
        goto cleanup;
    }
    if (!copy) {
        if (link(src, dst) == 0)
            linked = 1;
        else if (!psdb__errno_is(errno, PSDB__ERRNO_NO_HARD_LINK)) {
            admin_fail(cmd, "link %s: %s", dst, strerror(errno));
            goto cleanup;
        }
    }
    if (!linked && (e = copy_file(src, dst)) != 0) {
        admin_fail(cmd, "copy %s to %s: %s", src, dst, strerror(e));
        goto cleanup;
    }
    if (stat(dst, &st) != 0 || (uint64_t)st.st_size != size) {
        admin_fail(cmd, "blob %s: the written file does not have its %llu bytes", sha,
                   (unsigned long long)size);
        goto cleanup;
    }
    t->blobs++;
    t->bytes += size;
    if (linked)
        t->linked++;
    else
        t->copied++;
    rc = 0;
cleanup:
    free(src);
    free(dst);
    free(sub);
    return rc;
}

/* Copies the SQLite database src into a new file dst with the online backup API: one read
 * transaction on src, so the copy is one consistent snapshot while other connections keep
 * writing (WAL readers do not block the writer). The copy is switched to a rollback journal so it
 * is a single self-contained file, then fsynced. */
static int sqlite_copy(const char *cmd, const char *src, int src_flags, const char *dst)
{
    sqlite3 *in = NULL, *out = NULL;
    sqlite3_backup *b = NULL;
    int rc = 1, step = SQLITE_OK, e;
    if (sqlite3_open_v2(src, &in, src_flags, NULL) != SQLITE_OK) {
        admin_fail(cmd, "open %s: %s", src, in ? sqlite3_errmsg(in) : "out of memory");
        goto cleanup;
    }
    sqlite3_busy_timeout(in, 10000);
    if (sqlite3_open_v2(dst, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        admin_fail(cmd, "create %s: %s", dst, out ? sqlite3_errmsg(out) : "out of memory");
        goto cleanup;
    }
    if (!(b = sqlite3_backup_init(out, "main", in, "main"))) {
        admin_fail(cmd, "backup %s: %s", src, sqlite3_errmsg(out));
        goto cleanup;
    }
    /* -1: all pages in one step, under one read snapshot. BUSY/LOCKED are transient (a writer
     * holding a lock the snapshot needs for a moment): wait and retry a bounded number of times. */
    for (int tries = 0; tries < 1000; tries++) {
        step = sqlite3_backup_step(b, -1);
        if (step != SQLITE_OK && step != SQLITE_BUSY && step != SQLITE_LOCKED)
            break;
        sqlite3_sleep(10);
    }
    e = sqlite3_backup_finish(b);
    b = NULL;
    if (step != SQLITE_DONE || e != SQLITE_OK) {
        admin_fail(cmd, "backup %s: %s", src, sqlite3_errstr(step != SQLITE_DONE ? step : e));
        goto cleanup;
    }
    if (sqlite3_exec(out, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK) {
        admin_fail(cmd, "%s: %s", dst, sqlite3_errmsg(out));
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (b)
        sqlite3_backup_finish(b);
    sqlite3_close(in);
    if (out && sqlite3_close(out) != SQLITE_OK && rc == 0)
        rc = admin_fail(cmd, "close %s", dst);
    /* The index holds token hashes: not for other users, whatever the umask. */
    if (rc == 0 && chmod(dst, 0640) != 0)
        rc = admin_fail(cmd, "chmod %s: %s", dst, strerror(errno));
    if (rc == 0 && (e = fsync_path(dst, O_RDONLY)) != 0)
        rc = admin_fail(cmd, "fsync %s: %s", dst, strerror(e));
    return rc;
}

/* Links or copies every blob the index copy at `index_path` names from src_dir to dst_dir, and
 * reads the counts for the summary. */
static int transfer_blobs(const char *cmd, const char *index_path, const char *src_dir,
                          const char *dst_dir, int copy, transfer *t)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = 1, step;
    if (sqlite3_open_v2(index_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        admin_fail(cmd, "open %s: %s", index_path, db ? sqlite3_errmsg(db) : "out of memory");
        goto cleanup;
    }
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        admin_fail(cmd, "%s: %s", index_path, sqlite3_errmsg(db));
        goto cleanup;
    }
    t->schema_version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM psdbs", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        admin_fail(cmd, "%s is not a psdbd index: %s", index_path, sqlite3_errmsg(db));
        goto cleanup;
    }
    t->psdbs = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT sha256, size FROM blobs ORDER BY sha256", -1, &st, NULL) !=
        SQLITE_OK) {
        admin_fail(cmd, "%s: %s", index_path, sqlite3_errmsg(db));
        goto cleanup;
    }
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *sha = (const char *)sqlite3_column_text(st, 0);
        sqlite3_int64 size = sqlite3_column_int64(st, 1);
        if (!sha || !psdbd_is_digest(sha) || size < 0) {
            admin_fail(cmd, "%s: a blobs row has a malformed digest or size", index_path);
            goto cleanup;
        }
        if (place_blob(cmd, src_dir, dst_dir, sha, (uint64_t)size, copy, t) != 0)
            goto cleanup;
    }
    if (step != SQLITE_DONE) {
        admin_fail(cmd, "%s: %s", index_path, sqlite3_errmsg(db));
        goto cleanup;
    }
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

/* Makes the new blob directories and entries durable (links and renames live in directories). */
static int sync_blob_dirs(const char *cmd, const char *dir)
{
    int rc = 0, e;
    char *blobs = xasprintf("%s/blobs", dir);
    for (unsigned i = 0; i < 256 && rc == 0; i++) {
        char *sub = xasprintf("%s/%02x", blobs, i);
        if ((e = fsync_path(sub, O_RDONLY | O_DIRECTORY)) != 0 &&
            !psdb__errno_is(e, PSDB__ERRNO_ABSENT))
            rc = admin_fail(cmd, "fsync %s: %s", sub, strerror(e));
        free(sub);
    }
    if (rc == 0 && ((e = fsync_path(blobs, O_RDONLY | O_DIRECTORY)) != 0 ||
                    (e = fsync_path(dir, O_RDONLY | O_DIRECTORY)) != 0))
        rc = admin_fail(cmd, "fsync %s: %s", dir, strerror(e));
    free(blobs);
    return rc;
}

struct transfer_opts {
    char **from, **to;
    int *copy;
};

static int transfer_option(int val, const char *arg, void *ctx)
{
    struct transfer_opts *o = ctx;
    if (val == 'c') {
        *o->copy = 1;
    } else {
        char **slot = val == 'f' ? o->from : o->to;
        free(*slot);
        *slot = xstrdup(arg);
    }
    return 0;
}

/* The summary line of a backup or restore that succeeded. */
static void print_summary(const char *cmd, const char *from, const char *to, const transfer *t)
{
    printf("%s: ok: %s -> %s: %llu psdbs, %llu blobs (%llu bytes; %llu linked, %llu copied)\n", cmd,
           from, to, (unsigned long long)t->psdbs, (unsigned long long)t->blobs,
           (unsigned long long)t->bytes, (unsigned long long)t->linked,
           (unsigned long long)t->copied);
}

/* Parses FROM_FLAG, TO_FLAG and --copy: ADMIN_GO_ON when both are given, else the exit status:
 * 0 after the usage (--help), 2 after a message (bad arguments). */
static int parse_args(const char *cmd, int argc, char **argv, void (*usage)(void *),
                      const char *from_flag, char **from, const char *to_flag, char **to, int *copy)
{
    const struct option opts[] = {{from_flag, required_argument, NULL, 'f'},
                                  {to_flag, required_argument, NULL, 't'},
                                  {"copy", no_argument, NULL, 'c'},
                                  {NULL, 0, NULL, 0}};
    struct transfer_opts o = {from, to, copy};
    admin_args a = {0};
    int rc = admin_parse(cmd, argc, argv, 0, opts, transfer_option, &o, usage, &a);
    if (rc == 1)
        return 2;
    if (rc == ADMIN_GO_ON && (!*from || !*to)) {
        admin_fail(cmd, "--%s and --%s are required (see --help)", from_flag, to_flag);
        return 2;
    }
    return rc;
}

static void backup_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd backup --data-dir DIR --out BACKUPDIR [--copy]\n\n"
           "Copies a data directory while psdbd may be serving it: the index through SQLite's\n"
           "online backup API (one consistent snapshot), then every blob that snapshot names,\n"
           "hard-linked when BACKUPDIR is on the same filesystem (blobs never change) and copied\n"
           "otherwise or with --copy; each is checked against its indexed size. BACKUPDIR must be\n"
           "absent or empty. BACKUPDIR/backup.json, written last, marks a complete backup.\n"
           "Restore with: psdbd restore --from BACKUPDIR --data-dir NEWDIR\n");
}

int psdbd_cmd_backup(int argc, char **argv)
{
    char *dir = NULL, *out = NULL, *src_index = NULL, *dst_index = NULL, *tmp_index = NULL;
    char *meta = NULL, *meta_tmp = NULL, when[32];
    json_t *o = NULL;
    transfer t = {0};
    struct stat st;
    int rc = 1, copy = 0, e;
    if ((rc = parse_args("backup", argc, argv, backup_usage, "data-dir", &dir, "out", &out,
                         &copy)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    src_index = xasprintf("%s/index.sqlite", dir);
    if (stat(src_index, &st) != 0) {
        admin_fail("backup", "%s: %s (is %s a psdbd data directory?)", src_index, strerror(errno),
                   dir);
        goto cleanup;
    }
    if (make_target("backup", out) != 0)
        goto cleanup;
    dst_index = xasprintf("%s/index.sqlite", out);
    tmp_index = xasprintf("%s/index.sqlite.partial", out);
    if (sqlite_copy("backup", src_index, SQLITE_OPEN_READWRITE, tmp_index) != 0)
        goto cleanup;
    /* The snapshot names only blobs that were durable before their rows committed, and gc never
     * removes an indexed blob, so every one of them is still there to link. */
    if (transfer_blobs("backup", tmp_index, dir, out, copy, &t) != 0)
        goto cleanup;
    if (rename(tmp_index, dst_index) != 0) {
        admin_fail("backup", "rename %s: %s", dst_index, strerror(errno));
        goto cleanup;
    }
    if (sync_blob_dirs("backup", out) != 0)
        goto cleanup;
    o = json_pack("{s:s, s:i, s:s, s:s, s:i, s:I, s:I, s:I}", "format", BACKUP_FORMAT,
                  "format_version", BACKUP_FORMAT_VERSION, "created_at",
                  psdbd_format_time((int64_t)time(NULL), when, sizeof(when)), "source", dir,
                  "schema_version", t.schema_version, "psdbs", (json_int_t)t.psdbs, "blobs",
                  (json_int_t)t.blobs, "bytes", (json_int_t)t.bytes);
    meta = xasprintf("%s/backup.json", out);
    meta_tmp = xasprintf("%s/backup.json.partial", out);
    if (!o || json_dump_file(o, meta_tmp, JSON_INDENT(2) | JSON_SORT_KEYS) != 0 ||
        (e = fsync_path(meta_tmp, O_RDONLY)) != 0 || rename(meta_tmp, meta) != 0 ||
        (e = fsync_path(out, O_RDONLY | O_DIRECTORY)) != 0) {
        admin_fail("backup", "write %s failed", meta);
        goto cleanup;
    }
    print_summary("backup", dir, out, &t);
    rc = 0;
cleanup:
    json_decref(o);
    free(dir);
    free(out);
    free(src_index);
    free(dst_index);
    free(tmp_index);
    free(meta);
    free(meta_tmp);
    return rc;
}

static void restore_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd restore --from BACKUPDIR --data-dir NEWDIR [--copy]\n\n"
           "Makes NEWDIR a data directory from a complete `psdbd backup` (one with backup.json).\n"
           "NEWDIR must be absent or empty: restore never overwrites a data directory. Blobs are\n"
           "hard-linked from the backup when on the same filesystem, copied otherwise or with\n"
           "--copy, each checked against its indexed size; the index is copied last, so a failed\n"
           "restore leaves no index.sqlite. Afterwards: psdbd check --data-dir NEWDIR --deep\n");
}

/* Reads BACKUPDIR/backup.json and refuses anything but a complete backup of a known format. */
static int read_meta(const char *from)
{
    char *path = xasprintf("%s/backup.json", from);
    json_error_t jerr;
    json_t *o = json_load_file(path, 0, &jerr);
    const char *format = json_string_value(json_object_get(o, "format"));
    json_int_t version = json_integer_value(json_object_get(o, "format_version"));
    int rc = 1;
    if (!o) {
        admin_fail("restore", "%s: %s (not a complete psdbd backup)", path, jerr.text);
        goto cleanup;
    }
    if (!format || strcmp(format, BACKUP_FORMAT) != 0 || version != BACKUP_FORMAT_VERSION) {
        admin_fail("restore", "%s: not a psdbd backup of format version %d", path,
                   BACKUP_FORMAT_VERSION);
        goto cleanup;
    }
    rc = 0;
cleanup:
    json_decref(o);
    free(path);
    return rc;
}

int psdbd_cmd_restore(int argc, char **argv)
{
    char *from = NULL, *dir = NULL, *src_index = NULL, *dst_index = NULL, *tmp_index = NULL;
    char *tmp_dir = NULL, err[512];
    psdbd_index *ix = NULL;
    transfer t = {0};
    int rc = 1, copy = 0, lock_fd = -1;
    if ((rc = parse_args("restore", argc, argv, restore_usage, "from", &from, "data-dir", &dir,
                         &copy)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    if (read_meta(from) != 0 || make_target("restore", dir) != 0)
        goto cleanup;
    /* No server may start on the directory while it is half-restored. */
    if ((lock_fd = psdbd_lock_data_dir(dir, err, sizeof(err))) < 0) {
        admin_fail("restore", "%s", err);
        goto cleanup;
    }
    tmp_dir = xasprintf("%s/tmp", dir);
    if (mkdir(tmp_dir, 0750) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS)) {
        admin_fail("restore", "create %s: %s", tmp_dir, strerror(errno));
        goto cleanup;
    }
    src_index = xasprintf("%s/index.sqlite", from);
    dst_index = xasprintf("%s/index.sqlite", dir);
    tmp_index = xasprintf("%s/tmp/index.sqlite.restore", dir);
    if (sqlite_copy("restore", src_index, SQLITE_OPEN_READONLY, tmp_index) != 0 ||
        transfer_blobs("restore", tmp_index, from, dir, copy, &t) != 0 ||
        sync_blob_dirs("restore", dir) != 0)
        goto cleanup;
    /* psdbd's own open: refuses a schema newer than this binary and applies missing migrations,
     * so a backup from an older psdbd restores into the current layout. */
    if (psdbd_index_open(tmp_index, &ix, err, sizeof(err)) != 0) {
        admin_fail("restore", "%s", err);
        goto cleanup;
    }
    psdbd_index_close(ix);
    ix = NULL;
    if (rename(tmp_index, dst_index) != 0 || fsync_path(dir, O_RDONLY | O_DIRECTORY) != 0) {
        admin_fail("restore", "rename %s: %s", dst_index, strerror(errno));
        goto cleanup;
    }
    print_summary("restore", from, dir, &t);
    rc = 0;
cleanup:
    psdbd_index_close(ix);
    if (lock_fd >= 0)
        close(lock_fd);
    free(from);
    free(dir);
    free(src_index);
    free(dst_index);
    free(tmp_index);
    free(tmp_dir);
    return rc;
}
