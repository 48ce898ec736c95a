/* index_sqlite.c - the psdbd index's SQLite engine: WAL, one connection per thread, migrations,
 * and noticing an index lost or damaged under the server. The queries are in
 * index_sqlite_queries.c.
 *
 * DESIGN
 * Each worker thread gets its own connection (a pthread key; closed when the thread exits) with
 * its own cache of prepared statements, so readers never share a handle or a lock in this code;
 * SQLite's WAL lets them read while one writer writes. Every write is one BEGIN IMMEDIATE
 * transaction (the write lock is taken up front, so a transaction never fails half-way on
 * SQLITE_BUSY after reading) under a busy timeout. synchronous=FULL: a publish acknowledged with
 * 201 survives a power cut. */
#include "index_int.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "common/status_map.h"

#define STMT_CACHE 32
#define BUSY_TIMEOUT_MS 10000

struct conn {
    sqlite3 *db;
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } cache[STMT_CACHE];
};

static void conn_free(void *p)
{
    struct conn *c = p;
    if (!c)
        return;
    for (int i = 0; i < STMT_CACHE; i++)
        sqlite3_finalize(c->cache[i].st);
    sqlite3_close_v2(c->db);
    free(c);
}

/* Opens a connection. Only psdbd_index_create passes create: every other open, the worker
 * threads' included, finds the file or fails, so a removed index is never silently replaced by
 * an empty one. */
static sqlite3 *open_db(const char *path, int create, char *err, size_t err_size)
{
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, err_size, "open index %s: %s", path, db ? sqlite3_errmsg(db) : "no memory");
        goto fail;
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    sqlite3_extended_result_codes(db, 1);
    /* journal_mode=WAL is set once, by index_start after the file proved to be an index: it is
     * stored in the file, and setting it writes to a file that may be someone else's. */
    rc = sqlite3_exec(db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, err_size, "configure index %s: %s", path, sqlite3_errmsg(db));
        goto fail;
    }
    return db;
fail:
    sqlite3_close_v2(db);
    return NULL;
}

enum { LOST_NO = 0, LOST_REMOVED, LOST_REPLACED, LOST_UNREADABLE };

/* True when the path names another file than the one opened, or none. Logs each change. */
static int file_lost(psdbd_index *ix)
{
    struct stat sb;
    int state = LOST_NO, e = 0, was;
    if (ix->ino == 0)
        return 0; /* still opening */
    if (stat(ix->path, &sb) != 0) {
        e = errno;
        state = psdb__errno_is(e, PSDB__ERRNO_ABSENT) ? LOST_REMOVED : LOST_UNREADABLE;
    } else if (sb.st_dev != ix->dev || sb.st_ino != ix->ino) {
        state = LOST_REPLACED;
    } else if (access(ix->path, R_OK | W_OK) != 0) {
        /* Open connections would go on working; new ones would fail: refuse on every thread. */
        e = errno;
        state = LOST_UNREADABLE;
    }
    /* Read first: every query of every thread passes here, and a store would bounce the cache
     * line between them. */
    was = atomic_load(&ix->lost);
    if (state != was)
        was = atomic_exchange(&ix->lost, state);
    if (state != was && state != LOST_NO)
        psdbd_log("index %s was %s%s while psdbd runs: index reads and writes are refused (503) "
                  "until it is put back; restore it (psdbd restore) and restart psdbd",
                  ix->path,
                  state == LOST_REMOVED    ? "removed"
                  : state == LOST_REPLACED ? "replaced by another file"
                                           : "made unusable: ",
                  state == LOST_UNREADABLE ? strerror(e) : "");
    else if (state != was)
        psdbd_log("index %s is back in place", ix->path);
    return state != LOST_NO;
}

int psdbd__sqlite_lost(psdbd_index *ix)
{
    return file_lost(ix) || atomic_load(&ix->damaged);
}

