/* psdb_lookup.c - lookups in an open PSDB: one key's values (through the key index or SQL),
 * each blob checked against its SHA-256 the first time it is read, and the walk over groups. */
#include "format/psdbfile_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/error.h"
#include "common/status_map.h"

/* Fills k with what value_entries holds for key (every type at once). */
static psdb_hr load_key(conn *c, const void *key, size_t key_size, cached_key *k)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = c->key_st;
    int rc = SQLITE_OK;

    k->key_size = 0;
    memset(k->blob_id, 0, sizeof(k->blob_id));
    memset(k->size, 0, sizeof(k->size));
    if ((rc = psdb__pf_bind_bytes(st, 1, key, key_size)) != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 type = sqlite3_column_int64(st, 0);
        sqlite3_int64 id = sqlite3_column_int64(st, 1);
        sqlite3_int64 size = sqlite3_column_int64(st, 2);
        if (type < 0 || type >= (sqlite3_int64)PSDB_VALUE_TYPE_COUNT)
            continue; /* never asked for; psdb_file_verify reports it */
        if (sqlite3_column_type(st, 1) != SQLITE_INTEGER || id <= 0 ||
            sqlite3_column_type(st, 2) != SQLITE_INTEGER || size <= 0 || size > MAX_ITEM_SIZE)
            k->blob_id[type] = BLOB_MALFORMED;
        else
            k->blob_id[type] = id;
        k->size[type] = (uint64_t)size;
    }
    if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    if (key_size <= CACHED_KEY_MAX) {
        memcpy(k->key, key, key_size);
        k->key_size = key_size;
    }
cleanup:
    sqlite3_reset(st);
    return hr;
}

/* Reads a blob already checked against its digest, through the connection's blob handle. */
static psdb_hr read_verified(conn *c, sqlite3_int64 id, void *value, size_t size)
{
    int rc = c->blob ? sqlite3_blob_reopen(c->blob, id)
                     : sqlite3_blob_open(c->db, "main", "blobs", "data", id, 0, &c->blob);
    if (rc == SQLITE_OK && (size_t)sqlite3_blob_bytes(c->blob) != size)
        return PSDB_E_CACHE_CORRUPT;
    if (rc == SQLITE_OK)
        rc = sqlite3_blob_read(c->blob, value, (int)size, 0);
    if (rc != SQLITE_OK) {
        /* A failed handle is aborted: start afresh next time. */
        sqlite3_blob_close(c->blob);
        c->blob = NULL;
        return psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
    }
    return PSDB_S_OK;
}

