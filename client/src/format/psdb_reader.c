/* psdb_reader.c - opening a PSDB: the raw header, the header row and the compatibility checks,
 * and the handle's lifetime. The connections are in psdb_conn.c, the schema check in
 * psdb_schema.c, lookups in psdb_lookup.c. */
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

/* Checks the raw SQLite header (the first 100 bytes) and the file size before SQLite sees it.
 * On success *fd_out is the open file (the caller's), which every connection then reads. The path
 * is opened without blocking and refused unless it is a regular file: a FIFO, a device or a
 * directory named as a PSDB never hangs or feeds a reader. */
static psdb_hr check_raw_header(const char *path, int *fd_out, uint64_t *file_size, char *msg,
                                size_t msg_size)
{
    psdb_hr hr = PSDB_E_CACHE_CORRUPT;
    uint8_t h[SQLITE_HEADER_SIZE];
    struct stat sb;
    int fd = -1;
    ssize_t n = 0;
    uint32_t page_size = 0, pages = 0;

    *fd_out = -1;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        hr = psdb__errno_hr(errno);
        psdb__pf_set_msg(msg, msg_size, "open: %s", strerror(errno));
        goto cleanup;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        hr = PSDB_E_IO;
        psdb__pf_set_msg(msg, msg_size, "not a regular file (a FIFO, a device or a directory)");
        goto cleanup;
    }
    n = pread(fd, h, sizeof(h), 0);
    if (n < 0) {
        hr = PSDB_E_IO;
        psdb__pf_set_msg(msg, msg_size, "read %s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (n < (ssize_t)sizeof(h) || memcmp(h, "SQLite format 3", 16) != 0) {
        psdb__pf_set_msg(msg, msg_size, "not a SQLite file");
        goto cleanup;
    }
    if (psdb__pf_be32(h + 68) != PSDB__PSDB_APPLICATION_ID) {
        psdb__pf_set_msg(msg, msg_size, "not a PSDB (application_id 0x%08x)",
                         (unsigned)psdb__pf_be32(h + 68));
        goto cleanup;
    }
    if (psdb__pf_be32(h + 60) != PSDB__PSDB_SCHEMA_VERSION) {
        psdb__pf_set_msg(msg, msg_size,
                         "unsupported PSDB schema version %u (this library reads %u)",
                         (unsigned)psdb__pf_be32(h + 60), PSDB__PSDB_SCHEMA_VERSION);
        goto cleanup;
    }
    page_size = (uint32_t)h[16] << 8 | h[17];
    if (page_size == 1)
        page_size = 65536;
    pages = psdb__pf_be32(h + 28);
    if (page_size < 512 || (page_size & (page_size - 1)) != 0 || pages == 0 ||
        psdb__pf_be32(h + 24) != psdb__pf_be32(h + 92)) {
        psdb__pf_set_msg(msg, msg_size, "malformed SQLite header");
        goto cleanup;
    }
    /* Header fields that change how SQLite reads the file, each fixed by how the writer makes it
     * (schema/PSDB.md): rollback journal (18-19), no reserved bytes per page (20), the payload
     * fractions SQLite requires (21-23), schema format 4 (44), no auto_vacuum or incremental
     * vacuum (52, 64), UTF-8 text (56), and the reserved expansion bytes zero (72-91). */
    if (h[18] != 1 || h[19] != 1) {
        psdb__pf_set_msg(msg, msg_size,
                         "SQLite header: not in rollback-journal mode (versions %u/%u)",
                         (unsigned)h[18], (unsigned)h[19]);
        goto cleanup;
    }
    if (h[20] != 0 || h[21] != 64 || h[22] != 32 || h[23] != 32 || psdb__pf_be32(h + 44) != 4) {
        psdb__pf_set_msg(msg, msg_size, "SQLite header: unexpected page layout or schema format %u",
                         (unsigned)psdb__pf_be32(h + 44));
        goto cleanup;
    }
    if (psdb__pf_be32(h + 52) != 0 || psdb__pf_be32(h + 64) != 0) {
        psdb__pf_set_msg(msg, msg_size, "SQLite header: auto_vacuum is on (a PSDB never has it)");
        goto cleanup;
    }
    if (psdb__pf_be32(h + 56) != 1) {
        psdb__pf_set_msg(msg, msg_size, "SQLite header: text encoding %u is not UTF-8",
                         (unsigned)psdb__pf_be32(h + 56));
        goto cleanup;
    }
    for (size_t i = 72; i < 92; i++) {
        if (h[i] != 0) {
            psdb__pf_set_msg(msg, msg_size, "SQLite header: reserved byte %zu is not zero", i);
            goto cleanup;
        }
    }
    if ((uint64_t)sb.st_size != (uint64_t)page_size * pages) {
        psdb__pf_set_msg(msg, msg_size, "%s (%llu bytes, header says %llu)",
                         (uint64_t)sb.st_size < (uint64_t)page_size * pages ? "truncated"
                                                                            : "trailing bytes",
                         (unsigned long long)sb.st_size, (unsigned long long)page_size * pages);
        goto cleanup;
    }
    *file_size = (uint64_t)sb.st_size;
    *fd_out = fd;
    fd = -1;
    hr = PSDB_S_OK;
cleanup:
    if (fd >= 0)
        close(fd);
    return hr;
}