sqlite3 *psdbd_index_db(psdbd_index *ix)
{
    struct conn *c;
    char err[512];
    if (ix->ops != &psdbd__sqlite_ops)
        return NULL;
    c = pthread_getspecific(ix->key);
    if (file_lost(ix))
        return NULL;
    if (c)
        return c->db;
    c = xcalloc(1, sizeof(*c));
    c->db = open_db(ix->path, 0, err, sizeof(err));
    if (!c->db) {
        psdbd_log("%s", err);
        free(c);
        return NULL;
    }
    pthread_setspecific(ix->key, c);
    return c->db;
}

/* This thread's connection as it is (no check, no open): for error messages. */
sqlite3 *psdbd__index_this_db(psdbd_index *ix)
{
    struct conn *c = pthread_getspecific(ix->key);
    return c ? c->db : NULL;
}

/* A cached prepared statement of this thread's connection, reset and unbound. `sql` must be a
 * string literal: the cache is keyed by its address. */
sqlite3_stmt *psdbd__index_prep(psdbd_index *ix, const char *sql)
{
    if (!psdbd_index_db(ix))
        return NULL;
    struct conn *c = pthread_getspecific(ix->key);
    int free_slot = -1;
    for (int i = 0; i < STMT_CACHE; i++) {
        if (c->cache[i].sql == sql) {
            sqlite3_reset(c->cache[i].st);
            sqlite3_clear_bindings(c->cache[i].st);
            return c->cache[i].st;
        }
        if (!c->cache[i].sql && free_slot < 0)
            free_slot = i;
    }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
        if (psdb__sqlite_hr(rc, PSDB_E_IO) == PSDB_E_CACHE_CORRUPT)
            atomic_store(&ix->damaged, 1);
        psdbd_log("index: prepare: %s", sqlite3_errmsg(c->db));
        return NULL;
    }
    if (free_slot < 0) { /* more distinct statements than slots: evict slot 0 */
        sqlite3_finalize(c->cache[0].st);
        free_slot = 0;
    }
    c->cache[free_slot].sql = sql;
    c->cache[free_slot].st = st;
    return st;
}

/* A SQLite failure as the index's status. The class comes from the one SQLite mapping
 * (psdb__sqlite_hr: full disk, damaged file); the rest is what the index makes of codes that
 * mapping leaves general: a failed write or fsync of the index is taken for a full disk, which
 * surfaces that way on some paths; a unique key taken is a conflict; a moved or unopenable file is
 * a lost index. */
