/* registry_int.h - what the registry's files share (registry_db.c, installer.c, component.c,
 * explorer.c): the connection and handle types and their helpers. Shader cache registration (MODEL
 * B): installers, applications, components and the read-only explorer, stored in one SQLite
 * database under a registry root.
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
#ifndef PSDB_REGISTRY_INT_H
#define PSDB_REGISTRY_INT_H

#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "registry/install.h"
#include "registry/registry.h"

#define BUSY_TIMEOUT_MS 10000
#define INSTALLER_NAME_MAX 200

/* One connection to one registry root, shared by the handles made from it. */
typedef struct psdb__reg {
    atomic_uint refs;
    sqlite3 *db; /* NULL: an explorer on a root that has no registry yet (empty) */
    int readonly;
    char *path; /* <root>/registry.db, for messages */
} psdb__reg;

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

/* registry_db.c */
psdb_hr psdb__reg_fail(const psdb__reg *reg, psdb_hr hr);
/* registry_db.c */
char *psdb__reg_join_path(const char *dir, const char *name);
/* registry_db.c */
psdb_hr psdb__reg_make_dirs(const char *path, mode_t mode);
/* registry_db.c */
psdb_hr psdb__reg_resolve_root(const char *root_dir, psdb_scope scope, char **out);
/* registry_db.c */
void psdb__reg_unref(psdb__reg *reg);
/* registry_db.c */
psdb__reg *psdb__reg_ref(psdb__reg *reg);
/* registry_db.c */
psdb_hr psdb__reg_exec_sql(sqlite3 *db, const char *sql);
/* registry_db.c */
psdb_hr psdb__reg_open_rw(const char *root, psdb__reg **out);
/* registry_db.c */
psdb_hr psdb__reg_open_ro(const char *root, psdb__reg **out);
/* registry_db.c */
psdb_hr psdb__reg_lock_file_name(const char *name, char **out);
/* installer.c */
int psdb__reg_valid_text(const char *s);
/* installer.c: PSDB_E_INVALIDARG with "<fn>: the <label> contains U+202E (...)" as the last error
 * when name (NULL: absent, fine) breaks psdb's rule for names (psdb__name_check); S_OK otherwise.
 * Every name that enters the registry (installer, application, exe filename, engine, component,
 * family) passes here: the registry is what launchers and `psdb registry list` show. */
psdb_hr psdb__reg_check_name(const char *fn, const char *label, const char *name);
/* installer.c */
psdb_hr psdb__reg_app_handle(psdb__reg *reg, sqlite3_int64 id, const char *exe_path,
                             psdb_application **out);
/* installer.c */
void psdb__reg_bind_text_or_null(sqlite3_stmt *st, int i, const char *s);
/* installer.c */
psdb_hr psdb__reg_delete_by_id(sqlite3 *db, const char *sql, sqlite3_int64 id, sqlite3_int64 id2);
/* component.c */
psdb_hr psdb__reg_component_path(psdb_component *component, const char *family, char **out);

#endif
