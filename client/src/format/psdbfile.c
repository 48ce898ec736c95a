/* psdbfile.c - the PSDB file: a SQLite database of values and groups (schema/PSDB.md). */
/*
 * DESIGN
 * A PSDB is written once and never modified, so readers open it with SQLite's immutable=1 URI
 * parameter: no locks, no journal lookups, no change detection. Lookups come from many device
 * threads at once; one SQLite connection cannot run two statements concurrently, so the file keeps
 * a pool of read connections, each with its own prepared statements and SHA-256 context. A lookup
 * pops one from a free list under a mutex held for a few instructions, runs, and pushes it back;
 * the pool grows to the peak number of concurrent lookups. A runtime asks for the size, then the
 * object code, then the metadata of one key. The first lookup starts a thread that copies
 * value_entries into an in-memory hash table (key -> blob id and size per type, one cache line per
 * key); once it is published a size query is a hash probe and a data fetch seeks one blob row.
 * Until then, or when the table cannot be indexed, the first query reads every type of the key in
 * one index range scan and the connection keeps it, so the fetches that follow seek blob rows only
 * (blobs are numbered so that one key's blobs are neighbours). Mapped I/O is off on purpose: a
 * file truncated under a reader must give a short read (PSDB_E_CACHE_CORRUPT), not SIGBUS. So that
 * a blob seek costs one pread (its leaf) rather than one per B-tree level, the connections read
 * through a VFS of the file's own that keeps every interior page it has read, shared by all.
 *
 * Every data fetch checks the blob's bytes against its stored SHA-256 the first time that blob is
 * fetched through this psdb_file; a per-blob flag then skips the hash (the file is immutable, and a
 * runtime fetches a given object's code once or a few times). psdb_file_verify hashes everything.
 *
 * The writer stages puts in a private temporary database (ATTACH ''), then at finish copies the
 * staged rows into the final tables in sorted order inside one transaction. The same content thus
 * gives the same sequence of SQLite operations, hence the same bytes, whatever the order of puts.
 */
#include "format/psdbfile_internal.h"

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
#include "common/hash.h"
#include "common/error.h"
#include "common/status_map.h"

#define SQLITE_HEADER_SIZE 100
/* SQLITE_LIMIT_SQL_LENGTH of a reading connection: bounds each statement of a file's schema. */
#define SCHEMA_SQL_MAX 4096
/* SQLite's default SQLITE_MAX_LENGTH: no blob or key may be longer. */
#define MAX_ITEM_SIZE 1000000000u

/* ---- Shared helpers -------------------------------------------------------------------------- */

static void set_msg(char *msg, size_t msg_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_msg(char *msg, size_t msg_size, const char *fmt, ...)
{
    va_list ap;
    if (!msg || msg_size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
}
/* Maps a SQLite result met while writing a PSDB. */
static uint32_t be32(const uint8_t *p)
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
    *out = be32(h + 68);
    rc = 0;
cleanup:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Binds a byte string that outlives the statement's step. */
static int bind_bytes(sqlite3_stmt *st, int idx, const void *p, size_t n)
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

typedef struct content_stats {
    uint64_t num_values, num_groups, num_blobs, blob_bytes;
    uint8_t digest[32];
} content_stats;

/* Streams the content of the main tables of db through SHA-256 in the canonical order and counts
 * rows. Used by the writer at finish and by psdb_file_verify, so both agree by construction. */
static psdb_hr compute_content(sqlite3 *db, const psdb_app_identity *id, const psdb_target *t,
                               content_stats *out, char *msg, size_t msg_size)
{
    static const char *values_sql =
        "SELECT v.key, v.type, b.sha256 FROM value_entries v LEFT JOIN blobs b ON b.id = v.blob_id "
        "ORDER BY v.key, v.type";
    static const char *groups_sql = "SELECT key, version, (SELECT count(*) FROM group_members m "
                                    "WHERE m.group_key = g.key) FROM value_groups g ORDER BY key";
    static const char *members_sql =
        "SELECT value_key FROM group_members WHERE group_key = ?1 ORDER BY idx";
    static const char *blobs_sql = "SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs";
    psdb_hr hr = PSDB_S_OK;
    psdb__buf b = {0};
    psdb__sha256_ctx *sha = NULL;
    sqlite3_stmt *vst = NULL, *gst = NULL, *mst = NULL, *bst = NULL;
    content_stats st = {0};
    int rc = SQLITE_OK;

    sha = psdb__sha256_begin();
    if (!sha) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((rc = sqlite3_prepare_v2(db, values_sql, -1, &vst, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, groups_sql, -1, &gst, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, members_sql, -1, &mst, NULL)) != SQLITE_OK ||
        (rc = sqlite3_prepare_v2(db, blobs_sql, -1, &bst, NULL)) != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        set_msg(msg, msg_size, "content: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    digest_header(&b, id, t);
    if ((hr = psdb__buf_status(&b)) < 0)
        goto cleanup;
    psdb__sha256_update(sha, b.data, b.len);

    while ((rc = sqlite3_step(vst)) == SQLITE_ROW) {
        uint8_t rec[4];
        if (sqlite3_column_type(vst, 0) != SQLITE_BLOB ||
            sqlite3_column_type(vst, 1) != SQLITE_INTEGER ||
            sqlite3_column_type(vst, 2) != SQLITE_BLOB || sqlite3_column_bytes(vst, 2) != 32) {
            hr = PSDB_E_CACHE_CORRUPT;
            set_msg(msg, msg_size, "value %llu: malformed row or missing blob",
                    (unsigned long long)st.num_values);
            goto cleanup;
        }
        const void *key = sqlite3_column_blob(vst, 0);
        size_t key_size = (size_t)sqlite3_column_bytes(vst, 0);
        const void *digest = sqlite3_column_blob(vst, 2);
        psdb__sha256_update(sha, "\x01", 1);
        psdb__put_le32(rec, (uint32_t)key_size);
        psdb__sha256_update(sha, rec, 4);
        psdb__sha256_update(sha, key, key_size);
        psdb__put_le32(rec, (uint32_t)sqlite3_column_int64(vst, 1));
        psdb__sha256_update(sha, rec, 4);
        psdb__sha256_update(sha, digest, 32);
        st.num_values++;
    }
    if (rc != SQLITE_DONE)
        goto sqlite_fail;

    while ((rc = sqlite3_step(gst)) == SQLITE_ROW) {
        sqlite3_int64 n = sqlite3_column_int64(gst, 2);
        uint8_t rec[8];
        if (sqlite3_column_type(gst, 0) != SQLITE_BLOB ||
            sqlite3_column_type(gst, 1) != SQLITE_INTEGER || n < 0 || n > UINT32_MAX) {
            hr = PSDB_E_CACHE_CORRUPT;
            set_msg(msg, msg_size, "group %llu: malformed row", (unsigned long long)st.num_groups);
            goto cleanup;
        }
        const void *key = sqlite3_column_blob(gst, 0);
        size_t key_size = (size_t)sqlite3_column_bytes(gst, 0);
        psdb__sha256_update(sha, "\x02", 1);
        psdb__put_le32(rec, (uint32_t)key_size);
        psdb__sha256_update(sha, rec, 4);
        psdb__sha256_update(sha, key, key_size);
        psdb__put_le64(rec, (uint64_t)sqlite3_column_int64(gst, 1));
        psdb__sha256_update(sha, rec, 8);
        psdb__put_le32(rec, (uint32_t)n);
        psdb__sha256_update(sha, rec, 4);
        if ((rc = bind_bytes(mst, 1, key, key_size)) != SQLITE_OK)
            goto sqlite_fail;
        while ((rc = sqlite3_step(mst)) == SQLITE_ROW) {
            if (sqlite3_column_type(mst, 0) != SQLITE_BLOB) {
                hr = PSDB_E_CACHE_CORRUPT;
                set_msg(msg, msg_size, "group %llu: malformed member",
                        (unsigned long long)st.num_groups);
                goto cleanup;
            }
            const void *vk = sqlite3_column_blob(mst, 0);
            size_t vk_size = (size_t)sqlite3_column_bytes(mst, 0);
            psdb__put_le32(rec, (uint32_t)vk_size);
            psdb__sha256_update(sha, rec, 4);
            psdb__sha256_update(sha, vk, vk_size);
        }
        sqlite3_reset(mst);
        if (rc != SQLITE_DONE)
            goto sqlite_fail;
        st.num_groups++;
    }
    if (rc != SQLITE_DONE)
        goto sqlite_fail;
    psdb__sha256_update(sha, "\x00", 1);

    if ((rc = sqlite3_step(bst)) != SQLITE_ROW)
        goto sqlite_fail;
    st.num_blobs = (uint64_t)sqlite3_column_int64(bst, 0);
    st.blob_bytes = (uint64_t)sqlite3_column_int64(bst, 1);
    psdb__sha256_end(sha, st.digest);
    sha = NULL;
    *out = st;
    goto cleanup;

sqlite_fail:
    hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
    set_msg(msg, msg_size, "content: %s", sqlite3_errmsg(db));
cleanup:
    if (sha) {
        uint8_t junk[32];
        psdb__sha256_end(sha, junk);
    }
    sqlite3_finalize(vst);
    sqlite3_finalize(gst);
    sqlite3_finalize(mst);
    sqlite3_finalize(bst);
    psdb__buf_free(&b);
    return hr;
}

/* ---- Reading --------------------------------------------------------------------------------- */

/* ---- Interior page cache: a VFS shim --------------------------------------------------------- */

/* Each blob fetch seeks the blobs B-tree from its root. The leaf page is a different one each time,
 * and its reads push the interior pages out of every connection's LRU cache, so without help a
 * fetch costs a pread per level. The file is immutable and mapped I/O is ruled out, so the VFS of
 * the file's connections keeps a copy of every interior B-tree page it reads, shared by all
 * connections of the psdb_file, and serves later reads of that page with a copy from memory. A
 * page is kept only once read whole and intact, so a truncated file still gives short reads. */
#define PAGE_CACHE_PAGE_SIZE 4096u               /* schema/psdb.sql fixes the page size */
#define PAGE_CACHE_MAX_BYTES ((size_t)64 << 20)  /* a crafted file of interior pages stops here */
#define PAGE_CACHE_MAX_PAGES ((uint64_t)1 << 28) /* larger files go without the cache */

typedef struct page_cache {
    sqlite3_vfs vfs; /* registered under name; pAppData points here */
    sqlite3_vfs *base;
    char name[48];
    size_t num_pages;
    uint8_t *_Atomic *pages; /* [page number - 1]: a copy of an interior page, or NULL */
    _Atomic size_t bytes;
    int registered;
} page_cache;

typedef struct pc_file {
    sqlite3_file base;
    page_cache *pc;     /* NULL: not the main database file, nothing cached */
    sqlite3_file *real; /* the base VFS's file, stored right after this struct */
} pc_file;

static int pc_close(sqlite3_file *file)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xClose(p->real);
}

static int pc_read(sqlite3_file *file, void *buf, int amt, sqlite3_int64 off)
{
    pc_file *p = (pc_file *)file;
    page_cache *pc = p->pc;
    uint8_t *page = NULL, *expected = NULL;
    uint64_t idx = 0;
    int rc = SQLITE_OK, cacheable = pc && amt == (int)PAGE_CACHE_PAGE_SIZE && off >= 0 &&
                                    (uint64_t)off % PAGE_CACHE_PAGE_SIZE == 0 &&
                                    (uint64_t)off / PAGE_CACHE_PAGE_SIZE < pc->num_pages;

    if (cacheable) {
        idx = (uint64_t)off / PAGE_CACHE_PAGE_SIZE;
        page = atomic_load_explicit(&pc->pages[idx], memory_order_acquire);
        if (page) {
            memcpy(buf, page, PAGE_CACHE_PAGE_SIZE);
            return SQLITE_OK;
        }
    }
    rc = p->real->pMethods->xRead(p->real, buf, amt, off);
    if (rc != SQLITE_OK || !cacheable)
        return rc;
    /* B-tree page type flag (after the 100-byte file header on page 1): 2 and 5 are interior. */
    uint8_t type = ((const uint8_t *)buf)[idx == 0 ? SQLITE_HEADER_SIZE : 0];
    if (type != 2 && type != 5)
        return rc;
    /* Reserve first so that concurrent readers never pass the cap together. */
    if (atomic_fetch_add(&pc->bytes, PAGE_CACHE_PAGE_SIZE) >= PAGE_CACHE_MAX_BYTES) {
        atomic_fetch_sub(&pc->bytes, PAGE_CACHE_PAGE_SIZE);
        return rc;
    }
    if ((page = malloc(PAGE_CACHE_PAGE_SIZE)) != NULL) {
        memcpy(page, buf, PAGE_CACHE_PAGE_SIZE);
        if (atomic_compare_exchange_strong_explicit(&pc->pages[idx], &expected, page,
                                                    memory_order_release, memory_order_relaxed))
            return rc;
        free(page); /* another connection stored the same bytes first */
    }
    atomic_fetch_sub(&pc->bytes, PAGE_CACHE_PAGE_SIZE);
    return rc;
}

static int pc_write(sqlite3_file *file, const void *buf, int amt, sqlite3_int64 off)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xWrite(p->real, buf, amt, off);
}

static int pc_truncate(sqlite3_file *file, sqlite3_int64 size)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xTruncate(p->real, size);
}

static int pc_sync(sqlite3_file *file, int flags)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xSync(p->real, flags);
}

