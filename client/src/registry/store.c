/* store.c - the shared PSDB store of a registry root: store lock, download locks, digests, sweep
 * (the DESIGN is in store.h). */
#include "registry/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "registry/install.h"
#include "common/buf.h"
#include "common/fdio.h"
#include "common/hash.h"
#include "common/status_map.h"
#include "common/error.h"

psdb_hr psdb__store_open(psdb_installer *inst, psdb__store *s, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    char *root = NULL, *lock = NULL;
    const char *call = NULL, *path = NULL;
    char why[128] = "";
    int saved = 0;
    s->dir = NULL;
    s->lock_fd = -1;
    s->held = 0;
    /* Registrations hold absolute paths: the runtime opens them from any working directory. */
    root = realpath(psdb__installer_root(inst), NULL);
    if (!root) {
        saved = errno;
        call = "realpath";
        path = psdb__installer_root(inst);
        goto cleanup;
    }
    if (asprintf(&s->dir, "%s/" PSDB__STORE_DIR, root) < 0) {
        s->dir = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (asprintf(&lock, "%s/" PSDB__STORE_LOCK, root) < 0) {
        lock = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (mkdir(s->dir, 0755) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS)) {
        saved = errno;
        call = "mkdir";
        path = s->dir;
        goto cleanup;
    }
    /* psdbs/ itself a link would send every file of the store elsewhere. */
    if (!psdb__own_dir(s->dir, why, sizeof(why))) {
        saved = errno;
        call = "check";
        path = s->dir;
        goto cleanup;
    }
    s->lock_fd = psdb__open_file(lock, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, sizeof(why));
    if (s->lock_fd < 0) {
        saved = errno;
        call = "open";
        path = lock;
        goto cleanup;
    }
cleanup:
    if (call) {
        hr = psdb__errno_hr(saved);
        if (err && err_size)
            snprintf(err, err_size, "store: %s %s: %s", call, path, why[0] ? why : strerror(saved));
    }
    if (PSDB_FAILED(hr))
        psdb__store_close(s);
    free(root);
    free(lock);
    return hr;
}

static int flock_retry(int fd, int op)
{
    int rc;
    do
        rc = flock(fd, op);
    while (rc != 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED));
    return rc;
}

psdb_hr psdb__store_hold(psdb__store *s)
{
    if (flock_retry(s->lock_fd, LOCK_SH) != 0)
        return psdb__errno_hr(errno);
    s->held = 1;
    return PSDB_S_OK;
}

void psdb__store_close(psdb__store *s)
{
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the flock */
    s->lock_fd = -1;
    s->held = 0;
    free(s->dir);
    s->dir = NULL;
}

/* Files are compared by device and inode, so a registration that spells the store's path
 * differently (a symlinked root, a relative path) still protects its file. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
} file_id;

typedef struct id_set {
    file_id *ids;
    size_t n, cap;
    int oom;
} id_set;

static void id_set_add(const char *path, void *ctx)
{
    id_set *set = ctx;
    struct stat st;
    if (set->oom || stat(path, &st) != 0)
        return; /* a missing file needs no protection */
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        file_id *p = realloc(set->ids, cap * sizeof(*p));
        if (!p) {
            set->oom = 1;
            return;
        }
        set->ids = p;
        set->cap = cap;
    }
    set->ids[set->n].dev = st.st_dev;
    set->ids[set->n].ino = st.st_ino;
    set->n++;
}

static int id_set_has(const id_set *set, const struct stat *st)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->ids[i].dev == st->st_dev && set->ids[i].ino == st->st_ino)
            return 1;
    return 0;
}

/* What an interrupted install keeps for resuming: a download's .part, a delta update's output
 * and its value map (delta.h). */
static int is_partial(const char *name)
{
    static const char *const suffixes[] = {".part", ".delta", ".valuemap"};
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t k = strlen(suffixes[i]);
        if (len > k && strcmp(name + len - k, suffixes[i]) == 0)
            return 1;
    }
    return 0;
}

typedef struct sweep_ctx {
    psdb_installer *inst;
    const psdb__store *s;
    uint32_t flags;
} sweep_ctx;

/* Runs inside the registry's write transaction and under the exclusive store lock. */
static psdb_hr sweep_locked(void *arg)
{
    sweep_ctx *x = arg;
    psdb_hr hr = PSDB_S_OK;
    id_set keep = {0};
    DIR *d = NULL;
    hr = psdb__registry_foreach_path(x->inst, NULL, NULL, id_set_add, &keep);
    if (PSDB_SUCCEEDED(hr) && keep.oom)
        hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_FAILED(hr))
        goto cleanup; /* when in doubt, keep everything */
    d = opendir(x->s->dir);
    if (!d) {
        hr = psdb__errno_hr(errno);
        goto cleanup;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (id_set_has(&keep, &st))
            continue;
        if (is_partial(e->d_name) && !(x->flags & PSDB_SWEEP_PARTIAL) &&
            now - st.st_mtime < PSDB__PART_GRACE_SECONDS)
            continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
cleanup:
    if (d)
        closedir(d);
    free(keep.ids);
    return hr;
}

