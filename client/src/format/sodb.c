/* sodb.c - the SODB container: a SQLite file of encoded creation descriptions (schema/SODB.md). */
#include "format/sodb.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "format/desc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/migrate.h"
#include "common/status_map.h"
#include "common/error.h"

#define SODB_APPLICATION_ID 0x50534F44 /* 'PSOD' */
#define SODB_USER_VERSION 1

/* schema/sodb.sql itself, embedded by psdb_embed_sql. */
extern const psdb__sql_set psdb__sodb_schema;

struct psdb_sodb_writer {
    pthread_mutex_t lock; /* one add at a time: the statement and connection are shared */
    sqlite3 *db;
    sqlite3_stmt *insert;
    int bulk;
    /* The encoding of a typed add, reused under the lock: a buffer freed after every add had the
     * allocator give the top of its heap back and take it again each time (psdb synth spent
     * about twice the system time). */
    psdb__buf scratch;
};

struct psdb_sodb {
    sqlite3 *db;
    psdb_app_identity identity; /* strings owned */
};

static int pragma_int(sqlite3 *db, const char *sql, int *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

static int identity_valid(const psdb_app_identity *id)
{
    if (!id || !id->desc.name || !*id->desc.name || id->desc.version == 0)
        return 0;
    if (!id->desc.engine_name && id->desc.engine_version != 0)
        return 0;
    return 1;
}

/* Checks the pragmas and the header: 1 = an SODB, 0 = an empty database (no tables), else fails. */
static psdb_hr check_sodb(sqlite3 *db, int *is_sodb)
{
    int app_id = 0, user_version = 0, tables = 0, rc;
    *is_sodb = 0;
    rc = pragma_int(db, "PRAGMA application_id", &app_id);
    if (rc == SQLITE_OK)
        rc = pragma_int(db, "PRAGMA user_version", &user_version);
    if (rc == SQLITE_OK)
        rc = pragma_int(db, "SELECT count(*) FROM sqlite_master", &tables);
    if (rc != SQLITE_OK)
        return psdb__sqlite_hr(rc, PSDB_E_IO) == PSDB_E_IO ? PSDB_E_CACHE_CORRUPT
                                                           : psdb__sqlite_hr(rc, PSDB_E_IO);
    if (app_id == 0 && user_version == 0 && tables == 0)
        return PSDB_S_OK;
    if ((uint32_t)app_id != SODB_APPLICATION_ID || user_version != SODB_USER_VERSION)
        return psdb__error_const(PSDB_E_CACHE_CORRUPT,
                                 "sodb: not an SODB (another application id or schema version)");
    *is_sodb = 1;
    return PSDB_S_OK;
}

static void free_identity(psdb_app_identity *id)
{
    free((char *)id->desc.exe_filename);
    free((char *)id->desc.name);
    free((char *)id->desc.engine_name);
    memset(id, 0, sizeof(*id));
}

static char *column_text(sqlite3_stmt *st, int col, int *oom)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        return NULL;
    const unsigned char *t = sqlite3_column_text(st, col);
    char *s = psdb__strdup((const char *)(t ? t : (const unsigned char *)""));
    if (!s)
        *oom = 1;
    return s;
}

/* Reads the one header row into *out (strings malloc'd). */
static psdb_hr read_header(sqlite3 *db, psdb_app_identity *out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int oom = 0;
    memset(out, 0, sizeof(*out));
    int rc = sqlite3_prepare_v2(db,
                                "SELECT exe_filename, app_name, app_version, engine_name, "
                                "engine_version, app_id, encoding_version FROM header",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = rc == SQLITE_NOMEM ? PSDB_E_OUTOFMEMORY : PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW || sqlite3_column_type(st, 1) != SQLITE_TEXT ||
        sqlite3_column_type(st, 5) != SQLITE_BLOB || sqlite3_column_bytes(st, 5) != 16 ||
        sqlite3_column_int64(st, 6) != PSDB__DESC_VERSION) {
        hr = rc == SQLITE_ROW || rc == SQLITE_DONE ? PSDB_E_CACHE_CORRUPT
                                                   : psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    out->desc.exe_filename = column_text(st, 0, &oom);
    out->desc.name = column_text(st, 1, &oom);
    out->desc.version = (uint64_t)sqlite3_column_int64(st, 2);
    out->desc.engine_name = column_text(st, 3, &oom);
    out->desc.engine_version = (uint64_t)sqlite3_column_int64(st, 4);
    memcpy(out->app_id, sqlite3_column_blob(st, 5), 16);
    if (oom) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (sqlite3_step(st) != SQLITE_DONE)
        hr = PSDB_E_CACHE_CORRUPT; /* more than one header row */
cleanup:
    sqlite3_finalize(st);
    if (PSDB_FAILED(hr))
        free_identity(out);
    return hr;
}

static psdb_hr create_schema(sqlite3 *db, const psdb_app_identity *id)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_exec(db, psdb__sodb_schema.files[0].sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db,
                                "INSERT INTO header (id, exe_filename, app_name, app_version, "
                                "engine_name, engine_version, app_id, encoding_version) "
                                "VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    if (id->desc.exe_filename)
        sqlite3_bind_text(st, 1, id->desc.exe_filename, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, id->desc.name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)id->desc.version);
    if (id->desc.engine_name)
        sqlite3_bind_text(st, 4, id->desc.engine_name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)id->desc.engine_version);
    sqlite3_bind_blob(st, 6, id->app_id, 16, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, PSDB__DESC_VERSION);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