static int pc_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xFileSize(p->real, size);
}

static int pc_lock(sqlite3_file *file, int lock)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xLock(p->real, lock);
}

static int pc_unlock(sqlite3_file *file, int lock)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xUnlock(p->real, lock);
}

static int pc_check_reserved_lock(sqlite3_file *file, int *out)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int pc_file_control(sqlite3_file *file, int op, void *arg)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xFileControl(p->real, op, arg);
}

static int pc_sector_size(sqlite3_file *file)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xSectorSize(p->real);
}

static int pc_device_characteristics(sqlite3_file *file)
{
    pc_file *p = (pc_file *)file;
    return p->real->pMethods->xDeviceCharacteristics(p->real);
}

/* Version 1: no shared memory (immutable files need no WAL) and no xFetch (no mapped I/O). */
static const sqlite3_io_methods pc_methods = {
    .iVersion = 1,
    .xClose = pc_close,
    .xRead = pc_read,
    .xWrite = pc_write,
    .xTruncate = pc_truncate,
    .xSync = pc_sync,
    .xFileSize = pc_file_size,
    .xLock = pc_lock,
    .xUnlock = pc_unlock,
    .xCheckReservedLock = pc_check_reserved_lock,
    .xFileControl = pc_file_control,
    .xSectorSize = pc_sector_size,
    .xDeviceCharacteristics = pc_device_characteristics,
};

static int pc_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags,
                   int *out_flags)
{
    page_cache *pc = vfs->pAppData;
    pc_file *p = (pc_file *)file;
    int rc = SQLITE_OK;

    memset(p, 0, sizeof(*p));
    p->real = (sqlite3_file *)(p + 1);
    p->pc = (flags & SQLITE_OPEN_MAIN_DB) ? pc : NULL;
    rc = pc->base->xOpen(pc->base, name, p->real, flags, out_flags);
    if (rc == SQLITE_OK && p->real->pMethods) {
        p->base.pMethods = &pc_methods;
    } else if (p->real->pMethods) {
        p->real->pMethods->xClose(p->real);
        p->real->pMethods = NULL;
    }
    return rc;
}

static int pc_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xDelete(b, name, sync_dir);
}

static int pc_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xAccess(b, name, flags, out);
}

static int pc_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xFullPathname(b, name, n, out);
}

static void *pc_dl_open(sqlite3_vfs *vfs, const char *name)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xDlOpen ? b->xDlOpen(b, name) : NULL;
}

static void pc_dl_error(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    if (b->xDlError)
        b->xDlError(b, n, out);
    else if (n > 0)
        out[0] = '\0';
}

static void (*pc_dl_sym(sqlite3_vfs *vfs, void *lib, const char *sym))(void)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xDlSym ? b->xDlSym(b, lib, sym) : NULL;
}

