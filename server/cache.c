/* cache.c - per-thread cache of /v1/resolve answers, invalidated by a global generation.
 *
 * A resolve answer changes only when a publish or a retire commits, and psdbd is the only writer
 * of PSDB rows (one server per data directory, by lock). So each worker thread keeps a small
 * direct-mapped table of recent answers, tagged with the generation they were computed at; every
 * commit bumps the generation, which turns every entry stale at once. No lock is shared between
 * threads: only the generation, an atomic. */
#include "cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define SLOTS 256

struct slot {
    uint64_t hash, gen;
    char *key, *body;
    size_t key_len, len;
    unsigned kind; /* the caller's name for the answer (psdbd: its outcome) */
};

static atomic_uint_fast64_t generation = 1;
static pthread_key_t table_key;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_free(void *p)
{
    struct slot *t = p;
    for (size_t i = 0; t && i < SLOTS; i++) {
        free(t[i].key);
        free(t[i].body);
    }
    free(t);
}

static void table_init(void)
{
    pthread_key_create(&table_key, table_free);
}

static struct slot *table(void)
{
    struct slot *t;
    pthread_once(&table_once, table_init);
    t = pthread_getspecific(table_key);
    if (!t) {
        t = xcalloc(SLOTS, sizeof(*t));
        pthread_setspecific(table_key, t);
    }
    return t;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t psdbd_cache_generation(void)
{
    return atomic_load_explicit(&generation, memory_order_acquire);
}

void psdbd_cache_invalidate(void)
{
    atomic_fetch_add_explicit(&generation, 1, memory_order_acq_rel);
}

int psdbd_cache_get(const char *key, size_t key_len, unsigned *kind, char **body, size_t *len)
{
    uint64_t h = fnv1a(key, key_len);
    struct slot *s = &table()[h % SLOTS];
    if (!s->key || s->hash != h || s->key_len != key_len || memcmp(s->key, key, key_len) != 0 ||
        s->gen != psdbd_cache_generation())
        return 0;
    *body = xmalloc(s->len ? s->len : 1);
    memcpy(*body, s->body, s->len);
    *len = s->len;
    *kind = s->kind;
    return 1;
}

void psdbd_cache_put(const char *key, size_t key_len, unsigned kind, const char *body, size_t len,
                     uint64_t gen)
{
    uint64_t h = fnv1a(key, key_len);
    struct slot *s = &table()[h % SLOTS];
    free(s->key);
    free(s->body);
    s->key = xmalloc(key_len ? key_len : 1);
    memcpy(s->key, key, key_len);
    s->body = xmalloc(len ? len : 1);
    memcpy(s->body, body, len);
    s->hash = h;
    s->key_len = key_len;
    s->len = len;
    s->kind = kind;
    s->gen = gen;
}
