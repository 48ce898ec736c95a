/* registry_db.c - the registry database of a root: opening, identity checks, migrations, the
 * problems it records in psdb_error_last. */
#include "registry/registry_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/store.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/migrate.h"
#include "common/status_map.h"

/* Records in psdb_error_last why the registry at path cannot be used, in one line naming the
 * database and the way out; detail says what was found. */
static void set_problem(const char *path, psdb_hr hr, const char *detail)
{
    if (hr == PSDB_E_CACHE_CORRUPT)
        psdb__error_set(hr,
                        "registry %s is damaged or not a psdb registry (%s): move it aside (mv %s "
                        "%s.broken) and run psdb install again for each application to rebuild it",
                        path, detail, path, path);
    else if (hr == PSDB_E_UNSUPPORTED)
        psdb__error_set(
            hr, "registry %s: %s: use a newer psdb, or move it aside and run psdb install again",
            path, detail);
    else
        psdb__error_set(hr, "registry %s: %s", path, detail);
}

/* Records a failed SQLite call on reg's database (corruption found while reading, for one). */
psdb_hr psdb__reg_fail(const psdb__reg *reg, psdb_hr hr)
{
    if (reg && reg->path && hr != PSDB_E_BUSY && hr != PSDB_E_OUTOFMEMORY)
        set_problem(reg->path, hr, reg->db ? sqlite3_errmsg(reg->db) : psdb_hr_str(hr));
    return hr;
}

char *psdb__reg_join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + 1 + b + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* mkdir -p for the registry root and its subdirectories. */
psdb_hr psdb__reg_make_dirs(const char *path, mode_t mode)
{
    psdb_hr hr = PSDB_S_OK;
    char *copy = psdb__strdup(path);
    if (!copy) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (char *p = copy + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(copy, mode) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS)) {
            hr = psdb__errno_hr(errno);
            goto cleanup;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        hr = PSDB_E_IO;
        goto cleanup;
    }
cleanup:
    free(copy);
    return hr;
}

