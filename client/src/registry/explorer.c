/* explorer.c - the read-only explorer of a registry root, precompile targets and the device's
 * default lookup. */
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
#include "common/status_map.h"

psdb_hr psdb_explorer_open(const char *root_dir, psdb_explorer **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_explorer *exp = NULL;
    char *root = NULL;
    psdb__error_clear();
    if (out)
        *out = NULL;
    if (!out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_explorer_open: NULL out");
        goto cleanup;
    }
    hr = psdb__reg_resolve_root(root_dir, PSDB_SCOPE_USER, &root);
    if (PSDB_FAILED(hr))
        goto cleanup;
    exp = calloc(1, sizeof(*exp));
    if (!exp) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = psdb__reg_open_ro(root, &exp->reg);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = exp;
    exp = NULL;
cleanup:
    psdb_explorer_release(exp);
    free(root);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_explorer_get_application(psdb_explorer *exp, const char *exe_path,
                                      psdb_application **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    if (out)
        *out = NULL;
    if (!exp || !psdb__reg_valid_text(exe_path) || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_explorer_get_application: NULL explorer or "
                                                  "out, or a NULL, empty or invalid exe path");
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
    hr = psdb__reg_app_handle(exp->reg, sqlite3_column_int64(st, 0), exe_path, out);
cleanup:
    sqlite3_finalize(st);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* The joins and order of psdb_explorer_foreach's walk. What psdb install recorded applies to the
 * PSDB it registered: the default component's, for that family, still at the file named by that
 * digest (not one the component API put there). */
#define FOREACH_TAIL                                                                               \
    " LEFT JOIN components c ON c.app = a.id"                                                      \
    " LEFT JOIN component_psdbs p ON p.component = c.id"                                           \
    " LEFT JOIN installed i ON i.exe_path = a.exe_path"                                            \
    " AND i.family = p.family AND c.name = '" PSDB_DEFAULT_COMPONENT "'"                           \
    " AND p.psdb_path LIKE '%/' || i.sha256 || '.psdb'"                                            \
    " ORDER BY a.exe_path, c.name, p.family"

psdb_hr psdb_explorer_foreach(psdb_explorer *exp,
                              int (*fn)(const psdb_registry_entry *e, void *ctx), void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc;
    if (!exp || !fn) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_explorer_foreach: NULL explorer or callback");
        goto cleanup;
    }
    if (!exp->reg->db)
        goto cleanup;
    /* One read transaction, so the walk sees one consistent registry state. */
    hr = psdb__reg_exec_sql(exp->reg->db, "BEGIN");
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* An explorer never migrates: a registry written before version 3 has no origin columns,
     * and its rows read as downloaded, source unknown (schema/REGISTRY.md, version 3). */
    sqlite3_stmt *ver = NULL;
    int version = 0;
    if (sqlite3_prepare_v2(exp->reg->db, "PRAGMA user_version", -1, &ver, NULL) == SQLITE_OK &&
        sqlite3_step(ver) == SQLITE_ROW)
        version = sqlite3_column_int(ver, 0);
    sqlite3_finalize(ver);
    rc = sqlite3_prepare_v2(exp->reg->db,
                            version >= 3
                                ? "SELECT a.exe_path, a.exe_filename, a.name, a.version,"
                                  " a.engine_name, a.engine_version, a.installer, c.name,"
                                  " c.sodb_path, p.family, p.psdb_path, i.serial, i.sha256,"
                                  " i.built_here, i.sodb_sha256 FROM applications a" FOREACH_TAIL
                                : "SELECT a.exe_path, a.exe_filename, a.name, a.version,"
                                  " a.engine_name, a.engine_version, a.installer, c.name,"
                                  " c.sodb_path, p.family, p.psdb_path, i.serial, i.sha256,"
                                  " 0, NULL FROM applications a" FOREACH_TAIL,
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__reg_fail(exp->reg, psdb__sqlite_hr(rc, PSDB_E_IO));
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
            .installed_built_here = sqlite3_column_int(st, 13),
            .installed_sodb_sha256 = (const char *)sqlite3_column_text(st, 14),
        };
        if (fn(&e, ctx)) {
            hr = PSDB_S_FALSE;
            break;
        }
    }
    if (hr == PSDB_S_OK && rc != SQLITE_DONE)
        hr = psdb__reg_fail(exp->reg, psdb__sqlite_hr(rc, PSDB_E_IO));
cleanup:
    sqlite3_finalize(st);
    if (exp && exp->reg->db && !sqlite3_get_autocommit(exp->reg->db))
        psdb__reg_exec_sql(exp->reg->db, "COMMIT");
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_registry_entry_check(const psdb_registry_entry *e, psdb_registry_file_state *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t got[32], want[32];
    if (!e || !out || !e->psdb_path) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_registry_entry_check: NULL entry, out or entry PSDB path");
        goto cleanup;
    }
    *out = PSDB_REGISTRY_FILE_MISSING;
    /* The whole file is hashed every time: registry version 2 records no size or mtime to trust,
     * and damage in place (a flipped sector, a rewrite of the same length) keeps both. A FIFO is
     * never waited on. What psdb install recorded is a regular file it wrote in the store, so a
     * link there is not that file (MISSING; installing again replaces it); a path registered
     * through the component API (no digest recorded) may be a link its installer made. */
    hr = psdb__file_sha256(e->psdb_path, e->installed_sha256 ? 0 : PSDB__OPEN_FOLLOW, got);
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
    return psdb__error_ret(hr, err_mark, __func__);
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
    psdb__reg_unref(exp->reg);
    free(exp);
}

psdb_hr psdb_get_precompile_targets(const psdb_adapter_desc *adapters, uint32_t num_adapters,
                                    psdb_precompile_target *out, uint32_t *count)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint32_t n = 0;
    if (!count || (num_adapters && !adapters) || (!out && *count)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_get_precompile_targets: NULL count, adapters NULL with a "
                               "count, or out NULL with a non-zero *count");
        goto cleanup;
    }
    for (uint32_t i = 0; i < num_adapters; i++) {
        const psdb_adapter_desc *a = &adapters[i];
        if (a->flags & PSDB_ADAPTER_FLAG_NO_ASD)
            continue;
        if (!psdb__reg_valid_text(a->family) || strlen(a->family) >= PSDB_ADAPTER_FAMILY_MAX) {
            hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_get_precompile_targets: an adapter "
                                                      "with an empty, invalid or too long family");
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
    return psdb__error_ret(hr, err_mark, __func__);
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
    hr = psdb__reg_component_path(comp, family, out);
cleanup:
    psdb_component_release(comp);
    psdb_application_release(app);
    psdb_explorer_release(exp);
    return hr;
}
