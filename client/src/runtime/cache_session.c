/* cache_session.c - application-managed shader cache sessions (MODEL D2): memory and disk stores
 * shared by identifier among the sessions of one device, FindValue / StoreValue with DXGI statuses.
 *
 * DESIGN
 * A store is identified by its 16-byte identifier; sessions of the same device with the same
 * identifier, mode and version share one store (the second session sees the first one's values). A
 * different version or mode while the store is open is PSDB_E_ALREADY_EXISTS; once every session of
 * a store is gone, a memory store is dropped and a disk store is closed. A disk store is an SQLite
 * file loaded into memory on open and written through on each store; a version mismatch on open
 * (no session open) clears it. Entries are indexed by a 64-bit hash of the key: a different key
 * with the same hash is DXGI_ERROR_CACHE_HASH_COLLISION, as the D3D12 cache reports it. */
#include "runtime/device_int.h"
#include "common/status_map.h"
#include "common/error.h"

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_MAX_MEMORY_BYTES (1024u * 1024u)
#define DEFAULT_MAX_ENTRIES 128u
#define DEFAULT_MAX_FILE_BYTES (128u * 1024u * 1024u)
#define BUCKETS 256

typedef struct cache_entry {
    uint64_t hash;
    uint8_t *key;
    size_t key_size;
    uint8_t *value;
    size_t value_size;
    struct cache_entry *next;
} cache_entry;

struct psdb__cache_store {
    uint8_t identifier[16];
    uint32_t mode, flags;
    uint64_t version;
    uint64_t hash_mask;
    size_t max_bytes, max_entries, max_file_bytes;
    unsigned sessions; /* guarded by the device's caches_lock */
    pthread_mutex_t lock;
    cache_entry *buckets[BUCKETS];
    size_t bytes, count;
    sqlite3 *db; /* disk mode */
    psdb__cache_store *next;
};

static _Atomic unsigned hash_bits = 64;