psdbd_rc psdbd__index_rc_of(psdbd_index *ix, int rc)
{
    sqlite3 *db = psdbd__index_this_db(ix);
    int primary = rc & 0xFF;
    psdb_hr hr = psdb__sqlite_hr(rc, PSDB_E_IO);
    if (hr == PSDB_E_DISK_FULL || rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_FSYNC)
        return PSDBD_FULL;
    if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
        return PSDBD_CONFLICT;
    if (hr == PSDB_E_CACHE_CORRUPT) {
        if (atomic_exchange(&ix->damaged, 1) == 0)
            psdbd_log("index %s is damaged (%s): index reads and writes are refused (503); "
                      "restore it (psdbd restore) and restart psdbd",
                      ix->path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        return PSDBD_UNAVAILABLE;
    }
    if (rc == SQLITE_READONLY_DBMOVED || primary == SQLITE_CANTOPEN) {
        psdbd_log("index %s: %s", ix->path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        return PSDBD_UNAVAILABLE;
    }
    psdbd_log("index: %s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    return psdbd_index_failure(ix);
}

/* One integer pragma of db into *out; 0, or -1 with err. */
static int pragma_int(sqlite3 *db, const char *path, const char *sql, int *out, char *err,
                      size_t err_size)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
        snprintf(err, err_size, "index %s: %s: %s", path, sql, sqlite3_errmsg(db));
        goto cleanup;
    }
    *out = sqlite3_column_int(st, 0);
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    return rc;
}

/* What the migration runner's check needs to know: which file, and whether it must be new. */
struct identity_ctx {
    const char *path;
    int create;
};

/* Refuses a file that is not (create: not yet) a psdbd index, from its user_version and
 * application_id: psdb__migrate's check, run under the write lock, and run once before it. */
static psdb_hr check_identity(sqlite3 *db, int version, int app_id, void *ctx, char *err,
                              size_t err_size)
{
    const struct identity_ctx *ic = ctx;
    (void)db;
    if (app_id != 0 && (uint32_t)app_id != PSDBD_INDEX_APPLICATION_ID) {
        snprintf(err, err_size, "index %s is not a psdbd index (application_id 0x%08x)", ic->path,
                 (unsigned)app_id);
        return PSDB_E_CACHE_CORRUPT;
    }
    if (ic->create && version != 0) {
        snprintf(err, err_size, "create index %s: another process created it meanwhile", ic->path);
        return PSDB_E_ALREADY_EXISTS;
    }
    if (!ic->create && version == 0) {
        /* An empty file (truncated, or created by something else) must not be migrated into a
         * fresh, empty index: that would silently start over. */
        snprintf(err, err_size,
                 "index %s is empty or not a psdbd index (schema version 0): restore it "
                 "(psdbd restore --from BACKUPDIR --data-dir NEWDIR) or move it away",
                 ic->path);
        return PSDB_E_CACHE_CORRUPT;
    }
    if (version < 0 || (size_t)version > psdbd_num_migrations) {
        snprintf(err, err_size,
                 "index %s has schema version %d, newer than this psdbd knows (%zu): upgrade psdbd",
                 ic->path, version, psdbd_num_migrations);
        return PSDB_E_UNSUPPORTED;
    }
    return PSDB_S_OK;
}

/* check_identity before anything is written (WAL mode writes the header). 0, or -1 with err. */
static int check_identity_now(sqlite3 *db, const struct identity_ctx *ic, char *err,
                              size_t err_size)
{
    int app_id = 0, version = 0;
    if (pragma_int(db, ic->path, "PRAGMA application_id", &app_id, err, err_size) != 0 ||
        pragma_int(db, ic->path, "PRAGMA user_version", &version, err, err_size) != 0)
        return -1;
    return PSDB_FAILED(check_identity(db, version, app_id, (void *)ic, err, err_size)) ? -1 : 0;
}

/* Opens or creates the index and brings its schema up to date. `create`: the file must be new
 * (user_version 0); otherwise it must already be a psdbd index. */
static int index_start(const char *path, int create, psdbd_index **out, char *err, size_t err_size)
{
    psdbd_index *ix = xcalloc(1, sizeof(*ix));
    struct conn *c = NULL;
    sqlite3 *db = NULL;
    struct stat sb;
    struct identity_ctx ic = {path, create};
    char what[PATH_MAX + 16];
    int result = -1;
    ix->ops = &psdbd__sqlite_ops;
    ix->path = xstrdup(path);
    if (pthread_key_create(&ix->key, conn_free) != 0) {
        snprintf(err, err_size, "index %s: pthread_key_create failed", path);
        free(ix->path);
        free(ix);
        *out = NULL;
        return -1;
    }
    if (lstat(path, &sb) == 0 && create) {
        snprintf(err, err_size, "create index %s: a file is already there", path);
        goto cleanup;
    }
    if (!create && lstat(path, &sb) != 0) {
        snprintf(err, err_size, "index %s: %s", path,
                 psdb__errno_is(errno, PSDB__ERRNO_ABSENT)
                     ? "missing (psdbd creates one only in a new data directory)"
                     : strerror(errno));
        goto cleanup;
    }
    c = xcalloc(1, sizeof(*c));
    if (!(c->db = open_db(path, create, err, err_size))) {
        free(c);
        goto cleanup;
    }
    pthread_setspecific(ix->key, c);
    db = c->db;
    if (stat(path, &sb) != 0) {
        snprintf(err, err_size, "index %s: stat: %s", path, strerror(errno));
        goto cleanup;
    }
    /* Checked before anything is written (WAL mode writes the header), then again by the
     * migration runner under the write lock, where the version is read so that two processes
     * never both migrate. Indexes made before the application_id was set get it there. */
    if (check_identity_now(db, &ic, err, err_size) != 0)
        goto cleanup;
    if (sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, err_size, "configure index %s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    snprintf(what, sizeof(what), "index %s", path);
    if (PSDB_FAILED(psdb__migrate(db, what, &psdbd_index_migrations, PSDBD_INDEX_APPLICATION_ID,
                                  check_identity, &ic, NULL, err, err_size)))
        goto cleanup;
    ix->version = (int)psdbd_num_migrations;
    ix->dev = sb.st_dev;
    ix->ino = sb.st_ino;
    result = 0;
cleanup:
    if (result != 0) {
        psdbd_index_close(ix);
        ix = NULL;
    }
    *out = ix;
    return result;
}

int psdbd_index_open(const char *path, psdbd_index **out, char *err, size_t err_size)
{
    return index_start(path, 0, out, err, err_size);
}

/* Removes a database file and its WAL companions (best effort). */
static void remove_db_files(const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        char *p = xasprintf("%s%s", path, suffixes[i]);
        unlink(p);
        free(p);
    }
}

int psdbd_index_create(const char *path, psdbd_index **out, char *err, size_t err_size)
{
    /* Built under another name and linked into place complete: a crash while creating leaves
     * no index.sqlite (which the next start would have to refuse as "empty"), only a .new file
     * that the next creation replaces. link() never replaces an existing index. */
    char *tmp = xasprintf("%s.new", path), *dir = xstrdup(path), *slash;
    psdbd_index *ix = NULL;
    int rc = -1, fd = -1;
    *out = NULL;
    if (access(path, F_OK) == 0 || !psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
        snprintf(err, err_size, "create index %s: a file is already there", path);
        goto cleanup;
    }
    remove_db_files(tmp);
    if (index_start(tmp, 1, &ix, err, err_size) != 0)
        goto cleanup;
    /* Everything into the main file before it is renamed: the WAL belongs to the old name. */
    if (sqlite3_exec(psdbd_index_db(ix), "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) !=
        SQLITE_OK) {
        snprintf(err, err_size, "create index %s: checkpoint: %s", tmp,
                 sqlite3_errmsg(psdbd_index_db(ix)));
        goto cleanup;
    }
    psdbd_index_close(ix);
    ix = NULL;
    if (link(tmp, path) != 0) {
        snprintf(err, err_size, "create index %s: link %s: %s", path, tmp, strerror(errno));
        goto cleanup;
    }
    remove_db_files(tmp);
    if ((slash = strrchr(dir, '/')) != NULL)
        *slash = '\0';
    if ((fd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY)) < 0 ||
        fsync(fd) != 0) {
        snprintf(err, err_size, "create index %s: fsync its directory: %s", path, strerror(errno));
        goto cleanup;
    }
    rc = index_start(path, 0, out, err, err_size);
cleanup:
    if (fd >= 0)
        close(fd);
    psdbd_index_close(ix);
    if (rc != 0)
        remove_db_files(tmp);
    free(tmp);
    free(dir);
    return rc;
}

void psdbd__sqlite_close(psdbd_index *ix)
{
    conn_free(pthread_getspecific(ix->key));
    pthread_setspecific(ix->key, NULL);
    pthread_key_delete(ix->key);
    free(ix->path);
    free(ix);
}

int psdbd__sqlite_ping(psdbd_index *ix)
{
    /* Also catches a file overwritten in place (same inode) with something else. */
    static const char sql[] = "SELECT (SELECT application_id FROM pragma_application_id()), "
                              "(SELECT user_version FROM pragma_user_version()), "
                              "(SELECT count(*) FROM apps)";
    sqlite3_stmt *st = psdbd__index_prep(ix, sql);
    int rc = -1, s;
    if (!st)
        return -1;
    if ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if ((uint32_t)sqlite3_column_int(st, 0) == PSDBD_INDEX_APPLICATION_ID &&
            sqlite3_column_int(st, 1) == ix->version)
            rc = 0;
        else
            psdbd_log("index %s: application_id 0x%08x, schema version %d: not the index psdbd "
                      "opened",
                      ix->path, (unsigned)sqlite3_column_int(st, 0), sqlite3_column_int(st, 1));
    } else {
        psdbd__index_rc_of(ix, sqlite3_extended_errcode(psdbd__index_this_db(ix)));
    }
    sqlite3_reset(st);
    return rc;
}
