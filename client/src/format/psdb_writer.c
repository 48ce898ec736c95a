/* psdb_writer.c - the PSDB writer: staged puts, sorted copy and the content digest at finish. */
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

/* ---- Writing --------------------------------------------------------------------------------- */

/* The staging tables, in a private temporary database: unsorted puts land here. */
static const char stage_sql[] =
    "ATTACH DATABASE '' AS stage;"
    "PRAGMA stage.journal_mode = OFF;"
    "CREATE TABLE stage.blobs (sha256 BLOB PRIMARY KEY, data BLOB NOT NULL);"
    "CREATE TABLE stage.vals (key BLOB NOT NULL, type INTEGER NOT NULL, sha256 BLOB NOT NULL,"
    " PRIMARY KEY (key, type)) WITHOUT ROWID;"
    "CREATE TABLE stage.groups (key BLOB PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE stage.members (group_key BLOB NOT NULL, idx INTEGER NOT NULL,"
    " value_key BLOB NOT NULL, PRIMARY KEY (group_key, idx)) WITHOUT ROWID;"
    "BEGIN;";

/* Copies the staged content into the final tables in sorted order. Blobs are numbered in the order
 * of their first use by (key, type), so the object code and metadata of one key sit side by side
 * (a runtime fetches them one after the other); OR IGNORE keeps the first use of shared bytes. */
static const char copy_sql[] =
    "INSERT OR IGNORE INTO main.blobs (sha256, data) SELECT b.sha256, b.data FROM stage.vals v"
    " JOIN stage.blobs b ON b.sha256 = v.sha256 ORDER BY v.key, v.type;"
    "INSERT INTO main.value_entries (key, type, blob_id, size)"
    " SELECT v.key, v.type, b.id, length(b.data)"
    " FROM stage.vals v JOIN main.blobs b ON b.sha256 = v.sha256 ORDER BY v.key, v.type;"
    "INSERT INTO main.value_groups (key, version) SELECT key, version FROM stage.groups"
    " ORDER BY key;"
    "INSERT INTO main.group_members (group_key, idx, value_key)"
    " SELECT group_key, idx, value_key FROM stage.members ORDER BY group_key, idx;";

enum {
    W_GET_VAL,
    W_PUT_BLOB,
    W_PUT_VAL,
    W_HAS_KEY,
    W_HAS_GROUP,
    W_PUT_GROUP,
    W_PUT_MEMBER,
    W_COUNT
};

static const char *const writer_sql[W_COUNT] = {
    "SELECT sha256 FROM stage.vals WHERE key = ?1 AND type = ?2",
    "INSERT OR IGNORE INTO stage.blobs (sha256, data) VALUES (?1, ?2)",
    "INSERT INTO stage.vals (key, type, sha256) VALUES (?1, ?2, ?3)",
    "SELECT 1 FROM stage.vals WHERE key = ?1 LIMIT 1",
    "SELECT 1 FROM stage.groups WHERE key = ?1",
    "INSERT INTO stage.groups (key, version) VALUES (?1, ?2)",
    "INSERT INTO stage.members (group_key, idx, value_key) VALUES (?1, ?2, ?3)",
};

struct psdb_writer {
    char *path, *tmp_path;
    sqlite3 *db;
    sqlite3_stmt *st[W_COUNT];
    psdb_app_identity identity;
    psdb_target target;
    psdb_hr broken; /* sticky failure after which the writer only accepts release */
    int finished;
};

static void writer_close_db(psdb_writer *w)
{
    for (int i = 0; i < W_COUNT; i++) {
        sqlite3_finalize(w->st[i]);
        w->st[i] = NULL;
    }
    sqlite3_close(w->db);
    w->db = NULL;
}

void psdb_writer_release(psdb_writer *w)
{
    if (!w)
        return;
    writer_close_db(w);
    if (!w->finished && w->tmp_path)
        unlink(w->tmp_path);
    free(w->path);
    free(w->tmp_path);
    free((char *)w->identity.desc.exe_filename);
    free((char *)w->identity.desc.name);
    free((char *)w->identity.desc.engine_name);
    free((char *)w->target.family);
    free(w);
}