void psdb__cache_set_hash_bits(unsigned bits)
{
    atomic_store(&hash_bits, bits == 0 || bits > 64 ? 64 : bits);
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void store_clear_memory(psdb__cache_store *st)
{
    for (size_t i = 0; i < BUCKETS; i++) {
        cache_entry *e = st->buckets[i];
        while (e) {
            cache_entry *next = e->next;
            free(e->key);
            free(e->value);
            free(e);
            e = next;
        }
        st->buckets[i] = NULL;
    }
    st->bytes = st->count = 0;
}

static void store_free(psdb__cache_store *st)
{
    if (!st)
        return;
    store_clear_memory(st);
    sqlite3_close_v2(st->db);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static cache_entry *store_find(psdb__cache_store *st, uint64_t hash)
{
    for (cache_entry *e = st->buckets[hash % BUCKETS]; e; e = e->next)
        if (e->hash == hash)
            return e;
    return NULL;
}

/* Adds an entry to memory (no limit checks). */
static psdb_hr store_insert(psdb__cache_store *st, uint64_t hash, const void *key, size_t key_size,
                            const void *value, size_t value_size)
{
    psdb_hr hr = PSDB_S_OK;
    cache_entry *e = calloc(1, sizeof(*e));
    if (!e) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    e->key = malloc(key_size);
    e->value = malloc(value_size ? value_size : 1);
    if (!e->key || !e->value) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    memcpy(e->key, key, key_size);
    if (value_size)
        memcpy(e->value, value, value_size);
    e->hash = hash;
    e->key_size = key_size;
    e->value_size = value_size;
    e->next = st->buckets[hash % BUCKETS];
    st->buckets[hash % BUCKETS] = e;
    st->bytes += key_size + value_size;
    st->count++;
    e = NULL;
cleanup:
    if (e) {
        free(e->key);
        free(e->value);
        free(e);
    }
    return hr;
}

static psdb_hr disk_dir(psdb_device *dev, uint32_t flags, char *buf, size_t size)
{
    psdb_hr hr = PSDB_S_OK;
    const char *base = dev->cache_dir, *suffix = "";
    if (flags & PSDB_CACHE_FLAG_USE_WORKING_DIR) {
        if (!getcwd(buf, size))
            hr =
                psdb__error_const(PSDB_E_IO, "cache session: the working directory cannot be read");
        goto cleanup;
    }
    if (!base || !*base)
        base = getenv("PSDB_CACHE_DIR");
    if (!base || !*base) {
        base = getenv("XDG_CACHE_HOME");
        suffix = "/psdb";
    }
    if (!base || !*base) {
        base = getenv("HOME");
        suffix = "/.cache/psdb";
    }
    if (!base || !*base) {
        hr = psdb__error_const(
            PSDB_E_NOT_FOUND,
            "cache session: no cache directory (the device has none and HOME is not set)");
        goto cleanup;
    }
    int n = snprintf(buf, size, "%s%s", base, suffix);
    if (n < 0 || (size_t)n >= size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "cache session: the cache directory path is too long");
        goto cleanup;
    }
    if (mkdir(buf, 0700) != 0 && access(buf, W_OK) != 0)
        hr = psdb__error_const(PSDB_E_ACCESS,
                               "cache session: the cache directory cannot be created or written");
cleanup:
    return hr;
}

/* Opens (creating) the disk store and loads it; a stored version other than st->version clears it
 * (no session has it open: the caller checked). */
static psdb_hr disk_open(psdb_device *dev, psdb__cache_store *st)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *q = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 128], hex[33];
    int rc;
    hr = disk_dir(dev, st->flags, dir, sizeof(dir));
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__hex(st->identifier, 16, hex);
    if (st->flags & PSDB_CACHE_FLAG_DRIVER_VERSIONED) {
        uint8_t digest[32];
        char dhex[17];
        psdb__buf b = {0};
        psdb__buf_str(&b, dev->family_buf);
        psdb__buf_u64(&b, dev->adapter.driver_build);
        hr = psdb__buf_status(&b);
        if (PSDB_SUCCEEDED(hr))
            psdb__sha256(b.data, b.len, digest);
        psdb__buf_free(&b);
        if (PSDB_FAILED(hr))
            goto cleanup;
        psdb__hex(digest, 8, dhex);
        snprintf(path, sizeof(path), "%s/%s-%s.cache", dir, hex, dhex);
    } else {
        snprintf(path, sizeof(path), "%s/%s.cache", dir, hex);
    }
    rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_busy_timeout(st->db, 10000);
    rc = sqlite3_exec(
        st->db,
        "PRAGMA journal_mode=WAL;"
        "CREATE TABLE IF NOT EXISTS meta(version INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS entries(key BLOB PRIMARY KEY, value BLOB NOT NULL)",
        NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    rc = sqlite3_prepare_v2(st->db, "SELECT version FROM meta", -1, &q, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    rc = sqlite3_step(q);
    int same = rc == SQLITE_ROW && (uint64_t)sqlite3_column_int64(q, 0) == st->version;
    sqlite3_finalize(q);
    q = NULL;
    if (!same) {
        char sql[128];
        snprintf(sql, sizeof(sql),
                 "BEGIN IMMEDIATE; DELETE FROM entries; DELETE FROM meta;"
                 " INSERT INTO meta VALUES(%lld); COMMIT",
                 (long long)st->version);
        rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
    }
    rc = sqlite3_prepare_v2(st->db, "SELECT key, value FROM entries", -1, &q, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const void *k = sqlite3_column_blob(q, 0);
        size_t ks = (size_t)sqlite3_column_bytes(q, 0);
        const void *v = sqlite3_column_blob(q, 1);
        size_t vs = (size_t)sqlite3_column_bytes(q, 1);
        if (!k || !ks)
            continue;
        hr = store_insert(st, fnv1a(k, ks) & st->hash_mask, k, ks, v, vs);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    sqlite3_finalize(q);
    return hr;
}

psdb_hr psdb_device_create_cache_session(psdb_device *dev, const psdb_cache_session_desc *desc,
                                         psdb_session **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_session *s = NULL;
    psdb__cache_store *st = NULL, *fresh = NULL;
    int locked = 0;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out ||
        (desc->mode != PSDB_CACHE_MODE_MEMORY && desc->mode != PSDB_CACHE_MODE_DISK) ||
        (desc->flags & ~(PSDB_CACHE_FLAG_DRIVER_VERSIONED | PSDB_CACHE_FLAG_USE_WORKING_DIR)) ||
        (desc->mode == PSDB_CACHE_MODE_MEMORY && desc->flags != 0)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_cache_session: NULL device, desc or out, or an "
                               "unknown mode or flags (memory sessions take none)");
        goto cleanup;
    }
    hr = psdb__session_new(dev, PSDB__SESSION_CACHE, 0, &s);
    if (PSDB_FAILED(hr))
        goto cleanup;
    pthread_mutex_lock(&dev->caches_lock);
    locked = 1;
    for (st = dev->caches; st; st = st->next)
        if (memcmp(st->identifier, desc->identifier, 16) == 0)
            break;
    if (st) {
        if (st->mode != desc->mode || st->version != desc->version || st->flags != desc->flags) {
            hr = psdb__error_const(PSDB_E_ALREADY_EXISTS,
                                   "psdb_device_create_cache_session: a session with this "
                                   "identifier exists with another mode, version or flags");
            goto cleanup;
        }
    } else {
        fresh = calloc(1, sizeof(*fresh));
        if (!fresh) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        pthread_mutex_init(&fresh->lock, NULL);
        memcpy(fresh->identifier, desc->identifier, 16);
        fresh->mode = desc->mode;
        fresh->flags = desc->flags;
        fresh->version = desc->version;
        unsigned bits = atomic_load(&hash_bits);
        fresh->hash_mask = bits >= 64 ? UINT64_MAX : ((1ull << bits) - 1);
        fresh->max_bytes = desc->max_in_memory_size_bytes ? desc->max_in_memory_size_bytes
                                                          : DEFAULT_MAX_MEMORY_BYTES;
        fresh->max_entries =
            desc->max_in_memory_entries ? desc->max_in_memory_entries : DEFAULT_MAX_ENTRIES;
        fresh->max_file_bytes = desc->max_value_file_size_bytes ? desc->max_value_file_size_bytes
                                                                : DEFAULT_MAX_FILE_BYTES;
        if (desc->mode == PSDB_CACHE_MODE_DISK) {
            hr = disk_open(dev, fresh);
            if (PSDB_FAILED(hr))
                goto cleanup;
        }
        fresh->next = dev->caches;
        dev->caches = fresh;
        st = fresh;
        fresh = NULL;
    }
    st->sessions++;
    s->store = st;
    *out = s;
    s = NULL;
cleanup:
    if (locked)
        pthread_mutex_unlock(&dev->caches_lock);
    store_free(fresh);
    psdb_session_release(s);
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb__cache_detach(psdb_session *s)
{
    psdb_device *dev = s->dev;
    psdb__cache_store *st = s->store, *drop = NULL;
    pthread_mutex_lock(&dev->caches_lock);
    if (--st->sessions == 0) {
        for (psdb__cache_store **p = &dev->caches; *p; p = &(*p)->next) {
            if (*p == st) {
                *p = st->next;
                break;
            }
        }
        drop = st;
    }
    pthread_mutex_unlock(&dev->caches_lock);
    s->store = NULL;
    store_free(drop);
}

void psdb__cache_clear_all(psdb_device *dev)
{
    pthread_mutex_lock(&dev->caches_lock);
    for (psdb__cache_store *st = dev->caches; st; st = st->next) {
        pthread_mutex_lock(&st->lock);
        store_clear_memory(st);
        if (st->db)
            sqlite3_exec(st->db, "DELETE FROM entries", NULL, NULL, NULL);
        pthread_mutex_unlock(&st->lock);
    }
    pthread_mutex_unlock(&dev->caches_lock);
}

psdb_hr psdb__cache_find(psdb_session *s, const void *key, size_t key_size, void *value,
                         size_t *value_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__cache_store *st = s->store;
    if (atomic_load(&s->dev->application_disabled)) {
        hr = psdb__error_const(PSDB_E_NOT_CURRENTLY_AVAILABLE,
                               "cache session: the application's caches are disabled "
                               "(psdb_device_shader_cache_control)");
        goto cleanup;
    }
    uint64_t hash = fnv1a(key, key_size) & st->hash_mask;
    pthread_mutex_lock(&st->lock);
    cache_entry *e = store_find(st, hash);
    if (!e) {
        hr = psdb__error_const(PSDB_E_NOT_FOUND, "cache session: the key is not in the session");
    } else if (e->key_size != key_size || memcmp(e->key, key, key_size) != 0) {
        hr = psdb__error_const(PSDB_E_CACHE_HASH_COLLISION,
                               "cache session: another key with the same hash is stored");
    } else if (!value) {
        *value_size = e->value_size;
    } else if (*value_size < e->value_size) {
        *value_size = e->value_size;
        hr = psdb__error_const(PSDB_E_MORE_DATA,
                               "cache session: the value buffer is smaller than the stored value");
    } else {
        memcpy(value, e->value, e->value_size);
        *value_size = e->value_size;
    }
    pthread_mutex_unlock(&st->lock);
cleanup:
    return hr;
}

psdb_hr psdb__cache_store_value(psdb_session *s, const void *key, size_t key_size,
                                const void *value, size_t value_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__cache_store *st = s->store;
    sqlite3_stmt *q = NULL;
    int locked = 0;
    if (atomic_load(&s->dev->application_disabled)) {
        hr = psdb__error_const(PSDB_E_NOT_CURRENTLY_AVAILABLE,
                               "psdb_session_store_value: the application's caches are disabled "
                               "(psdb_device_shader_cache_control)");
        goto cleanup;
    }
    uint64_t hash = fnv1a(key, key_size) & st->hash_mask;
    pthread_mutex_lock(&st->lock);
    locked = 1;
    cache_entry *e = store_find(st, hash);
    if (e) {
        hr = (e->key_size == key_size && memcmp(e->key, key, key_size) == 0)
                 ? PSDB_E_ALREADY_EXISTS
                 : PSDB_E_CACHE_HASH_COLLISION;
        goto cleanup;
    }
    if (key_size > INT_MAX || value_size > INT_MAX - key_size) {
        hr = psdb__error_const(PSDB_E_CACHE_FULL,
                               "psdb_session_store_value: key and value larger than any cache "
                               "session holds"); /* larger than any store may hold (and than SQLite
                                                    binds) */
        goto cleanup;
    }
    size_t add = key_size + value_size;
    int full = st->mode == PSDB_CACHE_MODE_MEMORY
                   ? (st->count + 1 > st->max_entries || st->bytes + add > st->max_bytes)
                   : st->bytes + add > st->max_file_bytes;
    if (full) {
        hr = psdb__error_const(PSDB_E_CACHE_FULL,
                               "psdb_session_store_value: the cache session is full");
        goto cleanup;
    }
    if (st->db) {
        int rc = sqlite3_prepare_v2(st->db, "INSERT INTO entries(key, value) VALUES(?, ?)", -1, &q,
                                    NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_blob(q, 1, key, (int)key_size, SQLITE_STATIC);
            sqlite3_bind_blob(q, 2, value_size ? value : "", (int)value_size, SQLITE_STATIC);
            rc = sqlite3_step(q);
        }
        if (rc != SQLITE_DONE) {
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
    }
    hr = store_insert(st, hash, key, key_size, value, value_size);
cleanup:
    sqlite3_finalize(q);
    if (locked)
        pthread_mutex_unlock(&st->lock);
    return hr;
}