psdb_hr psdb__store_sweep(psdb_installer *inst, psdb__store *s, uint32_t flags)
{
    psdb_hr hr = PSDB_S_OK;
    int locked = 0;
    if (s->held) {
        flock_retry(s->lock_fd, LOCK_UN);
        s->held = 0;
    }
    if (flock_retry(s->lock_fd, LOCK_EX | ((flags & PSDB_SWEEP_WAIT) ? 0 : LOCK_NB)) != 0) {
        /* An install is in flight: it sweeps itself when it is done (or the next one does). */
        hr = psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK) ? PSDB_S_FALSE : psdb__errno_hr(errno);
        goto cleanup;
    }
    locked = 1;
    sweep_ctx x = {.inst = inst, .s = s, .flags = flags};
    hr = psdb__registry_with_write_lock(inst, sweep_locked, &x);
cleanup:
    if (locked)
        flock_retry(s->lock_fd, LOCK_UN);
    return hr;
}

psdb_hr psdb__store_lock_part(const char *part, int *out, char *why, size_t why_size)
{
    psdb_hr hr = PSDB_S_OK;
    int fd = -1;
    *out = -1;
    for (;;) {
        struct stat held, named;
        /* Reused when another attempt left it: it must be a file of ours, not a link to one. */
        fd = psdb__open_file(part, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, why_size);
        if (fd < 0) {
            hr = psdb__errno_hr(errno);
            goto cleanup;
        }
        if (flock_retry(fd, LOCK_EX) != 0 || fstat(fd, &held) != 0) {
            hr = psdb__errno_hr(errno);
            if (why && why_size)
                snprintf(why, why_size, "%s", strerror(errno));
            goto cleanup;
        }
        /* The holder we waited for may have renamed its .part into place or removed it: then we
         * locked a file that no longer has this name, and start over on the current one. */
        if (lstat(part, &named) == 0 && named.st_dev == held.st_dev && named.st_ino == held.st_ino)
            break;
        close(fd);
        fd = -1;
    }
    *out = fd;
    fd = -1;
cleanup:
    if (fd >= 0)
        close(fd);
    return hr;
}

void psdb__store_unlock_part(const char *part, int fd, int remove)
{
    if (fd < 0)
        return;
    if (remove)
        psdb__unlink_same(part, fd); /* while locked: a waiter then sees the name gone */
    close(fd);
}

psdb_hr psdb__file_sha256(const char *path, unsigned checks, uint8_t out[32])
{
    psdb_hr hr = PSDB_S_OK;
    psdb__sha256_ctx *sha = NULL;
    uint8_t *buf = NULL;
    /* Not followed through a link, never blocked on a FIFO: what is not a regular file (of
     * ours, with PSDB__OPEN_OURS) is "not found", as an absent one. */
    int fd = psdb__open_file(path, O_RDONLY, 0, checks, NULL, 0);
    if (fd < 0) {
        hr = psdb__errno_is(errno, PSDB__ERRNO_NO_SUCH_PATH) ||
                     psdb__errno_is(errno, PSDB__ERRNO_REFUSED)
                 ? PSDB_E_NOT_FOUND
                 : psdb__errno_hr(errno);
        goto cleanup;
    }
    buf = malloc(1 << 16);
    sha = psdb__sha256_begin();
    if (!buf || !sha) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (;;) {
        ssize_t n = read(fd, buf, 1 << 16);
        if (n < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
            continue;
        if (n < 0) {
            hr = psdb__errno_hr(errno);
            goto cleanup;
        }
        if (n == 0)
            break;
        psdb__sha256_update(sha, buf, (size_t)n);
    }
    psdb__sha256_end(sha, out);
    sha = NULL;
cleanup:
    if (sha) {
        uint8_t discard[32];
        psdb__sha256_end(sha, discard);
    }
    free(buf);
    if (fd >= 0)
        close(fd);
    return hr;
}

psdb_hr psdb_installer_sweep_store(psdb_installer *inst, uint32_t flags)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__store s = {.lock_fd = -1};
    if (!inst || (flags & ~(PSDB_SWEEP_WAIT | PSDB_SWEEP_PARTIAL))) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_installer_sweep_store: NULL installer or unknown flags");
        goto cleanup;
    }
    hr = psdb__store_open(inst, &s, NULL, 0);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__store_sweep(inst, &s, flags);
cleanup:
    psdb__store_close(&s);
    return psdb__error_ret(hr, err_mark, __func__);
}
