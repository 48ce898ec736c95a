/* valuemaps.c - the value maps beside the blob store: names, derivation once per map, the
 * background worker that derives version 2 of each publish, leftovers (valuemaps.h, DESIGN). */
#include "valuemaps.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psdb/valuemap.h"

#include "common.h"
#include "common/status_map.h"
#include "metrics.h"

/* A derivation in progress: whoever else wants the same map waits for `done`. Freed by the last
 * of the deriver and its waiters (refs). */
struct inflight {
    struct inflight *next;
    char sha256[65];
    unsigned version;
    int done;
    psdb_hr result;
    unsigned refs;
};

struct psdbd_valuemaps {
    const psdbd_store *store;
    pthread_mutex_t lock;
    pthread_cond_t work;     /* the worker's: a digest queued, or stopping */
    pthread_cond_t finished; /* a derivation ended */
    struct inflight *inflight;
    char (*queue)[65]; /* a ring of PSDBD_VALUEMAP_QUEUE_MAX digests */
    unsigned head, count;
    int stopping;
    int backfill; /* psdbd_valuemaps_backfill asked for a walk of the store, not begun yet */
    pthread_t thread;
};

char *psdbd_valuemap_dir(const psdbd_store *s)
{
    return xasprintf("%s/valuemaps", s->dir);
}

char *psdbd_valuemap_path(const psdbd_store *s, const char *sha256, unsigned version)
{
    return version == 1 ? xasprintf("%s/valuemaps/%s.valuemap", s->dir, sha256)
                        : xasprintf("%s/valuemaps/%s.v%u.valuemap", s->dir, sha256, version);
}

void psdbd_valuemaps_forget(const psdbd_store *s, const char *sha256)
{
    for (unsigned v = 1; v <= 2; v++) {
        char *p = psdbd_valuemap_path(s, sha256, v);
        if (unlink(p) == 0)
            psdbd_log("valuemap v%u of %s removed: its blob file was replaced", v, sha256);
        else if (!psdb__errno_is(errno, PSDB__ERRNO_ABSENT))
            psdbd_log("valuemap v%u of %s: remove %s: %s", v, sha256, p, strerror(errno));
        free(p);
    }
}

psdbd_valuemap_kind psdbd_valuemap_classify(const char *name, char sha256[65], unsigned *version)
{
    static const char v1[] = ".valuemap", v2[] = ".v2.valuemap";
    psdbd_valuemap_kind kind = PSDBD_VALUEMAP_STRAY;
    const char *rest = name + 64;
    size_t n = 0;
    if (strnlen(name, 65) < 65 || !psdbd_is_lower_hex(name, 64))
        goto cleanup;
    if (strncmp(rest, v1, sizeof(v1) - 1) == 0) {
        n = sizeof(v1) - 1;
        *version = 1;
    } else if (strncmp(rest, v2, sizeof(v2) - 1) == 0) {
        n = sizeof(v2) - 1;
        *version = 2;
    } else {
        goto cleanup;
    }
    memcpy(sha256, name, 64);
    sha256[64] = '\0';
    if (rest[n] == '\0')
        kind = PSDBD_VALUEMAP_MAP;
    else if (rest[n] == '.')
        kind = PSDBD_VALUEMAP_TEMPORARY;
cleanup:
    return kind;
}

/* Writes the map under a unique temporary name, then renames it over `path`: the final name only
 * ever holds a whole map, whoever else derives it at the same time. PSDB_S_OK, libpsdb's status,
 * or a system call's errno as a status. */
static psdb_hr derive(const psdbd_store *s, const char *sha256, unsigned version, const char *path)
{
    char *blob = psdbd_store_path(s, sha256), *dir = psdbd_valuemap_dir(s), *tmp = NULL;
    uint64_t t0 = psdbd_now_ns();
    struct stat sb;
    psdb_hr hr = PSDB_S_OK;
    int fd = -1, e;
    if (mkdir(dir, 0755) != 0 && !psdb__errno_is(e = errno, PSDB__ERRNO_EXISTS)) {
        hr = psdb__errno_hr(e);
        psdbd_log("valuemap v%u of %s: mkdir %s: %s", version, sha256, dir, strerror(e));
        goto cleanup;
    }
    /* mkstemp, not a pid: replicas on other hosts share this directory. libpsdb writes
     * <tmp>.tmp, fsyncs it and renames it over this name (its mode, not mkstemp's 0600). */
    tmp = xasprintf("%s.XXXXXX", path);
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
        e = errno;
        hr = psdb__errno_hr(e);
        psdbd_log("valuemap v%u of %s: create %s: %s", version, sha256, tmp, strerror(e));
        free(tmp);
        tmp = NULL;
        goto cleanup;
    }
    close(fd);
    if (PSDB_FAILED(hr = psdb_value_map_write_version(blob, version, tmp))) {
        psdbd_log("valuemap v%u of %s: cannot derive it: %s", version, sha256, psdb_error_last());
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        hr = psdb__errno_hr(e);
        psdbd_log("valuemap v%u of %s: rename %s: %s", version, sha256, tmp, strerror(e));
        goto cleanup;
    }
    free(tmp);
    tmp = NULL;
    psdbd_metrics_valuemap_derived(version);
    psdbd_log("valuemap v%u of %s derived in %llu ms (%lld bytes)", version, sha256,
              (unsigned long long)((psdbd_now_ns() - t0) / 1000000),
              stat(path, &sb) == 0 ? (long long)sb.st_size : -1ll);
