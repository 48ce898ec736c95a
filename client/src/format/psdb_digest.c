/* psdb_digest.c - the PSDB content digest (schema/PSDB.md) and small helpers of the reader and
 * writer. */
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

/* ---- Shared helpers -------------------------------------------------------------------------- */

void psdb__pf_set_msg(char *msg, size_t msg_size, const char *fmt, ...)
{
    va_list ap;
    if (!msg || msg_size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
}
/* Maps a SQLite result met while writing a PSDB. */
uint32_t psdb__pf_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int psdb__sqlite_application_id(const char *path, uint32_t *out)
{
    uint8_t h[SQLITE_HEADER_SIZE];
    int fd = -1, rc = -1;
    ssize_t n = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto cleanup;
    n = pread(fd, h, sizeof(h), 0);
    if (n != (ssize_t)sizeof(h) || memcmp(h, "SQLite format 3", 16) != 0)
        goto cleanup;
    *out = psdb__pf_be32(h + 68);
    rc = 0;
cleanup:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Binds a byte string that outlives the statement's step. */
int psdb__pf_bind_bytes(sqlite3_stmt *st, int idx, const void *p, size_t n)
{
    return sqlite3_bind_blob64(st, idx, n ? p : "", (sqlite3_uint64)n, SQLITE_STATIC);
}

/* The canonical serialisation of the header part of the content digest (schema/PSDB.md). */
static void digest_header(psdb__buf *b, const psdb_app_identity *id, const psdb_target *t)
{
    psdb__buf_u32(b, PSDB__PSDB_APPLICATION_ID);
    psdb__buf_u32(b, PSDB__PSDB_SCHEMA_VERSION);
    psdb__buf_str(b, id->desc.exe_filename);
    psdb__buf_str(b, id->desc.name);
    psdb__buf_u64(b, id->desc.version);
    psdb__buf_str(b, id->desc.engine_name);
    psdb__buf_u64(b, id->desc.engine_version);
    psdb__buf_append(b, id->app_id, 16);
    psdb__buf_str(b, t->family);
    psdb__buf_u64(b, t->abi_version);
    psdb__buf_u64(b, t->compiler_version);
    psdb__buf_u64(b, t->profile_version);
}

/* The serialisation of the content digest goes through this buffer: one SHA-256 update per 16 KiB
 * instead of five per value and three per group member (measured: the calls cost more than the
 * hashing on a file of 63k values). The digest is that of the same bytes. */
#define DIGEST_STAGE 16384u

typedef struct digest_stage {
    psdb__sha256_ctx *sha;
    size_t len;
    uint8_t buf[DIGEST_STAGE];
} digest_stage;

static void stage_flush(digest_stage *d)
{
    psdb__sha256_update(d->sha, d->buf, d->len);
    d->len = 0;
}

static void stage_put(digest_stage *d, const void *p, size_t n)
{
    if (n > DIGEST_STAGE - d->len)
        stage_flush(d);
    if (n >= DIGEST_STAGE) {
        psdb__sha256_update(d->sha, p, n); /* a long key: straight through */
        return;
    }
    memcpy(d->buf + d->len, p, n);
    d->len += n;
}

static void stage_le32(digest_stage *d, uint32_t v)
{
    uint8_t rec[4];
    psdb__put_le32(rec, v);
    stage_put(d, rec, sizeof(rec));
}

/* Streams the content of the main tables of db through SHA-256 in the canonical order and counts
 * rows. Used by the writer at finish and by psdb_file_verify, so both agree by construction. */
psdb_hr psdb__pf_compute_content(sqlite3 *db, const psdb_app_identity *id, const psdb_target *t,
                                 const content_blobs *blobs, content_stats *out, char *msg,
                                 size_t msg_size)
{
    static const char *join_sql =
        "SELECT v.key, v.type, b.sha256 FROM value_entries v LEFT JOIN blobs b ON b.id = v.blob_id "
        "ORDER BY v.key, v.type";
    /* With the digests at hand, value_entries alone: a scan of its rows, no blob page read. */
    static const char *ids_sql =
        "SELECT key, type, blob_id, size FROM value_entries ORDER BY key, type";
    const uint8_t(*blob_sha)[32] = blobs ? blobs->sha : NULL;
    const uint64_t num_blob_sha = blobs ? blobs->num : 0;
    const uint32_t *blob_len = blobs ? blobs->len : NULL;
    const char *values_sql = blob_sha ? ids_sql : join_sql;
    static const char *groups_sql = "SELECT key, version, (SELECT count(*) FROM group_members m "
                                    "WHERE m.group_key = g.key) FROM value_groups g ORDER BY key";
    static const char *members_sql =
        "SELECT value_key, idx FROM group_members WHERE group_key = ?1 ORDER BY idx";
    static const char *blobs_sql = "SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs";
    static const char *all_members_sql = "SELECT count(*) FROM group_members";
    psdb_hr hr = PSDB_S_OK;
    psdb__buf b = {0};
    digest_stage *d = NULL;
    sqlite3_stmt *vst = NULL, *gst = NULL, *mst = NULL, *bst = NULL, *ast = NULL;
    content_stats st = {0};
    uint64_t members = 0;
    int rc = SQLITE_OK;

    d = malloc(sizeof(*d));
    if (!d || !(d->sha = psdb__sha256_begin())) {
        free(d);
        d = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    d->len = 0;
    if ((rc = sqlite3_prepare_v2(db, values_sql, -1, &vst, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, groups_sql, -1, &gst, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, members_sql, -1, &mst, NULL)) != SQLITE_OK ||
        (!blob_sha && (rc = sqlite3_prepare_v2(db, blobs_sql, -1, &bst, NULL)) != SQLITE_OK) ||
        (blob_len && (rc = sqlite3_prepare_v2(db, all_members_sql, -1, &ast, NULL)) != SQLITE_OK)) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "content: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    digest_header(&b, id, t);
    if ((hr = psdb__buf_status(&b)) < 0)
        goto cleanup;
    stage_put(d, b.data, b.len);

    while ((rc = sqlite3_step(vst)) == SQLITE_ROW) {
        sqlite3_int64 blob = sqlite3_column_int64(vst, 2);
        if (sqlite3_column_type(vst, 0) != SQLITE_BLOB ||
            sqlite3_column_type(vst, 1) != SQLITE_INTEGER ||
            (blob_sha ? sqlite3_column_type(vst, 2) != SQLITE_INTEGER || blob < 1 ||
                            (uint64_t)blob > num_blob_sha
                      : sqlite3_column_type(vst, 2) != SQLITE_BLOB ||
                            sqlite3_column_bytes(vst, 2) != 32)) {
            hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(msg, msg_size, "value %llu: malformed row or missing blob",
                             (unsigned long long)st.num_values);
            goto cleanup;
        }
        const void *key = sqlite3_column_blob(vst, 0);
        size_t key_size = (size_t)sqlite3_column_bytes(vst, 0);
        /* psdb_file_verify's checks of each value, made on this scan: a key, a type of 0..3, the
         * size of the blob it names (whose bytes were hashed). */
        if (blob_len && (key_size == 0 || sqlite3_column_int64(vst, 1) < 0 ||
                         sqlite3_column_int64(vst, 1) >= (sqlite3_int64)PSDB_VALUE_TYPE_COUNT ||
                         sqlite3_column_type(vst, 3) != SQLITE_INTEGER || blob_len[blob] == 0 ||
                         sqlite3_column_int64(vst, 3) != (sqlite3_int64)blob_len[blob])) {
            hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(msg, msg_size, "value %llu: empty key, bad type or size",
                             (unsigned long long)st.num_values);
            goto cleanup;
        }
        if (blobs && blobs->ref)
            blobs->ref[blob] = 1;
        const void *digest = blob_sha ? blob_sha[blob] : sqlite3_column_blob(vst, 2);
        stage_put(d, "\x01", 1);
        stage_le32(d, (uint32_t)key_size);
        stage_put(d, key, key_size);
        stage_le32(d, (uint32_t)sqlite3_column_int64(vst, 1));
        stage_put(d, digest, 32);
        st.num_values++;
    }
    if (rc != SQLITE_DONE)
        goto sqlite_fail;

    while ((rc = sqlite3_step(gst)) == SQLITE_ROW) {
        sqlite3_int64 n = sqlite3_column_int64(gst, 2);
        uint8_t rec[8];
        uint32_t i = 0;
        if (sqlite3_column_type(gst, 0) != SQLITE_BLOB ||
            sqlite3_column_type(gst, 1) != SQLITE_INTEGER || n < 0 || n > UINT32_MAX ||
            (blob_len && sqlite3_column_bytes(gst, 0) == 0)) {
            hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(msg, msg_size, "group %llu: malformed row",
                             (unsigned long long)st.num_groups);
            goto cleanup;
        }
        const void *key = sqlite3_column_blob(gst, 0);
        size_t key_size = (size_t)sqlite3_column_bytes(gst, 0);
        stage_put(d, "\x02", 1);
        stage_le32(d, (uint32_t)key_size);
        stage_put(d, key, key_size);
        psdb__put_le64(rec, (uint64_t)sqlite3_column_int64(gst, 1));
        stage_put(d, rec, 8);
        stage_le32(d, (uint32_t)n);
        if ((rc = psdb__pf_bind_bytes(mst, 1, key, key_size)) != SQLITE_OK)
            goto sqlite_fail;
        for (; (rc = sqlite3_step(mst)) == SQLITE_ROW; i++) {
            /* With the checks of psdb_file_verify: the members' indexes are 0..n-1. */
            if (sqlite3_column_type(mst, 0) != SQLITE_BLOB ||
                (blob_len && (sqlite3_column_type(mst, 1) != SQLITE_INTEGER ||
                              sqlite3_column_int64(mst, 1) != (sqlite3_int64)i))) {
                hr = PSDB_E_CACHE_CORRUPT;
                psdb__pf_set_msg(msg, msg_size, "group %llu: malformed member",
                                 (unsigned long long)st.num_groups);
                goto cleanup;
            }
            const void *vk = sqlite3_column_blob(mst, 0);
            size_t vk_size = (size_t)sqlite3_column_bytes(mst, 0);
            stage_le32(d, (uint32_t)vk_size);
            stage_put(d, vk, vk_size);
        }
        sqlite3_reset(mst);
        if (rc != SQLITE_DONE)
            goto sqlite_fail;
        if (blob_len && i != (uint64_t)n) {
            hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(msg, msg_size, "group %llu: members miscounted",
                             (unsigned long long)st.num_groups);
            goto cleanup;
        }
        members += i;
        st.num_groups++;
    }
    if (rc != SQLITE_DONE)
        goto sqlite_fail;
    stage_put(d, "\x00", 1);

    /* Every member was met under its group: none belongs to no group. */
    if (ast) {
        if ((rc = sqlite3_step(ast)) != SQLITE_ROW)
            goto sqlite_fail;
        if ((uint64_t)sqlite3_column_int64(ast, 0) != members) {
            hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(msg, msg_size, "a group member belongs to no group");
            goto cleanup;
        }
    }
    if (bst) {
        if ((rc = sqlite3_step(bst)) != SQLITE_ROW)
            goto sqlite_fail;
        st.num_blobs = (uint64_t)sqlite3_column_int64(bst, 0);
        st.blob_bytes = (uint64_t)sqlite3_column_int64(bst, 1);
    }
    stage_flush(d);
    psdb__sha256_end(d->sha, st.digest);
    d->sha = NULL;
    *out = st;
    goto cleanup;

sqlite_fail:
    hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
    psdb__pf_set_msg(msg, msg_size, "content: %s", sqlite3_errmsg(db));
cleanup:
    if (d && d->sha) {
        uint8_t junk[32];
        psdb__sha256_end(d->sha, junk);
    }
    free(d);
    sqlite3_finalize(vst);
    sqlite3_finalize(gst);
    sqlite3_finalize(mst);
    sqlite3_finalize(bst);
    sqlite3_finalize(ast);
    psdb__buf_free(&b);
    return hr;
}

psdb_hr psdb_file_kind(const char *path, uint32_t *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t h[SQLITE_HEADER_SIZE];
    int fd = -1;
    ssize_t n = 0;
    uint32_t appid;

    psdb__error_clear();
    if (out)
        *out = PSDB_FILE_KIND_OTHER;
    if (!path || !out) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_file_kind: NULL path or out");
        goto cleanup;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        hr = psdb__errno_is(e, PSDB__ERRNO_ABSENT) ? PSDB_E_NOT_FOUND : psdb__errno_hr(e);
        psdb__error_set(hr, "open %s: %s", path, strerror(e));
        goto cleanup;
    }
    /* A short file cannot be a database of either kind; a read error (a directory) is a failure. */
    n = pread(fd, h, sizeof(h), 0);
    if (n < 0) {
        int e = errno;
        hr = psdb__error_set(psdb__errno_hr(e), "read %s: %s", path, strerror(e));
        goto cleanup;
    }
    if (n != (ssize_t)sizeof(h) || memcmp(h, "SQLite format 3", 16) != 0)
        goto cleanup;
    appid = psdb__pf_be32(h + 68);
    if (appid == PSDB__PSDB_APPLICATION_ID)
        *out = PSDB_FILE_KIND_PSDB;
    else if (appid == PSDB__SODB_APPLICATION_ID)
        *out = PSDB_FILE_KIND_SODB;
cleanup:
    if (fd >= 0)
        close(fd);
    return psdb__error_ret(hr, err_mark, __func__);
}
