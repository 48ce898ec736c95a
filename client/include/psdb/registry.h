/* psdb/registry.h - shader cache registration: installers, applications, components (MODEL B). */
#ifndef PSDB_REGISTRY_H
#define PSDB_REGISTRY_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum psdb_scope { PSDB_SCOPE_USER = 0, PSDB_SCOPE_SYSTEM = 1 } psdb_scope;

typedef struct psdb_installer_desc {
    const char *name; /* installer name; one open installer per name per root (B1) */
    psdb_scope scope;
    const char
        *root_dir; /* NULL: the scope's default root ($PSDB_REGISTRY_DIR, else
                      $XDG_DATA_HOME/psdb, else ~/.local/share/psdb; SYSTEM: /var/lib/psdb) */
} psdb_installer_desc;

typedef struct psdb_component_psdb {
    const char *adapter_family;
    const char *psdb_path;
} psdb_component_psdb;

/* The component name that is the implicit default (B3). */
#define PSDB_DEFAULT_COMPONENT "default"

/* Storage (MODEL B8): one SQLite database, <root>/registry.db (WAL, schema versioned with PRAGMA
 * user_version; a registry newer than this library is refused with PSDB_E_UNSUPPORTED), and one
 * lock file per installer name under <root>/locks/. Each registration is one transaction: a reader
 * in any process sees it whole or not at all, and concurrent writers wait (busy timeout) instead of
 * failing. Installer, explorer, application and component handles are used by one thread at a
 * time; distinct handles may be used from distinct threads and processes at once.
 *
 * Names. Every name that enters the registry (installer, application name, exe filename, engine
 * name, component name, family) must be well-formed UTF-8 without a control character (C0, DEL,
 * C1), a Unicode format character (Cf: U+202E and the other bidirectional controls, zero widths,
 * tags, ...) or a separator other than U+0020 (U+00A0, U+2028, U+3000, ...): launchers and tools
 * show these names, and such a character makes one name display as another. The refusal is
 * PSDB_E_INVALIDARG with psdb_error_last naming the field and the code point ("the application
 * name contains U+202E (a Unicode format character)"), the same rule psdbd and the psdb tool
 * apply. */

/* Opens an installer (MODEL B1) on desc->root_dir (NULL: the scope's default root), creating the
 * root and its database when absent. Only one installer per name may be open per root at a time,
 * across processes and within one: the next open gets PSDB_E_BUSY until the first is released (or
 * its process exits). Statuses: PSDB_E_INVALIDARG (desc or out NULL, name NULL, empty or longer
 * than 200 bytes, a name psdb's rule for names refuses (below), unknown scope); PSDB_E_BUSY;
 * PSDB_E_ACCESS when the root cannot be created or written (permissions, read-only file system) -
 * nothing is created then - or when locks/ or the name's lock file is not this user's own (a
 * symbolic link, a FIFO, another user's file: refused, never followed; the last error names the
 * path); PSDB_E_IO on other file errors; PSDB_E_UNSUPPORTED for a registry schema newer than this
 * library; PSDB_E_CACHE_CORRUPT for a damaged database or one that is not a registry (see
 * psdb_explorer_open); PSDB_E_NOT_FOUND when no default root can be derived (no HOME). *out is
 * the caller's (psdb_installer_release). */
PSDB_API psdb_hr psdb_installer_open(const psdb_installer_desc *desc, psdb_installer **out);
/* Releases the installer and its name lock. Application handles made from it stay usable. NULL is a
 * no-op. */
PSDB_API void psdb_installer_release(psdb_installer *inst);

/* Registers an application by its full exe path, the lookup key (MODEL B2). Re-registering an
 * existing exe path updates its description in place: its components and existing handles stay
 * valid. desc->name must be non-empty, desc->version non-zero, and engine_version 0 when
 * engine_name is NULL (MODEL A2), else PSDB_E_INVALIDARG (as for NULL inst, exe_path, desc or out,
 * an empty exe_path, and a name, exe filename or engine name psdb's rule for names refuses).
 * *out is the caller's (psdb_application_release). */
PSDB_API psdb_hr psdb_installer_register_application(psdb_installer *inst, const char *exe_path,
                                                     const psdb_app_desc *desc,
                                                     psdb_application **out);
/* Removes an application and its components in one transaction (MODEL B4); every handle to it
 * becomes invalid: further calls on it return PSDB_E_NOT_FOUND, also after the same exe path is
 * registered again (that is a new registration). The caller still releases the handle.
 * PSDB_E_ACCESS for an explorer's application; PSDB_E_INVALIDARG for NULL or an application of
 * another registry root; PSDB_E_NOT_FOUND when already removed. No file is deleted here: the
 * store's files it referenced go at the next sweep (psdb_installer_sweep_store) if nothing else
 * references them. */
PSDB_API psdb_hr psdb_installer_remove_application(psdb_installer *inst, psdb_application *app);

