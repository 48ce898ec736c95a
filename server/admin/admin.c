/* admin.c - what psdbd's admin commands share: messages, argument parsing, the data directory's
 * lock and the one place that decides whether a data directory is new. */
#include "admin_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "config.h"

#include "common/status_map.h"

int admin_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "psdbd %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

int admin_bad_text(const char *cmd, const char *option, const char *s)
{
    char why[128];
    if (psdb__name_check(s, why, sizeof(why)) != 0)
        return admin_fail(cmd, "%s %s", option, why);
    return 0;
}

int admin_parse(const char *cmd, int argc, char **argv, unsigned flags, const struct option *opts,
                admin_option_fn on_opt, void *ctx, void (*usage)(void *ctx), admin_args *out)
{
    size_t n = 0, k = 0;
    struct option *all = NULL;
    int c, rc = ADMIN_GO_ON;
    out->dir = (flags & ADMIN_DATA_DIR) ? psdbd_default_data_dir() : NULL;
    out->json = 0;
    out->operand = NULL;
    while (opts && opts[n].name)
        n++;
    out->index = (flags & ADMIN_DATA_DIR) ? psdbd_default_index() : NULL;
    all = xcalloc(n + 5, sizeof(*all));
    for (size_t i = 0; i < n; i++) {
        assert(opts[i].val != 'd' && opts[i].val != 'j' && opts[i].val != 'h' &&
               opts[i].val != ADMIN_OPT_INDEX);
        all[k++] = opts[i];
    }
    if (flags & ADMIN_DATA_DIR) {
        all[k++] = (struct option){"data-dir", required_argument, NULL, 'd'};
        all[k++] = (struct option){"index", required_argument, NULL, ADMIN_OPT_INDEX};
    }
    if (flags & ADMIN_JSON)
        all[k++] = (struct option){"json", no_argument, NULL, 'j'};
    all[k++] = (struct option){"help", no_argument, NULL, 'h'};
    optind = 1;
    while (rc == ADMIN_GO_ON && (c = getopt_long(argc, argv, "h", all, NULL)) != -1) {
        if (c == 'd') {
            free(out->dir);
            out->dir = xstrdup(optarg);
        } else if (c == ADMIN_OPT_INDEX) {
            free(out->index);
            out->index = xstrdup(optarg);
        } else if (c == 'j') {
            out->json = 1;
        } else if (c == 'h') {
            usage(ctx);
            rc = 0;
        } else if (c == '?' || c == ':' || !on_opt) {
            rc = admin_fail(cmd, "bad arguments (see --help)");
        } else if (on_opt(c, optarg, ctx) != 0) {
            rc = 1;
        }
    }
    if (rc == ADMIN_GO_ON && (flags & ADMIN_OPERAND) && optind < argc)
        out->operand = argv[optind++];
    if (rc == ADMIN_GO_ON && optind != argc)
        rc = admin_fail(cmd, "unexpected argument '%s'", argv[optind]);
    free(all);
    return rc;
}

void admin_args_free(admin_args *a)
{
    free(a->dir);
    free(a->index);
    a->dir = a->index = NULL;
}

void admin_note_stray(const char *path, int json)
{
    fprintf(json ? stderr : stdout, "stray %s (not a blob; left alone)\n", path);
}

int psdbd_lock_data_dir(const char *dir, char *err, size_t err_size)
{
    char *path = xasprintf("%s/psdbd.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, err_size, "open %s: %s", path, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, err_size, "%s is in use by another psdbd (%s)", dir,
                 psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK) ? "locked" : strerror(errno));
        close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

int psdbd_lock_data_dir_shared(const char *dir, int *alone, char *err, size_t err_size)
{
    char *path = xasprintf("%s/psdbd.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    *alone = 0;
    if (fd < 0) {
        snprintf(err, err_size, "open %s: %s", path, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        /* No other replica: this one may clean up; then share with those that come later. */
        *alone = 1;
        if (flock(fd, LOCK_SH) != 0) {
            snprintf(err, err_size, "lock %s: %s", path, strerror(errno));
            close(fd);
            fd = -1;
        }
    } else if (!psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK) ||
               flock(fd, LOCK_SH | LOCK_NB) != 0) {
        snprintf(err, err_size, "%s is in use by a psdbd on SQLite (%s)", dir,
                 psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK) ? "locked" : strerror(errno));
        close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

struct blob_count {
    uint64_t n;
    int first_only;
    int64_t older_than;
};

static int count_one(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct blob_count *bc = ctx;
    (void)sha;
    (void)size;
    if (bc->older_than > 0 && mtime >= bc->older_than)
        return 0;
    bc->n++;
    return bc->first_only; /* nonzero stops the walk */
}

uint64_t admin_blob_files(const psdbd_store *store, int first_only, int64_t older_than)
{
    struct blob_count bc = {0, first_only, older_than};
    psdbd_store_walk(store, count_one, NULL, &bc);
    return bc.n;
}

int psdbd_data_open_index(const psdbd_store *store, int may_init, psdbd_index **out, char *err,
                          size_t err_size)
{
    char *path = xasprintf("%s/index.sqlite", store->dir);
    struct stat sb;
    int rc = -1;
    *out = NULL;
    if (lstat(path, &sb) == 0 || !psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
        rc = psdbd_index_open(path, out, err, err_size);
        goto cleanup;
    }
    if (!may_init) {
        snprintf(err, err_size,
                 "index %s is missing: restore it from a backup (psdbd restore --from BACKUPDIR "
                 "--data-dir NEWDIR)",
                 path);
        goto cleanup;
    }
    /* Blobs without an index are a data directory that lost its index, not a new one: starting
     * with an empty index would serve nothing and let gc delete every blob. */
    if (admin_blob_files(store, 1, 0) > 0) {
        snprintf(err, err_size,
                 "index %s is missing but %s holds blobs: restore the index from a backup "
                 "(psdbd restore --from BACKUPDIR --data-dir NEWDIR, then serve NEWDIR), or, to "
                 "rebuild from nothing, move %s away and publish the PSDBs again",
                 path, store->blob_dir, store->blob_dir);
        goto cleanup;
    }
    rc = psdbd_index_create(path, out, err, err_size);
cleanup:
    free(path);
    return rc;
}

int psdbd_data_open_index_at(const psdbd_store *store, const char *url, unsigned pool,
                             unsigned statement_timeout_ms, int may_init, psdbd_index **out,
                             char *err, size_t err_size)
{
    *out = NULL;
    if (!url || !*url)
        return psdbd_data_open_index(store, may_init, out, err, err_size);
    if (!psdbd_index_is_url(url)) {
        snprintf(err, err_size, "index '%s': not a postgresql:// or postgres:// URL", url);
        return -1;
    }
    /* As for a new index.sqlite: blobs beside an empty database are a lost index, not a new one.
     * The check is psdbd_index_connect's, under its migration lock. */
    return psdbd_index_connect(url, pool, statement_timeout_ms,
                               may_init && admin_blob_files(store, 1, 0) == 0, out, err, err_size);
}

int admin_open_data(const char *cmd, const admin_args *a, int may_init, psdbd_store *store,
                    psdbd_index **ix)
{
    char err[1024];
    if (psdbd_store_open(store, a->dir, 0, err, sizeof(err)) != 0)
        return admin_fail(cmd, "%s", err);
    if (psdbd_data_open_index_at(store, a->index, 0, PSDBD_INDEX_PG_STATEMENT_TIMEOUT_MS_DEFAULT,
                                 may_init, ix, err, sizeof(err)) != 0) {
        psdbd_store_close(store);
        return admin_fail(cmd, "%s", err);
    }
    return 0;
}
