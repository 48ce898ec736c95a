/* upload_hash.c - the SHA-256 of a publish's body, computed on a thread of its own that maps back
 * what the worker thread wrote.
 *
 * The worker that receives an upload is its slowest stage: each chunk is received, written to the
 * temporary file and, before this, hashed, all on one thread, while the sender (and the second
 * core) waits. Hashing is a third of that work, and it need not be in line: the hasher follows
 * the writer through the page cache, a chunk behind, so the digest is ready moments after the
 * last byte. */
#include "http_int.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/hash.h"

/* How far the writer gets ahead before the hasher goes on, and the most it maps at a time. */
#define HASH_STEP ((uint64_t)1 << 20)
#define HASH_MAP_MAX ((size_t)8 << 20)

struct upload_hasher {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t more;
    int fd;
    psdb__sha256_ctx *sha;
    /* under lock */
    uint64_t written; /* bytes the writer has put into the file */
    uint64_t woken;   /* written when the hasher was last signalled */
    int done;         /* no more bytes will come */
    int cancel;       /* stop now: the digest is not wanted */
    int waiting;      /* the hasher sleeps on `more` */
    /* the hasher's own until it exits */
    uint64_t hashed;
    int read_errno;
};

static void *hasher_main(void *arg)
{
    upload_hasher *h = arg;
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (;;) {
        uint64_t avail;
        int stop;
        pthread_mutex_lock(&h->lock);
        while (!h->cancel && !h->done && h->written - h->hashed < HASH_STEP) {
            h->waiting = 1;
            pthread_cond_wait(&h->more, &h->lock);
            h->waiting = 0;
        }
        avail = h->written - h->hashed;
        stop = h->cancel || (h->done && avail == 0);
        pthread_mutex_unlock(&h->lock);
        if (stop)
            break;
        /* Mapped, not read: a read would copy every byte once more. The file is this request's
         * own and shrinks only after the hasher has stopped (http_upload_hasher_cancel), so no
         * mapped page can vanish under it. */
        uint64_t start = h->hashed - h->hashed % page;
        size_t n = avail < HASH_MAP_MAX ? (size_t)avail : HASH_MAP_MAX;
        size_t len = (size_t)(h->hashed - start) + n;
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, h->fd, (off_t)start);
        if (m == MAP_FAILED) {
            h->read_errno = errno;
            break;
        }
        psdb__sha256_update(h->sha, (const uint8_t *)m + (h->hashed - start), n);
        munmap(m, len);
        h->hashed += n;
    }
    return NULL;
}

upload_hasher *http_upload_hasher_start(int fd)
{
    upload_hasher *h = calloc(1, sizeof(*h));
    sigset_t all, old;
    int started = 0;
    if (!h)
        return NULL;
    h->fd = fd;
    if (!(h->sha = psdb__sha256_begin()))
        goto fail;
    if (pthread_mutex_init(&h->lock, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&h->more, NULL) != 0) {
        pthread_mutex_destroy(&h->lock);
        goto fail;
    }
    /* Signals stay with the main thread, which waits for them to shut down. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    started = pthread_create(&h->thread, NULL, hasher_main, h) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started)
        return h;
    pthread_cond_destroy(&h->more);
    pthread_mutex_destroy(&h->lock);
fail:
    if (h->sha) {
        uint8_t dropped[32];
        psdb__sha256_end(h->sha, dropped);
    }
    free(h);
    return NULL;
}

void http_upload_hasher_wrote(upload_hasher *h, size_t n)
{
    pthread_mutex_lock(&h->lock);
    h->written += n;
    /* A wake-up per megabyte, not per chunk: the hasher reads in steps of that size. */
    if (h->waiting && h->written - h->woken >= HASH_STEP) {
        h->woken = h->written;
        pthread_cond_signal(&h->more);
    }
    pthread_mutex_unlock(&h->lock);
}

/* Stops the thread (after the last byte when `finish`, at once otherwise) and frees h. */
static int hasher_stop(upload_hasher *h, int finish, uint8_t digest[32])
{
    int e;
    uint8_t dropped[32];
    pthread_mutex_lock(&h->lock);
    if (finish)
        h->done = 1;
    else
        h->cancel = 1;
    pthread_cond_signal(&h->more);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    e = h->read_errno;
    if (finish && e == 0 && h->hashed != h->written)
        e = EIO;
    psdb__sha256_end(h->sha, finish && e == 0 ? digest : dropped);
    pthread_cond_destroy(&h->more);
    pthread_mutex_destroy(&h->lock);
    free(h);
    return e;
}

int http_upload_hasher_finish(upload_hasher *h, uint8_t digest[32])
{
    return hasher_stop(h, 1, digest);
}

void http_upload_hasher_cancel(upload_hasher *h)
{
    if (h)
        hasher_stop(h, 0, NULL);
}
