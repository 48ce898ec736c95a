/* registry.c - shader cache registration (MODEL B): installers, applications, components and the
 * read-only explorer, stored in one SQLite database under a registry root.
 *
 * DESIGN
 * The registry root holds registry.db (WAL, numbered migrations in PRAGMA user_version) and
 * locks/<installer>.lock. Every write is one BEGIN IMMEDIATE transaction, so a reader (an explorer,
 * another process) sees a registration entirely or not at all (B8), and concurrent writers queue on
 * SQLite's busy timeout instead of failing. One installer per name across processes (B1) is an
 * flock() on the installer's lock file, held for the installer's lifetime: the kernel drops it when
 * the process dies, so a crashed installer never blocks the next one.
 * Application and component handles carry the row id they were made for; ids come from
 * AUTOINCREMENT, never reused, so a removed registration stays invalid (B4) even when the same exe
 * path or name is registered again. */
#include "registry/registry.h"
#include "registry/install.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/store.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/migrate.h"
#include "common/status_map.h"

#define BUSY_TIMEOUT_MS 10000
#define INSTALLER_NAME_MAX 200

/* One connection to one registry root, shared by the handles made from it. */
typedef struct psdb__reg {
    atomic_uint refs;
    sqlite3 *db; /* NULL: an explorer on a root that has no registry yet (empty) */
    int readonly;
    char *path; /* <root>/registry.db, for messages */
} psdb__reg;

/* The last registry problem of this thread, one line naming the database and the way out. */
static _Thread_local char problem[640];

const char *psdb__registry_problem(void)
{
    return problem;
}

/* Records why the registry at path cannot be used; detail says what was found. */
static void set_problem(const char *path, psdb_hr hr, const char *detail)
{
    if (hr == PSDB_E_CACHE_CORRUPT)
        snprintf(problem, sizeof(problem),
                 "registry %s is damaged or not a psdb registry (%s): move it aside (mv %s "
                 "%s.broken) and run psdb install again for each application to rebuild it",
                 path, detail, path, path);
    else if (hr == PSDB_E_UNSUPPORTED)
        snprintf(problem, sizeof(problem),
                 "registry %s: %s: use a newer psdb, or move it aside and run psdb install again",
                 path, detail);
    else
        snprintf(problem, sizeof(problem), "registry %s: %s", path, detail);
    psdb__error_set(hr, "%s", problem);
}

/* Records a failed SQLite call on reg's database (corruption found while reading, for one). */
static psdb_hr reg_fail(const psdb__reg *reg, psdb_hr hr)
{
    if (reg && reg->path && hr != PSDB_E_BUSY && hr != PSDB_E_OUTOFMEMORY)
        set_problem(reg->path, hr, reg->db ? sqlite3_errmsg(reg->db) : psdb_hr_str(hr));
    return hr;
}

struct psdb_installer {
    psdb__reg *reg;
    char *name;
    char *root;
    int lock_fd;
};

struct psdb_explorer {
    psdb__reg *reg;
};

struct psdb_application {
    psdb__reg *reg;
    sqlite3_int64 id;
    char *exe_path;
};

struct psdb_component {
    psdb__reg *reg;
    sqlite3_int64 app_id;
    sqlite3_int64 id;
};