/* Copies a TEXT column (NULL allowed when nullable) that holds no NUL byte. 0 ok, -1 malformed,
 * -2 out of memory. */
static int column_text(sqlite3_stmt *st, int i, int nullable, char **out)
{
    int type = sqlite3_column_type(st, i);
    const unsigned char *s = NULL;
    int n = 0;

    *out = NULL;
    if (type == SQLITE_NULL)
        return nullable ? 0 : -1;
    if (type != SQLITE_TEXT)
        return -1;
    s = sqlite3_column_text(st, i);
    n = sqlite3_column_bytes(st, i);
    if (!s || memchr(s, '\0', (size_t)n))
        return -1;
    *out = malloc((size_t)n + 1);
    if (!*out)
        return -2;
    memcpy(*out, s, (size_t)n + 1);
    return 0;
}

static psdb_hr read_header(psdb_file *f, sqlite3 *db, uint64_t file_size, char *msg,
                           size_t msg_size)
{
    static const char *sql =
        "SELECT exe_filename, app_name, app_version, engine_name, engine_version, app_id, family, "
        "abi_version, compiler_version, profile_version, num_values, num_groups, num_blobs, "
        "blob_bytes, content_digest FROM header";
    psdb_hr hr = PSDB_E_CACHE_CORRUPT;
    sqlite3_stmt *st = NULL;
    psdb_file_info *info = &f->info;
    int rc = SQLITE_OK, t = 0;
    const char *why = NULL;

    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "header: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_CACHE_CORRUPT : psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "malformed header row (%s)",
                         rc == SQLITE_DONE ? "no row" : sqlite3_errmsg(db));
        goto cleanup;
    }
    for (int i = 2; i <= 14; i++) {
        int want = (i == 5 || i == 14) ? SQLITE_BLOB : SQLITE_INTEGER;
        if (i == 3 || i == 6)
            continue;
        if (sqlite3_column_type(st, i) != want) {
            why = sqlite3_column_name(st, i);
            goto malformed;
        }
    }
    if ((t = column_text(st, 0, 1, &f->exe_filename)) != 0 ||
        (t = column_text(st, 1, 0, &f->app_name)) != 0 ||
        (t = column_text(st, 3, 1, &f->engine_name)) != 0 ||
        (t = column_text(st, 6, 0, &f->family)) != 0) {
        if (t == -2) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        why = "text field";
        goto malformed;
    }
    info->identity.desc.exe_filename = f->exe_filename;
    info->identity.desc.name = f->app_name;
    info->identity.desc.version = (uint64_t)sqlite3_column_int64(st, 2);
    info->identity.desc.engine_name = f->engine_name;
    info->identity.desc.engine_version = (uint64_t)sqlite3_column_int64(st, 4);
    info->target.family = f->family;
    info->target.abi_version = (uint64_t)sqlite3_column_int64(st, 7);
    info->target.compiler_version = (uint64_t)sqlite3_column_int64(st, 8);
    info->target.profile_version = (uint64_t)sqlite3_column_int64(st, 9);
    info->num_values = (uint64_t)sqlite3_column_int64(st, 10);
    info->num_groups = (uint64_t)sqlite3_column_int64(st, 11);
    info->num_blobs = (uint64_t)sqlite3_column_int64(st, 12);
    info->blob_bytes = (uint64_t)sqlite3_column_int64(st, 13);
    if (sqlite3_column_bytes(st, 5) != 16 || sqlite3_column_bytes(st, 14) != 32) {
        why = "app_id or content_digest size";
        goto malformed;
    }
    memcpy(info->identity.app_id, sqlite3_column_blob(st, 5), 16);
    memcpy(info->content_digest, sqlite3_column_blob(st, 14), 32);
    if (f->app_name[0] == '\0') {
        why = "app_name empty";
        goto malformed;
    }
    if (!f->engine_name && info->identity.desc.engine_version != 0) {
        why = "engine_version without engine_name";
        goto malformed;
    }
    if (f->family[0] == '\0' || strlen(f->family) >= PSDB_ADAPTER_FAMILY_MAX) {
        why = "family length";
        goto malformed;
    }
    if (info->target.abi_version == 0 || info->target.abi_version == UINT64_MAX) {
        why = "reserved abi_version";
        goto malformed;
    }
    /* Every count is bounded by the file size (each row takes at least a byte), which keeps a lying
     * header from driving allocations. */
    if (info->num_values > file_size || info->num_groups > file_size ||
        info->num_blobs > file_size || info->blob_bytes > file_size ||
        info->num_blobs > info->num_values) {
        why = "counts";
        goto malformed;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        why = "more than one row";
        goto malformed;
    }
    hr = PSDB_S_OK;
    goto cleanup;
