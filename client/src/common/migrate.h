/* migrate.h - the one SQL schema source and migration runner: SQL files under schema/ embedded by
 * the CMake function psdb_embed_sql (cmake/EmbedSql.cmake), and numbered migrations applied in one
 * transaction keyed by PRAGMA user_version (the PSDB writer, the registry and psdbd's index). */
#ifndef PSDB_COMMON_MIGRATE_H
#define PSDB_COMMON_MIGRATE_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "psdb/status.h"

/* One embedded SQL file: its file name ("001_init.sql") and its text, NUL-terminated. */
typedef struct psdb__sql_file {
    const char *name;
    const char *sql;
    size_t len; /* strlen(sql) */
} psdb__sql_file;

/* An ordered set of embedded files, as psdb_embed_sql(<target> <name> <files>) generates:
 * `extern const psdb__sql_set <name>;` with the files sorted by name. For migrations, file i
 * brings the schema from user_version i to i + 1. */
typedef struct psdb__sql_set {
    const psdb__sql_file *files;
    size_t count;
} psdb__sql_set;

/* Called under the write lock with the database's user_version and application_id, before any
 * step runs: refuses a database that is not the caller's (returns a failure status and writes a
 * one-line reason into err). */
typedef psdb_hr (*psdb__migrate_check_fn)(sqlite3 *db, int version, int application_id, void *ctx,
                                          char *err, size_t err_size);

/* Brings db's schema to steps->count: BEGIN IMMEDIATE; reads user_version and application_id;
 * runs check (may be NULL); refuses a negative version or one above steps->count
 * (PSDB_E_UNSUPPORTED: newer than this binary knows); runs steps[version..count) in order, sets
 * user_version to count and application_id to `application_id`; COMMIT. Any failure rolls back
 * everything: the database is left as it was. Statuses: PSDB_S_OK (migrated or already current),
 * check's status, PSDB_E_UNSUPPORTED, psdb__sqlite_hr's statuses for SQLite failures (BEGIN
 * IMMEDIATE against another writer is PSDB_E_BUSY). On failure err gets one line naming `what`
 * (the database, for messages) and the cause. *version_out (may be NULL) gets the version found
 * before migrating. */
psdb_hr psdb__migrate(sqlite3 *db, const char *what, const psdb__sql_set *steps,
                      uint32_t application_id, psdb__migrate_check_fn check, void *ctx,
                      int *version_out, char *err, size_t err_size);

#endif