/* Registers a component atomically, replacing one of the same name with all its PSDBs (MODEL B3);
 * a replaced component keeps its identity, so existing handles see the new PSDBs. sodb_path may be
 * NULL. num_psdbs may be 0. Each family must be non-empty, shorter than PSDB_ADAPTER_FAMILY_MAX and
 * distinct, each path non-empty: else PSDB_E_INVALIDARG (also for NULL app or name, empty name,
 * psdbs NULL with num_psdbs > 0, a name or family psdb's rule for names refuses). The PSDB files
 * are not opened here: they are checked when a device resolves them (MODEL B7). `out` may be NULL.
 * PSDB_E_ACCESS from an explorer's application (MODEL B5); PSDB_E_NOT_FOUND when the application
 * was removed. */
PSDB_API psdb_hr psdb_application_register_component(psdb_application *app, const char *name,
                                                     const char *sodb_path, uint32_t num_psdbs,
                                                     const psdb_component_psdb *psdbs,
                                                     psdb_component **out);
/* Removes a component (MODEL B4): its handles become invalid (PSDB_E_NOT_FOUND). PSDB_E_ACCESS from
 * an explorer's application; PSDB_E_INVALIDARG for NULL or a component of another application;
 * PSDB_E_NOT_FOUND when already removed. */
PSDB_API psdb_hr psdb_application_remove_component(psdb_application *app,
                                                   psdb_component *component);
/* Looks up a component by name. PSDB_E_NOT_FOUND when absent (or the application was removed);
 * PSDB_E_INVALIDARG on NULL or empty name. *out is the caller's (psdb_component_release). */
PSDB_API psdb_hr psdb_application_get_component(psdb_application *app, const char *name,
                                                psdb_component **out);
/* The PSDB path registered for a family, copied with its NUL into buf (PSDB_E_MORE_DATA when
 * buf_size is short, PSDB_E_NOT_FOUND when the component has none for that family or was removed,
 * PSDB_E_INVALIDARG on NULL component or family, or buf NULL with buf_size > 0). */
PSDB_API psdb_hr psdb_component_get_psdb_path(psdb_component *component, const char *family,
                                              char *buf, size_t buf_size);
/* Release handles; NULL is a no-op. */
PSDB_API void psdb_application_release(psdb_application *app);
PSDB_API void psdb_component_release(psdb_component *component);

/* Opens a read-only view of a registry root (MODEL B5); root_dir NULL: the default USER root. A
 * root without a registry is an empty view (lookups give PSDB_E_NOT_FOUND), never created.
 * Mutating calls on applications from an explorer return PSDB_E_ACCESS. PSDB_E_INVALIDARG when
 * out is NULL or root_dir empty; PSDB_E_UNSUPPORTED for a newer schema; PSDB_E_IO /
 * PSDB_E_ACCESS when the database cannot be read; PSDB_E_CACHE_CORRUPT when it is damaged (SQLite's
 * quick_check fails) or not a psdb registry (another application_id, a negative schema version,
 * tables without a schema version). psdb_installer_open refuses the same databases. */
PSDB_API psdb_hr psdb_explorer_open(const char *root_dir, psdb_explorer **out);
/* The application registered at exe_path (exact string match). PSDB_E_NOT_FOUND when absent;
 * PSDB_E_INVALIDARG on NULL or empty arguments. *out is the caller's. */
PSDB_API psdb_hr psdb_explorer_get_application(psdb_explorer *exp, const char *exe_path,
                                               psdb_application **out);
PSDB_API void psdb_explorer_release(psdb_explorer *exp);

/* One row of a registry listing: an application, one of its components (NULL when it has none) and
 * one of the component's PSDBs (family and path NULL when it has none). Strings are borrowed for
 * the duration of the callback. */
typedef struct psdb_registry_entry {
    const char *exe_path;
    const psdb_app_desc *app;
    const char *installer; /* name of the installer that registered the application last */
    const char *component;
    const char *sodb_path;
    const char *adapter_family;
    const char *psdb_path;
    /* What psdb install (psdb_client_install) recorded for this PSDB: set for the "default"
     * component's PSDB of a family it installed, else 0 and NULL (registered through
     * psdb_application_register_component). installed_sha256 is lowercase hex. */
    uint64_t installed_serial;
    const char *installed_sha256;
    /* Where that PSDB came from (schema/REGISTRY.md, version 3): installed_built_here 1 when
     * psdb install --compile-missing compiled it on this machine (nothing signed it), 0 when it
     * was downloaded as published; installed_sodb_sha256 (lowercase hex, or NULL when unknown)
     * the SODB it was compiled from: the local build's, or the one a farm-built PSDB's
     * version 2 statement names. */
    int installed_built_here;
    const char *installed_sodb_sha256;
} psdb_registry_entry;

/* Visits every (application, component, PSDB) of the registry in exe path, component name and
 * family order, from one consistent snapshot. A non-zero return from fn stops the walk (S_FALSE).
 * PSDB_E_INVALIDARG on NULL exp or fn. */