static char *join_path(const char *dir, const char *name)
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
static psdb_hr make_dirs(const char *path, mode_t mode)
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
        if (mkdir(copy, mode) != 0 && errno != EEXIST) {
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
    psdb_hr hr = PSDB_S_OK;
    const char *base = NULL, *suffix = "";
    if (!buf && buf_size) {
        hr = PSDB_E_INVALIDARG;
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
    return hr;
}

/* Resolves root_dir (NULL: the scope's default) into a malloc'd string. */
static psdb_hr resolve_root(const char *root_dir, psdb_scope scope, char **out)
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

static void reg_unref(psdb__reg *reg)
{
    if (!reg || atomic_fetch_sub(&reg->refs, 1) != 1)
        return;
    sqlite3_close_v2(reg->db);
    free(reg->path);
    free(reg);
}

static psdb__reg *reg_ref(psdb__reg *reg)
{
    atomic_fetch_add(&reg->refs, 1);
    return reg;
}

static psdb_hr exec_sql(sqlite3 *db, const char *sql)
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
    problem[0] = '\0';
    psdb__error_clear();
    *path = join_path(root, PSDB__REGISTRY_DB);
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

/* Opens the registry database of root for writing (creating and migrating it). */
static psdb_hr reg_open_rw(const char *root, psdb__reg **out)
{
    psdb__reg *reg = NULL;
    char *path = NULL;
    psdb_hr hr = reg_new(root, &reg, &path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    int rc = sqlite3_open_v2(
        path, &reg->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        hr = reg_fail(reg, psdb__sqlite_hr(rc, PSDB_E_IO));
        goto cleanup;
    }
    sqlite3_busy_timeout(reg->db, BUSY_TIMEOUT_MS);
    hr = exec_sql(reg->db, "PRAGMA journal_mode=WAL");
    if (PSDB_SUCCEEDED(hr))
        hr = exec_sql(reg->db, "PRAGMA foreign_keys=ON; PRAGMA synchronous=FULL");
    if (PSDB_FAILED(hr)) {
        reg_fail(reg, hr);
        goto cleanup;
    }
    hr = check_integrity(reg->db, path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = migrate(reg->db, path);
    if (PSDB_FAILED(hr)) {
        if (!problem[0])
            reg_fail(reg, hr);
        goto cleanup;
    }
    *out = reg;
    reg = NULL;
cleanup:
    reg_unref(reg);
    free(path);
    return hr;
}

/* Opens the registry of root read-only; a root without a registry gives an empty view. */
static psdb_hr reg_open_ro(const char *root, psdb__reg **out)
{
    psdb__reg *reg = NULL;
    char *path = NULL;
    psdb_hr hr = reg_new(root, &reg, &path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    reg->readonly = 1;
    if (access(path, F_OK) != 0) {
        if (errno != ENOENT) {
            hr = psdb__errno_hr(errno);
            goto cleanup;
        }
        *out = reg;
        reg = NULL;
        goto cleanup;
    }
    int rc = sqlite3_open_v2(path, &reg->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        hr = reg_fail(reg, psdb__sqlite_hr(rc, PSDB_E_IO));
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
    reg_unref(reg);
    free(path);
    return hr;
}

/* Lock file names keep [A-Za-z0-9._-] and percent-encode the rest, so any installer name maps to
 * one file inside locks/ and distinct names never share a lock. */
static psdb_hr lock_file_name(const char *name, char **out)
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

psdb_hr psdb_installer_open(const psdb_installer_desc *desc, psdb_installer **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_installer *inst = NULL;
    char *root = NULL, *locks = NULL, *lock_name = NULL, *lock_path = NULL;
    problem[0] = '\0'; /* a failure before the database is reached is not about it */
    psdb__error_clear();
    if (out)
        *out = NULL;
    if (!desc || !out || !desc->name || !*desc->name || strlen(desc->name) > INSTALLER_NAME_MAX ||
        (desc->scope != PSDB_SCOPE_USER && desc->scope != PSDB_SCOPE_SYSTEM)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = resolve_root(desc->root_dir, desc->scope, &root);
    if (PSDB_FAILED(hr))
        goto cleanup;
    inst = calloc(1, sizeof(*inst));
    if (!inst) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    inst->lock_fd = -1;
    inst->name = psdb__strdup(desc->name);
    locks = join_path(root, "locks");
    if (!inst->name || !locks) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = make_dirs(locks, desc->scope == PSDB_SCOPE_SYSTEM ? 0755 : 0700);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = lock_file_name(desc->name, &lock_name);
    if (PSDB_FAILED(hr))
        goto cleanup;
    lock_path = join_path(locks, lock_name);
    if (!lock_path) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    inst->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (inst->lock_fd < 0) {
        hr = psdb__errno_hr(errno);
        goto cleanup;
    }
    /* flock() locks belong to the open file description: a second open of the same name fails
     * in this process as well as in another one. */
    if (flock(inst->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        hr = (errno == EWOULDBLOCK) ? PSDB_E_BUSY : psdb__errno_hr(errno);
        goto cleanup;
    }
    hr = reg_open_rw(root, &inst->reg);
    if (PSDB_FAILED(hr))
        goto cleanup;
    inst->root = root;
    root = NULL;
    *out = inst;
    inst = NULL;
cleanup:
    psdb_installer_release(inst);
    free(root);
    free(locks);
    free(lock_name);
    free(lock_path);
    return hr;
}

void psdb_installer_release(psdb_installer *inst)
{
    if (!inst)
        return;
    reg_unref(inst->reg);
    if (inst->lock_fd >= 0)
        close(inst->lock_fd); /* drops the flock */
    free(inst->name);
    free(inst->root);
    free(inst);
}

static int valid_text(const char *s)
{
    return s && *s;
}

static psdb_hr app_handle(psdb__reg *reg, sqlite3_int64 id, const char *exe_path,
                          psdb_application **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_application *app = calloc(1, sizeof(*app));
    if (!app) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    app->exe_path = psdb__strdup(exe_path);
    if (!app->exe_path) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    app->reg = reg_ref(reg);
    app->id = id;
    *out = app;
    app = NULL;
cleanup:
    psdb_application_release(app);
    return hr;
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

psdb_hr psdb_installer_register_application(psdb_installer *inst, const char *exe_path,
                                            const psdb_app_desc *desc, psdb_application **out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int in_tx = 0, rc;
    sqlite3_int64 id = 0;
    if (out)
        *out = NULL;
    if (!inst || !valid_text(exe_path) || !desc || !out || !valid_text(desc->name) ||
        desc->version == 0 || (!desc->engine_name && desc->engine_version != 0)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    sqlite3 *db = inst->reg->db;
    hr = exec_sql(db, "BEGIN IMMEDIATE");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 1;
    /* Re-registering an exe path updates the description in place: the row id, and so existing
     * handles and components, stay valid. */
    rc = sqlite3_prepare_v2(
        db,
        "INSERT INTO applications(exe_path, exe_filename, name, version,"
        " engine_name, engine_version, installer) VALUES(?,?,?,?,?,?,?)"
        " ON CONFLICT(exe_path) DO UPDATE SET exe_filename=excluded.exe_filename,"
        " name=excluded.name, version=excluded.version,"
        " engine_name=excluded.engine_name,"
        " engine_version=excluded.engine_version, installer=excluded.installer",
        -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, exe_path, -1, SQLITE_TRANSIENT);
    bind_text_or_null(st, 2, desc->exe_filename);
    sqlite3_bind_text(st, 3, desc->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)desc->version);
    bind_text_or_null(st, 5, desc->engine_name);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)desc->engine_version);
    sqlite3_bind_text(st, 7, inst->name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_finalize(st);
    st = NULL;
    rc = sqlite3_prepare_v2(db, "SELECT id FROM applications WHERE exe_path=?", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, exe_path, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_IO : psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    hr = exec_sql(db, "COMMIT");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 0;
    hr = app_handle(inst->reg, id, exe_path, out);
cleanup:
    sqlite3_finalize(st);
    if (in_tx)
        exec_sql(inst->reg->db, "ROLLBACK");
    return hr;
}

/* Runs a one-row DELETE (or UPDATE) by id; PSDB_E_NOT_FOUND when no row matched. */
static psdb_hr delete_by_id(sqlite3 *db, const char *sql, sqlite3_int64 id, sqlite3_int64 id2)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_bind_parameter_count(st) > 1)
        sqlite3_bind_int64(st, 2, id2);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    if (sqlite3_changes(db) == 0)
        hr = PSDB_E_NOT_FOUND;
cleanup:
    sqlite3_finalize(st);
    return hr;
}

psdb_hr psdb_installer_remove_application(psdb_installer *inst, psdb_application *app)
{
    psdb_hr hr = PSDB_S_OK;
    if (!inst || !app) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (app->reg->readonly) {
        hr = PSDB_E_ACCESS;
        goto cleanup;
    }
    if (app->reg != inst->reg) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    /* One statement is its own transaction; ON DELETE CASCADE removes the components with it. */
    hr = delete_by_id(inst->reg->db, "DELETE FROM applications WHERE id=?", app->id, 0);
cleanup:
    return hr;
}

/* S_OK when the application row still exists, PSDB_E_NOT_FOUND once removed. */
static psdb_hr app_exists(psdb__reg *reg, sqlite3_int64 id)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    if (!reg->db) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    int rc = sqlite3_prepare_v2(reg->db, "SELECT 1 FROM applications WHERE id=?", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        rc = sqlite3_step(st);
    }
    if (rc == SQLITE_DONE)
        hr = PSDB_E_NOT_FOUND;
    else if (rc != SQLITE_ROW)
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

static psdb_hr check_component_args(const char *name, uint32_t num_psdbs,
                                    const psdb_component_psdb *psdbs)
{
    psdb_hr hr = PSDB_S_OK;
    if (!valid_text(name) || (num_psdbs && !psdbs)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    for (uint32_t i = 0; i < num_psdbs; i++) {
        const char *f = psdbs[i].adapter_family;
        if (!valid_text(f) || strlen(f) >= PSDB_ADAPTER_FAMILY_MAX ||
            !valid_text(psdbs[i].psdb_path)) {
            hr = PSDB_E_INVALIDARG;
            goto cleanup;
        }
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(psdbs[j].adapter_family, f) == 0) {
                hr = PSDB_E_INVALIDARG;
                goto cleanup;
            }
        }
    }
cleanup:
    return hr;
}

static psdb_hr component_id(sqlite3 *db, sqlite3_int64 app_id, const char *name, sqlite3_int64 *out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc =
        sqlite3_prepare_v2(db, "SELECT id FROM components WHERE app=? AND name=?", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, app_id);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
    }
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        hr = rc == SQLITE_DONE ? PSDB_E_NOT_FOUND : psdb__sqlite_hr(rc, PSDB_E_IO);
    sqlite3_finalize(st);
    return hr;
}

static psdb_hr component_handle(psdb__reg *reg, sqlite3_int64 app_id, sqlite3_int64 id,
                                psdb_component **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_component *c = calloc(1, sizeof(*c));
    if (!c) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    c->reg = reg_ref(reg);
    c->app_id = app_id;
    c->id = id;
    *out = c;
cleanup:
    return hr;
}

psdb_hr psdb_application_register_component(psdb_application *app, const char *name,
                                            const char *sodb_path, uint32_t num_psdbs,
                                            const psdb_component_psdb *psdbs, psdb_component **out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int in_tx = 0, rc;
    sqlite3_int64 id = 0;
    if (out)
        *out = NULL;
    if (!app) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = check_component_args(name, num_psdbs, psdbs);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (app->reg->readonly) {
        hr = PSDB_E_ACCESS;
        goto cleanup;
    }
    sqlite3 *db = app->reg->db;
    hr = exec_sql(db, "BEGIN IMMEDIATE");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 1;
    hr = app_exists(app->reg, app->id);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* Replacement keeps the component's row id, so handles to it see the new PSDBs. */
    hr = component_id(db, app->id, name, &id);
    if (hr == PSDB_E_NOT_FOUND) {
        rc = sqlite3_prepare_v2(db, "INSERT INTO components(app, name, sodb_path) VALUES(?,?,?)",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, app->id);
            sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
            bind_text_or_null(st, 3, sodb_path);
            rc = sqlite3_step(st);
        }
        if (rc != SQLITE_DONE) {
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
        id = sqlite3_last_insert_rowid(db);
        hr = PSDB_S_OK;
    } else if (PSDB_SUCCEEDED(hr)) {
        rc = sqlite3_prepare_v2(db, "UPDATE components SET sodb_path=? WHERE id=?", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            bind_text_or_null(st, 1, sodb_path);
            sqlite3_bind_int64(st, 2, id);
            rc = sqlite3_step(st);
        }
        if (rc != SQLITE_DONE) {
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
        sqlite3_finalize(st);
        st = NULL;
        hr = delete_by_id(db, "DELETE FROM component_psdbs WHERE component=?", id, 0);
        if (hr == PSDB_E_NOT_FOUND)
            hr = PSDB_S_OK;
        if (PSDB_FAILED(hr))
            goto cleanup;
    } else {
        goto cleanup;
    }
    sqlite3_finalize(st);
    st = NULL;
    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO component_psdbs(component, family, psdb_path)"
                            " VALUES(?,?,?)",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    for (uint32_t i = 0; i < num_psdbs; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_text(st, 2, psdbs[i].adapter_family, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, psdbs[i].psdb_path, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) {
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    hr = exec_sql(db, "COMMIT");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 0;
    if (out)
        hr = component_handle(app->reg, app->id, id, out);
cleanup:
    sqlite3_finalize(st);
    if (in_tx)
        exec_sql(app->reg->db, "ROLLBACK");
    return hr;
}

psdb_hr psdb_application_remove_component(psdb_application *app, psdb_component *component)
{
    psdb_hr hr = PSDB_S_OK;
    if (!app || !component) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (app->reg->readonly) {
        hr = PSDB_E_ACCESS;
        goto cleanup;
    }
    if (component->app_id != app->id || component->reg != app->reg) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = delete_by_id(app->reg->db, "DELETE FROM components WHERE id=? AND app=?", component->id,
                      app->id);
cleanup:
    return hr;
}

psdb_hr psdb_application_get_component(psdb_application *app, const char *name,
                                       psdb_component **out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_int64 id = 0;
    if (out)
        *out = NULL;
    if (!app || !valid_text(name) || !out) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (!app->reg->db) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    hr = component_id(app->reg->db, app->id, name, &id);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = component_handle(app->reg, app->id, id, out);
cleanup:
    return hr;
}

/* The PSDB path of a component for a family, malloc'd. */
static psdb_hr component_path(psdb_component *component, const char *family, char **out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    if (!component->reg->db) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    int rc = sqlite3_prepare_v2(component->reg->db,
                                "SELECT psdb_path FROM component_psdbs WHERE component=? AND"
                                " family=?",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, component->id);
        sqlite3_bind_text(st, 2, family, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_NOT_FOUND : psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    *out = psdb__strdup((const char *)sqlite3_column_text(st, 0));
    if (!*out)
        hr = PSDB_E_OUTOFMEMORY;
cleanup:
    sqlite3_finalize(st);
    return hr;
}

psdb_hr psdb_component_get_psdb_path(psdb_component *component, const char *family, char *buf,
                                     size_t buf_size)
{
    psdb_hr hr = PSDB_S_OK;
    char *path = NULL;
    if (!component || !valid_text(family) || (!buf && buf_size)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = component_path(component, family, &path);
    if (PSDB_FAILED(hr))
        goto cleanup;
    size_t n = strlen(path);
    if (n + 1 > buf_size) {
        hr = PSDB_E_MORE_DATA;
        goto cleanup;
    }
    memcpy(buf, path, n + 1);
cleanup:
    free(path);
    return hr;
}

void psdb_application_release(psdb_application *app)
{
    if (!app)
        return;
    reg_unref(app->reg);
    free(app->exe_path);
    free(app);
}

void psdb_component_release(psdb_component *component)
{
    if (!component)
        return;
    reg_unref(component->reg);
    free(component);
}

psdb_hr psdb_explorer_open(const char *root_dir, psdb_explorer **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_explorer *exp = NULL;
    char *root = NULL;
    problem[0] = '\0';
    psdb__error_clear();
    if (out)
        *out = NULL;
    if (!out) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = resolve_root(root_dir, PSDB_SCOPE_USER, &root);
    if (PSDB_FAILED(hr))
        goto cleanup;
    exp = calloc(1, sizeof(*exp));
    if (!exp) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = reg_open_ro(root, &exp->reg);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = exp;
    exp = NULL;
cleanup:
    psdb_explorer_release(exp);
    free(root);
    return hr;
}

psdb_hr psdb_explorer_get_application(psdb_explorer *exp, const char *exe_path,
                                      psdb_application **out)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    if (out)
        *out = NULL;
    if (!exp || !valid_text(exe_path) || !out) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (!exp->reg->db) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    int rc = sqlite3_prepare_v2(exp->reg->db, "SELECT id FROM applications WHERE exe_path=?", -1,
                                &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, exe_path, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_NOT_FOUND : psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    hr = app_handle(exp->reg, sqlite3_column_int64(st, 0), exe_path, out);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

psdb_hr psdb_explorer_foreach(psdb_explorer *exp,
                              int (*fn)(const psdb_registry_entry *e, void *ctx), void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc;
    if (!exp || !fn) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (!exp->reg->db)
        goto cleanup;
    /* One read transaction, so the walk sees one consistent registry state. */
    hr = exec_sql(exp->reg->db, "BEGIN");
    if (PSDB_FAILED(hr))
        goto cleanup;
    rc = sqlite3_prepare_v2(exp->reg->db,
                            "SELECT a.exe_path, a.exe_filename, a.name, a.version, a.engine_name,"
                            " a.engine_version, a.installer, c.name, c.sodb_path, p.family,"
                            " p.psdb_path, i.serial, i.sha256 FROM applications a"
                            " LEFT JOIN components c ON c.app = a.id"
                            " LEFT JOIN component_psdbs p ON p.component = c.id"
                            /* What psdb install recorded applies to the PSDB it registered:
                             * the default component's, for that family, still at the file
                             * named by that digest (not one the component API put there). */
                            " LEFT JOIN installed i ON i.exe_path = a.exe_path"
                            " AND i.family = p.family AND c.name = '" PSDB_DEFAULT_COMPONENT "'"
                            " AND p.psdb_path LIKE '%/' || i.sha256 || '.psdb'"
                            " ORDER BY a.exe_path, c.name, p.family",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = reg_fail(exp->reg, psdb__sqlite_hr(rc, PSDB_E_IO));
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        psdb_app_desc app = {
            .exe_filename = (const char *)sqlite3_column_text(st, 1),
            .name = (const char *)sqlite3_column_text(st, 2),
            .version = (uint64_t)sqlite3_column_int64(st, 3),
            .engine_name = (const char *)sqlite3_column_text(st, 4),
            .engine_version = (uint64_t)sqlite3_column_int64(st, 5),
        };
        psdb_registry_entry e = {
            .exe_path = (const char *)sqlite3_column_text(st, 0),
            .app = &app,
            .installer = (const char *)sqlite3_column_text(st, 6),
            .component = (const char *)sqlite3_column_text(st, 7),
            .sodb_path = (const char *)sqlite3_column_text(st, 8),
            .adapter_family = (const char *)sqlite3_column_text(st, 9),
            .psdb_path = (const char *)sqlite3_column_text(st, 10),
            .installed_serial = (uint64_t)sqlite3_column_int64(st, 11),
            .installed_sha256 = (const char *)sqlite3_column_text(st, 12),
        };
        if (fn(&e, ctx)) {
            hr = PSDB_S_FALSE;
            break;
        }
    }
    if (hr == PSDB_S_OK && rc != SQLITE_DONE)
        hr = reg_fail(exp->reg, psdb__sqlite_hr(rc, PSDB_E_IO));
cleanup:
    sqlite3_finalize(st);
    if (exp && exp->reg->db && !sqlite3_get_autocommit(exp->reg->db))
        exec_sql(exp->reg->db, "COMMIT");
    return hr;
}

psdb_hr psdb_registry_entry_check(const psdb_registry_entry *e, psdb_registry_file_state *out)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t got[32], want[32];
    if (!e || !out || !e->psdb_path) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    *out = PSDB_REGISTRY_FILE_MISSING;
    /* The whole file is hashed every time: registry version 2 records no size or mtime to trust,
     * and damage in place (a flipped sector, a rewrite of the same length) keeps both. */
    hr = psdb__file_sha256(e->psdb_path, got);
    if (hr == PSDB_E_NOT_FOUND) {
        hr = PSDB_S_OK;
        goto cleanup;
    }
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (!e->installed_sha256 || psdb__unhex(e->installed_sha256, want, 32) != 0)
        *out = PSDB_REGISTRY_FILE_UNVERIFIED;
    else
        *out = memcmp(got, want, 32) == 0 ? PSDB_REGISTRY_FILE_OK : PSDB_REGISTRY_FILE_MISMATCH;
cleanup:
    return hr;
}

const char *psdb_registry_file_state_str(psdb_registry_file_state state)
{
    switch (state) {
    case PSDB_REGISTRY_FILE_OK:
        return "ok";
    case PSDB_REGISTRY_FILE_UNVERIFIED:
        return "unverified";
    case PSDB_REGISTRY_FILE_MISSING:
        return "missing";
    case PSDB_REGISTRY_FILE_MISMATCH:
        return "mismatch";
    }
    return "unknown";
}

void psdb_explorer_release(psdb_explorer *exp)
{
    if (!exp)
        return;
    reg_unref(exp->reg);
    free(exp);
}

psdb_hr psdb_get_precompile_targets(const psdb_adapter_desc *adapters, uint32_t num_adapters,
                                    psdb_precompile_target *out, uint32_t *count)
{
    psdb_hr hr = PSDB_S_OK;
    uint32_t n = 0;
    if (!count || (num_adapters && !adapters) || (!out && *count)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    for (uint32_t i = 0; i < num_adapters; i++) {
        const psdb_adapter_desc *a = &adapters[i];
        if (a->flags & PSDB_ADAPTER_FLAG_NO_ASD)
            continue;
        if (!valid_text(a->family) || strlen(a->family) >= PSDB_ADAPTER_FAMILY_MAX) {
            hr = PSDB_E_INVALIDARG;
            goto cleanup;
        }
        /* Distinct targets: an adapter equal to an earlier ASD adapter adds nothing. */
        int dup = 0;
        for (uint32_t j = 0; j < i && !dup; j++) {
            const psdb_adapter_desc *b = &adapters[j];
            dup = !(b->flags & PSDB_ADAPTER_FLAG_NO_ASD) && strcmp(b->family, a->family) == 0 &&
                  b->abi_min == a->abi_min && b->abi_max == a->abi_max &&
                  b->compiler_version == a->compiler_version &&
                  b->app_profile_version == a->app_profile_version;
        }
        if (dup)
            continue;
        if (n < *count) {
            psdb_precompile_target *t = &out[n];
            memset(t, 0, sizeof(*t));
            memcpy(t->family, a->family, strlen(a->family) + 1);
            t->abi_min = a->abi_min;
            t->abi_max = a->abi_max;
            t->compiler_version = a->compiler_version;
            t->profile_version = a->app_profile_version;
        }
        n++;
    }
    if (n > *count)
        hr = PSDB_E_MORE_DATA;
    *count = n;
cleanup:
    return hr;
}

psdb_hr psdb__registry_find_psdb(const char *root_dir, const char *exe_path, const char *component,
                                 const char *family, char **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_explorer *exp = NULL;
    psdb_application *app = NULL;
    psdb_component *comp = NULL;
    *out = NULL;
    hr = psdb_explorer_open(root_dir, &exp);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb_explorer_get_application(exp, exe_path, &app);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb_application_get_component(app, component, &comp);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = component_path(comp, family, out);
cleanup:
    psdb_component_release(comp);
    psdb_application_release(app);
    psdb_explorer_release(exp);
    return hr;
}

/* ---- install support (install.h) ----------------------------------------------------------------
 */

const char *psdb__installer_root(const psdb_installer *inst)
{
    return inst->root;
}

psdb_hr psdb__registry_installed(psdb_installer *inst, const char *exe_path, const char *family,
                                 uint64_t *serial, char sha256[65])
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        inst->reg->db, "SELECT serial, sha256 FROM installed WHERE exe_path=? AND family=?", -1,
        &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, exe_path, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, family, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    if (rc != SQLITE_ROW) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    *serial = (uint64_t)sqlite3_column_int64(st, 0);
    snprintf(sha256, 65, "%s", (const char *)sqlite3_column_text(st, 1));
cleanup:
    sqlite3_finalize(st);
    return hr;
}

/* Runs one prepared statement to completion with the given text/int64 bindings. */
static psdb_hr step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? PSDB_S_OK : psdb__sqlite_hr(rc, PSDB_E_IO);
}

psdb_hr psdb__registry_install(psdb_installer *inst, const char *exe_path,
                               const psdb_app_desc *desc, const uint8_t *app_id, uint32_t n,
                               const psdb__install_entry *entries, int allow_downgrade)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3 *db = inst->reg->db;
    sqlite3_stmt *app = NULL, *comp = NULL, *psdb = NULL, *old = NULL, *mark = NULL;
    int in_tx = 0, rc;

    hr = exec_sql(db, "BEGIN IMMEDIATE");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 1;
    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO applications(exe_path, exe_filename, name, version,"
                            " engine_name, engine_version, installer, app_id)"
                            " VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(exe_path) DO UPDATE SET"
                            " exe_filename=excluded.exe_filename, name=excluded.name,"
                            " version=excluded.version, engine_name=excluded.engine_name,"
                            " engine_version=excluded.engine_version,"
                            " installer=excluded.installer,"
                            " app_id=coalesce(excluded.app_id, applications.app_id)",
                            -1, &app, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db,
                                "INSERT INTO components(app, name) SELECT id, ? FROM applications"
                                " WHERE exe_path=? ON CONFLICT(app, name) DO NOTHING",
                                -1, &comp, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(
            db,
            "INSERT OR REPLACE INTO component_psdbs(component, family, psdb_path)"
            " SELECT c.id, ?, ? FROM components c JOIN applications a"
            " ON c.app = a.id WHERE a.exe_path=? AND c.name=?",
            -1, &psdb, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "SELECT serial FROM installed WHERE exe_path=? AND family=?",
                                -1, &old, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO installed VALUES(?,?,?,?)", -1, &mark,
                                NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_bind_text(app, 1, exe_path, -1, SQLITE_STATIC);
    bind_text_or_null(app, 2, desc->exe_filename);
    sqlite3_bind_text(app, 3, desc->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(app, 4, (sqlite3_int64)desc->version);
    bind_text_or_null(app, 5, desc->engine_name);
    sqlite3_bind_int64(app, 6, (sqlite3_int64)desc->engine_version);
    sqlite3_bind_text(app, 7, inst->name, -1, SQLITE_STATIC);
    if (app_id)
        sqlite3_bind_blob(app, 8, app_id, 16, SQLITE_STATIC);
    hr = step_done(app);
    if (PSDB_FAILED(hr))
        goto cleanup;
    sqlite3_bind_text(comp, 1, PSDB_DEFAULT_COMPONENT, -1, SQLITE_STATIC);
    sqlite3_bind_text(comp, 2, exe_path, -1, SQLITE_STATIC);
    hr = step_done(comp);
    if (PSDB_FAILED(hr))
        goto cleanup;
    for (uint32_t i = 0; i < n; i++) {
        const psdb__install_entry *e = &entries[i];
        sqlite3_bind_text(old, 1, exe_path, -1, SQLITE_STATIC);
        sqlite3_bind_text(old, 2, e->family, -1, SQLITE_STATIC);
        rc = sqlite3_step(old);
        uint64_t have = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(old, 0) : 0;
        sqlite3_reset(old);
        sqlite3_clear_bindings(old);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
        if (e->serial < have && !allow_downgrade) {
            hr = PSDB_E_DOWNGRADE;
            goto cleanup;
        }
        sqlite3_bind_text(psdb, 1, e->family, -1, SQLITE_STATIC);
        sqlite3_bind_text(psdb, 2, e->psdb_path, -1, SQLITE_STATIC);
        sqlite3_bind_text(psdb, 3, exe_path, -1, SQLITE_STATIC);
        sqlite3_bind_text(psdb, 4, PSDB_DEFAULT_COMPONENT, -1, SQLITE_STATIC);
        hr = step_done(psdb);
        if (PSDB_FAILED(hr))
            goto cleanup;
        sqlite3_bind_text(mark, 1, exe_path, -1, SQLITE_STATIC);
        sqlite3_bind_text(mark, 2, e->family, -1, SQLITE_STATIC);
        sqlite3_bind_int64(mark, 3, (sqlite3_int64)e->serial);
        sqlite3_bind_text(mark, 4, e->sha256, -1, SQLITE_STATIC);
        hr = step_done(mark);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = exec_sql(db, "COMMIT");
    if (PSDB_SUCCEEDED(hr))
        in_tx = 0;
cleanup:
    sqlite3_finalize(app);
    sqlite3_finalize(comp);
    sqlite3_finalize(psdb);
    sqlite3_finalize(old);
    sqlite3_finalize(mark);
    if (in_tx)
        exec_sql(db, "ROLLBACK");
    if (PSDB_FAILED(hr) && hr != PSDB_E_DOWNGRADE)
        reg_fail(inst->reg, hr);
    return hr;
}

psdb_hr psdb__registry_with_write_lock(psdb_installer *inst, psdb_hr (*fn)(void *ctx), void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    int in_tx = 0;
    hr = exec_sql(inst->reg->db, "BEGIN IMMEDIATE");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 1;
    hr = fn(ctx);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = exec_sql(inst->reg->db, "COMMIT");
    if (PSDB_SUCCEEDED(hr))
        in_tx = 0;
cleanup:
    if (in_tx)
        exec_sql(inst->reg->db, "ROLLBACK");
    return hr;
}

psdb_hr psdb__registry_foreach_path(psdb_installer *inst, void (*fn)(const char *path, void *ctx),
                                    void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(inst->reg->db, "SELECT DISTINCT psdb_path FROM component_psdbs", -1,
                                &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        fn((const char *)sqlite3_column_text(st, 0), ctx);
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    sqlite3_finalize(st);
    return hr;
}