static void pc_dl_close(sqlite3_vfs *vfs, void *lib)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    if (b->xDlClose)
        b->xDlClose(b, lib);
}

static int pc_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xRandomness(b, n, out);
}

static int pc_sleep(sqlite3_vfs *vfs, int us)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xSleep(b, us);
}

static int pc_current_time(sqlite3_vfs *vfs, double *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xCurrentTime(b, out);
}

static int pc_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xGetLastError ? b->xGetLastError(b, n, out) : 0;
}

static int pc_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    if (b->iVersion >= 2 && b->xCurrentTimeInt64)
        return b->xCurrentTimeInt64(b, out);
    double t = 0;
    int rc = b->xCurrentTime(b, &t);
    *out = (sqlite3_int64)(t * 86400000.0);
    return rc;
}

static void page_cache_free(page_cache *pc)
{
    if (!pc)
        return;
    if (pc->registered)
        sqlite3_vfs_unregister(&pc->vfs);
    for (size_t i = 0; pc->pages && i < pc->num_pages; i++)
        free(atomic_load(&pc->pages[i]));
    free((void *)pc->pages);
    free(pc);
}

/* A VFS of its own for a file of file_size bytes; NULL (lookups read through the default VFS) when
 * there is no memory for it or the file is too large. */
static page_cache *page_cache_new(uint64_t file_size)
{
    page_cache *pc = NULL;
    sqlite3_vfs *base = sqlite3_vfs_find(NULL);
    uint64_t n = file_size / PAGE_CACHE_PAGE_SIZE;

    if (!base || n == 0 || n > PAGE_CACHE_MAX_PAGES || base->szOsFile < 0 ||
        (size_t)base->szOsFile > INT_MAX - sizeof(pc_file))
        goto fail;
    if (!(pc = calloc(1, sizeof(*pc))))
        goto fail;
    pc->base = base;
    pc->num_pages = (size_t)n;
    if (!(pc->pages = calloc(pc->num_pages, sizeof(*pc->pages))))
        goto fail;
    snprintf(pc->name, sizeof(pc->name), "psdb-pages-%p", (void *)pc);
    pc->vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)(sizeof(pc_file) + (size_t)base->szOsFile),
        .mxPathname = base->mxPathname,
        .zName = pc->name,
        .pAppData = pc,
        .xOpen = pc_open,
        .xDelete = pc_delete,
        .xAccess = pc_access,
        .xFullPathname = pc_full_pathname,
        .xDlOpen = pc_dl_open,
        .xDlError = pc_dl_error,
        .xDlSym = pc_dl_sym,
        .xDlClose = pc_dl_close,
        .xRandomness = pc_randomness,
        .xSleep = pc_sleep,
        .xCurrentTime = pc_current_time,
        .xGetLastError = pc_get_last_error,
        .xCurrentTimeInt64 = pc_current_time_int64,
    };
    if (sqlite3_vfs_register(&pc->vfs, 0) != SQLITE_OK)
        goto fail;
    pc->registered = 1;
    return pc;
fail:
    page_cache_free(pc);
    return NULL;
}

/* Every type of one key in one index range scan: a runtime asks for the size, then the object
 * code, then the metadata of the same key, and the last two then cost one blob seek each. */
static const char key_sql[] = "SELECT type, blob_id, size FROM value_entries WHERE key = ?1";
static const char blob_sql[] = "SELECT sha256, data FROM blobs WHERE id = ?1";

/* Keys longer than this are looked up without the per-connection cache. */
#define CACHED_KEY_MAX 256
/* cached_key.blob_id values besides a positive id. */
#define BLOB_ABSENT 0
#define BLOB_MALFORMED (-1)

/* What value_entries says about the last key looked up on a connection. */
typedef struct cached_key {
    size_t key_size; /* 0: nothing cached */
    uint8_t key[CACHED_KEY_MAX];
    sqlite3_int64 blob_id[PSDB_VALUE_TYPE_COUNT];
    uint64_t size[PSDB_VALUE_TYPE_COUNT];
} cached_key;

/* One read connection and what a lookup needs with it; used by one thread at a time. */
typedef struct conn {
    sqlite3 *db;
    sqlite3_stmt *key_st, *blob_st;
    sqlite3_blob *blob; /* open on blobs.data once a verified blob was read; NULL before */
    EVP_MD_CTX *md;
    cached_key cache;
    struct conn *next;
} conn;

struct psdb_file {
    char *uri;
    EVP_MD *sha256;
    pthread_mutex_t lock;
    conn *idle; /* free list, under lock */
    char *exe_filename, *app_name, *engine_name, *family;
    psdb_file_info info;
    /* verified[id] != 0: blob id has matched its digest once (ids 1..num_blobs). NULL: no cache. */
    _Atomic unsigned char *verified;
    uint64_t num_verified_slots;
    page_cache *pages;  /* the VFS of the file's connections; NULL: SQLite's default */
    uint64_t file_size; /* bytes, as checked at open */
    /* The in-memory copy of value_entries, built by a thread started at the first lookup. */
    _Atomic int index_state;         /* INDEX_* */
    _Atomic int index_cancel;        /* set by psdb_file_release to stop a build early */
    struct key_index *_Atomic index; /* non-NULL once published; immutable from then on */
    pthread_t index_thread;          /* valid when index_started */
    int index_started;               /* under lock */
    pthread_cond_t index_done;       /* broadcast under lock when the build ends */
};

static void conn_close(conn *c)
{
    if (!c)
        return;
    sqlite3_blob_close(c->blob);
    sqlite3_finalize(c->key_st);
    sqlite3_finalize(c->blob_st);
    sqlite3_close(c->db);
    EVP_MD_CTX_free(c->md);
    free(c);
}

static psdb_hr db_open(psdb_file *f, sqlite3 **db, char *msg, size_t msg_size)
{
    int rc =
        sqlite3_open_v2(f->uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                        f->pages ? f->pages->name : NULL);
    if (rc != SQLITE_OK) {
        set_msg(msg, msg_size, "sqlite3_open_v2: %s", *db ? sqlite3_errmsg(*db) : "out of memory");
        return *db ? psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT) : PSDB_E_OUTOFMEMORY;
    }
    /* The file is untrusted input: no functions with side effects from its schema, and neither
     * views nor triggers, which a PSDB never has (check_schema refuses them; this holds even for
     * a statement that would run before it). */
    sqlite3_db_config(*db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
    /* Loading the schema parses every statement stored in the file: keep a crafted statement
     * small and shallow. The longest of psdb.sql is under 1 KiB, our queries under 512 bytes. */
    sqlite3_limit(*db, SQLITE_LIMIT_SQL_LENGTH, SCHEMA_SQL_MAX);
    sqlite3_limit(*db, SQLITE_LIMIT_EXPR_DEPTH, 64);
    sqlite3_limit(*db, SQLITE_LIMIT_COLUMN, 64);
    sqlite3_limit(*db, SQLITE_LIMIT_COMPOUND_SELECT, 4);
    sqlite3_limit(*db, SQLITE_LIMIT_ATTACHED, 0);
    return PSDB_S_OK;
}

static psdb_hr check_schema(sqlite3 *db, char *msg, size_t msg_size);

/* check: compare the file's schema with psdb.sql before the first statement on it (the first
 * connection of psdb_file_open); later connections read a file already checked. */
static psdb_hr conn_open(psdb_file *f, int check, conn **out, char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    int rc = SQLITE_OK;

    c = calloc(1, sizeof(*c));
    if (!c || !(c->md = EVP_MD_CTX_new())) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = db_open(f, &c->db, msg, msg_size)) < 0)
        goto cleanup;
    if (check && (hr = check_schema(c->db, msg, msg_size)) < 0)
        goto cleanup;
    /* Small: interior pages come from the file's page cache (pc_read), and leaf pages are
     * seldom read twice; a large LRU only costs memory and cache misses (measured). */
    sqlite3_exec(c->db, "PRAGMA cache_size = -256", NULL, NULL, NULL);
    rc = sqlite3_prepare_v3(c->db, key_sql, -1, SQLITE_PREPARE_PERSISTENT, &c->key_st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(c->db, blob_sql, -1, SQLITE_PREPARE_PERSISTENT, &c->blob_st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        set_msg(msg, msg_size, "prepare lookup: %s", sqlite3_errmsg(c->db));
        goto cleanup;
    }
    *out = c;
    c = NULL;
cleanup:
    conn_close(c);
    return hr;
}