cleanup:
    if (PSDB_FAILED(hr))
        psdbd_metrics_valuemap_failed();
    if (tmp)
        unlink(tmp);
    free(tmp);
    free(dir);
    free(blob);
    return hr;
}

static struct inflight *inflight_find(psdbd_valuemaps *vm, const char *sha256, unsigned version)
{
    for (struct inflight *f = vm->inflight; f; f = f->next)
        if (f->version == version && strcmp(f->sha256, sha256) == 0)
            return f;
    return NULL;
}

/* Drops one reference to f; called with vm->lock held. */
static void inflight_unref(struct inflight *f)
{
    if (--f->refs == 0)
        free(f);
}

psdb_hr psdbd_valuemaps_ensure(psdbd_valuemaps *vm, const char *sha256, unsigned version)
{
    char *path = psdbd_valuemap_path(vm->store, sha256, version);
    struct inflight *f = NULL, **pp;
    psdb_hr rc = PSDB_S_OK;
    if (access(path, F_OK) == 0) /* the usual case, without the lock */
        goto cleanup;
    pthread_mutex_lock(&vm->lock);
    if ((f = inflight_find(vm, sha256, version)) != NULL) {
        f->refs++;
        while (!f->done)
            pthread_cond_wait(&vm->finished, &vm->lock);
        rc = f->result;
        inflight_unref(f);
        pthread_mutex_unlock(&vm->lock);
        goto cleanup;
    }
    /* A derivation may have ended between the access above and the lock: it renames before it
     * leaves the list, so the file is there now if it succeeded. */
    if (access(path, F_OK) == 0) {
        pthread_mutex_unlock(&vm->lock);
        goto cleanup;
    }
    f = xcalloc(1, sizeof(*f));
    memcpy(f->sha256, sha256, 65);
    f->version = version;
    f->refs = 1;
    f->next = vm->inflight;
    vm->inflight = f;
    pthread_mutex_unlock(&vm->lock);

    rc = derive(vm->store, sha256, version, path);

    pthread_mutex_lock(&vm->lock);
    for (pp = &vm->inflight; *pp != f; pp = &(*pp)->next) {
    }
    *pp = f->next;
    f->done = 1;
    f->result = rc;
    pthread_cond_broadcast(&vm->finished);
    inflight_unref(f);
    pthread_mutex_unlock(&vm->lock);
cleanup:
    free(path);
    return rc;
}

void psdbd_valuemaps_enqueue(psdbd_valuemaps *vm, const char *sha256)
{
    const char *dropped = NULL;
    pthread_mutex_lock(&vm->lock);
    if (vm->stopping) {
        dropped = "psdbd is stopping";
    } else if (vm->count == PSDBD_VALUEMAP_QUEUE_MAX) {
        dropped = "the queue is full";
        psdbd_metrics_valuemap_dropped();
    } else {
        memcpy(vm->queue[(vm->head + vm->count) % PSDBD_VALUEMAP_QUEUE_MAX], sha256, 65);
        vm->count++;
        pthread_cond_signal(&vm->work);
    }
    pthread_mutex_unlock(&vm->lock);
    if (dropped)
        psdbd_log("valuemap v2 of %s: not queued (%s): its first request derives it", sha256,
                  dropped);
}

/* Derives what is queued until the queue is empty or psdbd stops; called and returns with
 * vm->lock held. 0, or -1 once stopping. */
static int drain_queue(psdbd_valuemaps *vm)
{
    char sha256[65];
    while (vm->count > 0 && !vm->stopping) {
        memcpy(sha256, vm->queue[vm->head], 65);
        vm->head = (vm->head + 1) % PSDBD_VALUEMAP_QUEUE_MAX;
        vm->count--;
        pthread_mutex_unlock(&vm->lock);
        psdbd_valuemaps_ensure(vm, sha256, 2); /* a failure is logged and counted there */
        pthread_mutex_lock(&vm->lock);
    }
    return vm->stopping ? -1 : 0;
}

struct backfill {
    psdbd_valuemaps *vm;
    unsigned long long blobs, derived, failed;
    int stopped;
};

/* One blob of the backfill's walk: what publishes queued meanwhile goes first, then this blob's
 * version 2 when it has none. Non-zero stops the walk (psdbd is stopping). */