static psdb_hr writer_open(const char *path, const psdb_app_identity *identity, int bulk,
                           psdb_sodb_writer **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb_writer *w = NULL;
    psdb_app_identity existing = {0};
    int is_sodb = 0, in_tx = 0, rc;

    if (!out)
        return psdb__error_const(PSDB_E_INVALIDARG, "sodb writer: NULL out");
    *out = NULL;
    if (!path || !*path || !identity_valid(identity))
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "sodb writer: NULL or empty path, or an invalid identity");
    w = calloc(1, sizeof(*w));
    if (!w)
        return PSDB_E_OUTOFMEMORY;
    w->bulk = bulk;
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w);
        return PSDB_E_OUTOFMEMORY;
    }
    rc = sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__error_set(rc == SQLITE_NOMEM ? PSDB_E_OUTOFMEMORY : PSDB_E_IO,
                             "sodb writer: open %s: %s", path, sqlite3_errstr(rc));
        goto cleanup;
    }
    sqlite3_busy_timeout(w->db, 10000);
    /* Creation and the identity check happen under the write lock, so two processes opening the
     * same new path agree on one header. */
    rc = sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO) == PSDB_E_IO ? PSDB_E_CACHE_CORRUPT
                                                         : psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    in_tx = 1;
    hr = check_sodb(w->db, &is_sodb);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (is_sodb) {
        hr = read_header(w->db, &existing);
        if (PSDB_FAILED(hr))
            goto cleanup;
        if (strcmp(existing.desc.name, identity->desc.name) != 0) {
            hr = psdb__error_set(PSDB_E_INVALIDARG,
                                 "sodb writer: %s holds another application's pipelines", path);
            goto cleanup;
        }
    } else {
        hr = create_schema(w->db, identity);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    rc = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    in_tx = 0;
    /* Capture: WAL so each durable add costs one sequential write + fsync. Bulk: a rollback
     * journal, so the finished file stands alone and the same adds give the same bytes. */
    rc =
        sqlite3_exec(w->db,
                     bulk ? "PRAGMA journal_mode=DELETE; PRAGMA synchronous=NORMAL; BEGIN IMMEDIATE"
                          : "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL",
                     NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(w->db,
                                "INSERT OR IGNORE INTO entries (kind, object_key, version, "
                                "description) VALUES (?, ?, ?, ?)",
                                -1, &w->insert, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    *out = w;
    w = NULL;
cleanup:
    if (in_tx)
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    free_identity(&existing);
    psdb_sodb_writer_release(w);
    return hr;
}

psdb_hr psdb_sodb_writer_open(const char *path, const psdb_app_identity *identity,
                              psdb_sodb_writer **out)
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(writer_open(path, identity, 0, out), err_mark, __func__);
}

psdb_hr psdb_sodb_writer_open_ex(const char *path, const psdb_app_identity *identity,
                                 uint32_t flags, psdb_sodb_writer **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (flags & ~PSDB_SODB_WRITER_BULK) {
        if (out)
            *out = NULL;
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_sodb_writer_open_ex: unknown flags 0x%x",
                             (unsigned)(flags & ~PSDB_SODB_WRITER_BULK));
    } else {
        hr = writer_open(path, identity, (flags & PSDB_SODB_WRITER_BULK) != 0, out);
    }
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb__sodb_writer_open_bulk(const char *path, const psdb_app_identity *identity,
                                    psdb_sodb_writer **out)
{
    return writer_open(path, identity, 1, out);
}

psdb_hr psdb__sodb_writer_commit(psdb_sodb_writer *w)
{
    if (!w)
        return psdb__error_const(PSDB_E_INVALIDARG, "sodb writer commit: NULL writer");
    pthread_mutex_lock(&w->lock);
    psdb_hr hr = PSDB_S_OK;
    if (!w->bulk) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "sodb writer commit: no bulk transaction (the writer was opened "
                               "without PSDB_SODB_WRITER_BULK, or committed already)");
    } else {
        int rc = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            w->bulk = 0; /* later adds commit one by one */
        else
            hr = psdb__error_set(psdb__sqlite_hr(rc, PSDB_E_IO), "sodb writer commit: %s",
                                 sqlite3_errmsg(w->db));
    }
    pthread_mutex_unlock(&w->lock);
    return hr;
}