static psdb_hr conn_get(psdb_file *f, conn **out)
{
    conn *c = NULL;

    pthread_mutex_lock(&f->lock);
    c = f->idle;
    if (c)
        f->idle = c->next;
    pthread_mutex_unlock(&f->lock);
    if (c) {
        *out = c;
        return PSDB_S_OK;
    }
    return conn_open(f, 0, out, NULL, 0);
}

static void conn_put(psdb_file *f, conn *c)
{
    pthread_mutex_lock(&f->lock);
    c->next = f->idle;
    f->idle = c;
    pthread_mutex_unlock(&f->lock);
}

/* ---- The key index --------------------------------------------------------------------------- */

/* A size query through SQLite costs a statement step and a B-tree seek on blob keys (about a
 * microsecond), and the value_entries pages compete with blob pages in the connection caches. A
 * thread started by the first lookup therefore copies value_entries into a hash table in one
 * sequential scan and publishes it; lookups use SQL until then, and for good when the scan fails
 * (a damaged table, an implausible row, no memory): the SQL path reports each lookup's own error.
 */
#define INDEX_NONE 0     /* no build started */
#define INDEX_BUILDING 1 /* the thread runs */
#define INDEX_READY 2    /* f->index is published */
#define INDEX_FAILED 3   /* lookups stay on the SQL path */

/* index_entry.blob_id of a row whose blob_id or size is not a valid number. */
#define INDEX_MALFORMED UINT32_MAX
/* How often (in rows) the build checks whether psdb_file_release asks it to stop. */
#define INDEX_CANCEL_EVERY 4096u

/* Keys up to this size are held in their entry, longer ones in key_index.keys. */
#define INDEX_INLINE_KEY 28

/* Every type of one key in one 64-byte cache line (a probe touches its slot and this line only);
 * blob ids and sizes fit 32 bits (the build gives up otherwise). */
typedef struct index_entry {
    uint32_t key_size;
    uint32_t blob_id[PSDB_VALUE_TYPE_COUNT]; /* BLOB_ABSENT, INDEX_MALFORMED or an id */
    uint32_t size[PSDB_VALUE_TYPE_COUNT];
    uint8_t key[INDEX_INLINE_KEY]; /* the key, or a uint64_t offset into key_index.keys */
} index_entry;
_Static_assert(sizeof(index_entry) == 64, "an index entry is one cache line");

typedef struct key_index {
    uint64_t seed; /* per file: a crafted file cannot choose colliding keys in advance */
    /* Open addressing with linear probing, at most 3/4 full: a probe usually reads one cache line
     * (the next ones are adjacent). key_size 0 marks a free entry (keys are never empty). */
    index_entry *table;
    size_t cap;
    index_entry *entries; /* while building: one per key, in key order */
    size_t num_entries, cap_entries;
    uint8_t *keys;
    size_t keys_len, keys_cap;
} key_index;

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

static void index_free(key_index *x)
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

static const index_entry *index_find(const key_index *x, const void *key, size_t key_size)
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
        if (index_find(x, key, e->key_size))
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
    if ((hr = db_open(f, &db, NULL, 0)) < 0)
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
    index_free(x);
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
static void index_start(psdb_file *f)
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

    index_start(f);
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
static char *make_uri(const char *path)
{
    static const char suffix[] = "?immutable=1";
    size_t n = strlen(path);
    char *uri = NULL, *p = NULL;

    if (n > (SIZE_MAX - sizeof(suffix) - 8) / 3)
        return NULL;
    uri = malloc(5 + 3 * n + sizeof(suffix));
    if (!uri)
        return NULL;
    memcpy(uri, "file:", 5);
    p = uri + 5;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)path[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '/' || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            *p++ = (char)ch;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            *p++ = '%';
            *p++ = hex[ch >> 4];
            *p++ = hex[ch & 15];
        }
    }
    memcpy(p, suffix, sizeof(suffix));
    return uri;
}

