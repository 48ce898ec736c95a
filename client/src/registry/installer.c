/* installer.c - installers (MODEL B1): opening by name, registering and removing applications, and
 * the install support of install.h. */
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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/store.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/migrate.h"
#include "common/parse.h"
#include "common/status_map.h"

psdb_hr psdb_installer_open(const psdb_installer_desc *desc, psdb_installer **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_installer *inst = NULL;
    char *root = NULL, *locks = NULL, *lock_name = NULL, *lock_path = NULL;
    psdb__error_clear(); /* a failure before the database is reached is not about it */
    if (out)
        *out = NULL;
    if (!desc || !out || !desc->name || !*desc->name || strlen(desc->name) > INSTALLER_NAME_MAX ||
        (desc->scope != PSDB_SCOPE_USER && desc->scope != PSDB_SCOPE_SYSTEM)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_installer_open: NULL desc or out, a NULL, empty or too long "
                               "installer name, or an unknown scope");
        goto cleanup;
    }
    if ((hr = psdb__reg_check_name(__func__, "installer name", desc->name)) < 0)
        goto cleanup;
    hr = psdb__reg_resolve_root(desc->root_dir, desc->scope, &root);
    if (PSDB_FAILED(hr))
        goto cleanup;
    inst = calloc(1, sizeof(*inst));
    if (!inst) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    inst->lock_fd = -1;
    inst->name = psdb__strdup(desc->name);
    locks = psdb__reg_join_path(root, "locks");
    if (!inst->name || !locks) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = psdb__reg_make_dirs(locks, desc->scope == PSDB_SCOPE_SYSTEM ? 0755 : 0700);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__reg_lock_file_name(desc->name, &lock_name);
    if (PSDB_FAILED(hr))
        goto cleanup;
    lock_path = psdb__reg_join_path(locks, lock_name);
    if (!lock_path) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* A link, a FIFO or another user's file planted at the name (or locks/ a link to elsewhere)
     * is refused, not followed. */
    char why[128];
    if (!psdb__own_dir(locks, why, sizeof(why))) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_installer_open: %s: %s", locks, why);
        goto cleanup;
    }
    inst->lock_fd =
        psdb__open_file(lock_path, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, sizeof(why));
    if (inst->lock_fd < 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_installer_open: lock file %s: %s",
                             lock_path, why);
        goto cleanup;
    }
    /* flock() locks belong to the open file description: a second open of the same name fails
     * in this process as well as in another one. */
    if (flock(inst->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        hr = (psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK)) ? PSDB_E_BUSY : psdb__errno_hr(errno);
        goto cleanup;
    }
    hr = psdb__reg_open_rw(root, &inst->reg);
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
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_installer_release(psdb_installer *inst)
{
    if (!inst)
        return;
    psdb__reg_unref(inst->reg);
    if (inst->lock_fd >= 0)
        close(inst->lock_fd); /* drops the flock */
    free(inst->name);
    free(inst->root);
    free(inst);
}

int psdb__reg_valid_text(const char *s)
{
    return s && *s;
}

psdb_hr psdb__reg_check_name(const char *fn, const char *label, const char *name)
{
    char why[128];
    if (psdb__name_check(name, why, sizeof(why)) != 0)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: the %s %s", fn, label, why);
    return PSDB_S_OK;
}

psdb_hr psdb__reg_app_handle(psdb__reg *reg, sqlite3_int64 id, const char *exe_path,
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
    app->reg = psdb__reg_ref(reg);
    app->id = id;
    *out = app;
    app = NULL;
cleanup:
    psdb_application_release(app);
    return hr;
}

void psdb__reg_bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

psdb_hr psdb_installer_register_application(psdb_installer *inst, const char *exe_path,
                                            const psdb_app_desc *desc, psdb_application **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int in_tx = 0, rc;
    sqlite3_int64 id = 0;
    if (out)
        *out = NULL;
    if (!inst || !psdb__reg_valid_text(exe_path) || !desc || !out ||
        !psdb__reg_valid_text(desc->name) || desc->version == 0 ||
        (!desc->engine_name && desc->engine_version != 0)) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_installer_register_application: NULL installer, desc or out, an invalid exe path "
            "or name, version 0, or an engine version without engine name");
        goto cleanup;
    }
    if ((hr = psdb__reg_check_name(__func__, "application name", desc->name)) < 0 ||
        (hr = psdb__reg_check_name(__func__, "exe filename", desc->exe_filename)) < 0 ||
        (hr = psdb__reg_check_name(__func__, "engine name", desc->engine_name)) < 0)
        goto cleanup;
    sqlite3 *db = inst->reg->db;
    hr = psdb__reg_exec_sql(db, "BEGIN IMMEDIATE");
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
    psdb__reg_bind_text_or_null(st, 2, desc->exe_filename);
    sqlite3_bind_text(st, 3, desc->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)desc->version);
    psdb__reg_bind_text_or_null(st, 5, desc->engine_name);
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
    hr = psdb__reg_exec_sql(db, "COMMIT");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 0;
    hr = psdb__reg_app_handle(inst->reg, id, exe_path, out);
cleanup:
    sqlite3_finalize(st);
    if (in_tx)
        psdb__reg_exec_sql(inst->reg->db, "ROLLBACK");
    return psdb__error_ret(hr, err_mark, __func__);
}

