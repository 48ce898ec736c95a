/* install.h - the registry's side of an install: installed serials and the one-transaction update
 * of an application's "default" component (implemented in installer.c). */
#ifndef PSDB_INSTALL_H
#define PSDB_INSTALL_H

#include "psdb/psdb.h"

typedef struct psdb__install_entry {
    const char *family;
    const char *psdb_path;
    uint64_t serial;
    char sha256[65]; /* lowercase hex */
    int built_here;  /* compiled on this machine (psdb install --compile-missing) */
    /* Lowercase hex of the source SODB: the SODB a local build compiled, or the one a version 2
     * statement names; "" when none is known. */
    char sodb_sha256[65];
} psdb__install_entry;

/* The registry root an installer writes (borrowed; lives as long as the installer). */
const char *psdb__installer_root(const psdb_installer *inst);

/* The serial and digest installed for (exe_path, family). PSDB_E_NOT_FOUND when none. */
psdb_hr psdb__registry_installed(psdb_installer *inst, const char *exe_path, const char *family,
                                 uint64_t *serial, char sha256[65]);

/* A PSDB the registry holds as built here (psdb install --compile-missing) for family from the
 * SODB sodb_sha256 (lowercase hex): its digest, and *own 1 when it is exe_path's own row, 0 when
 * another executable's (exe_path's row is taken first). PSDB_E_NOT_FOUND when none. */
psdb_hr psdb__registry_built_here(psdb_installer *inst, const char *exe_path, const char *family,
                                  const char *sodb_sha256, char sha256[65], int *own);

/* In one BEGIN IMMEDIATE transaction: registers (or updates) the application, sets each entry's
 * family in its "default" component (other families stay), and records the serials. A serial
 * app_id (16 bytes) is recorded when non-NULL. A serial
 * lower than the recorded one -> PSDB_E_DOWNGRADE and nothing changes, unless allow_downgrade. */
psdb_hr psdb__registry_install(psdb_installer *inst, const char *exe_path,
                               const psdb_app_desc *desc, const uint8_t *app_id, uint32_t n,
                               const psdb__install_entry *entries, int allow_downgrade);

/* Runs fn inside one BEGIN IMMEDIATE transaction of the installer's registry (committed when fn
 * succeeds): no registration can commit while fn runs. */
psdb_hr psdb__registry_with_write_lock(psdb_installer *inst, psdb_hr (*fn)(void *ctx), void *ctx);

/* Calls fn once for every PSDB path a component registers for family (any family when NULL) in an
 * application named only_name (any application when NULL), in path order. */
psdb_hr psdb__registry_foreach_path(psdb_installer *inst, const char *family, const char *only_name,
                                    void (*fn)(const char *path, void *ctx), void *ctx);

#endif