/* Checks the raw SQLite header (the first 100 bytes) and the file size before SQLite sees it. */
static psdb_hr check_raw_header(const char *path, uint64_t *file_size, char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_E_CACHE_CORRUPT;
    uint8_t h[SQLITE_HEADER_SIZE];
    struct stat sb;
    int fd = -1;
    ssize_t n = 0;
    uint32_t page_size = 0, pages = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        hr = psdb__errno_hr(errno);
        set_msg(msg, msg_size, "open %s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        hr = PSDB_E_IO;
        set_msg(msg, msg_size, "%s: not a regular file", path);
        goto cleanup;
    }
    n = pread(fd, h, sizeof(h), 0);
    if (n < 0) {
        hr = PSDB_E_IO;
        set_msg(msg, msg_size, "read %s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (n < (ssize_t)sizeof(h) || memcmp(h, "SQLite format 3", 16) != 0) {
        set_msg(msg, msg_size, "not a SQLite file");
        goto cleanup;
    }
    if (be32(h + 68) != PSDB__PSDB_APPLICATION_ID) {
        set_msg(msg, msg_size, "not a PSDB (application_id 0x%08x)", (unsigned)be32(h + 68));
        goto cleanup;
    }
    if (be32(h + 60) != PSDB__PSDB_SCHEMA_VERSION) {
        set_msg(msg, msg_size, "unsupported PSDB schema version %u (this library reads %u)",
                (unsigned)be32(h + 60), PSDB__PSDB_SCHEMA_VERSION);
        goto cleanup;
    }
    page_size = (uint32_t)h[16] << 8 | h[17];
    if (page_size == 1)
        page_size = 65536;
    pages = be32(h + 28);
    if (page_size < 512 || (page_size & (page_size - 1)) != 0 || pages == 0 ||
        be32(h + 24) != be32(h + 92)) {
        set_msg(msg, msg_size, "malformed SQLite header");
        goto cleanup;
    }
    /* Header fields that change how SQLite reads the file, each fixed by how the writer makes it
     * (schema/PSDB.md): rollback journal (18-19), no reserved bytes per page (20), the payload
     * fractions SQLite requires (21-23), schema format 4 (44), no auto_vacuum or incremental
     * vacuum (52, 64), UTF-8 text (56), and the reserved expansion bytes zero (72-91). */
    if (h[18] != 1 || h[19] != 1) {
        set_msg(msg, msg_size, "SQLite header: not in rollback-journal mode (versions %u/%u)",
                (unsigned)h[18], (unsigned)h[19]);
        goto cleanup;
    }
    if (h[20] != 0 || h[21] != 64 || h[22] != 32 || h[23] != 32 || be32(h + 44) != 4) {
        set_msg(msg, msg_size, "SQLite header: unexpected page layout or schema format %u",
                (unsigned)be32(h + 44));
        goto cleanup;
    }
    if (be32(h + 52) != 0 || be32(h + 64) != 0) {
        set_msg(msg, msg_size, "SQLite header: auto_vacuum is on (a PSDB never has it)");
        goto cleanup;
    }
    if (be32(h + 56) != 1) {
        set_msg(msg, msg_size, "SQLite header: text encoding %u is not UTF-8",
                (unsigned)be32(h + 56));
        goto cleanup;
    }
    for (size_t i = 72; i < 92; i++) {
        if (h[i] != 0) {
            set_msg(msg, msg_size, "SQLite header: reserved byte %zu is not zero", i);
            goto cleanup;
        }
    }
    if ((uint64_t)sb.st_size != (uint64_t)page_size * pages) {
        set_msg(msg, msg_size, "%s (%llu bytes, header says %llu)",
                (uint64_t)sb.st_size < (uint64_t)page_size * pages ? "truncated" : "trailing bytes",
                (unsigned long long)sb.st_size, (unsigned long long)page_size * pages);
        goto cleanup;
    }
    *file_size = (uint64_t)sb.st_size;
    hr = PSDB_S_OK;
cleanup:
    if (fd >= 0)
        close(fd);
    return hr;
}

/* One token of SQL text (sql_next). */
typedef struct sql_tok {
    const char *p;
    size_t n;
    int word; /* a keyword or bare identifier: compared without ASCII case */
} sql_tok;

static int sql_word_byte(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '$' || ch >= 0x80;
}

/* Reads the next token of [*p, end) into t, skipping white space and comments; 0 at the end. A
 * quoted token ('', "", ``, []) is kept whole with its quotes, any other character that is not
 * part of a word is a token of its own. */
static int sql_next(const char **p, const char *end, sql_tok *t)
{
    const char *s = *p;

    for (;;) {
        while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f'))
            s++;
        if (end - s >= 2 && s[0] == '-' && s[1] == '-') {
            while (s < end && *s != '\n')
                s++;
        } else if (end - s >= 2 && s[0] == '/' && s[1] == '*') {
            s += 2;
            while (s < end && !(end - s >= 2 && s[0] == '*' && s[1] == '/'))
                s++;
            s = s < end ? s + 2 : end;
        } else {
            break;
        }
    }
    if (s >= end) {
        *p = end;
        return 0;
    }
    t->p = s;
    t->word = 0;
    if (*s == '\'' || *s == '"' || *s == '`' || *s == '[') {
        char close = *s == '[' ? ']' : *s;
        s++;
        while (s < end) {
            if (*s++ == close) {
                if (close == ']' || s >= end || *s != close)
                    break;
                s++; /* a doubled quote stands for one */
            }
        }
    } else if (sql_word_byte((unsigned char)*s)) {
        t->word = 1;
        while (s < end && sql_word_byte((unsigned char)*s))
            s++;
    } else {
        s++;
    }
    t->n = (size_t)(s - t->p);
    *p = s;
    return 1;
}

/* Whether two statements are the same sequence of tokens: they then mean the same (white space,
 * comments and the case of keywords and bare identifiers are all SQLite ignores). Cost linear in
 * the shorter text plus the white space skipped. */
static int sql_same(const char *a, size_t an, const char *b, size_t bn)
{
    const char *ae = a + an, *be = b + bn;
    sql_tok x, y;

    for (;;) {
        int ha = sql_next(&a, ae, &x), hb = sql_next(&b, be, &y);
        if (!ha || !hb)
            return ha == hb;
        if (x.n != y.n || x.word != y.word)
            return 0;
        for (size_t i = 0; i < x.n; i++) {
            unsigned char ca = (unsigned char)x.p[i], cb = (unsigned char)y.p[i];
            if (x.word && ca >= 'A' && ca <= 'Z')
                ca = (unsigned char)(ca - 'A' + 'a');
            if (x.word && cb >= 'A' && cb <= 'Z')
                cb = (unsigned char)(cb - 'A' + 'a');
            if (ca != cb)
                return 0;
        }
    }
}

/* A name read from a file, fit for a one-line message: at most 63 bytes, printable ASCII (other
 * bytes become '?'). */
static const char *msg_name(const char *s, char out[64])
{
    size_t i = 0;
    for (; s && s[i] && i < 63; i++)
        out[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
    return s ? out : "(null)";
}

/* One row of sqlite_schema as psdb.sql creates it. */
typedef struct schema_row {
    char *type, *name, *tbl_name, *sql; /* sql NULL for an automatic index */
    size_t sql_len;
    int seen;
} schema_row;

#define SCHEMA_ROWS_MAX 16

/* Tables first, so that a missing table is named before its automatic index. */
static const char schema_want_sql[] =
    "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type = 'table' DESC, type, name";
/* In stored order: the check stops at the first row that differs, before reading the rest. */
static const char schema_got_sql[] = "SELECT type, name, tbl_name, sql FROM sqlite_schema";

static char *dup_column(sqlite3_stmt *st, int i, size_t *len)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *d = NULL;

    if (!s)
        return NULL;
    if ((d = malloc(n + 1)) != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    if (len)
        *len = n;
    return d;
}

/* The schema of db must be exactly the one schema/psdb.sql creates: every row of sqlite_schema
 * (tables, indexes including the automatic ones, views, triggers) with the same type, name, table
 * and statement, and nothing else. The statement text decides everything SQLite will evaluate:
 * columns (generated or hidden ones included), types, constraints, defaults, collations, index
 * expressions, WITHOUT ROWID. Only sqlite_schema is read, so nothing stored in the file is
 * evaluated before it passes. */
static psdb_hr check_schema(sqlite3 *db, char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3 *ref = NULL;
    sqlite3_stmt *want = NULL, *got = NULL;
    schema_row rows[SCHEMA_ROWS_MAX];
    size_t nrows = 0;
    int rc = SQLITE_OK;

    memset(rows, 0, sizeof(rows));
    rc = sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(ref, psdb__psdb_schema_sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(ref, schema_want_sql, -1, &want, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(want)) == SQLITE_ROW) {
        schema_row *w = &rows[nrows];
        if (nrows == SCHEMA_ROWS_MAX) {
            rc = SQLITE_ERROR; /* psdb.sql grew past SCHEMA_ROWS_MAX: a bug here, not in a file */
            break;
        }
        w->type = dup_column(want, 0, NULL);
        w->name = dup_column(want, 1, NULL);
        w->tbl_name = dup_column(want, 2, NULL);
        w->sql = dup_column(want, 3, &w->sql_len);
        nrows++;
        if (!w->type || !w->name || !w->tbl_name ||
            (!w->sql && sqlite3_column_type(want, 3) != SQLITE_NULL)) {
            rc = SQLITE_NOMEM;
            break;
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
        hr = rc == SQLITE_NOMEM || !ref ? PSDB_E_OUTOFMEMORY : PSDB_E_FAIL;
        set_msg(msg, msg_size, "reference schema: %s", ref ? sqlite3_errmsg(ref) : "no memory");
        goto cleanup;
    }
    rc = sqlite3_prepare_v2(db, schema_got_sql, -1, &got, NULL);
    if (rc != SQLITE_OK) {
        char e[64];
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        /* SQLite's message quotes names from the file. */
        set_msg(msg, msg_size, "schema: %s", msg_name(sqlite3_errmsg(db), e));
        goto cleanup;
    }
    /* At most nrows + 1 rows are read: the first unexpected or differing one ends the check. */
    while ((rc = sqlite3_step(got)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(got, 0);
        const char *name = (const char *)sqlite3_column_text(got, 1);
        const char *tbl = (const char *)sqlite3_column_text(got, 2);
        const char *sql = (const char *)sqlite3_column_text(got, 3);
        size_t sql_len = (size_t)sqlite3_column_bytes(got, 3);
        schema_row *w = NULL;

        for (size_t i = 0; name && i < nrows && !w; i++)
            if (!rows[i].seen && strcmp(rows[i].name, name) == 0 &&
                (size_t)sqlite3_column_bytes(got, 1) == strlen(name))
                w = &rows[i];
        hr = PSDB_E_CACHE_CORRUPT;
        if (!w || !type || strcmp(w->type, type) != 0) {
            char t[64], n[64];
            set_msg(msg, msg_size, "schema differs: %s %s unexpected", msg_name(type, t),
                    msg_name(name, n));
            goto cleanup;
        }
        if (!tbl || strcmp(w->tbl_name, tbl) != 0 || !w->sql != !sql ||
            (sql && !sql_same(w->sql, w->sql_len, sql, sql_len))) {
            set_msg(msg, msg_size, "schema differs: %s %s is not defined as psdb.sql defines it",
                    w->type, w->name);
            goto cleanup;
        }
        hr = PSDB_S_OK;
        w->seen = 1;
    }
    if (rc != SQLITE_DONE) {
        char e[64];
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        set_msg(msg, msg_size, "schema: %s", msg_name(sqlite3_errmsg(db), e));
        goto cleanup;
    }
    for (size_t i = 0; i < nrows; i++) {
        if (!rows[i].seen) {
            hr = PSDB_E_CACHE_CORRUPT;
            set_msg(msg, msg_size, "schema differs: %s %s missing", rows[i].type, rows[i].name);
            goto cleanup;
        }
    }
cleanup:
    for (size_t i = 0; i < nrows; i++) {
        free(rows[i].type);
        free(rows[i].name);
        free(rows[i].tbl_name);
        free(rows[i].sql);
    }
    sqlite3_finalize(want);
    sqlite3_finalize(got);
    sqlite3_close(ref);
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
        set_msg(msg, msg_size, "header: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_CACHE_CORRUPT : psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        set_msg(msg, msg_size, "malformed header row (%s)",
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
    set_msg(msg, msg_size, "malformed header row (%s)", why);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

/* MODEL A3: same family, ABI within the driver's range, top 32 bits of the profile version. */
static psdb_hr check_compat(const psdb_file_info *info, const psdb_adapter_desc *a, char *msg,
                            size_t msg_size)
{
    if (strcmp(info->target.family, a->family) != 0) {
        set_msg(msg, msg_size, "adapter family %s, PSDB made for %s", a->family,
                info->target.family);
        return PSDB_E_ADAPTER_NOT_FOUND;
    }
    if (info->target.abi_version < a->abi_min || info->target.abi_version > a->abi_max) {
        set_msg(msg, msg_size, "ABI version %llu outside the driver's [%llu, %llu]",
                (unsigned long long)info->target.abi_version, (unsigned long long)a->abi_min,
                (unsigned long long)a->abi_max);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    if (info->target.profile_version >> 32 != a->app_profile_version >> 32) {
        set_msg(msg, msg_size, "application profile version 0x%016llx, driver has 0x%016llx",
                (unsigned long long)info->target.profile_version,
                (unsigned long long)a->app_profile_version);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    return PSDB_S_OK;
}

void psdb_file_release(psdb_file *f)
{
    if (!f)
        return;
    atomic_store(&f->index_cancel, 1);
    if (f->index_started)
        pthread_join(f->index_thread, NULL);
    index_free(atomic_load(&f->index));
    while (f->idle) {
        conn *c = f->idle;
        f->idle = c->next;
        conn_close(c);
    }
    page_cache_free(f->pages);
    pthread_cond_destroy(&f->index_done);
    pthread_mutex_destroy(&f->lock);
    EVP_MD_free(f->sha256);
    free((void *)f->verified);
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

    set_msg(msg, msg_size, "ok");
    if (!path || !out || (adapter && !adapter->family)) {
        hr = PSDB_E_INVALIDARG;
        set_msg(msg, msg_size, "invalid argument");
        goto cleanup;
    }
    *out = NULL;
    if ((hr = check_raw_header(path, &file_size, msg, msg_size)) < 0)
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
    f->uri = make_uri(path);
    f->pages = page_cache_new(file_size);
    f->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!f->uri || !f->sha256) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = conn_open(f, 1, &c, msg, msg_size)) < 0)
        goto cleanup;
    if ((hr = read_header(f, c->db, file_size, msg, msg_size)) < 0)
        goto cleanup;
    if (f->info.num_blobs > 0 && f->info.num_blobs < SIZE_MAX) {
        /* Without the cache every fetch hashes; that is correct, only slower. */
        f->num_verified_slots = f->info.num_blobs + 1;
        f->verified = calloc((size_t)f->num_verified_slots, 1);
        if (!f->verified)
            f->num_verified_slots = 0;
    }
    if (adapter && (hr = check_compat(&f->info, adapter, msg, msg_size)) < 0)
        goto cleanup;
    conn_put(f, c);
    c = NULL;
    *out = f;
    f = NULL;
cleanup:
    conn_close(c);
    psdb_file_release(f);
    return hr;
}

psdb_hr psdb_file_open(const char *path, const psdb_adapter_desc *adapter, psdb_file **out)
{
    char msg[512] = "";
    psdb_hr hr = psdb__file_open_msg(path, adapter, out, msg, sizeof(msg));
    if (PSDB_FAILED(hr))
        psdb__error_set(hr, "%s: %s", path ? path : "(null)", msg[0] ? msg : psdb_hr_str(hr));
    return hr;
}

psdb_hr psdb_file_get_info(psdb_file *f, psdb_file_info *out)
{
    if (!f || !out)
        return PSDB_E_INVALIDARG;
    *out = f->info;
    return PSDB_S_OK;
}

/* Fills k with what value_entries holds for key (every type at once). */
static psdb_hr load_key(conn *c, const void *key, size_t key_size, cached_key *k)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = c->key_st;
    int rc = SQLITE_OK;

    k->key_size = 0;
    memset(k->blob_id, 0, sizeof(k->blob_id));
    memset(k->size, 0, sizeof(k->size));
    if ((rc = bind_bytes(st, 1, key, key_size)) != SQLITE_OK) {
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
    const uint8_t *digest = sqlite3_column_blob(st, 0);
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
        atomic_store_explicit(&f->verified[id], 1, memory_order_relaxed);
cleanup:
    sqlite3_reset(st);
    return hr;
}

psdb_hr psdb_file_find_value(psdb_file *f, const void *key, size_t key_size, uint32_t value_type,
                             void *value, size_t *value_size)
{
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
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    x = atomic_load_explicit(&f->index, memory_order_acquire);
    if (x) {
        /* The index answers every key of value_entries: a miss is NOT_FOUND. */
        if ((e = index_find(x, key, key_size)) != NULL) {
            id = e->blob_id[value_type] == INDEX_MALFORMED ? (sqlite3_int64)BLOB_MALFORMED
                                                           : (sqlite3_int64)e->blob_id[value_type];
            size = e->size[value_type];
        }
    } else {
        index_start(f);
        if ((hr = conn_get(f, &c)) < 0)
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
    if (!c && (hr = conn_get(f, &c)) < 0)
        goto cleanup;
    if ((uint64_t)id < f->num_verified_slots &&
        atomic_load_explicit(&f->verified[id], memory_order_relaxed))
        hr = read_verified(c, id, value, size);
    else
        hr = read_and_check(f, c, id, value, size);
    if (hr >= 0)
        *value_size = size;
cleanup:
    if (c)
        conn_put(f, c);
    return hr;
}

psdb_hr psdb_file_foreach_group(psdb_file *f,
                                int (*fn)(const void *key, size_t key_size, uint64_t version,
                                          uint32_t num_values, void *ctx),
                                void *ctx)
{
    static const char *sql = "SELECT key, version, (SELECT count(*) FROM group_members m "
                             "WHERE m.group_key = g.key) FROM value_groups g ORDER BY key";
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!f || !fn) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if ((hr = conn_get(f, &c)) < 0)
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
        conn_put(f, c);
    return hr;
}

/* Runs a query expected to return no row; a row means a broken invariant described by what. */
static psdb_hr expect_empty(sqlite3 *db, const char *sql, const char *what, char *msg,
                            size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        hr = PSDB_E_CACHE_CORRUPT;
        set_msg(msg, msg_size, "%s", what);
    } else if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        set_msg(msg, msg_size, "%s: %s", what, sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return hr;
}

/* Work bound of psdb_file_verify, in SQLite VM instructions: VERIFY_OPS_PER_BYTE per byte of the
 * file plus VERIFY_OPS_BASE. Every query of the verification is a scan or an index seek per row on
 * the schema check_schema enforces, so a well-formed file needs a small fraction of this (a file of
 * one-byte values, the densest, measured about 4 instructions per byte); the bound only stops a
 * query that some input made worse than linear. The progress handler is called every
 * VERIFY_PROGRESS_EVERY instructions. */
#define VERIFY_OPS_PER_BYTE 64u
#define VERIFY_OPS_BASE 10000000u
#define VERIFY_PROGRESS_EVERY 1000

typedef struct verify_budget {
    uint64_t left; /* calls of verify_progress still allowed */
    int stopped;
} verify_budget;

static int verify_progress(void *arg)
{
    verify_budget *b = arg;
    if (b->left == 0) {
        b->stopped = 1;
        return 1; /* interrupts the statement: SQLITE_INTERRUPT */
    }
    b->left--;
    return 0;
}

static void verify_budget_init(const psdb_file *f, verify_budget *b)
{
    b->stopped = 0;
    b->left = (f->file_size > (UINT64_MAX - VERIFY_OPS_BASE) / VERIFY_OPS_PER_BYTE
                   ? UINT64_MAX
                   : f->file_size * VERIFY_OPS_PER_BYTE + VERIFY_OPS_BASE) /
              VERIFY_PROGRESS_EVERY;
}

/* Blob ids are claimed in chunks of this many by the threads that hash them. */
#define VERIFY_BLOB_CHUNK 16

/* The blobs of a PSDB hashed by two threads: each claims the next VERIFY_BLOB_CHUNK ids of 1..last
 * (the writer numbers blobs 1..num_blobs; psdb_file_verify refuses any other id), so the work
 * splits evenly whatever the blob sizes. */
typedef struct blob_scan {
    _Atomic uint64_t next; /* first id of the next chunk */
    uint64_t last;         /* header num_blobs */
} blob_scan;

/* What one thread found: rows hashed, and the first failure. */
typedef struct blob_part {
    uint64_t count;
    psdb_hr hr;
    sqlite3_int64 bad_id;
    char msg[256];
} blob_part;

static void blob_scan_run(blob_scan *s, sqlite3 *db, blob_part *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        db, "SELECT id, sha256, data FROM blobs WHERE id BETWEEN ?1 AND ?2 ORDER BY id", -1, &st,
        NULL);

    if (rc != SQLITE_OK)
        goto sqlite_fail;
    for (;;) {
        uint64_t first = atomic_fetch_add(&s->next, VERIFY_BLOB_CHUNK);
        if (first > s->last)
            break;
        uint64_t last =
            s->last - first < VERIFY_BLOB_CHUNK ? s->last : first + VERIFY_BLOB_CHUNK - 1;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)first);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)last);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            uint8_t got[32];
            sqlite3_int64 id = sqlite3_column_int64(st, 0);
            if (sqlite3_column_type(st, 1) != SQLITE_BLOB ||
                sqlite3_column_type(st, 2) != SQLITE_BLOB || sqlite3_column_bytes(st, 1) != 32 ||
                sqlite3_column_bytes(st, 2) == 0) {
                out->hr = PSDB_E_CACHE_CORRUPT;
                out->bad_id = id;
                set_msg(out->msg, sizeof(out->msg), "blob %lld: malformed row", (long long)id);
                goto cleanup;
            }
            psdb__sha256(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2), got);
            if (memcmp(got, sqlite3_column_blob(st, 1), 32) != 0) {
                out->hr = PSDB_E_CACHE_CORRUPT;
                out->bad_id = id;
                set_msg(out->msg, sizeof(out->msg), "blob %lld: bytes do not match their SHA-256",
                        (long long)id);
                goto cleanup;
            }
            out->count++;
        }
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            goto sqlite_fail;
    }
    goto cleanup;