/* Runs a one-row DELETE (or UPDATE) by id; PSDB_E_NOT_FOUND when no row matched. */
psdb_hr psdb__reg_delete_by_id(sqlite3 *db, const char *sql, sqlite3_int64 id, sqlite3_int64 id2)
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
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!inst || !app) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_installer_remove_application: NULL installer or application");
        goto cleanup;
    }
    if (app->reg->readonly) {
        hr = PSDB_E_ACCESS;
        goto cleanup;
    }
    if (app->reg != inst->reg) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_installer_remove_application: the application belongs to another registry");
        goto cleanup;
    }
    /* One statement is its own transaction; ON DELETE CASCADE removes the components with it. */
    hr = psdb__reg_delete_by_id(inst->reg->db, "DELETE FROM applications WHERE id=?", app->id, 0);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

/* S_OK when the application row still exists, PSDB_E_NOT_FOUND once removed. */

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

psdb_hr psdb__registry_built_here(psdb_installer *inst, const char *exe_path, const char *family,
                                  const char *sodb_sha256, char sha256[65], int *own)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    const unsigned char *sha;
    uint8_t raw[32];
    int rc = sqlite3_prepare_v2(inst->reg->db,
                                "SELECT sha256, exe_path=? FROM installed WHERE family=? AND"
                                " built_here=1 AND sodb_sha256=? ORDER BY exe_path=? DESC, exe_path"
                                " LIMIT 1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, exe_path, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, family, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, sodb_sha256, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, exe_path, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    if (rc != SQLITE_ROW) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    /* The digest names a file of the store: anything but 64 hex digits is no row of ours. */
    sha = sqlite3_column_text(st, 0);
    if (!sha || psdb__unhex((const char *)sha, raw, sizeof(raw)) != 0) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    memcpy(sha256, sha, 65);
    *own = sqlite3_column_int(st, 1) != 0;
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

    /* The manifest's names, checked here too: an install without trusted keys verifies no
     * statement, and the registry is what launchers show. */
    if ((hr = psdb__reg_check_name("install", "application name", desc->name)) < 0 ||
        (hr = psdb__reg_check_name("install", "exe filename", desc->exe_filename)) < 0 ||
        (hr = psdb__reg_check_name("install", "engine name", desc->engine_name)) < 0)
        goto cleanup;
    for (uint32_t i = 0; i < n; i++)
        if ((hr = psdb__reg_check_name("install", "family", entries[i].family)) < 0)
            goto cleanup;
    hr = psdb__reg_exec_sql(db, "BEGIN IMMEDIATE");
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
        rc = sqlite3_prepare_v2(db,
                                "INSERT OR REPLACE INTO installed(exe_path, family, serial, sha256,"
                                " built_here, sodb_sha256) VALUES(?,?,?,?,?,?)",
                                -1, &mark, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    sqlite3_bind_text(app, 1, exe_path, -1, SQLITE_STATIC);
    psdb__reg_bind_text_or_null(app, 2, desc->exe_filename);
    sqlite3_bind_text(app, 3, desc->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(app, 4, (sqlite3_int64)desc->version);
    psdb__reg_bind_text_or_null(app, 5, desc->engine_name);
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
        sqlite3_bind_int(mark, 5, e->built_here ? 1 : 0);
        psdb__reg_bind_text_or_null(mark, 6, e->sodb_sha256[0] ? e->sodb_sha256 : NULL);
        hr = step_done(mark);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = psdb__reg_exec_sql(db, "COMMIT");
    if (PSDB_SUCCEEDED(hr))
        in_tx = 0;
cleanup:
    sqlite3_finalize(app);
    sqlite3_finalize(comp);
    sqlite3_finalize(psdb);
    sqlite3_finalize(old);
    sqlite3_finalize(mark);
    if (in_tx)
        psdb__reg_exec_sql(db, "ROLLBACK");
    if (PSDB_FAILED(hr) && hr != PSDB_E_DOWNGRADE)
        psdb__reg_fail(inst->reg, hr);
    return hr;
}

psdb_hr psdb__registry_with_write_lock(psdb_installer *inst, psdb_hr (*fn)(void *ctx), void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    int in_tx = 0;
    hr = psdb__reg_exec_sql(inst->reg->db, "BEGIN IMMEDIATE");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 1;
    hr = fn(ctx);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__reg_exec_sql(inst->reg->db, "COMMIT");
    if (PSDB_SUCCEEDED(hr))
        in_tx = 0;
cleanup:
    if (in_tx)
        psdb__reg_exec_sql(inst->reg->db, "ROLLBACK");
    return hr;
}

psdb_hr psdb__registry_foreach_path(psdb_installer *inst, const char *family, const char *only_name,
                                    void (*fn)(const char *path, void *ctx), void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc =
        sqlite3_prepare_v2(inst->reg->db,
                           "SELECT p.psdb_path FROM component_psdbs p"
                           " JOIN components c ON c.id = p.component"
                           " JOIN applications a ON a.id = c.app"
                           " WHERE (?1 IS NULL OR p.family = ?1) AND (?2 IS NULL OR a.name = ?2)"
                           " GROUP BY p.psdb_path ORDER BY p.psdb_path",
                           -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        goto cleanup;
    }
    psdb__reg_bind_text_or_null(st, 1, family);
    psdb__reg_bind_text_or_null(st, 2, only_name);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        fn((const char *)sqlite3_column_text(st, 0), ctx);
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
cleanup:
    sqlite3_finalize(st);
    return hr;
}
