/* psdb/registry.h - shader cache registration: installers, applications, components (MODEL B). */
#ifndef PSDB_REGISTRY_H
#define PSDB_REGISTRY_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum psdb_scope { PSDB_SCOPE_USER = 0, PSDB_SCOPE_SYSTEM = 1 } psdb_scope;

typedef struct psdb_installer_desc {
    const char *name;     /* installer name; one open installer per name per root (B1) */
    psdb_scope scope;
    const char *root_dir; /* NULL: the scope's default root ($PSDB_REGISTRY_DIR, else
                             $XDG_DATA_HOME/psdb, else ~/.local/share/psdb; SYSTEM: /var/lib/psdb) */
} psdb_installer_desc;

typedef struct psdb_component_psdb {
    const char *adapter_family;
    const char *psdb_path;
} psdb_component_psdb;

/* The component name that is the implicit default (B3). */
#define PSDB_DEFAULT_COMPONENT "default"

/* Opens an installer. PSDB_E_BUSY when another installer of the same name holds the root (any
 * process); PSDB_E_ACCESS / PSDB_E_IO when the root cannot be created or written;
 * PSDB_E_INVALIDARG on NULL or empty name. Not thread-safe: one thread uses one installer. */
PSDB_API psdb_hr psdb_installer_open(const psdb_installer_desc *desc, psdb_installer **out);
PSDB_API void psdb_installer_release(psdb_installer *inst);

/* Registers (or replaces) an application by full exe path (B2). The returned handle is the
 * caller's. */
PSDB_API psdb_hr psdb_installer_register_application(psdb_installer *inst, const char *exe_path,
                                                     const psdb_app_desc *desc,
                                                     psdb_application **out);
/* Removes an application and its components; the handle becomes invalid (B4): further calls on
 * it return PSDB_E_NOT_FOUND. The caller still releases it. */
PSDB_API psdb_hr psdb_installer_remove_application(psdb_installer *inst, psdb_application *app);

/* Registers a component atomically, replacing one of the same name (B3). sodb_path may be NULL.
 * Families must be distinct. `out` may be NULL. PSDB_E_ACCESS from an explorer's application. */
PSDB_API psdb_hr psdb_application_register_component(psdb_application *app, const char *name,
                                                     const char *sodb_path, uint32_t num_psdbs,
                                                     const psdb_component_psdb *psdbs,
                                                     psdb_component **out);
PSDB_API psdb_hr psdb_application_remove_component(psdb_application *app,
                                                   psdb_component *component);
/* Looks up a component by name. PSDB_E_NOT_FOUND when absent. */
PSDB_API psdb_hr psdb_application_get_component(psdb_application *app, const char *name,
                                                psdb_component **out);
/* The PSDB path registered for a family, copied into buf (PSDB_E_MORE_DATA when short,
 * PSDB_E_NOT_FOUND when the component has none for that family or was removed). */
PSDB_API psdb_hr psdb_component_get_psdb_path(psdb_component *component, const char *family,
                                              char *buf, size_t buf_size);
PSDB_API void psdb_application_release(psdb_application *app);
PSDB_API void psdb_component_release(psdb_component *component);

/* Opens a read-only view of a registry root (B5); root_dir NULL: the default USER root. Mutating
 * calls on applications from an explorer return PSDB_E_ACCESS. */
PSDB_API psdb_hr psdb_explorer_open(const char *root_dir, psdb_explorer **out);
PSDB_API psdb_hr psdb_explorer_get_application(psdb_explorer *exp, const char *exe_path,
                                               psdb_application **out);
PSDB_API void psdb_explorer_release(psdb_explorer *exp);

/* What an installer should fetch for one adapter of this machine (B6). */
typedef struct psdb_precompile_target {
    char family[PSDB_ADAPTER_FAMILY_MAX];
    uint64_t abi_min, abi_max, compiler_version, profile_version;
} psdb_precompile_target;

/* Fills out[0..*count) with the distinct targets of the given adapters (adapters without ASD are
 * skipped; adapters of one family with different ranges give one target each). *count in is the
 * capacity; PSDB_E_MORE_DATA with the needed count when short. */
PSDB_API psdb_hr psdb_get_precompile_targets(const psdb_adapter_desc *adapters,
                                             uint32_t num_adapters, psdb_precompile_target *out,
                                             uint32_t *count);

/* Resolves the default registry root for a scope into buf. */
PSDB_API psdb_hr psdb_registry_default_root(psdb_scope scope, char *buf, size_t buf_size);

#ifdef __cplusplus
}
#endif
#endif