malformed:
    hr = PSDB_E_CACHE_CORRUPT;
    psdb__pf_set_msg(msg, msg_size, "malformed header row (%s)", why);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

/* MODEL A3: same family, ABI within the driver's range, top 32 bits of the profile version. */
static psdb_hr check_compat(const psdb_file_info *info, const psdb_adapter_desc *a, char *msg,
                            size_t msg_size)
{
    if (strcmp(info->target.family, a->family) != 0) {
        psdb__pf_set_msg(msg, msg_size, "adapter family %s, PSDB made for %s", a->family,
                         info->target.family);
        return PSDB_E_ADAPTER_NOT_FOUND;
    }
    if (info->target.abi_version < a->abi_min || info->target.abi_version > a->abi_max) {
        psdb__pf_set_msg(msg, msg_size, "ABI version %llu outside the driver's [%llu, %llu]",
                         (unsigned long long)info->target.abi_version,
                         (unsigned long long)a->abi_min, (unsigned long long)a->abi_max);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    if (info->target.profile_version >> 32 != a->app_profile_version >> 32) {
        psdb__pf_set_msg(msg, msg_size,
                         "application profile version 0x%016llx, driver has 0x%016llx",
                         (unsigned long long)info->target.profile_version,
                         (unsigned long long)a->app_profile_version);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    return PSDB_S_OK;
}

/* The root page of the blobs table, where direct blob reads (psdb_btree.c) start; 0 (SQLite
 * reads only) when it cannot be read or is not a page of the file. The schema was compared with
 * psdb.sql already, so the row is the table's. */
static uint32_t blobs_root(sqlite3 *db, size_t num_pages)
{
    sqlite3_stmt *st = NULL;
    uint32_t root = 0;

    if (sqlite3_prepare_v2(db,
                           "SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND "
                           "name = 'blobs'",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        sqlite3_int64 v = sqlite3_column_int64(st, 0);
        if (v >= 2 && (uint64_t)v <= num_pages && v <= UINT32_MAX)
            root = (uint32_t)v;
    }
    sqlite3_finalize(st);
    return root;
}

void psdb_file_release(psdb_file *f)
{
    if (!f)
        return;
    atomic_store(&f->index_cancel, 1);
    if (f->index_started)
        pthread_join(f->index_thread, NULL);
    psdb__pf_index_free(atomic_load(&f->index));
    while (f->idle) {
        conn *c = f->idle;
        f->idle = c->next;
        psdb__pf_conn_close(c);
    }
    psdb__pf_page_cache_free(f->pages);
    pthread_cond_destroy(&f->index_done);
    pthread_mutex_destroy(&f->lock);
    EVP_MD_free(f->sha256);
    free((void *)f->verified);
    free((void *)f->leaf_of);
    free(atomic_load(&f->checked));
    free(f->uri);
    free(f->exe_filename);
    free(f->app_name);
    free(f->engine_name);
    free(f->family);
    free(f);
}

psdb_hr psdb__file_open_msg(const char *path, const psdb_adapter_desc *adapter, psdb_file **out,
                            char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_file *f = NULL;
    conn *c = NULL;
    uint64_t file_size = 0;
    int fd = -1;

    psdb__pf_set_msg(msg, msg_size, "ok");
    if (!path || !out || (adapter && !adapter->family)) {
        hr = PSDB_E_INVALIDARG;
        psdb__pf_set_msg(msg, msg_size, "invalid argument");
        goto cleanup;
    }
    *out = NULL;
    if ((hr = check_raw_header(path, &fd, &file_size, msg, msg_size)) < 0)
        goto cleanup;
    f = calloc(1, sizeof(*f));
    if (!f) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (pthread_mutex_init(&f->lock, NULL) != 0) {
        free(f);
        f = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (pthread_cond_init(&f->index_done, NULL) != 0) {
        pthread_mutex_destroy(&f->lock);
        free(f);
        f = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    f->file_size = file_size;
    f->uri = psdb__pf_make_uri(path);
    f->pages = psdb__pf_page_cache_new(fd, file_size);
    fd = -1; /* the page cache's, or closed */
    f->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!f->uri || !f->pages || !f->sha256) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = psdb__pf_conn_open(f, 1, &c, msg, msg_size)) < 0)
        goto cleanup;
    if ((hr = read_header(f, c->db, file_size, msg, msg_size)) < 0)
        goto cleanup;
    if (f->info.num_blobs > 0 && f->info.num_blobs < SIZE_MAX) {
        /* Without the cache every fetch hashes; that is correct, only slower. */
        f->num_verified_slots = f->info.num_blobs + 1;
        f->verified = calloc((size_t)f->num_verified_slots, 1);
        if (!f->verified)
            f->num_verified_slots = 0;
        else
            f->leaf_of = calloc((size_t)f->num_verified_slots, sizeof(*f->leaf_of));
    }
    if (adapter && (hr = check_compat(&f->info, adapter, msg, msg_size)) < 0)
        goto cleanup;
    f->blobs_root = blobs_root(c->db, f->pages->num_pages);
    psdb__pf_conn_put(f, c);
    c = NULL;
    *out = f;
    f = NULL;
cleanup:
    if (fd >= 0)
        close(fd);
    psdb__pf_conn_close(c);
    psdb_file_release(f);
    return hr;
}

psdb_hr psdb_file_open(const char *path, const psdb_adapter_desc *adapter, psdb_file **out)
{
    const unsigned err_mark = psdb__error_mark();
    char msg[512] = "";
    psdb_hr hr = psdb__file_open_msg(path, adapter, out, msg, sizeof(msg));
    if (PSDB_FAILED(hr))
        psdb__error_set(hr, "%s: %s", path ? path : "(null)", msg[0] ? msg : psdb_hr_str(hr));
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_file_get_info(psdb_file *f, psdb_file_info *out)
{
    const unsigned err_mark = psdb__error_mark();
    if (!f || !out)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    *out = f->info;
    return psdb__error_ret(PSDB_S_OK, err_mark, __func__);
}