psdb_hr psdb_sodb_writer_commit(psdb_sodb_writer *w)
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(psdb__sodb_writer_commit(w), err_mark, __func__);
}

/* The kind a description's magic names, 0 for none: the encodings of desc.h, and the Vulkan
 * encodings of schema/SODB.md section 3, which only the Vulkan layer writes and reads. */
static uint32_t sodb_kind(const void *desc, size_t size)
{
    if (size >= 4 && memcmp(desc, "VKCP", 4) == 0)
        return PSDB_SODB_VK_COMPUTE;
    if (size >= 4 && memcmp(desc, "VKGP", 4) == 0)
        return PSDB_SODB_VK_GRAPHICS;
    return psdb__desc_kind(desc, size);
}

/* Inserts one checked description with its key; the caller holds w->lock. */
static psdb_hr insert_locked(psdb_sodb_writer *w, uint32_t kind, const uint8_t key[32],
                             uint64_t version, const void *desc, size_t desc_size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_bind_int(w->insert, 1, (int)kind);
    sqlite3_bind_blob(w->insert, 2, key, 32, SQLITE_STATIC);
    sqlite3_bind_int64(w->insert, 3, (sqlite3_int64)version);
    sqlite3_bind_blob(w->insert, 4, desc, (int)desc_size, SQLITE_STATIC);
    int rc = sqlite3_step(w->insert);
    if (rc == SQLITE_DONE)
        hr = sqlite3_changes(w->db) == 0 ? PSDB_S_FALSE : PSDB_S_OK;
    else
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
    sqlite3_reset(w->insert);
    sqlite3_clear_bindings(w->insert);
    return hr;
}

static psdb_hr writer_add(psdb_sodb_writer *w, uint32_t kind, uint64_t version, const void *desc,
                          size_t desc_size)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t key[32];

    if (!w || !desc || desc_size == 0 || desc_size > INT32_MAX || kind == 0 ||
        sodb_kind(desc, desc_size) != kind)
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "psdb_sodb_writer_add: NULL writer or desc, a bad size, or a "
                                 "description that is not of the given kind");
    psdb__sha256(desc, desc_size, key);
    pthread_mutex_lock(&w->lock);
    hr = insert_locked(w, kind, key, version, desc, desc_size);
    pthread_mutex_unlock(&w->lock);
    return hr;
}

psdb_hr psdb_sodb_writer_add(psdb_sodb_writer *w, uint32_t kind, uint64_t version, const void *desc,
                             size_t desc_size)
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(writer_add(w, kind, version, desc, desc_size), err_mark, __func__);
}

/* ---- D3D12-shaped descriptions: encoded here (desc.h), recorded or hashed ------------------- */

/* One description of `kind` (PSDB_SODB_COMPUTE, _GRAPHICS or _STATE_OBJECT) encoded into b's
 * storage (desc.h: psdb__desc_encode_into). */
static psdb_hr encode(uint32_t kind, const void *desc, psdb__buf *b, const char *what)
{
    psdb_hr hr = PSDB_S_OK;
    if (!desc)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL description", what);
    /* A live collection has no recorded key here: the encoder refuses it. */
    hr = psdb__desc_encode_into(kind, desc, b);
    if (hr == PSDB_E_INVALIDARG)
        return psdb__error_set(hr,
                               "%s: a description the SODB encoding cannot hold (a NULL pointer "
                               "with a count or size, a byte string of 4 GiB or more, an unknown "
                               "or NULL subobject, an existing collection)",
                               what);
    return hr;
}