static int valid_identity(const psdb_app_identity *id)
{
    return id->desc.name && id->desc.name[0] &&
           (id->desc.engine_name || id->desc.engine_version == 0);
}

static int valid_target(const psdb_target *t)
{
    return t->family && t->family[0] && strlen(t->family) < PSDB_ADAPTER_FAMILY_MAX &&
           t->abi_version != 0 && t->abi_version != UINT64_MAX;
}

psdb_hr psdb_writer_create(const char *path, const psdb_app_identity *identity,
                           const psdb_target *target, psdb_writer **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_writer *w = NULL;
    size_t n = 0;
    int rc = SQLITE_OK;

    if (!path || !path[0] || !identity || !target || !out || !valid_identity(identity) ||
        !valid_target(target)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_writer_create: NULL or empty path, NULL identity, target or "
                               "out, or an invalid identity or target");
        goto cleanup;
    }
    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (!w) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    n = strlen(path);
    w->path = psdb__strdup(path);
    w->tmp_path = malloc(n + 5);
    w->identity = *identity;
    w->identity.desc.exe_filename = psdb__strdup(identity->desc.exe_filename);
    w->identity.desc.name = psdb__strdup(identity->desc.name);
    w->identity.desc.engine_name = psdb__strdup(identity->desc.engine_name);
    w->target = *target;
    w->target.family = psdb__strdup(target->family);
    if (!w->path || !w->tmp_path || !w->identity.desc.name || !w->target.family ||
        (identity->desc.exe_filename && !w->identity.desc.exe_filename) ||
        (identity->desc.engine_name && !w->identity.desc.engine_name)) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, ".tmp", 5);
    if (unlink(w->tmp_path) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
        hr = psdb__errno_hr(errno);
        goto cleanup;
    }
    rc = sqlite3_open_v2(w->tmp_path, &w->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        hr = w->db ? (rc == SQLITE_CANTOPEN ? PSDB_E_IO : psdb__sqlite_hr(rc, PSDB_E_IO))
                   : PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* No journal: the file is private until the rename, and a crash leaves only path.tmp. */
    rc = sqlite3_exec(w->db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;", NULL, NULL,
                      NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(w->db, psdb__psdb_schema_sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(w->db, stage_sql, NULL, NULL, NULL);
    for (int i = 0; rc == SQLITE_OK && i < W_COUNT; i++)
        rc = sqlite3_prepare_v3(w->db, writer_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &w->st[i],
                                NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    *out = w;
    w = NULL;
cleanup:
    psdb_writer_release(w);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* Steps a write statement once and resets it. */
static int step_reset(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

psdb_hr psdb_writer_put_value(psdb_writer *w, const void *key, size_t key_size, uint32_t value_type,
                              const void *value, size_t value_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t digest[32];
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!w || w->finished || !key || key_size == 0 || key_size > MAX_ITEM_SIZE ||
        value_type >= PSDB_VALUE_TYPE_COUNT || !value || value_size == 0 ||
        value_size > MAX_ITEM_SIZE) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_writer_put_value: NULL writer, key or value, an empty or oversized key or value, "
            "an unknown value type, or a writer already finished");
        goto cleanup;
    }
    if (w->broken < 0) {
        hr = w->broken;
        goto cleanup;
    }
    psdb__sha256(value, value_size, digest);

    st = w->st[W_GET_VAL];
    if ((rc = psdb__pf_bind_bytes(st, 1, key, key_size)) != SQLITE_OK ||
        (rc = sqlite3_bind_int(st, 2, (int)value_type)) != SQLITE_OK)
        goto sqlite_fail;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int same = sqlite3_column_bytes(st, 0) == 32 &&
                   memcmp(sqlite3_column_blob(st, 0), digest, 32) == 0;
        sqlite3_reset(st);
        hr = same ? PSDB_S_FALSE : PSDB_E_CACHE_HASH_COLLISION;
        goto cleanup;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        goto sqlite_fail;

    st = w->st[W_PUT_BLOB];
    if ((rc = psdb__pf_bind_bytes(st, 1, digest, 32)) != SQLITE_OK ||
        (rc = psdb__pf_bind_bytes(st, 2, value, value_size)) != SQLITE_OK ||
        (rc = step_reset(st)) != SQLITE_DONE)
        goto sqlite_fail;
    st = w->st[W_PUT_VAL];
    if ((rc = psdb__pf_bind_bytes(st, 1, key, key_size)) != SQLITE_OK ||
        (rc = sqlite3_bind_int(st, 2, (int)value_type)) != SQLITE_OK ||
        (rc = psdb__pf_bind_bytes(st, 3, digest, 32)) != SQLITE_OK ||
        (rc = step_reset(st)) != SQLITE_DONE)
        goto sqlite_fail;
    goto cleanup;

sqlite_fail:
    hr = w->broken = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    if (st)
        sqlite3_clear_bindings(st);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_writer_put_group(psdb_writer *w, const void *group_key, size_t key_size,
                              uint64_t version, uint32_t num_values, const psdb_value_ref *values)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!w || w->finished || !group_key || key_size == 0 || key_size > MAX_ITEM_SIZE ||
        (num_values > 0 && !values)) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_writer_put_group: NULL writer or group key, an empty or oversized key, values "
            "NULL with a count, or a writer already finished");
        goto cleanup;
    }
    for (uint32_t i = 0; i < num_values; i++) {
        if (!values[i].key || values[i].key_size == 0 || values[i].key_size > MAX_ITEM_SIZE) {
            hr = psdb__error_const(
                PSDB_E_INVALIDARG,
                "psdb_writer_put_group: a value reference with a NULL, empty or oversized key");
            goto cleanup;
        }
    }
    if (w->broken < 0) {
        hr = w->broken;
        goto cleanup;
    }
    st = w->st[W_HAS_GROUP];
    if ((rc = psdb__pf_bind_bytes(st, 1, group_key, key_size)) != SQLITE_OK)
        goto sqlite_fail;
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_ROW) {
        hr = PSDB_E_ALREADY_EXISTS;
        goto cleanup;
    }
    if (rc != SQLITE_DONE)
        goto sqlite_fail;
    st = w->st[W_HAS_KEY];
    for (uint32_t i = 0; i < num_values; i++) {
        if ((rc = psdb__pf_bind_bytes(st, 1, values[i].key, values[i].key_size)) != SQLITE_OK)
            goto sqlite_fail;
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc == SQLITE_DONE) {
            hr = PSDB_E_NOT_FOUND;
            goto cleanup;
        }
        if (rc != SQLITE_ROW)
            goto sqlite_fail;
    }
    st = w->st[W_PUT_GROUP];
    if ((rc = psdb__pf_bind_bytes(st, 1, group_key, key_size)) != SQLITE_OK ||
        (rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)version)) != SQLITE_OK ||
        (rc = step_reset(st)) != SQLITE_DONE)
        goto sqlite_fail;
    st = w->st[W_PUT_MEMBER];
    for (uint32_t i = 0; i < num_values; i++) {
        if ((rc = psdb__pf_bind_bytes(st, 1, group_key, key_size)) != SQLITE_OK ||
            (rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)i)) != SQLITE_OK ||
            (rc = psdb__pf_bind_bytes(st, 3, values[i].key, values[i].key_size)) != SQLITE_OK ||
            (rc = step_reset(st)) != SQLITE_DONE)
            goto sqlite_fail;
    }
    goto cleanup;