/* Reads a blob for the first time: bytes, type and size checked against the row and its SHA-256. */
static psdb_hr read_and_check(psdb_file *f, conn *c, sqlite3_int64 id, void *value, size_t size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = c->blob_st;
    uint8_t got[EVP_MAX_MD_SIZE];
    unsigned int got_size = 0;
    int rc = sqlite3_bind_int64(st, 1, id);

    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_CACHE_CORRUPT : psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    if (sqlite3_column_type(st, 0) != SQLITE_BLOB || sqlite3_column_type(st, 1) != SQLITE_BLOB ||
        sqlite3_column_bytes(st, 0) != 32) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    /* The digest psdb_file_check proved, once it did: the row's own column may disagree with
     * what the content digest covers in a crafted file. */
    uint8_t(*checked)[32] = atomic_load_explicit(&f->checked, memory_order_acquire);
    if (checked && (id < 1 || (uint64_t)id > f->info.num_blobs)) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    const uint8_t *digest = checked ? checked[id] : sqlite3_column_blob(st, 0);
    const void *data = sqlite3_column_blob(st, 1);
    if ((size_t)sqlite3_column_bytes(st, 1) != size) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    if (EVP_DigestInit_ex2(c->md, f->sha256, NULL) != 1 ||
        EVP_DigestUpdate(c->md, data, size) != 1 ||
        EVP_DigestFinal_ex(c->md, got, &got_size) != 1) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (got_size != 32 || memcmp(got, digest, 32) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    memcpy(value, data, size);
    if ((uint64_t)id < f->num_verified_slots)
        atomic_store_explicit(&f->verified[id], checked ? VERIFIED_CHECKED : VERIFIED_ROW,
                              memory_order_relaxed);
cleanup:
    sqlite3_reset(st);
    return hr;
}

psdb_hr psdb_file_find_value(psdb_file *f, const void *key, size_t key_size, uint32_t value_type,
                             void *value, size_t *value_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    cached_key uncached;
    const cached_key *k = NULL;
    const key_index *x = NULL;
    const index_entry *e = NULL;
    sqlite3_int64 id = 0;
    size_t size = 0;

    if (!f || !key || key_size == 0 || key_size > MAX_ITEM_SIZE ||
        value_type >= PSDB_VALUE_TYPE_COUNT || !value_size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_file_find_value: NULL file, key or value_size, an empty or "
                               "oversized key, or an unknown value type");
        goto cleanup;
    }
    x = atomic_load_explicit(&f->index, memory_order_acquire);
    if (x) {
        /* The index answers every key of value_entries: a miss is NOT_FOUND. */
        if ((e = psdb__pf_index_find(x, key, key_size)) != NULL) {
            id = e->blob_id[value_type] == INDEX_MALFORMED ? (sqlite3_int64)BLOB_MALFORMED
                                                           : (sqlite3_int64)e->blob_id[value_type];
            size = e->size[value_type];
        }
    } else {
        psdb__pf_index_start(f);
        if ((hr = psdb__pf_conn_get(f, &c)) < 0)
            goto cleanup;
        if (c->cache.key_size == key_size && memcmp(c->cache.key, key, key_size) == 0) {
            k = &c->cache;
        } else {
            /* Long keys bypass the cache (it holds CACHED_KEY_MAX bytes). */
            cached_key *dst = key_size <= CACHED_KEY_MAX ? &c->cache : &uncached;
            if ((hr = load_key(c, key, key_size, dst)) < 0)
                goto cleanup;
            k = dst;
        }
        id = k->blob_id[value_type];
        size = (size_t)k->size[value_type];
    }
    if (id == BLOB_ABSENT) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    if (id == BLOB_MALFORMED) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    if (!value) {
        *value_size = size;
        goto cleanup;
    }
    if (size > *value_size) {
        *value_size = size;
        hr = PSDB_E_MORE_DATA;
        goto cleanup;
    }
    if (!c && (hr = psdb__pf_conn_get(f, &c)) < 0)
        goto cleanup;
    if (psdb__pf_blob_fetch(f, c, id, value, size))
        hr = PSDB_S_OK;
    else if ((uint64_t)id < f->num_verified_slots &&
             atomic_load_explicit(&f->verified[id], memory_order_relaxed) ==
                 (atomic_load_explicit(&f->checked, memory_order_acquire) ? VERIFIED_CHECKED
                                                                          : VERIFIED_ROW))
        hr = read_verified(c, id, value, size);
    else
        hr = read_and_check(f, c, id, value, size);
    if (hr >= 0)
        *value_size = size;
cleanup:
    if (c)
        psdb__pf_conn_put(f, c);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_file_foreach_group(psdb_file *f,
                                int (*fn)(const void *key, size_t key_size, uint64_t version,
                                          uint32_t num_values, void *ctx),
                                void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    static const char *sql = "SELECT key, version, (SELECT count(*) FROM group_members m "
                             "WHERE m.group_key = g.key) FROM value_groups g ORDER BY key";
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!f || !fn) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_file_foreach_group: NULL file or callback");
        goto cleanup;
    }
    if ((hr = psdb__pf_conn_get(f, &c)) < 0)
        goto cleanup;
    if ((rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 n = sqlite3_column_int64(st, 2);
        if (sqlite3_column_type(st, 0) != SQLITE_BLOB ||
            sqlite3_column_type(st, 1) != SQLITE_INTEGER || n < 0 || n > UINT32_MAX) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        const void *key = sqlite3_column_blob(st, 0);
        size_t key_size = (size_t)sqlite3_column_bytes(st, 0);
        if (fn(key, key_size, (uint64_t)sqlite3_column_int64(st, 1), (uint32_t)n, ctx) != 0) {
            hr = PSDB_S_FALSE;
            goto cleanup;
        }
    }
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
cleanup:
    sqlite3_finalize(st);
    if (c)
        psdb__pf_conn_put(f, c);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* Runs a query expected to return no row; a row means a broken invariant described by what. */