/* Encodes desc, a description of `kind`, and records it with w at version (encoded into the
 * writer's scratch buffer, under its lock). */
static psdb_hr encode_then(uint32_t kind, const void *desc, psdb_sodb_writer *w, uint64_t version,
                           const char *what)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t k[32];
    if (!w)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL writer", what);
    pthread_mutex_lock(&w->lock);
    hr = encode(kind, desc, &w->scratch, what);
    if (PSDB_SUCCEEDED(hr)) {
        psdb__sha256(w->scratch.data, w->scratch.len, k);
        hr = insert_locked(w, kind, k, version, w->scratch.data, w->scratch.len);
    }
    pthread_mutex_unlock(&w->lock);
    return hr;
}

psdb_hr psdb_sodb_writer_add_compute(psdb_sodb_writer *w, uint64_t version,
                                     const psdb_compute_pipeline_desc *desc)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = encode_then(PSDB_SODB_COMPUTE, desc, w, version, __func__);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_sodb_writer_add_graphics(psdb_sodb_writer *w, uint64_t version,
                                      const psdb_graphics_pipeline_desc *desc)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = encode_then(PSDB_SODB_GRAPHICS, desc, w, version, __func__);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_sodb_writer_add_state_object(psdb_sodb_writer *w, uint64_t version,
                                          const psdb_state_object_desc *desc)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = encode_then(PSDB_SODB_STATE_OBJECT, desc, w, version, __func__);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* The key calls: the object key of desc's encoding into out. */
static psdb_hr desc_key(uint32_t kind, const void *desc, uint8_t out[32], const char *what)
{
    psdb__buf b = {0};
    psdb_hr hr;
    if (!out)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL out", what);
    hr = encode(kind, desc, &b, what);
    if (PSDB_SUCCEEDED(hr))
        psdb__sha256(b.data, b.len, out);
    psdb__buf_free(&b);
    return hr;
}

psdb_hr psdb_sodb_compute_key(const psdb_compute_pipeline_desc *desc, uint8_t out[32])
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(desc_key(PSDB_SODB_COMPUTE, desc, out, __func__), err_mark, __func__);
}

psdb_hr psdb_sodb_graphics_key(const psdb_graphics_pipeline_desc *desc, uint8_t out[32])
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(desc_key(PSDB_SODB_GRAPHICS, desc, out, __func__), err_mark, __func__);
}

psdb_hr psdb_sodb_state_object_key(const psdb_state_object_desc *desc, uint8_t out[32])
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(desc_key(PSDB_SODB_STATE_OBJECT, desc, out, __func__), err_mark,
                           __func__);
}

void psdb_sodb_writer_release(psdb_sodb_writer *w)
{
    if (!w)
        return;
    sqlite3_finalize(w->insert);
    if (w->db) {
        if (w->bulk)
            sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        else {
            /* Back to a rollback journal so the file reads alone (also from read-only places).
             * While another connection still has the file open this fails at once (no busy
             * wait) and the file stays in WAL mode until the last writer closes. */
            sqlite3_busy_timeout(w->db, 0);
            sqlite3_exec(w->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
        }
        sqlite3_close(w->db);
    }
    pthread_mutex_destroy(&w->lock);
    psdb__buf_free(&w->scratch);
    free(w);
}

/* ---- Reading --------------------------------------------------------------------------------- */

psdb_hr psdb_sodb_open(const char *path, psdb_sodb **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *s = NULL;
    int is_sodb = 0, rc;

    if (!out)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    *out = NULL;
    if (!path)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    s = calloc(1, sizeof(*s));
    if (!s)
        return psdb__error_ret(PSDB_E_OUTOFMEMORY, err_mark, __func__);
    rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__error_set(rc == SQLITE_NOMEM ? PSDB_E_OUTOFMEMORY : PSDB_E_IO,
                             "psdb_sodb_open: %s: %s", path, sqlite3_errstr(rc));
        goto cleanup;
    }
    sqlite3_busy_timeout(s->db, 10000);
    hr = check_sodb(s->db, &is_sodb);
    /* An SODB left in WAL mode (its writer killed) is read with its -wal through the -shm index;
     * SQLite cannot read it where that index is missing and cannot be created. Not corruption:
     * said as what it is. */
    if (PSDB_FAILED(hr) && (sqlite3_errcode(s->db) & 0xFF) == SQLITE_CANTOPEN)
        hr = psdb__error_set(PSDB_E_ACCESS,
                             "psdb_sodb_open: %s: cannot open its write-ahead log (%s-wal, -shm): "
                             "%s (an SODB left in WAL mode needs its -wal and -shm beside it, or a "
                             "folder it may create them in)",
                             path, path, sqlite3_errmsg(s->db));
    if (PSDB_SUCCEEDED(hr) && !is_sodb)
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT, "psdb_sodb_open: %s: not an SODB", path);
    if (PSDB_SUCCEEDED(hr))
        hr = read_header(s->db, &s->identity);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = s;
    s = NULL;