sqlite_fail:
    hr = w->broken = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    if (st)
        sqlite3_clear_bindings(st);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* fsync a file or directory by path. */
static int fsync_path(const char *path, int dir)
{
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    int rc = -1;

    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

psdb_hr psdb_writer_finish(psdb_writer *w)
{
    const unsigned err_mark = psdb__error_mark();
    static const char *header_sql =
        "INSERT INTO main.header (id, exe_filename, app_name, app_version, engine_name, "
        "engine_version, app_id, family, abi_version, compiler_version, profile_version, "
        "num_values, num_groups, num_blobs, blob_bytes, content_digest) "
        "VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    content_stats cs = {0};
    char *dir = NULL, *slash = NULL;
    const psdb_app_identity *id = NULL;
    int rc = SQLITE_OK;

    if (!w || w->finished) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_writer_finish: NULL writer, or a writer already finished");
        goto cleanup;
    }
    if (w->broken < 0) {
        hr = w->broken;
        goto cleanup;
    }
    id = &w->identity;
    for (int i = 0; i < W_COUNT; i++) {
        sqlite3_finalize(w->st[i]);
        w->st[i] = NULL;
    }
    if ((rc = sqlite3_exec(w->db, copy_sql, NULL, NULL, NULL)) != SQLITE_OK)
        goto sqlite_fail;
    if ((hr = psdb__pf_compute_content(w->db, id, &w->target, NULL, &cs, NULL, 0)) < 0) {
        /* The staged rows were all written by this writer: a failure here is I/O or memory. */
        if (hr == PSDB_E_CACHE_CORRUPT)
            hr = PSDB_E_IO;
        goto fail;
    }
    if ((rc = sqlite3_prepare_v2(w->db, header_sql, -1, &st, NULL)) != SQLITE_OK)
        goto sqlite_fail;
    if (id->desc.exe_filename)
        rc = sqlite3_bind_text(st, 1, id->desc.exe_filename, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 2, id->desc.name, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 3, (sqlite3_int64)id->desc.version);
    if (rc == SQLITE_OK && id->desc.engine_name)
        rc = sqlite3_bind_text(st, 4, id->desc.engine_name, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 5, (sqlite3_int64)id->desc.engine_version);
    if (rc == SQLITE_OK)
        rc = psdb__pf_bind_bytes(st, 6, id->app_id, 16);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 7, w->target.family, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 8, (sqlite3_int64)w->target.abi_version);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 9, (sqlite3_int64)w->target.compiler_version);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 10, (sqlite3_int64)w->target.profile_version);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 11, (sqlite3_int64)cs.num_values);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 12, (sqlite3_int64)cs.num_groups);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 13, (sqlite3_int64)cs.num_blobs);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 14, (sqlite3_int64)cs.blob_bytes);
    if (rc == SQLITE_OK)
        rc = psdb__pf_bind_bytes(st, 15, cs.digest, 32);
    if (rc != SQLITE_OK || (rc = sqlite3_step(st)) != SQLITE_DONE)
        goto sqlite_fail;
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = sqlite3_exec(w->db, "COMMIT; DETACH DATABASE stage;", NULL, NULL, NULL)) != SQLITE_OK)
        goto sqlite_fail;
    rc = sqlite3_close(w->db);
    w->db = NULL;
    if (rc != SQLITE_OK)
        goto sqlite_fail;

    if (fsync_path(w->tmp_path, 0) != 0 || rename(w->tmp_path, w->path) != 0) {
        hr = psdb__errno_hr(errno);
        goto fail;
    }
    w->finished = 1;
    /* The rename is durable once the directory is synced; a failure here leaves a complete file. */
    dir = psdb__strdup(w->path);
    if (!dir) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    if (fsync_path(slash ? dir : ".", 1) != 0)
        hr = PSDB_E_IO;
    goto cleanup;

sqlite_fail:
    hr = psdb__sqlite_hr(rc, PSDB_E_IO);
fail:
    w->broken = hr;
cleanup:
    sqlite3_finalize(st);
    free(dir);
    return psdb__error_ret(hr, err_mark, __func__);
}