sqlite_fail:
    out->hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
    out->bad_id = 0;
    set_msg(out->msg, sizeof(out->msg), "blobs: %s", sqlite3_errmsg(db));
cleanup:
    if (out->hr < 0)
        atomic_store(&s->next, UINT64_MAX / 2); /* the other thread stops at its next chunk */
    sqlite3_finalize(st);
}

/* The second thread of psdb_file_verify: PRAGMA integrity_check on a connection of its own, then
 * its share of the blobs. */
typedef struct integrity_job {
    psdb_file *f;
    blob_scan *scan;
    psdb_hr hr;
    char msg[256];
    blob_part blobs;
} integrity_job;

static void integrity_run(integrity_job *job)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    verify_budget budget;
    int rc = SQLITE_OK;

    if ((job->hr = db_open(job->f, &db, job->msg, sizeof(job->msg))) < 0)
        goto cleanup;
    verify_budget_init(job->f, &budget);
    sqlite3_progress_handler(db, VERIFY_PROGRESS_EVERY, verify_progress, &budget);
    rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (budget.stopped) {
        job->hr = PSDB_E_CACHE_CORRUPT;
        set_msg(job->msg, sizeof(job->msg),
                "integrity_check stopped: more work than a PSDB of %llu bytes can need",
                (unsigned long long)job->f->file_size);
    } else if (rc != SQLITE_ROW) {
        job->hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        set_msg(job->msg, sizeof(job->msg), "integrity_check: %s", sqlite3_errmsg(db));
    } else if (!sqlite3_column_text(st, 0) ||
               strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
        char e[64];
        job->hr = PSDB_E_CACHE_CORRUPT;
        set_msg(job->msg, sizeof(job->msg), "integrity_check: %s",
                msg_name((const char *)sqlite3_column_text(st, 0), e));
    }
    sqlite3_finalize(st);
    st = NULL;
    if (job->hr < 0 && job->scan)
        atomic_store(&job->scan->next, UINT64_MAX / 2); /* its finding is reported: stop hashing */
    if (job->hr >= 0 && job->scan)
        blob_scan_run(job->scan, db, &job->blobs);
    if (budget.stopped && job->blobs.hr >= 0) {
        job->blobs.hr = PSDB_E_CACHE_CORRUPT;
        set_msg(job->blobs.msg, sizeof(job->blobs.msg),
                "verification stopped: more work than a PSDB of %llu bytes can need",
                (unsigned long long)job->f->file_size);
    }
