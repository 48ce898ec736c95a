/* migrate.c - numbered SQL migrations in one transaction, keyed by PRAGMA user_version. */
#include "common/migrate.h"

#include <stdio.h>

#include "common/status_map.h"

static psdb_hr exec_sql(sqlite3 *db, const char *sql, const char *what, const char *step, char *err,
                        size_t err_size)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        return PSDB_S_OK;
    snprintf(err, err_size, "%s: %s%s%s", what, step ? step : "", step ? ": " : "",
             sqlite3_errmsg(db));
    psdb_hr hr = psdb__sqlite_hr(sqlite3_extended_errcode(db), PSDB_E_IO);
    return PSDB_SUCCEEDED(hr) ? PSDB_E_IO : hr;
}

static psdb_hr pragma_int(sqlite3 *db, const char *sql, int *out, const char *what, char *err,
                          size_t err_size)
{
    sqlite3_stmt *st = NULL;
    psdb_hr hr = PSDB_S_OK;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        snprintf(err, err_size, "%s: %s: %s", what, sql, sqlite3_errmsg(db));
        hr = psdb__sqlite_hr(rc, PSDB_E_IO);
        if (PSDB_SUCCEEDED(hr))
            hr = PSDB_E_IO;
        goto cleanup;
    }
    *out = sqlite3_column_int(st, 0);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

psdb_hr psdb__migrate(sqlite3 *db, const char *what, const psdb__sql_set *steps,
                      uint32_t application_id, psdb__migrate_check_fn check, void *ctx,
                      int *version_out, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    int in_tx = 0, version = 0, app_id = 0;
    char pragma[64];
    hr = exec_sql(db, "BEGIN IMMEDIATE", what, NULL, err, err_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
    in_tx = 1;
    hr = pragma_int(db, "PRAGMA user_version", &version, what, err, err_size);
    if (PSDB_SUCCEEDED(hr))
        hr = pragma_int(db, "PRAGMA application_id", &app_id, what, err, err_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (version_out)
        *version_out = version;
    if (check) {
        hr = check(db, version, app_id, ctx, err, err_size);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    if (version < 0 || (size_t)version > steps->count) {
        hr = PSDB_E_UNSUPPORTED;
        snprintf(err, err_size, "%s: schema version %d is newer than this binary knows (%zu)", what,
                 version, steps->count);
        goto cleanup;
    }
    for (size_t i = (size_t)version; i < steps->count; i++) {
        hr = exec_sql(db, steps->files[i].sql, what, steps->files[i].name, err, err_size);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    if ((size_t)version != steps->count) {
        snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %zu", steps->count);
        hr = exec_sql(db, pragma, what, NULL, err, err_size);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    if ((uint32_t)app_id != application_id) {
        snprintf(pragma, sizeof(pragma), "PRAGMA application_id = %d", (int)application_id);
        hr = exec_sql(db, pragma, what, NULL, err, err_size);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = exec_sql(db, "COMMIT", what, "commit", err, err_size);
    if (PSDB_SUCCEEDED(hr))
        in_tx = 0;
cleanup:
    if (in_tx)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return hr;
}