PSDB_API psdb_hr psdb_explorer_foreach(psdb_explorer *exp,
                                       int (*fn)(const psdb_registry_entry *e, void *ctx),
                                       void *ctx);

/* The state of a registered PSDB file, as psdb_registry_entry_check finds it. */
typedef enum psdb_registry_file_state {
    PSDB_REGISTRY_FILE_OK = 0,         /* present; its SHA-256 is the one psdb install recorded */
    PSDB_REGISTRY_FILE_UNVERIFIED = 1, /* present; no digest recorded to compare with */
    PSDB_REGISTRY_FILE_MISSING = 2,    /* no regular file at psdb_path (absent, a FIFO, device
                                          or directory; a symbolic link where psdb install
                                          recorded a digest: never followed) */
    PSDB_REGISTRY_FILE_MISMATCH = 3    /* present, but not the recorded SHA-256: damaged */
} psdb_registry_file_state;

/* Checks the file of one registry row (from psdb_explorer_foreach), so that a launcher can repair
 * a MISSING or MISMATCH registration by installing again (psdb install re-downloads it even when
 * the serial is unchanged). The whole file is hashed on every call (no size/mtime shortcut: the
 * registry records neither). Statuses: PSDB_S_OK with *out set; PSDB_E_INVALIDARG for NULL e or
 * out or a row without a PSDB (psdb_path NULL); PSDB_E_ACCESS / PSDB_E_IO when the file exists but
 * cannot be read (*out is MISSING then). Thread-safe; may be called from the foreach callback. */
PSDB_API psdb_hr psdb_registry_entry_check(const psdb_registry_entry *e,
                                           psdb_registry_file_state *out);
/* "ok", "unverified", "missing", "mismatch" (static strings); "unknown" for other values. */
PSDB_API const char *psdb_registry_file_state_str(psdb_registry_file_state state);

/* Flags of psdb_installer_sweep_store. */
#define PSDB_SWEEP_WAIT 0x1u    /* wait for installs in flight instead of returning PSDB_S_FALSE */
#define PSDB_SWEEP_PARTIAL 0x2u /* also remove partial downloads (.part) however recent */

/* Removes the files of the root's PSDB store (<root>/psdbs/) that no registration references:
 * those of removed applications and components, replaced serials, and installs that died before
 * registering. psdb install does this after each install; removal calls leave files to the next
 * sweep. It runs only while no install of any installer name is between placing a file in the
 * store and registering it (<root>/store.lock, exclusive), and inside a registry write
 * transaction, so it never removes a file that is registered or about to be. A partial download
 * younger than a day is kept (a later install resumes it) unless PSDB_SWEEP_PARTIAL. Statuses:
 * PSDB_S_OK; PSDB_S_FALSE when an install was in flight (nothing removed; it sweeps when it
 * finishes) and PSDB_SWEEP_WAIT was not given; PSDB_E_INVALIDARG for NULL inst or unknown flags;
 * PSDB_E_IO / PSDB_E_ACCESS on file errors. The installer is used by one thread at a time. */
PSDB_API psdb_hr psdb_installer_sweep_store(psdb_installer *inst, uint32_t flags);

/* What an installer should fetch for one adapter of this machine (B6). */
typedef struct psdb_precompile_target {
    char family[PSDB_ADAPTER_FAMILY_MAX];
    uint64_t abi_min, abi_max, compiler_version, profile_version;
} psdb_precompile_target;

/* Fills out[0..*count) with the distinct targets of the given adapters (MODEL B6), in adapter
 * order: adapters without ASD are skipped; adapters of one family with different ranges or
 * versions give one target each; identical ones give one. *count in is the capacity (out may be
 * NULL when it is 0); on return it is the number of targets. PSDB_E_MORE_DATA when the capacity is
 * short (the first *count-in targets are written); PSDB_E_INVALIDARG on NULL count, adapters NULL
 * with num_adapters > 0, or an ASD adapter without a valid family. Thread-safe. */
PSDB_API psdb_hr psdb_get_precompile_targets(const psdb_adapter_desc *adapters,
                                             uint32_t num_adapters, psdb_precompile_target *out,
                                             uint32_t *count);

/* Resolves the default registry root for a scope into buf: USER is $PSDB_REGISTRY_DIR, else
 * $XDG_DATA_HOME/psdb, else $HOME/.local/share/psdb; SYSTEM is /var/lib/psdb. PSDB_E_MORE_DATA
 * when buf_size is short, PSDB_E_NOT_FOUND when no variable gives a USER root, PSDB_E_INVALIDARG
 * on an unknown scope or buf NULL with buf_size > 0. Thread-safe (reads the environment). */
PSDB_API psdb_hr psdb_registry_default_root(psdb_scope scope, char *buf, size_t buf_size);

#ifdef __cplusplus
}
#endif
#endif