psdb_hr psdb_registry_default_root(psdb_scope scope, char *buf, size_t buf_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    const char *base = NULL, *suffix = "";
    if (!buf && buf_size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_registry_default_root: buf NULL with a size");
        goto cleanup;
    }
    if (scope == PSDB_SCOPE_SYSTEM) {
        base = "/var/lib/psdb";
    } else if (scope == PSDB_SCOPE_USER) {
        base = getenv("PSDB_REGISTRY_DIR");
        if (!base || !*base) {
            base = getenv("XDG_DATA_HOME");
            suffix = "/psdb";
        }
        if (!base || !*base) {
            base = getenv("HOME");
            suffix = "/.local/share/psdb";
        }
        if (!base || !*base) {
            hr = PSDB_E_NOT_FOUND;
            goto cleanup;
        }
    } else {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    int n = snprintf(buf, buf_size, "%s%s", base, suffix);
    if (n < 0 || (size_t)n >= buf_size)
        hr = PSDB_E_MORE_DATA;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

/* Resolves root_dir (NULL: the scope's default) into a malloc'd string. */
psdb_hr psdb__reg_resolve_root(const char *root_dir, psdb_scope scope, char **out)
{
    psdb_hr hr = PSDB_S_OK;
    char buf[PATH_MAX];
    if (!root_dir) {
        hr = psdb_registry_default_root(scope, buf, sizeof(buf));
        if (PSDB_FAILED(hr))
            goto cleanup;
        root_dir = buf;
    }
    if (!*root_dir) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    *out = psdb__strdup(root_dir);
    if (!*out)
        hr = PSDB_E_OUTOFMEMORY;
cleanup:
    return hr;
}

void psdb__reg_unref(psdb__reg *reg)
{
    if (!reg || atomic_fetch_sub(&reg->refs, 1) != 1)
        return;
    sqlite3_close_v2(reg->db);
    free(reg->path);
    free(reg);
}

psdb__reg *psdb__reg_ref(psdb__reg *reg)
{
    atomic_fetch_add(&reg->refs, 1);
    return reg;
}

psdb_hr psdb__reg_exec_sql(sqlite3 *db, const char *sql)
{
    return psdb__sqlite_hr(sqlite3_exec(db, sql, NULL, NULL, NULL), PSDB_E_IO);
}

/* Runs a query that yields one integer (a PRAGMA, a count). */
static psdb_hr query_int(sqlite3 *db, const char *sql, int *out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        if (hr == PSDB_S_OK)
            hr = PSDB_E_IO;
        goto cleanup;
    }
    *out = sqlite3_column_int(st, 0);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

/* Checks that db is a psdb registry this library can use: its application_id is psdb's (0 is
 * accepted: registries written before the id was stamped), its user_version is one psdb writes,
 * and a version-0 file is empty. *version gets the schema version. On failure the problem names
 * path and what was found. */
static psdb_hr check_identity(sqlite3 *db, const char *path, int *version)
{
    psdb_hr hr = PSDB_S_OK;
    int app_id = 0, tables = 0;
    char detail[160];
    hr = query_int(db, "PRAGMA application_id", &app_id);
    if (PSDB_SUCCEEDED(hr))
        hr = query_int(db, "PRAGMA user_version", version);
    if (PSDB_SUCCEEDED(hr))
        hr = query_int(db, "SELECT count(*) FROM sqlite_master", &tables);
    if (PSDB_FAILED(hr)) {
        snprintf(detail, sizeof(detail), "%s", sqlite3_errmsg(db));
        goto cleanup;
    }
    if (app_id != 0 && app_id != PSDB__REGISTRY_APPLICATION_ID) {
        hr = PSDB_E_CACHE_CORRUPT;
        snprintf(detail, sizeof(detail), "application_id 0x%08x, not psdb's 0x%08x",
                 (unsigned)app_id, (unsigned)PSDB__REGISTRY_APPLICATION_ID);
    } else if (*version < 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        snprintf(detail, sizeof(detail), "schema version %d", *version);
    } else if (*version == 0 && tables > 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        snprintf(detail, sizeof(detail), "%d tables but no psdb schema version", tables);
    } else if (*version > PSDB__REGISTRY_SCHEMA_VERSION) {
        hr = PSDB_E_UNSUPPORTED;
        snprintf(detail, sizeof(detail), "schema version %d is newer than this psdb knows (%d)",
                 *version, PSDB__REGISTRY_SCHEMA_VERSION);
    }
cleanup:
    if (PSDB_FAILED(hr) && hr != PSDB_E_BUSY && hr != PSDB_E_OUTOFMEMORY)
        set_problem(path, hr, detail);
    return hr;
}

/* The migration runner's identity check: the registry's own (check_identity records the problem).
 */
static psdb_hr registry_check(sqlite3 *db, int version, int application_id, void *ctx, char *err,
                              size_t err_size)
{
    int found = 0;
    (void)version;
    (void)application_id;
    (void)err;
    (void)err_size;
    return check_identity(db, ctx, &found);
}

/* Brings the schema to the newest of schema/registry/NNN_*.sql in one transaction and stamps
 * psdb's application_id; refuses newer schemas and databases that are not a registry. */
static psdb_hr migrate(sqlite3 *db, const char *path)
{
    char err[256];
    assert(psdb__registry_migrations.count == PSDB__REGISTRY_SCHEMA_VERSION);
    return psdb__migrate(db, path, &psdb__registry_migrations, PSDB__REGISTRY_APPLICATION_ID,
                         registry_check, (void *)path, NULL, err, sizeof(err));
}

/* A registry handle with one reference and the path of its database under root. */
static psdb_hr reg_new(const char *root, psdb__reg **reg, char **path)
{
    psdb__error_clear(); /* a failure from here on is about this call */
    *path = psdb__reg_join_path(root, PSDB__REGISTRY_DB);
    *reg = calloc(1, sizeof(**reg));
    if (*reg) {
        atomic_init(&(*reg)->refs, 1);
        (*reg)->path = psdb__strdup(*path);
    }
    /* On failure the caller's cleanup frees what was allocated. */
    return *path && *reg && (*reg)->path ? PSDB_S_OK : PSDB_E_OUTOFMEMORY;
}

/* SQLite's quick_check: a truncated or overwritten registry is found when it is opened, not by
 * whichever query reaches the damaged page first. The registry is small (kilobytes), so this costs
 * little. */
static psdb_hr check_integrity(sqlite3 *db, const char *path)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    char detail[200];
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        if (hr == PSDB_S_OK || hr == PSDB_E_IO)
            hr = PSDB_E_CACHE_CORRUPT;
        snprintf(detail, sizeof(detail), "%s", sqlite3_errmsg(db));
        goto cleanup;
    }
    const char *verdict = (const char *)sqlite3_column_text(st, 0);
    if (!verdict || strcmp(verdict, "ok") != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        snprintf(detail, sizeof(detail), "%s", verdict ? verdict : "quick_check failed");
    }
cleanup:
    if (PSDB_FAILED(hr) && hr != PSDB_E_BUSY && hr != PSDB_E_OUTOFMEMORY)
        set_problem(path, hr, detail);
    sqlite3_finalize(st);
    return hr;
}