static int backfill_blob(const char *sha256, uint64_t size, int64_t mtime, void *ctx)
{
    struct backfill *b = ctx;
    psdbd_valuemaps *vm = b->vm;
    char *path = psdbd_valuemap_path(vm->store, sha256, 2);
    int stop, missing;
    (void)size;
    (void)mtime;
    b->blobs++;
    pthread_mutex_lock(&vm->lock);
    stop = drain_queue(vm);
    pthread_mutex_unlock(&vm->lock);
    b->stopped = stop;
    missing = access(path, F_OK) != 0;
    free(path);
    if (stop || !missing)
        return stop;
    if (PSDB_SUCCEEDED(psdbd_valuemaps_ensure(vm, sha256, 2)))
        b->derived++;
    else
        b->failed++;
    return 0;
}

/* The walk psdbd_valuemaps_backfill asked for; called and returns with vm->lock held. */
static void backfill(psdbd_valuemaps *vm)
{
    struct backfill b = {.vm = vm};
    uint64_t t0 = psdbd_now_ns();
    pthread_mutex_unlock(&vm->lock);
    /* What is under blobs/ and no blob is psdbd check's business, not the backfill's. */
    int e = psdbd_store_walk(vm->store, backfill_blob, NULL, &b);
    if (e != 0)
        psdbd_log("valuemaps: backfill: cannot read %s: %s", vm->store->blob_dir, strerror(e));
    psdbd_log("valuemaps: backfill %s: %llu blobs looked at, %llu version 2 maps derived, %llu "
              "could not be (logged above), %llu ms",
              b.stopped ? "stopped with psdbd" : "done", b.blobs, b.derived, b.failed,
              (unsigned long long)((psdbd_now_ns() - t0) / 1000000));
    pthread_mutex_lock(&vm->lock);
}

static void *worker(void *arg)
{
    psdbd_valuemaps *vm = arg;
    pthread_mutex_lock(&vm->lock);
    for (;;) {
        while (vm->count == 0 && !vm->backfill && !vm->stopping)
            pthread_cond_wait(&vm->work, &vm->lock);
        if (drain_queue(vm) != 0)
            break;
        if (vm->backfill) {
            vm->backfill = 0;
            backfill(vm);
        }
    }
    if (vm->count > 0)
        psdbd_log("valuemaps: stopping with %u maps not derived yet (their first requests derive "
                  "them)",
                  vm->count);
    pthread_mutex_unlock(&vm->lock);
    return NULL;
}

/* Removes every temporary in valuemaps/: only while no other psdbd can be deriving. */
static void clean_leftovers(const psdbd_store *s)
{
    char *dir = psdbd_valuemap_dir(s), sha256[65];
    unsigned version;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (psdbd_valuemap_classify(e->d_name, sha256, &version) == PSDBD_VALUEMAP_TEMPORARY &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            psdbd_log("removed leftover value map temporary valuemaps/%s", e->d_name);
    }
    if (d)
        closedir(d);
    free(dir);
}

psdbd_valuemaps *psdbd_valuemaps_start(const psdbd_store *s, int clean, char *err, size_t err_size)
{
    psdbd_valuemaps *vm = xcalloc(1, sizeof(*vm));
    int e;
    vm->store = s;
    vm->queue = xcalloc(PSDBD_VALUEMAP_QUEUE_MAX, sizeof(*vm->queue));
    pthread_mutex_init(&vm->lock, NULL);
    pthread_cond_init(&vm->work, NULL);
    pthread_cond_init(&vm->finished, NULL);
    if (clean)
        clean_leftovers(s);
    if ((e = pthread_create(&vm->thread, NULL, worker, vm)) != 0) {
        snprintf(err, err_size, "cannot start the value map thread: %s", strerror(e));
        pthread_cond_destroy(&vm->finished);
        pthread_cond_destroy(&vm->work);
        pthread_mutex_destroy(&vm->lock);
        free(vm->queue);
        free(vm);
        vm = NULL;
    }
    return vm;
}

void psdbd_valuemaps_backfill(psdbd_valuemaps *vm)
{
    pthread_mutex_lock(&vm->lock);
    vm->backfill = 1;
    pthread_cond_signal(&vm->work);
    pthread_mutex_unlock(&vm->lock);
}

void psdbd_valuemaps_stop(psdbd_valuemaps *vm)
{
    if (!vm)
        return;
    pthread_mutex_lock(&vm->lock);
    vm->stopping = 1;
    pthread_cond_broadcast(&vm->work);
    pthread_mutex_unlock(&vm->lock);
    pthread_join(vm->thread, NULL);
    /* Every request has ended before this (psdbd_http_stop): nothing is in flight. */
    assert(vm->inflight == NULL);
    pthread_cond_destroy(&vm->finished);
    pthread_cond_destroy(&vm->work);
    pthread_mutex_destroy(&vm->lock);
    free(vm->queue);
    free(vm);
}
