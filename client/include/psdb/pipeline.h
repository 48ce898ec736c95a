/* psdb/pipeline.h - pipeline and state-object creation with their PSDB lookups, lookup events and
 * creation info (MODEL F, G, I). Part of psdb/device.h (which includes it); may be included alone.
 */
#ifndef PSDB_PIPELINE_H
#define PSDB_PIPELINE_H

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Creation (MODEL F, G, I) ------------------------------------------------------------------
 * Each creation selects one PSDB before its first lookup (F): a non-null per-object PSDB
 * subobject with its flags (F1), else the device-wide default with its flags (F2), else the
 * implicit default (F3), else none. The selection covers every lookup of the operation (F7): for
 * each compile unit (each shader stage or DXIL library, then the pipeline / state object), the
 * size then the data of its object code, then of its metadata; a unit whose object code misses
 * skips its metadata. A unit found entirely is used as is; any other unit is taken from the local
 * driver cache or compiled locally and stored there, never into the PSDB (J1); a miss never
 * searches another PSDB (F5). Every lookup calls the lookup callback. While PSDB lookups are
 * disabled (J2) the selection is still made and kept, but no lookup happens.
 * Statuses: PSDB_E_INVALIDARG for NULL arguments, a description the compiler refuses (see
 * compiler.h), a PSDB subobject with a NULL session and non-zero flags (F4), unknown flags, or a
 * session that is not an explicit PSDB of this device; PSDB_E_OUTOFMEMORY. A lookup error (e.g.
 * PSDB_E_CACHE_CORRUPT found in the file) is reported in the lookup event and counts as a miss;
 * the creation compiles locally and succeeds. With capture_sodb_path, each successful creation's
 * description is recorded (a recording failure is a warning message, not a failure).
 * The created object is the caller's; with NONE flags it holds the selected session (I3). All
 * creation functions are thread-safe and do not wait for one another. */
PSDB_API psdb_hr psdb_device_create_compute_pipeline(psdb_device *dev,
                                                     const psdb_compute_pipeline_desc *desc,
                                                     psdb_pipeline **out);
PSDB_API psdb_hr psdb_device_create_graphics_pipeline(psdb_device *dev,
                                                      const psdb_graphics_pipeline_desc *desc,
                                                      psdb_pipeline **out);
PSDB_API psdb_hr psdb_device_create_pipeline_state(psdb_device *dev,
                                                   const psdb_pipeline_stream_desc *desc,
                                                   psdb_pipeline **out);
PSDB_API psdb_hr psdb_device_create_state_object(psdb_device *dev,
                                                 const psdb_state_object_desc *desc,
                                                 psdb_state_object **out);
/* AddToStateObject (G3): the addition selects for itself (its PSDB subobject, else the device's
 * effective default at this call), never inheriting the base's selection; the base keeps its own.
 * The result references the base. PSDB_E_INVALIDARG also when base is NULL, of another device, a
 * collection, or of another type than addition->type. Existing collections referenced by a
 * description (G4) must belong to this device and keep their own PSDB association. */
PSDB_API psdb_hr psdb_device_add_to_state_object(psdb_device *dev,
                                                 const psdb_state_object_desc *addition,
                                                 psdb_state_object *base, psdb_state_object **out);
/* Reference counting of created objects (atomic). The last release drops the object's session
 * (I3) and the references it holds (base, collections). NULL is a no-op. */
PSDB_API void psdb_pipeline_addref(psdb_pipeline *p);
PSDB_API void psdb_pipeline_release(psdb_pipeline *p);
PSDB_API void psdb_state_object_release(psdb_state_object *so);

/* ---- Lookups, creation info (MODEL F5-F7, I3, I4) ----------------------------------------------
 */
#define PSDB_QUERY_SIZE 0u
#define PSDB_QUERY_DATA 1u

/* One event per PSDB lookup; no event when no PSDB is selected. */
typedef struct psdb_lookup_event {
    uint64_t
        operation_id; /* same id for every lookup of one creation or object-associated lookup */
    psdb_session *session; /* the PSDB searched (borrowed for the callback's duration) */
    uint32_t value_type;   /* PSDB_VALUE_* */
    uint32_t query;        /* PSDB_QUERY_SIZE or PSDB_QUERY_DATA */
    const void *key;
    size_t key_size;
    psdb_hr result; /* S_OK hit, PSDB_E_NOT_FOUND miss, or the error met */
} psdb_lookup_event;

/* Sets the function called for every PSDB lookup (NULL: none). It runs on the creating thread,
 * possibly on many threads at once, and must not block for long; it may call other device
 * functions, including the setter. A creation uses the callback set when it selected.
 * PSDB_E_INVALIDARG on NULL dev. Thread-safe. */
PSDB_API psdb_hr psdb_device_set_lookup_callback(psdb_device *dev,
                                                 void (*fn)(const psdb_lookup_event *ev, void *ctx),
                                                 void *ctx);

#define PSDB_SELECTION_NONE 0u
#define PSDB_SELECTION_PER_OBJECT 1u
#define PSDB_SELECTION_DEVICE_DEFAULT 2u
#define PSDB_SELECTION_IMPLICIT_DEFAULT 3u

typedef struct psdb_creation_info {
    uint64_t operation_id;
    uint32_t selection; /* PSDB_SELECTION_* */
    uint32_t flags;     /* the selection's PSDB_SESSION_FLAG_* */
    uint32_t lookups, hits;
    int psdb_hit; /* every required value found */
} psdb_creation_info;

/* What a creation selected and found: operation id (as in its lookup events), selection and
 * flags, number of lookups and of successful ones, and psdb_hit (a PSDB was searched and every
 * unit found; a partial hit is not a hit). PSDB_E_INVALIDARG on NULL. Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_get_creation_info(const psdb_pipeline *p, psdb_creation_info *out);
PSDB_API psdb_hr psdb_state_object_get_creation_info(const psdb_state_object *so,
                                                     psdb_creation_info *out);
/* An object-associated lookup made after creation (I3-I5): one lookup (size query when value is
 * NULL, else data query, as psdb_file_find_value) with its own operation id, in the session the
 * object kept (NONE), or in the device's implicit default for CREATE_ONLY objects (never the
 * current device-wide default). PSDB_E_NOT_FOUND without any event when there is nothing to search
 * (CREATE_ONLY without implicit default, or an object created with no PSDB);
 * PSDB_E_NOT_CURRENTLY_AVAILABLE without event while PSDB lookups are disabled (J2);
 * PSDB_E_INVALIDARG on NULL object, key or value_size, key_size 0 or an unknown value type; else
 * the reader's statuses (PSDB_E_NOT_FOUND, PSDB_E_MORE_DATA, PSDB_E_CACHE_CORRUPT). Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_find_value(psdb_pipeline *p, const void *key, size_t key_size,
                                          uint32_t value_type, void *value, size_t *value_size);
PSDB_API psdb_hr psdb_state_object_find_value(psdb_state_object *so, const void *key,
                                              size_t key_size, uint32_t value_type, void *value,
                                              size_t *value_size);

#ifdef __cplusplus
}
#endif
#endif