/* One attempt of psdb__reg_open_rw. */
static psdb_hr reg_open_rw_once(const char *root, psdb__reg **out)
{
    psdb__reg *reg = NULL;
    char *path = NULL;
    psdb_hr hr = reg_new(root, &reg, &path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    int rc = sqlite3_open_v2(
        path, &reg->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__reg_fail(reg, psdb__sqlite_hr(rc, PSDB_E_IO));
        goto cleanup;
    }
    sqlite3_busy_timeout(reg->db, BUSY_TIMEOUT_MS);
    hr = psdb__reg_exec_sql(reg->db, "PRAGMA journal_mode=WAL");
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__reg_exec_sql(reg->db, "PRAGMA foreign_keys=ON; PRAGMA synchronous=FULL");
    if (PSDB_FAILED(hr)) {
        psdb__reg_fail(reg, hr);
        goto cleanup;
    }
    hr = check_integrity(reg->db, path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    const unsigned mark = psdb__error_mark();
    hr = migrate(reg->db, path);
    if (PSDB_FAILED(hr)) {
        if (psdb__error_mark() == mark) /* the identity check did not say why */
            psdb__reg_fail(reg, hr);
        goto cleanup;
    }
    *out = reg;
    reg = NULL;
cleanup:
    psdb__reg_unref(reg);
    free(path);
    return hr;
}

/* One attempt of psdb__reg_open_ro. */
static psdb_hr reg_open_ro_once(const char *root, psdb__reg **out)
{
    psdb__reg *reg = NULL;
    char *path = NULL;
    psdb_hr hr = reg_new(root, &reg, &path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    reg->readonly = 1;
    if (access(path, F_OK) != 0) {
        if (!psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
            hr = psdb__errno_hr(errno);
            goto cleanup;
        }
        *out = reg;
        reg = NULL;
        goto cleanup;
    }
    int rc = sqlite3_open_v2(path, &reg->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__reg_fail(reg, psdb__sqlite_hr(rc, PSDB_E_IO));
        goto cleanup;
    }
    sqlite3_busy_timeout(reg->db, BUSY_TIMEOUT_MS);
    int version = 0;
    hr = check_integrity(reg->db, path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = check_identity(reg->db, path, &version);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (version == 0) {
        /* Created but never migrated (an installer died before its first commit): empty. */
        sqlite3_close_v2(reg->db);
        reg->db = NULL;
    }
    *out = reg;
    reg = NULL;
cleanup:
    psdb__reg_unref(reg);
    free(path);
    return hr;
}

/* Runs one open attempt until it is not BUSY or BUSY_TIMEOUT_MS have passed. SQLite returns
 * SQLITE_BUSY without calling the busy handler where waiting could deadlock: switching a new
 * database to WAL while other processes open it, or reading one that another connection is
 * converting. Launchers open one new registry at once (several installers of one root), so the
 * whole open is retried, as the busy handler would have waited. */
static psdb_hr reg_open_retrying(psdb_hr (*once)(const char *, psdb__reg **), const char *root,
                                 psdb__reg **out)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        psdb_hr hr = once(root, out);
        if (hr != PSDB_E_BUSY)
            return hr;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms =
            (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms >= BUSY_TIMEOUT_MS)
            return hr;
        struct timespec pause = {0, 20 * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* Opens the registry database of root for writing (creating and migrating it). */
psdb_hr psdb__reg_open_rw(const char *root, psdb__reg **out)
{
    return reg_open_retrying(reg_open_rw_once, root, out);
}

/* Opens the registry of root read-only; a root without a registry gives an empty view. */
psdb_hr psdb__reg_open_ro(const char *root, psdb__reg **out)
{
    return reg_open_retrying(reg_open_ro_once, root, out);
}

/* Lock file names keep [A-Za-z0-9._-] and percent-encode the rest, so any installer name maps to
 * one file inside locks/ and distinct names never share a lock. */
psdb_hr psdb__reg_lock_file_name(const char *name, char **out)
{
    psdb_hr hr = PSDB_S_OK;
    size_t n = strlen(name);
    char *s = malloc(n * 3 + sizeof(".lock"));
    if (!s) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '-' || (c == '.' && i > 0)) {
            s[j++] = (char)c;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            s[j++] = '%';
            s[j++] = hex[c >> 4];
            s[j++] = hex[c & 15];
        }
    }
    memcpy(s + j, ".lock", sizeof(".lock"));
    *out = s;
cleanup:
    return hr;
}