cleanup:
    psdb_sodb_release(s);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_sodb_get_identity(psdb_sodb *s, psdb_app_identity *out)
{
    const unsigned err_mark = psdb__error_mark();
    if (!s || !out)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    *out = s->identity;
    return psdb__error_ret(PSDB_S_OK, err_mark, __func__);
}

typedef int (*sodb_visit)(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                          size_t desc_size, void *ctx);

/* Every entry, by capture (seq) or by key then version (the UNIQUE (object_key, version) index
 * gives that order without a sort), each description checked against its key; func names the
 * public call in the error channel. */
static psdb_hr walk(psdb_sodb *s, int by_key, sodb_visit fn, void *ctx, const char *func)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc;
    if (!s || !fn)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, func);
    rc = sqlite3_prepare_v2(s->db,
                            by_key ? "SELECT kind, object_key, version, description FROM entries "
                                     "ORDER BY object_key, version"
                                   : "SELECT kind, object_key, version, description FROM entries "
                                     "ORDER BY seq",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = rc == SQLITE_NOMEM ? PSDB_E_OUTOFMEMORY : PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 kind = sqlite3_column_int64(st, 0);
        const void *key = sqlite3_column_blob(st, 1);
        int key_len = sqlite3_column_bytes(st, 1);
        const void *desc = sqlite3_column_blob(st, 3);
        int desc_len = sqlite3_column_bytes(st, 3);
        uint8_t digest[32];
        if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || kind < PSDB_SODB_COMPUTE ||
            kind > PSDB_SODB_VK_GRAPHICS || sqlite3_column_type(st, 1) != SQLITE_BLOB ||
            key_len != 32 || sqlite3_column_type(st, 2) != SQLITE_INTEGER ||
            sqlite3_column_type(st, 3) != SQLITE_BLOB || desc_len <= 0) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        /* The key names the bytes: a mismatch is corruption, not a different object. */
        psdb__sha256(desc, (size_t)desc_len, digest);
        if (memcmp(digest, key, 32) != 0) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        if (fn((uint32_t)kind, key, (uint64_t)sqlite3_column_int64(st, 2), desc, (size_t)desc_len,
               ctx) != 0) {
            hr = PSDB_S_FALSE;
            goto cleanup;
        }
    }
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_IO) == PSDB_E_IO ? PSDB_E_CACHE_CORRUPT
                                                         : psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    sqlite3_finalize(st);
    return psdb__error_ret(hr, err_mark, func);
}

psdb_hr psdb_sodb_foreach(psdb_sodb *s, sodb_visit fn, void *ctx)
{
    return walk(s, 0, fn, ctx, __func__);
}

psdb_hr psdb_sodb_foreach_by_key(psdb_sodb *s, sodb_visit fn, void *ctx)
{
    return walk(s, 1, fn, ctx, __func__);
}

psdb_hr psdb__sodb_count(psdb_sodb *s, uint64_t *out)
{
    sqlite3_stmt *st = NULL;
    psdb_hr hr = PSDB_E_CACHE_CORRUPT;
    if (!s || !out)
        return PSDB_E_INVALIDARG;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM entries", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        *out = (uint64_t)sqlite3_column_int64(st, 0);
        hr = PSDB_S_OK;
    }
    sqlite3_finalize(st);
    return hr;
}

void psdb_sodb_release(psdb_sodb *s)
{
    if (!s)
        return;
    free_identity(&s->identity);
    sqlite3_close(s->db);
    free(s);
}