cleanup:
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void *integrity_main(void *arg)
{
    integrity_run(arg);
    return NULL;
}

psdb_hr psdb_file_verify(psdb_file *f, char *msg, size_t msg_size)
{
    static const struct {
        const char *sql, *what;
    } checks[] = {
        {"SELECT 1 FROM value_entries v LEFT JOIN blobs b ON b.id = v.blob_id WHERE b.id IS NULL",
         "a value references a missing blob"},
        {"SELECT 1 FROM value_entries WHERE typeof(key) != 'blob' OR length(key) = 0 "
         "OR typeof(type) != 'integer' OR type NOT BETWEEN 0 AND 3",
         "a value has a malformed key or type"},
        {"SELECT 1 FROM value_entries v JOIN blobs b ON b.id = v.blob_id "
         "WHERE typeof(v.size) != 'integer' OR v.size != length(b.data)",
         "a value's size differs from its blob's"},
        /* With no dangling blob_id (checked above), counts suffice; value_entries has no index
         * on blob_id, so a NOT EXISTS per blob would be quadratic. */
        {"SELECT 1 WHERE (SELECT count(DISTINCT blob_id) FROM value_entries) != "
         "(SELECT count(*) FROM blobs)",
         "a blob is not referenced by any value"},
        {"SELECT 1 FROM value_groups WHERE typeof(key) != 'blob' OR length(key) = 0 "
         "OR typeof(version) != 'integer'",
         "a group has a malformed key or version"},
        {"SELECT 1 FROM group_members m WHERE NOT EXISTS (SELECT 1 FROM value_groups g "
         "WHERE g.key = m.group_key)",
         "a group member belongs to no group"},
        {"SELECT 1 FROM group_members m WHERE NOT EXISTS (SELECT 1 FROM value_entries v "
         "WHERE v.key = m.value_key)",
         "a group references a missing value key"},
        {"SELECT 1 FROM group_members GROUP BY group_key "
         "HAVING min(idx) != 0 OR max(idx) != count(*) - 1",
         "a group's member indexes are not 0..n-1"},
    };
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    sqlite3_stmt *st = NULL;
    content_stats cs = {0};
    uint64_t nblobs = 0;
    verify_budget budget = {0};
    integrity_job job = {.hr = PSDB_S_OK};
    blob_scan scan;
    blob_part mine = {.hr = PSDB_S_OK};
    pthread_t job_thread;
    int job_started = 0;
    char ids_sql[96];
    char hex[65];

    set_msg(msg, msg_size, "ok");
    if (!f) {
        hr = PSDB_E_INVALIDARG;
        set_msg(msg, msg_size, "invalid argument");
        goto cleanup;
    }
    if ((hr = conn_get(f, &c)) < 0) {
        set_msg(msg, msg_size, "cannot open a connection: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    /* SQLite's integrity check reads every page, as the blob hashing does: a second thread with
     * a connection of its own runs it, then joins this one in hashing blobs, so the two cost
     * about half their sum (publish runs this; measured). */
    atomic_init(&scan.next, 1);
    scan.last = f->info.num_blobs;
    job.f = f;
    job.scan = &scan;
    job_started = pthread_create(&job_thread, NULL, integrity_main, &job) == 0;
    if (!job_started) {
        job.scan = NULL;
        integrity_run(&job);
    }
    verify_budget_init(f, &budget);
    sqlite3_progress_handler(c->db, VERIFY_PROGRESS_EVERY, verify_progress, &budget);

    if (job_started || job.hr >= 0) /* job.hr is the other thread's until the join */
        blob_scan_run(&scan, c->db, &mine);
    if (job_started) {
        pthread_join(job_thread, NULL);
        job_started = 0;
    }
    if (job.hr < 0)
        goto cleanup; /* reported below */
    if (mine.hr < 0 || job.blobs.hr < 0) {
        /* The lower blob id first; a failure without one (SQLite's) before either. */
        const blob_part *bad = mine.hr >= 0                     ? &job.blobs
                               : job.blobs.hr >= 0              ? &mine
                               : job.blobs.bad_id < mine.bad_id ? &job.blobs
                                                                : &mine;
        hr = bad->hr;
        set_msg(msg, msg_size, "%s", bad->msg);
        goto cleanup;
    }
    nblobs = mine.count + job.blobs.count;

    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
        if ((hr = expect_empty(c->db, checks[i].sql, checks[i].what, msg, msg_size)) < 0)
            goto cleanup;
    /* Only ids 1..num_blobs were hashed: any other is refused (the counts then cover the rest). */
    snprintf(ids_sql, sizeof(ids_sql), "SELECT 1 FROM blobs WHERE id < 1 OR id > %llu",
             (unsigned long long)f->info.num_blobs);
    if ((hr = expect_empty(c->db, ids_sql, "blob ids are not 1..num_blobs", msg, msg_size)) < 0)
        goto cleanup;

    if ((hr = compute_content(c->db, &f->info.identity, &f->info.target, &cs, msg, msg_size)) < 0)
        goto cleanup;
    if (cs.num_values != f->info.num_values || cs.num_groups != f->info.num_groups ||
        cs.num_blobs != f->info.num_blobs || cs.blob_bytes != f->info.blob_bytes ||
        nblobs != cs.num_blobs) {
        hr = PSDB_E_CACHE_CORRUPT;
        set_msg(msg, msg_size,
                "header counts differ from the tables (values %llu/%llu, groups %llu/%llu, "
                "blobs %llu/%llu, blob bytes %llu/%llu)",
                (unsigned long long)f->info.num_values, (unsigned long long)cs.num_values,
                (unsigned long long)f->info.num_groups, (unsigned long long)cs.num_groups,
                (unsigned long long)f->info.num_blobs, (unsigned long long)cs.num_blobs,
                (unsigned long long)f->info.blob_bytes, (unsigned long long)cs.blob_bytes);
        goto cleanup;
    }
    if (memcmp(cs.digest, f->info.content_digest, 32) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        psdb__hex(cs.digest, 32, hex);
        set_msg(msg, msg_size, "content digest differs from the header (recomputed %s)", hex);
        goto cleanup;
    }
    set_msg(msg, msg_size, "ok");
cleanup:
    sqlite3_finalize(st);
    if (job_started)
        pthread_join(job_thread, NULL);
    /* Damaged pages explain whatever else failed: SQLite's finding comes first. */
    if (job.hr < 0) {
        hr = job.hr;
        set_msg(msg, msg_size, "%s", job.msg);
    } else if (budget.stopped) {
        hr = PSDB_E_CACHE_CORRUPT;
        set_msg(msg, msg_size,
                "verification stopped: more work than a PSDB of %llu bytes can need (crafted "
                "content)",
                (unsigned long long)f->file_size);
    }
    if (c) {
        sqlite3_progress_handler(c->db, 0, NULL, NULL);
        conn_put(f, c);
    }
    return hr;
}

psdb_hr psdb_file_open_verified(const char *path, char *msg, size_t msg_size, psdb_file **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_file *f = NULL;

    if (out)
        *out = NULL;
    if ((hr = psdb__file_open_msg(path, NULL, out ? &f : NULL, msg, msg_size)) < 0)
        goto cleanup;
    if ((hr = psdb_file_verify(f, msg, msg_size)) < 0)
        goto cleanup;
    *out = f;
    f = NULL;
cleanup:
    psdb_file_release(f);
    return hr;
}

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
    psdb_hr hr = PSDB_S_OK;
    psdb_writer *w = NULL;
    size_t n = 0;
    int rc = SQLITE_OK;

    if (!path || !path[0] || !identity || !target || !out || !valid_identity(identity) ||
        !valid_target(target)) {
        hr = PSDB_E_INVALIDARG;
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
    if (unlink(w->tmp_path) != 0 && errno != ENOENT) {
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
    return hr;
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
    psdb_hr hr = PSDB_S_OK;
    uint8_t digest[32];
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!w || w->finished || !key || key_size == 0 || key_size > MAX_ITEM_SIZE ||
        value_type >= PSDB_VALUE_TYPE_COUNT || !value || value_size == 0 ||
        value_size > MAX_ITEM_SIZE) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (w->broken < 0) {
        hr = w->broken;
        goto cleanup;
    }
    psdb__sha256(value, value_size, digest);

    st = w->st[W_GET_VAL];
    if ((rc = bind_bytes(st, 1, key, key_size)) != SQLITE_OK ||
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
    if ((rc = bind_bytes(st, 1, digest, 32)) != SQLITE_OK ||
        (rc = bind_bytes(st, 2, value, value_size)) != SQLITE_OK ||
        (rc = step_reset(st)) != SQLITE_DONE)
        goto sqlite_fail;
    st = w->st[W_PUT_VAL];
    if ((rc = bind_bytes(st, 1, key, key_size)) != SQLITE_OK ||
        (rc = sqlite3_bind_int(st, 2, (int)value_type)) != SQLITE_OK ||
        (rc = bind_bytes(st, 3, digest, 32)) != SQLITE_OK || (rc = step_reset(st)) != SQLITE_DONE)
        goto sqlite_fail;
    goto cleanup;

sqlite_fail:
    hr = w->broken = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    if (st)
        sqlite3_clear_bindings(st);
    return hr;
}

psdb_hr psdb_writer_put_group(psdb_writer *w, const void *group_key, size_t key_size,
                              uint64_t version, uint32_t num_values, const psdb_value_ref *values)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!w || w->finished || !group_key || key_size == 0 || key_size > MAX_ITEM_SIZE ||
        (num_values > 0 && !values)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    for (uint32_t i = 0; i < num_values; i++) {
        if (!values[i].key || values[i].key_size == 0 || values[i].key_size > MAX_ITEM_SIZE) {
            hr = PSDB_E_INVALIDARG;
            goto cleanup;
        }
    }
    if (w->broken < 0) {
        hr = w->broken;
        goto cleanup;
    }
    st = w->st[W_HAS_GROUP];
    if ((rc = bind_bytes(st, 1, group_key, key_size)) != SQLITE_OK)
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
        if ((rc = bind_bytes(st, 1, values[i].key, values[i].key_size)) != SQLITE_OK)
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
    if ((rc = bind_bytes(st, 1, group_key, key_size)) != SQLITE_OK ||
        (rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)version)) != SQLITE_OK ||
        (rc = step_reset(st)) != SQLITE_DONE)
        goto sqlite_fail;
    st = w->st[W_PUT_MEMBER];
    for (uint32_t i = 0; i < num_values; i++) {
        if ((rc = bind_bytes(st, 1, group_key, key_size)) != SQLITE_OK ||
            (rc = sqlite3_bind_int64(st, 2, (sqlite3_int64)i)) != SQLITE_OK ||
            (rc = bind_bytes(st, 3, values[i].key, values[i].key_size)) != SQLITE_OK ||
            (rc = step_reset(st)) != SQLITE_DONE)
            goto sqlite_fail;
    }
    goto cleanup;

sqlite_fail:
    hr = w->broken = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    if (st)
        sqlite3_clear_bindings(st);
    return hr;
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
        hr = PSDB_E_INVALIDARG;
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
    if ((hr = compute_content(w->db, id, &w->target, &cs, NULL, 0)) < 0) {
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
        rc = bind_bytes(st, 6, id->app_id, 16);
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
        rc = bind_bytes(st, 15, cs.digest, 32);
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
    return hr;
}
