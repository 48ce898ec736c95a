/* psdb_index.c - the in-memory key index of an open PSDB, built by a thread the first lookup
 * starts. */
#include "format/psdbfile_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/status_map.h"

/* ---- The key index --------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t key_hash(uint64_t seed, const uint8_t *p, size_t n)
{
    uint64_t h = seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull), w = 0;

    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = mix64(h ^ w);
    }
    if (n) {
        w = 0;
        memcpy(&w, p, n);
        h = mix64(h ^ w ^ 0xFF);
    }
    return mix64(h);
}

void psdb__pf_index_free(key_index *x)
{
    if (!x)
        return;
    free(x->table);
    free(x->entries);
    free(x->keys);
    free(x);
}

static const uint8_t *entry_key(const key_index *x, const index_entry *e)
{
    uint64_t off = 0;

    if (e->key_size <= INDEX_INLINE_KEY)
        return e->key;
    memcpy(&off, e->key, sizeof(off));
    return x->keys + off;
}

const index_entry *psdb__pf_index_find(const key_index *x, const void *key, size_t key_size)
{
    uint64_t h = key_hash(x->seed, key, key_size);

    for (size_t i = (size_t)(((h >> 32) * (uint64_t)x->cap) >> 32);;
         i = i + 1 == x->cap ? 0 : i + 1) {
        const index_entry *e = &x->table[i];
        if (e->key_size == 0)
            return NULL;
        if (e->key_size == key_size && memcmp(entry_key(x, e), key, key_size) == 0)
            return e;
    }
}

/* Grows *p (of *cap elements of size each) to hold need elements; 0 on success. */
static int grow(void **p, size_t *cap, size_t need, size_t each)
{
    size_t n = *cap ? *cap : 1024;
    void *q = NULL;

    if (need <= *cap)
        return 0;
    while (n < need) {
        if (n > SIZE_MAX / 2 / each)
            return -1;
        n *= 2;
    }
    if (!(q = realloc(*p, n * each)))
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Adds one value_entries row to x (rows come in key order, so one key's rows are neighbours). */
static psdb_hr index_add_row(key_index *x, sqlite3_stmt *st)
{
    const void *key = sqlite3_column_blob(st, 0);
    size_t key_size = (size_t)sqlite3_column_bytes(st, 0);
    sqlite3_int64 type = sqlite3_column_int64(st, 1);
    sqlite3_int64 id = sqlite3_column_int64(st, 2);
    sqlite3_int64 size = sqlite3_column_int64(st, 3);
    index_entry *e = x->num_entries ? &x->entries[x->num_entries - 1] : NULL;

    /* Rows a lookup can never match (it binds a non-empty blob key) or never asks for. */
    if (sqlite3_column_type(st, 0) != SQLITE_BLOB || key_size == 0 || !key || type < 0 ||
        type >= (sqlite3_int64)PSDB_VALUE_TYPE_COUNT)
        return PSDB_S_OK;
    if (!e || e->key_size != key_size || memcmp(entry_key(x, e), key, key_size) != 0) {
        if (x->num_entries >= UINT32_MAX - 1 || key_size > UINT32_MAX ||
            x->keys_len > SIZE_MAX - key_size)
            return PSDB_E_FAIL;
        if (grow((void **)&x->entries, &x->cap_entries, x->num_entries + 1, sizeof(*e)) != 0)
            return PSDB_E_OUTOFMEMORY;
        e = &x->entries[x->num_entries];
        memset(e, 0, sizeof(*e));
        e->key_size = (uint32_t)key_size;
        if (key_size <= INDEX_INLINE_KEY) {
            memcpy(e->key, key, key_size);
        } else {
            uint64_t off = x->keys_len;
            if (grow((void **)&x->keys, &x->keys_cap, x->keys_len + key_size, 1) != 0)
                return PSDB_E_OUTOFMEMORY;
            memcpy(e->key, &off, sizeof(off));
            memcpy(x->keys + x->keys_len, key, key_size);
            x->keys_len += key_size;
        }
        x->num_entries++;
    }
    if (sqlite3_column_type(st, 2) != SQLITE_INTEGER || id <= 0 ||
        sqlite3_column_type(st, 3) != SQLITE_INTEGER || size <= 0 || size > MAX_ITEM_SIZE) {
        e->blob_id[type] = INDEX_MALFORMED;
        e->size[type] = 0;
        return PSDB_S_OK;
    }
    if (id >= INDEX_MALFORMED)
        return PSDB_E_FAIL; /* far beyond any real file: leave such files to SQL */
    e->blob_id[type] = (uint32_t)id;
    e->size[type] = (uint32_t)size;
    return PSDB_S_OK;
}

/* Puts every entry into the hash table; fails if a key occurs twice (rows out of key order). */
static psdb_hr index_hash(key_index *x)
{
    void *table = NULL;
    size_t cap = x->num_entries + x->num_entries / 3 + 1;

    /* num_entries < 2^32 - 1 (index_add_row), so cap fits the 32-bit range reduction. */
    if (cap > SIZE_MAX / sizeof(index_entry) ||
        posix_memalign(&table, 64, cap * sizeof(index_entry)) != 0)
        return PSDB_E_OUTOFMEMORY;
    memset(table, 0, cap * sizeof(index_entry));
    x->table = table;
    x->cap = cap;
    for (size_t n = 0; n < x->num_entries; n++) {
        const index_entry *e = &x->entries[n];
        const uint8_t *key = entry_key(x, e);
        if (psdb__pf_index_find(x, key, e->key_size))
            return PSDB_E_FAIL;
        uint64_t h = key_hash(x->seed, key, e->key_size);
        size_t i = (size_t)(((h >> 32) * (uint64_t)cap) >> 32);
        while (x->table[i].key_size != 0)
            i = i + 1 == cap ? 0 : i + 1;
        x->table[i] = *e;
    }
    free(x->entries);
    x->entries = NULL;
    x->cap_entries = 0;
    return PSDB_S_OK;
}

/* Scans value_entries into a new index on a connection of its own. */
static psdb_hr index_build(psdb_file *f, key_index **out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    key_index *x = NULL;
    void *shrunk = NULL;
    uint64_t rows = 0;
    int rc = SQLITE_OK;

    if (!(x = calloc(1, sizeof(*x)))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    x->seed = mix64((uint64_t)(uintptr_t)x ^ (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
    if ((hr = psdb__pf_db_open(f, &db, NULL, 0)) < 0)
        goto cleanup;
    rc = sqlite3_prepare_v2(
        db, "SELECT key, type, blob_id, size FROM value_entries ORDER BY key, type", -1, &st, NULL);
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        if ((rc = sqlite3_step(st)) != SQLITE_ROW)
            break;
        if (++rows % INDEX_CANCEL_EVERY == 0 && atomic_load(&f->index_cancel)) {
            hr = PSDB_E_FAIL;
            goto cleanup;
        }
        if ((hr = index_add_row(x, st)) < 0)
            goto cleanup;
    }
    if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    if (x->keys_len > 0 && (shrunk = realloc(x->keys, x->keys_len)) != NULL) {
        x->keys = shrunk;
        x->keys_cap = x->keys_len;
    }
    if ((hr = index_hash(x)) < 0)
        goto cleanup;
    *out = x;
    x = NULL;
cleanup:
    sqlite3_finalize(st);
    sqlite3_close(db);
    psdb__pf_index_free(x);
    return hr;
}

static void *index_thread_main(void *arg)
{
    psdb_file *f = arg;
    key_index *x = NULL;
    int state = index_build(f, &x) >= 0 ? INDEX_READY : INDEX_FAILED;

    pthread_mutex_lock(&f->lock);
    atomic_store_explicit(&f->index, x, memory_order_release);
    atomic_store(&f->index_state, state);
    pthread_cond_broadcast(&f->index_done);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Starts the build unless it was started (or given up) already; cheap when it was. */
void psdb__pf_index_start(psdb_file *f)
{
    sigset_t all, old;

    if (atomic_load_explicit(&f->index_state, memory_order_relaxed) != INDEX_NONE)
        return;
    pthread_mutex_lock(&f->lock);
    if (atomic_load(&f->index_state) == INDEX_NONE) {
        /* The build thread must not take the application's signals. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        atomic_store(&f->index_state, INDEX_BUILDING);
        if (pthread_create(&f->index_thread, NULL, index_thread_main, f) == 0)
            f->index_started = 1;
        else
            atomic_store(&f->index_state, INDEX_FAILED);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_mutex_unlock(&f->lock);
}

int psdb__file_index_wait(psdb_file *f)
{
    int state = INDEX_NONE;

    psdb__pf_index_start(f);
    pthread_mutex_lock(&f->lock);
    while ((state = atomic_load(&f->index_state)) == INDEX_BUILDING)
        pthread_cond_wait(&f->index_done, &f->lock);
    pthread_mutex_unlock(&f->lock);
    return state == INDEX_READY;
}

size_t psdb__file_page_cache_bytes(psdb_file *f)
{
    const page_cache *pc = f->pages;
    return pc ? sizeof(*pc) + pc->num_pages * sizeof(*pc->pages) + atomic_load(&pc->bytes) : 0;
}

uint64_t psdb__file_direct_reads(psdb_file *f)
{
    uint64_t n = 0;

    pthread_mutex_lock(&f->lock);
    for (const conn *c = f->idle; c; c = c->next)
        n += c->direct_reads;
    pthread_mutex_unlock(&f->lock);
    return n;
}

uint64_t psdb__file_reads(psdb_file *f)
{
    return f->pages ? atomic_load_explicit(&f->pages->reads, memory_order_relaxed) : 0;
}

void psdb__file_index_disable(psdb_file *f)
{
    pthread_mutex_lock(&f->lock);
    if (atomic_load(&f->index_state) == INDEX_NONE)
        atomic_store(&f->index_state, INDEX_FAILED);
    pthread_mutex_unlock(&f->lock);
}

size_t psdb__file_index_bytes(psdb_file *f)
{
    size_t n = 0;

    pthread_mutex_lock(&f->lock);
    const key_index *x = atomic_load(&f->index);
    if (x)
        n = sizeof(*x) + x->cap * sizeof(*x->table) + x->keys_cap;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* "file:" URI of a path, percent-encoding everything but unreserved characters and '/'. */
