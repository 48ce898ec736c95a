/* registry.h - internal entry points of the shader cache registry for the device (MODEL B7, D1). */
#ifndef PSDB_REGISTRY_INTERNAL_H
#define PSDB_REGISTRY_INTERNAL_H

#include "psdb/psdb.h"

#include "common/migrate.h"

extern const psdb__sql_set psdb__registry_migrations;

/* Newest registry schema this library knows (PRAGMA user_version of registry.db): the number of
 * schema/registry/NNN_*.sql migrations embedded as psdb__registry_migrations (asserted). */
#define PSDB__REGISTRY_SCHEMA_VERSION 3

/* PRAGMA application_id of registry.db: "PSDR". Registries written before it was stamped carry
 * 0 and are stamped by the next installer; any other value is another program's database. */
#define PSDB__REGISTRY_APPLICATION_ID 0x50534452

/* File name of the registry database under a registry root. */
#define PSDB__REGISTRY_DB "registry.db"

/* Resolves the PSDB path registered for (exe_path, component, family) through a read-only
 * explorer on root_dir (NULL: the default USER root). *out is malloc'd (the caller frees).
 * PSDB_E_NOT_FOUND when the application, the component or the family is not registered;
 * other statuses from opening the registry. */
psdb_hr psdb__registry_find_psdb(const char *root_dir, const char *exe_path, const char *component,
                                 const char *family, char **out);

#endif
