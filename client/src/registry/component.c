/* component.c - components of a registered application (MODEL B3-B6) and their PSDB paths. */
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
#include "common/migrate.h"
#include "common/status_map.h"

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
    if (!psdb__reg_valid_text(name) || (num_psdbs && !psdbs)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if ((hr = psdb__reg_check_name("psdb_application_register_component", "component name", name)) <
        0)
        goto cleanup;
    for (uint32_t i = 0; i < num_psdbs; i++) {
        const char *f = psdbs[i].adapter_family;
        if (!psdb__reg_valid_text(f) || strlen(f) >= PSDB_ADAPTER_FAMILY_MAX ||
            !psdb__reg_valid_text(psdbs[i].psdb_path)) {
            hr = PSDB_E_INVALIDARG;
            goto cleanup;
        }
        if ((hr = psdb__reg_check_name("psdb_application_register_component", "family", f)) < 0)
            goto cleanup;
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
    c->reg = psdb__reg_ref(reg);
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
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int in_tx = 0, rc;
    sqlite3_int64 id = 0;
    if (out)
        *out = NULL;
    if (!app) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_application_register_component: NULL application");
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
    hr = psdb__reg_exec_sql(db, "BEGIN IMMEDIATE");
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
            psdb__reg_bind_text_or_null(st, 3, sodb_path);
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
            psdb__reg_bind_text_or_null(st, 1, sodb_path);
            sqlite3_bind_int64(st, 2, id);
            rc = sqlite3_step(st);
        }
        if (rc != SQLITE_DONE) {
            hr = psdb__sqlite_hr(rc, PSDB_E_IO);
            goto cleanup;
        }
        sqlite3_finalize(st);
        st = NULL;
        hr = psdb__reg_delete_by_id(db, "DELETE FROM component_psdbs WHERE component=?", id, 0);
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
    hr = psdb__reg_exec_sql(db, "COMMIT");
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 0;
    if (out)
        hr = component_handle(app->reg, app->id, id, out);
cleanup:
    sqlite3_finalize(st);
    if (in_tx)
        psdb__reg_exec_sql(app->reg->db, "ROLLBACK");
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_application_remove_component(psdb_application *app, psdb_component *component)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!app || !component) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_application_remove_component: NULL application or component");
        goto cleanup;
    }
    if (app->reg->readonly) {
        hr = PSDB_E_ACCESS;
        goto cleanup;
    }
    if (component->app_id != app->id || component->reg != app->reg) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_application_remove_component: the component belongs to another application");
        goto cleanup;
    }
    hr = psdb__reg_delete_by_id(app->reg->db, "DELETE FROM components WHERE id=? AND app=?",
                                component->id, app->id);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_application_get_component(psdb_application *app, const char *name,
                                       psdb_component **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_int64 id = 0;
    if (out)
        *out = NULL;
    if (!app || !psdb__reg_valid_text(name) || !out) {
        hr =
            psdb__error_const(PSDB_E_INVALIDARG, "psdb_application_get_component: NULL application "
                                                 "or out, or a NULL, empty or invalid name");
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
    return psdb__error_ret(hr, err_mark, __func__);
}

/* The PSDB path of a component for a family, malloc'd. */
psdb_hr psdb__reg_component_path(psdb_component *component, const char *family, char **out)
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
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    char *path = NULL;
    if (!component || !psdb__reg_valid_text(family) || (!buf && buf_size)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_component_get_psdb_path: NULL component, a NULL, empty or "
                               "invalid family, or buf NULL with a size");
        goto cleanup;
    }
    hr = psdb__reg_component_path(component, family, &path);
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
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_application_release(psdb_application *app)
{
    if (!app)
        return;
    psdb__reg_unref(app->reg);
    free(app->exe_path);
    free(app);
}

void psdb_component_release(psdb_component *component)
{
    if (!component)
        return;
    psdb__reg_unref(component->reg);
    free(component);
}
