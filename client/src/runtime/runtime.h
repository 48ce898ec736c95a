/* runtime.h - what the device core (device.c, session.c, cache_session.c, owned by device_int.h)
 * offers the files built on it: pipelines, state objects, the pipeline library, serialized and
 * derived PSOs, the queue. They see the device through these calls and accessors only, never its
 * struct, so the core can change without them and calls nothing of theirs (the serialized-PSO
 * store hangs on the device as a psdb__device_ext that carries its own destructor). */
#ifndef PSDB_RUNTIME_H
#define PSDB_RUNTIME_H

#include <stdatomic.h>

#include "psdb/psdb.h"

#include "common/buf.h"
#include "driver/driver.h"

typedef void (*psdb__lookup_fn)(const psdb_lookup_event *ev, void *ctx);

/* Something a file outside the device core hangs on the device (the serialized-PSO store). It
 * carries its destructor, so the device frees it without calling into the file that made it: the
 * core depends on nothing above it. */
typedef struct psdb__device_ext {
    void (*free)(struct psdb__device_ext *self);
} psdb__device_ext;

/* One creation's selection (F1-F3), taken once before its first lookup (F7) and held for the whole
 * operation (I2). */
typedef struct psdb__selection {
    psdb_session *session; /* referenced; NULL: no PSDB selected */
    uint32_t kind;         /* PSDB_SELECTION_* */
    uint32_t flags;        /* PSDB_SESSION_FLAG_* of the selection */
    psdb__lookup_fn lookup_fn;
    void *lookup_ctx;
} psdb__selection;

/* What an object keeps of its selection after creation (I3, I4, I5). */
typedef struct psdb__association {
    psdb_session *session; /* NONE: the selected session, held for the object's lifetime */
    int fallback_implicit; /* CREATE_ONLY: later lookups use the device's implicit default */
} psdb__association;

/* device.c */
void psdb__device_ref(psdb_device *dev);
void psdb__device_unref(psdb_device *dev);
/* Validates a subobject (NULL: omitted) and selects (F1-F4). PSDB_E_INVALIDARG per F4 / E5. */
psdb_hr psdb__select(psdb_device *dev, const psdb_session_subobject *sub, psdb__selection *out);
void psdb__selection_release(psdb__selection *sel);
/* Checks a non-null session against the explicit-PSDB requirements (E5). */
int psdb__session_is_explicit_psdb(psdb_device *dev, const psdb_session *s);
/* Runs a planned creation: lookups in the selected PSDB, local cache, local compiles (F5-F7, J1),
 * and statistics (K1). Fills info. */
psdb_hr psdb__run_creation(psdb_device *dev, const psdb__selection *sel, const psdb__plan *plan,
                           int state_object, psdb_creation_info *info);
/* A source of compiled units besides the PSDB and the local cache (a pipeline library's blobs):
 * non-zero when it holds the unit's values, which are then neither compiled nor cached. */
typedef int (*psdb__unit_source_fn)(void *ctx, const uint8_t key[32]);
/* psdb__run_creation with a unit source consulted after a PSDB miss (G2: a library load still
 * selects and looks up like any creation). source may be NULL. */
psdb_hr psdb__run_creation_ex(psdb_device *dev, const psdb__selection *sel, const psdb__plan *plan,
                              int state_object, psdb__unit_source_fn source, void *source_ctx,
                              psdb_creation_info *info);
/* Records a creation description into the capture SODB when enabled. */
void psdb__capture(psdb_device *dev, uint32_t kind, const psdb__buf *encoded);
void psdb__message(psdb_device *dev, uint32_t severity, uint32_t id, const char *text);
/* Turns the selection into what the created object keeps, consuming the selection's reference. */
void psdb__associate(psdb__selection *sel, psdb__association *out);
void psdb__association_release(psdb__association *a);
/* One object-associated lookup (I3, I4). */
psdb_hr psdb__associated_find_value(psdb_device *dev, const psdb__association *a, const void *key,
                                    size_t key_size, uint32_t value_type, void *value,
                                    size_t *value_size);

/* The device's fixed properties (set at creation, never changed: safe from any thread). */
const psdb_adapter_desc *psdb__device_adapter(const psdb_device *dev);
const psdb_target *psdb__device_target(const psdb_device *dev);
const psdb__driver *psdb__device_driver(const psdb_device *dev);
uint32_t psdb__device_flags(const psdb_device *dev); /* PSDB_DEVICE_FLAG_* */
/* The next operation id of a creation (I2); thread-safe. */
uint64_t psdb__device_next_operation(psdb_device *dev);
/* The device's slot for the serialized-PSO store (X3), set once by compare-and-swap. */
_Atomic(psdb__device_ext *) *psdb__device_serialized_slot(psdb_device *dev);

#endif
