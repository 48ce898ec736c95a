/* psdb/device.h - the device: features, PSDB sessions, the device-wide default, creation and
 * lookups, statistics, pipeline library, serialized / derived PSOs, the async queue. */
#ifndef PSDB_DEVICE_H
#define PSDB_DEVICE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Device (MODEL A) --------------------------------------------------------------------------
 */
#define PSDB_DEVICE_FLAG_TOOLS 0x1u /* a tools device: may serialize PSOs (MODEL X1) */

typedef struct psdb_device_desc {
    psdb_adapter_desc adapter;
    const psdb_app_identity *identity; /* NULL: none (explicit PSDBs unsupported) */
    const char *exe_path;              /* key of the implicit default; NULL: none */
    const char *registry_dir;          /* registry root; NULL: the default USER root */
    const char *capture_sodb_path;     /* record every creation description; NULL: off */
    uint32_t flags;                    /* PSDB_DEVICE_FLAG_* */
    /* Simulated local compile cost, nanoseconds per KiB of bytecode. 0: the reference compiler's
     * default (PSDB_COMPILE_NS_PER_KIB_DEFAULT); UINT64_MAX: no cost. */
    uint64_t compile_ns_per_kib;
    /* Directory of application-managed disk caches (psdb_device_create_cache_session). NULL:
     * $PSDB_CACHE_DIR, else $XDG_CACHE_HOME/psdb, else $HOME/.cache/psdb. */
    const char *cache_dir;
} psdb_device_desc;

/* Creates a device for one adapter (MODEL A1) with an optional application identity (A2). The
 * implicit default is resolved here, once (B7): the "default" component registered for exe_path
 * in registry_dir, its PSDB for the adapter's family, opened and checked for compatibility (A3).
 * When anything is missing, incompatible or corrupt the implicit default is absent (the device
 * still works; psdb_device_get_statistics reports default_psdb_registered = 0).
 * Statuses: PSDB_E_INVALIDARG when desc or out is NULL; unknown adapter or device flags; with ASD
 * (no PSDB_ADAPTER_FLAG_NO_ASD) a family NULL, empty or >= PSDB_ADAPTER_FAMILY_MAX bytes, abi_min
 * 0, abi_max UINT64_MAX or abi_min > abi_max; an identity without name or version or with an
 * engine version but no engine name; an empty exe_path; capture_sodb_path set without an identity
 * (the SODB records it). Opening the capture SODB may fail with its own status (PSDB_E_IO, ...).
 * Everything in desc is copied. *out is the caller's (psdb_device_release). */
PSDB_API psdb_hr psdb_device_create(const psdb_device_desc *desc, psdb_device **out);
/* Destroys the application's device: releases the device-wide default (MODEL I1). Sessions,
 * pipelines and state objects made from it stay valid until released (they keep what they need
 * of the device). NULL is a no-op. Do not call while other threads use the device. */
PSDB_API void psdb_device_release(psdb_device *dev);

typedef enum psdb_feature {
    PSDB_FEATURE_SHADER_CACHE,
    PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT,
    PSDB_FEATURE_EXPLICIT_PSDBS
} psdb_feature;

#define PSDB_SHADER_CACHE_SUPPORT_SINGLE_PSO 0x1u
#define PSDB_SHADER_CACHE_SUPPORT_LIBRARY 0x2u
#define PSDB_SHADER_CACHE_SUPPORT_AUTOMATIC_INPROC_CACHE 0x4u
#define PSDB_SHADER_CACHE_SUPPORT_AUTOMATIC_DISK_CACHE 0x8u

typedef struct psdb_feature_data_shader_cache {
    uint32_t support_flags;
} psdb_feature_data_shader_cache;

typedef struct psdb_feature_data_shader_cache_abi_support {
    char adapter_family[PSDB_ADAPTER_FAMILY_MAX];
    uint64_t minimum_abi_supported_version, maximum_abi_supported_version;
    uint64_t compiler_version, application_profile_version;
} psdb_feature_data_shader_cache_abi_support;

typedef struct psdb_feature_data_explicit_psdbs {
    int supported;
} psdb_feature_data_explicit_psdbs;

/* Feature queries (MODEL A4). data points to the feature's struct and size is its sizeof:
 *   SHADER_CACHE            support flags: SINGLE_PSO always, AUTOMATIC_INPROC_CACHE (the local
 *                           driver cache), LIBRARY unless the adapter has
 * PSDB_ADAPTER_FLAG_NO_LIBRARY; SHADER_CACHE_ABI_SUPPORT the adapter's family, ABI range, compiler
 * and profile versions; PSDB_E_FAIL when the driver has no ASD support; EXPLICIT_PSDBS supported =
 * ASD support and an identity given at creation. PSDB_E_INVALIDARG on NULL dev or data, a wrong
 * size or an unknown feature. Thread-safe. */
PSDB_API psdb_hr psdb_device_check_feature_support(psdb_device *dev, psdb_feature f, void *data,
                                                   size_t size);

/* ---- Sessions (MODEL D) ------------------------------------------------------------------------
 */
typedef struct psdb_session_desc {
    const char *psdb_path; /* exactly one of psdb_path and component */
    const char *component; /* registered component of the device's exe path */
} psdb_session_desc;

/* Opens a PSDB session (MODEL D1) from a PSDB file or from a component registered for the device's
 * exe path (resolved for the device's adapter family in the device's registry). The PSDB is
 * validated for this adapter (A3, C2). The session belongs to this device (D3) and can be a
 * per-object explicit PSDB or the device-wide default.
 * Statuses: PSDB_E_INVALIDARG (NULL dev, desc or out; both or neither of psdb_path and component;
 * an empty string); PSDB_E_UNSUPPORTED when the device has no ASD support; PSDB_E_NOT_FOUND when
 * the file does not exist, or the component is not registered for this exe path and family (or
 * the device has no exe path); PSDB_E_CACHE_CORRUPT, PSDB_E_ADAPTER_NOT_FOUND,
 * PSDB_E_DRIVER_VERSION_MISMATCH, PSDB_E_IO from opening the PSDB. *out is the caller's
 * (psdb_session_release). Thread-safe. */
PSDB_API psdb_hr psdb_device_open_session(psdb_device *dev, const psdb_session_desc *desc,
                                          psdb_session **out);

#define PSDB_CACHE_MODE_MEMORY 0u
#define PSDB_CACHE_MODE_DISK 1u
#define PSDB_CACHE_FLAG_NONE 0x0u
#define PSDB_CACHE_FLAG_DRIVER_VERSIONED 0x1u /* one store per adapter family and driver build */
#define PSDB_CACHE_FLAG_USE_WORKING_DIR 0x2u  /* disk store in the current directory */
typedef struct psdb_cache_session_desc {
    uint8_t identifier[16];
    uint32_t mode; /* PSDB_CACHE_MODE_* */
    uint32_t flags;
    uint32_t max_in_memory_size_bytes, max_in_memory_entries, max_value_file_size_bytes;
    uint64_t version;
} psdb_cache_session_desc;

/* Creates an application-managed shader cache session (MODEL D2; not a PSDB session: it cannot be
 * an explicit PSDB). Sessions of one device with the same identifier share one store when mode,
 * flags and version match; otherwise, while the store is open, PSDB_E_ALREADY_EXISTS. A memory
 * store lives while one of its sessions does. A disk store is the file <dir>/<identifier>.cache
 * (dir: desc cache_dir, see psdb_device_desc; USE_WORKING_DIR: the current directory;
 * DRIVER_VERSIONED: one file per family and driver build); opening it with another version clears
 * it. Limits (0: default): memory stores max_in_memory_entries (128) and
 * max_in_memory_size_bytes (1 MiB, keys + values); disk stores max_value_file_size_bytes
 * (128 MiB). Sharing and version checks are per device (two devices or processes opening one disk
 * store with different versions are not detected).
 * Statuses: PSDB_E_INVALIDARG (NULL, unknown mode or flags, flags with MEMORY mode);
 * PSDB_E_ALREADY_EXISTS; PSDB_E_ACCESS / PSDB_E_IO / PSDB_E_CACHE_CORRUPT for the disk file;
 * PSDB_E_OUTOFMEMORY. *out is the caller's. Thread-safe. */
PSDB_API psdb_hr psdb_device_create_cache_session(psdb_device *dev,
                                                  const psdb_cache_session_desc *desc,
                                                  psdb_session **out);
/* FindValue: with value NULL, *value_size receives the value's size; with a buffer, *value_size
 * in is its capacity (PSDB_E_MORE_DATA with the needed size when short), out the bytes copied.
 * Cache sessions: PSDB_E_NOT_FOUND, PSDB_E_CACHE_HASH_COLLISION (another key with the same hash
 * is stored), PSDB_E_NOT_CURRENTLY_AVAILABLE (application caches disabled, J2). PSDB sessions look
 * up the key's object code (PSDB_VALUE_OBJECT_CODE) with the PSDB reader's statuses; these
 * lookups are the application's own and produce no lookup event. PSDB_E_INVALIDARG on NULL s, key
 * or value_size, or key_size 0. Thread-safe. */
PSDB_API psdb_hr psdb_session_find_value(psdb_session *s, const void *key, size_t key_size,
                                         void *value, size_t *value_size);
/* StoreValue (cache sessions): PSDB_E_ALREADY_EXISTS for a stored key, PSDB_E_CACHE_HASH_COLLISION,
 * PSDB_E_CACHE_FULL past the limits, PSDB_E_NOT_CURRENTLY_AVAILABLE when disabled; bytes are
 * copied. PSDB sessions are read-only: PSDB_E_ACCESS (local compiles never go into a PSDB, J1).
 * PSDB_E_INVALIDARG on NULL s or key, key_size 0, or value NULL with value_size > 0. Thread-safe.
 */
PSDB_API psdb_hr psdb_session_store_value(psdb_session *s, const void *key, size_t key_size,
                                          const void *value, size_t value_size);
/* Reference counting (atomic; thread-safe). The last release destroys the session: its PSDB file
 * is closed, then its destroy callbacks run, on the releasing thread, in registration order. The
 * device, pipelines and in-flight creations hold their own references (MODEL I). NULL is a no-op.
 */
PSDB_API void psdb_session_addref(psdb_session *s);
PSDB_API void psdb_session_release(psdb_session *s);
/* Registers fn(ctx) to run when the session is destroyed (any number of callbacks). A callback
 * must not use the session. PSDB_E_INVALIDARG on NULL s or fn; PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_session_on_destroy(psdb_session *s, void (*fn)(void *ctx), void *ctx);

/* ---- The device-wide default (MODEL E, H) ------------------------------------------------------
 */
/* SetDefaultPrecompiledShaderCacheSession (seed 000; MODEL E, H, I). Sets (session non-NULL) or
 * clears (NULL) the device-wide explicit default and its flags (PSDB_SESSION_FLAG_NONE: objects
 * created with it keep the session for their lifetime; CREATE_ONLY: only during creation).
 * Returns S_OK on success; the device then holds its own reference (E7) until the default is
 * replaced, cleared or the device destroyed (I1), and the caller may release its reference.
 * PSDB_E_INVALIDARG (E3-E5): NULL dev; flags other than NONE / CREATE_ONLY; NULL session with
 * non-zero flags; a session that is not an explicit PSDB of this device (a cache session, the
 * implicit default, another device's session), or any session when the device does not support
 * explicit PSDBs (no ASD or no identity, A4). Clearing is allowed on every device. On failure the
 * previous session and flags are unchanged (E6).
 * Thread safety (H1-H5): may be called concurrently with creations and other setters. Each call
 * changes (session, flags) at once; a concurrent creation selects the pair from before or after,
 * never a mix; non-overlapping calls take effect in call order; a creation begun after a call
 * returned sees it. The call never waits for creations using the previous default; the previous
 * session is released from this call (its destroy callbacks may run here) only if nothing else
 * holds it (I6). */
PSDB_API psdb_hr psdb_device_set_default_session(psdb_device *dev, psdb_session *session,
                                                 uint32_t flags);

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

/* ---- ShaderCacheControl (MODEL J2) -------------------------------------------------------------
 */
#define PSDB_CACHE_KIND_IMPLICIT 0x1u    /* the local driver cache */
#define PSDB_CACHE_KIND_APPLICATION 0x2u /* application-managed cache sessions */
#define PSDB_CACHE_KIND_PRECOMPILED 0x4u /* PSDB lookups */
#define PSDB_CACHE_CONTROL_DISABLE 0x1u
#define PSDB_CACHE_CONTROL_ENABLE 0x2u
#define PSDB_CACHE_CONTROL_CLEAR 0x4u
/* ShaderCacheControl (J2). kinds: any of IMPLICIT (the local driver cache), APPLICATION (cache
 * sessions) and PRECOMPILED (PSDB lookups). control: DISABLE or ENABLE (not both), optionally with
 * CLEAR, or CLEAR alone. Disabling PSDB lookups keeps the device default and every selection;
 * creations still select but do not look up. CLEAR empties the local cache or the application
 * caches; PSDBs are read-only and are left as they are. PSDB_E_INVALIDARG on NULL dev, no or
 * unknown kinds, no or unknown control bits, DISABLE with ENABLE. Thread-safe. */
PSDB_API psdb_hr psdb_device_shader_cache_control(psdb_device *dev, uint32_t kinds,
                                                  uint32_t control);

/* ---- Statistics (MODEL K1) ---------------------------------------------------------------------
 */
typedef struct psdb_creation_statistics {
    uint32_t num_created, num_psdb_cache_missed, num_total_cache_missed, num_cache_unknown;
} psdb_creation_statistics;

typedef struct psdb_statistics {
    int default_psdb_registered;
    psdb_creation_statistics pipeline_states, state_objects;
} psdb_statistics;

/* Statistics (K1), per category (pipelines; state objects): created; PSDB-missed (not a full
 * PSDB hit, including partial hits, no selection and disabled lookups); total-missed (some unit
 * had to be compiled: neither the PSDB nor the local cache had it); unknown (the driver has no
 * ASD: counted there instead of the two misses). default_psdb_registered: the implicit default
 * is present (registered, ASD, compatible). Counters are atomic one by one, not as a group.
 * PSDB_E_INVALIDARG on NULL. Thread-safe. */
PSDB_API psdb_hr psdb_device_get_statistics(psdb_device *dev, psdb_statistics *out);
/* Number of compile units this device compiled locally so far (0 for NULL). Thread-safe. */
PSDB_API uint32_t psdb_device_get_local_compile_count(psdb_device *dev);

#define PSDB_MESSAGE_SEVERITY_ERROR 1u
#define PSDB_MESSAGE_SEVERITY_WARNING 2u
#define PSDB_MESSAGE_SEVERITY_INFO 3u
/* Sets the function receiving the device's messages (warnings such as a failed capture write).
 * Called under a device lock: it must not call psdb_device_set_message_callback. PSDB_E_INVALIDARG
 * on NULL dev. Thread-safe. */
PSDB_API psdb_hr psdb_device_set_message_callback(psdb_device *dev,
                                                  void (*fn)(uint32_t severity, uint32_t id,
                                                             const char *text, void *ctx),
                                                  void *ctx);

/* ---- Pipeline library (MODEL L, G2) ------------------------------------------------------------
 * A library holds named PSOs; PSOs with identical sub-components (compile units: shader stages,
 * pipeline state) share them, in memory and in the serialized blob (L8). The blob format is
 * schema/PIPELINE_LIBRARY.md.
 * Thread safety (L9): every function may be called from several threads on one library; the
 * library synchronizes internally. The seed asks callers to synchronize loads of the SAME name;
 * this implementation tolerates them (both callers get one and the same PSO). */

/* Message ids of the validation messages of this section (psdb_device_set_message_callback). */
#define PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH 0x0201u /* V4 */
#define PSDB_MESSAGE_ID_SERIALIZE_DESERIALIZED 0x0202u  /* X5 */

/* CreatePipelineLibrary. size 0: an empty library (blob may be NULL). Otherwise the blob is
 * validated, parsed, and its pointer kept: it is NOT copied and must outlive the library (L2).
 * out NULL: validate only, PSDB_S_FALSE when the library would have been created (L4).
 * Validation order (L3): size < 96 bytes or wrong magic -> PSDB_E_INVALIDARG (unrecognized);
 * another format version -> PSDB_E_DRIVER_VERSION_MISMATCH (an older or newer runtime); wrong
 * header size or total size -> PSDB_E_INVALIDARG; vendor or device id not this adapter's ->
 * PSDB_E_ADAPTER_NOT_FOUND; driver build, ABI version or compiler version not this driver's ->
 * PSDB_E_DRIVER_VERSION_MISMATCH; anything else wrong (checksums, reserved bytes, a table past the
 * end, offsets out of range, duplicate names or units, unknown kinds) -> PSDB_E_INVALIDARG.
 * Other statuses: PSDB_E_INVALIDARG for NULL dev or a NULL blob with size > 0; PSDB_E_UNSUPPORTED
 * when the adapter has no library support (PSDB_ADAPTER_FLAG_NO_LIBRARY, L1; checked first);
 * PSDB_E_OUTOFMEMORY. *out is the caller's (psdb_pipeline_library_release). Thread-safe. */
PSDB_API psdb_hr psdb_device_create_pipeline_library(psdb_device *dev, const void *blob,
                                                     size_t size, psdb_pipeline_library **out);
/* StorePipeline (L5): adds p under name (a non-empty UTF-8 string, copied). The library keeps a
 * reference to p: a later load of that name returns p itself, with its original selection (G2).
 * Compute and graphics PSOs made by creation, by a load or by derivation can be stored.
 * PSDB_E_INVALIDARG: NULL or empty name, NULL lib or p, a PSO of another device, a name already
 * present (no overwrite), a deserialized PSO or one derived from it (its description is only the
 * compact form, without bytecode). PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_library_store_pipeline(psdb_pipeline_library *lib, const char *name,
                                                      psdb_pipeline *p);
/* GetSerializedSize: the bytes psdb_pipeline_library_serialize writes now (0 for NULL). A store
 * made between this call and serialize may make the buffer too small. Thread-safe. */
PSDB_API size_t psdb_pipeline_library_get_serialized_size(psdb_pipeline_library *lib);
/* Serialize (L6): writes the whole library as one contiguous blob of GetSerializedSize bytes at
 * data (bytes past it are untouched). data may be the blob the library was created from.
 * PSDB_E_INVALIDARG: NULL lib or data, size smaller than the serialized size;
 * PSDB_E_OUTOFMEMORY. The blob is valid for devices with the same vendor and device ids, driver
 * build, ABI and compiler versions. Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_library_serialize(psdb_pipeline_library *lib, void *data,
                                                 size_t size);
/* LoadComputePipeline / LoadGraphicsPipeline / LoadPipeline (L7, G2): the PSO stored under name,
 * whose description must match desc (the same encoded description: every byte of bytecode and
 * state; the PSDB subobject is not part of it). When the entry already has a PSO (stored, or
 * created by an earlier load) that same object is returned with a new reference, keeping its
 * original PSDB selection. Otherwise the load is a creation (G2): it selects a PSDB from desc's
 * subobject like psdb_device_create_*_pipeline (F1-F4) and looks every unit up in it; units the
 * PSDB does not hold come from the library's blobs, not from a local compile. That PSO stays in
 * the library for later loads.
 * PSDB_E_INVALIDARG: NULL arguments, an unknown name, a PSO of the other kind, a description that
 * does not match or that the compiler refuses, a PSDB subobject refused by selection (F4, E5);
 * PSDB_E_OUTOFMEMORY. *out is the caller's. Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_library_load_compute_pipeline(psdb_pipeline_library *lib,
                                                             const char *name,
                                                             const psdb_compute_pipeline_desc *desc,
                                                             psdb_pipeline **out);
PSDB_API psdb_hr psdb_pipeline_library_load_graphics_pipeline(
    psdb_pipeline_library *lib, const char *name, const psdb_graphics_pipeline_desc *desc,
    psdb_pipeline **out);
PSDB_API psdb_hr psdb_pipeline_library_load_pipeline(psdb_pipeline_library *lib, const char *name,
                                                     const psdb_pipeline_stream_desc *desc,
                                                     psdb_pipeline **out);
/* Releases the library and its references to PSOs (PSOs handed out stay valid). The blob it was
 * created from may be freed afterwards. NULL is a no-op. Not concurrently with other calls on lib.
 */
PSDB_API void psdb_pipeline_library_release(psdb_pipeline_library *lib);

/* ---- Serialized PSOs (MODEL X) -----------------------------------------------------------------
 * Format: schema/SERIALIZED_PSO.md. */
typedef struct psdb_serialized_shader {
    const void *gpu_instructions; /* the stage's compiled code */
    size_t gpu_instructions_size;
    const void *metadata; /* structure version, unit key, compiler metadata, PIX shader info */
    size_t metadata_size;
} psdb_serialized_shader;

/* Blobs are owned by the tools device that serialized them (deduplicated across all its
 * serialized PSOs, X3: identical bytes are one blob at one address) and stay valid until the
 * device is released. Absent stages are {NULL, 0, NULL, 0}. */
typedef struct psdb_serialized_graphics_pipeline {
    const void *packet; /* the compiled pipeline state */
    size_t packet_size;
    const void *metadata; /* CRC32, version, validation data, compact creation arguments, input
                           * layout, stream output */
    size_t metadata_size;
    psdb_serialized_shader vs, ps, ds, hs, gs;
} psdb_serialized_graphics_pipeline;

typedef struct psdb_deserialize_graphics_pipeline_desc {
    const void *root_signature; /* must be the serialized PSO's root signature */
    size_t root_signature_size;
    const void *packet;
    size_t packet_size;
    const void *metadata;
    size_t metadata_size;
    psdb_serialized_shader vs, ps, ds, hs, gs;
} psdb_deserialize_graphics_pipeline_desc;

#define PSDB_SERIALIZE_FLAG_NONE 0x0u

/* SerializeGraphicsPipelineStateX (X1-X3): fills *out with blobs owned by dev. Only a tools device
 * (PSDB_DEVICE_FLAG_TOOLS) serializes: a retail device returns PSDB_E_UNSUPPORTED (X1). A PSO that
 * was deserialized (or derived from one) lost what serialization needs: PSDB_E_INVALIDARG and an
 * error message PSDB_MESSAGE_ID_SERIALIZE_DESERIALIZED through the message callback (X5).
 * PSDB_E_INVALIDARG also for NULL arguments, flags other than NONE, a compute PSO or a PSO of
 * another device; PSDB_E_OUTOFMEMORY. On failure *out is zeroed. Thread-safe. */
PSDB_API psdb_hr psdb_device_serialize_graphics_pipeline(psdb_device *dev, psdb_pipeline *p,
                                                         uint32_t flags,
                                                         psdb_serialized_graphics_pipeline *out);
/* DeserializeGraphicsPipelineStateX (X4): checks the metadata in this order: too short or wrong
 * magic -> PSDB_E_INVALIDARG; another structure version -> PSDB_E_DRIVER_VERSION_MISMATCH; vendor
 * or device id not this adapter's -> PSDB_E_ADAPTER_NOT_FOUND; driver build, ABI or compiler
 * version not this driver's -> PSDB_E_DRIVER_VERSION_MISMATCH; CRC32 mismatch over the packet,
 * metadata and stage blobs, malformed content, a root signature other than the serialized one, a
 * stage present in one and absent in the other, a stage blob that is not the serialized one ->
 * PSDB_E_INVALIDARG. Any device (retail or tools) deserializes. The PSO is working: it can be
 * derived from and reports creation info (selection NONE: deserialization compiles nothing and
 * looks nothing up). The caller's blobs are not referenced after the call.
 * PSDB_E_INVALIDARG also for NULL arguments; PSDB_E_OUTOFMEMORY. *out is the caller's.
 * Thread-safe. */
PSDB_API psdb_hr psdb_device_deserialize_graphics_pipeline(
    psdb_device *dev, const psdb_deserialize_graphics_pipeline_desc *desc, psdb_pipeline **out);

/* ---- Derived PSOs (MODEL V) --------------------------------------------------------------------
 */
#define PSDB_DERIVED_STATE_DEPTH_STENCIL 0u
#define PSDB_DERIVED_STATE_RASTERIZER 1u
#define PSDB_DERIVED_STATE_BLEND 2u
#define PSDB_DERIVED_STATE_SAMPLE_MASK 3u
#define PSDB_DERIVED_STATE_SHADER_LIMITS 4u

typedef struct psdb_derived_graphics_state_desc {
    uint32_t type; /* PSDB_DERIVED_STATE_*; the member named by type is used */
    psdb_depth_stencil_desc depth_stencil;
    psdb_rasterizer_desc rasterizer;
    psdb_blend_desc blend;
    uint32_t sample_mask;
    psdb_shader_limits shader_limits;
} psdb_derived_graphics_state_desc;

/* CreateDerivedGraphicsPipelineStateX (V1-V4): a PSO equal to base except for the states in
 * descs (depth-stencil, rasterizer, blend, sample mask, shader limits; each at most once; count 0
 * gives a copy). Input layout, render-target formats, stream output, shaders and every other
 * field are the base's (V1). Nothing is compiled and no PSDB is looked up (V2): the derived PSO
 * shares the base's compiled code, keeps a reference to base, uses the base's association for
 * object-associated lookups and reports selection NONE with no lookups. The derivation is not
 * counted in psdb_device_get_statistics. If an export the derived state needs (V3) differs from
 * the base's on any render target, it fails with PSDB_E_INVALIDARG and an error message
 * PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH naming the target (V4). base may be deserialized or
 * derived itself. PSDB_E_INVALIDARG also for NULL dev, base or out, descs NULL with count > 0, an
 * unknown or repeated type, a compute base or a base of another device; PSDB_E_OUTOFMEMORY.
 * *out is the caller's. Thread-safe. */
PSDB_API psdb_hr psdb_device_create_derived_graphics_pipeline(
    psdb_device *dev, psdb_pipeline *base, uint32_t count,
    const psdb_derived_graphics_state_desc *descs, psdb_pipeline **out);

/* ---- Base sets: derivation records (seed 003, "serialized + derived together") -------------
 * `psdb baseset` packages an SODB as a pipeline library of base PSOs plus derivation records
 * (schema/PIPELINE_LIBRARY.md). A game loads each base from the library (its name is the lowercase
 * hex of its SODB object key; its description is the captured one) and derives the other PSOs:
 * psdb_device_create_derived_graphics_pipeline(dev, base, d.count, d.descs, &pso). */
typedef struct psdb_derivation {
    uint8_t key[32];      /* the derived PSO's SODB object key */
    uint8_t base_key[32]; /* its base's SODB object key */
    uint32_t count;       /* states in descs, in PSDB_DERIVED_STATE_* order */
    psdb_derived_graphics_state_desc descs[5];
} psdb_derivation;

/* Validates a derivation-records blob completely (CRC-32, bounds, base indexes, reserved bytes)
 * and gives its number of records. PSDB_E_INVALIDARG: NULL data or count, too short, wrong magic,
 * corrupt; PSDB_E_DRIVER_VERSION_MISMATCH: another records version. Thread-safe. */
PSDB_API psdb_hr psdb_derivation_records_validate(const void *data, size_t size, uint32_t *count);
/* Reads the record at *cursor (0: the first) into *out and advances *cursor: PSDB_S_OK, or
 * PSDB_S_FALSE after the last record (out untouched). Bounds are checked on every call, the CRC-32
 * only by psdb_derivation_records_validate (call it once first). PSDB_E_INVALIDARG: NULL
 * arguments, a malformed header or record, a cursor that is not a record boundary;
 * PSDB_E_DRIVER_VERSION_MISMATCH: another records version. Thread-safe. */
PSDB_API psdb_hr psdb_derivation_records_next(const void *data, size_t size, size_t *cursor,
                                              psdb_derivation *out);

/* ---- Async creation queue and counters (MODEL Q) -----------------------------------------------
 * A queue creates pipelines on its own worker threads, the way launchers and games create PSOs off
 * the main thread. Everything submitted to it is a packet: a creation (graphics or compute), a
 * counter read or a counter write. Packets reach their TOP strictly in submission order: a
 * creation's TOP is the moment a worker starts it, and a read or write reaches TOP as soon as every
 * earlier creation has started (it needs no free worker). A creation's EOS is when it finishes:
 * creations run in parallel on the workers, so they end in any order (Q1).
 *
 * Each creation is made with psdb_device_create_compute_pipeline / _graphics_pipeline by a worker
 * right after its TOP, so it selects its PSDB when it starts executing, not when it is submitted
 * (MODEL F): a psdb_device_set_default_session() that returned before the creation's TOP is seen
 * even if it was made after the submission (H4); one overlapping the TOP is seen entirely or not
 * at all (H2). The selection is made once and covers the whole creation (F7).
 *
 * The queue keeps its own counters, a psdb_statistics. They start at zero, with
 * default_psdb_registered copied from the device. Each successful creation updates them at its
 * EOS, as the device counts its own creations (K1), in pipeline_states: created; PSDB-missed when
 * it was not a full PSDB hit (no selection, lookups disabled and partial hits included); total-
 * missed when some unit had to be compiled locally (neither the PSDB nor the local driver cache
 * had it); unknown instead of the two misses when the driver has no ASD.
 * A failed creation is not counted. The counters change as a group, under the queue's lock, just
 * before the creation's callback is called; the creation has ended when its callback returns. The
 * device's own statistics count the same creations as well (psdb_device_get_statistics).
 *
 * Thread safety: a queue may be shared by threads; every function except psdb_queue_release may
 * be called concurrently. Completion callbacks run on worker threads, possibly several at once.
 * A callback may submit creations and writes to its queue, and use any other queue or the device;
 * it must not wait for its own queue: psdb_queue_read_statistics and psdb_queue_wait_idle return
 * PSDB_E_INVALIDARG when called from one of the queue's callbacks, and it must not release it. */
#define PSDB_COUNTER_DEFAULT 0x0u
#define PSDB_COUNTER_READ_AT_EOS 0x1u
#define PSDB_COUNTER_READ_AT_TOP 0x2u
#define PSDB_COUNTER_WRITE_COPY_DATA 0x4u
#define PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER 0x8u
#define PSDB_COUNTER_COMPUTE 0x10u

/* Creates a queue with num_workers worker threads (1..64) on dev. The queue holds its own
 * reference to the device: the device may be released first, the queue keeps working until it is
 * released. Statuses: PSDB_E_INVALIDARG on NULL dev or out, num_workers 0 or above 64;
 * PSDB_E_OUTOFMEMORY (also when a thread cannot be started). *out is the caller's
 * (psdb_queue_release). Thread-safe. */
PSDB_API psdb_hr psdb_device_create_queue(psdb_device *dev, uint32_t num_workers, psdb_queue **out);
/* Submits a creation (graphics, or compute for the _compute_ function) and returns at once.
 * The description is copied in depth at the call: the caller may free or reuse it, and
 * everything it points to, as soon as the call returns. Its PSDB subobject, if any, is copied
 * too and its session gets a reference held until the creation ends (MODEL I2), so the caller may
 * release its own session at once.
 * done(hr, p, ctx) is called exactly once for every submission that returned S_OK, on a worker
 * thread at the creation's EOS, with the status of the device's creation function and, on
 * success, the pipeline: it becomes the callback's (psdb_pipeline_release); on failure p is
 * NULL. A failing creation (an invalid description, F4, a foreign session) never stops the
 * others. Statuses: PSDB_E_INVALIDARG on NULL q, desc or done, or a description that cannot be
 * copied (a NULL pointer with a non-zero size or count; the callback is not called);
 * PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_queue_create_compute_pipeline(
    psdb_queue *q, const psdb_compute_pipeline_desc *desc,
    void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx), void *ctx);
PSDB_API psdb_hr psdb_queue_create_graphics_pipeline(
    psdb_queue *q, const psdb_graphics_pipeline_desc *desc,
    void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx), void *ctx);
/* Reads the queue's counters into *out (Q2). The call is synchronous: it submits a read packet
 * and blocks until the packet has been processed, then returns the snapshot.
 *   READ_AT_EOS (or DEFAULT): at its TOP the read waits for the end (the callback returned) of
 *     every earlier creation of its class - graphics, or compute with PSDB_COUNTER_COMPUTE - and
 *     takes the snapshot at the moment the last of them ends. It holds every earlier creation of
 *     the class in full, plus whatever else had ended by then; it never waits for creations of the
 *     other class nor for later ones, and later packets are not held back behind it.
 *   READ_AT_TOP: the snapshot is taken at the read's TOP (once every earlier creation has
 *     started) without waiting for any creation to end: creations still in flight are missing
 *     from it.
 * Statuses: PSDB_E_INVALIDARG on NULL q or out, unknown flags, write flags, READ_AT_EOS together
 * with READ_AT_TOP, or a call from a completion callback of q. Thread-safe. */
PSDB_API psdb_hr psdb_queue_read_statistics(psdb_queue *q, uint32_t flags, psdb_statistics *out);
/* Replaces the queue's counters with *values (every field, default_psdb_registered included) at
 * the write's TOP, in queue order (Q3). The call returns at once; the write happens when every
 * earlier creation has started (at once when they all have). Creations in flight at that moment
 * count on top of the written values when they end.
 *   WRITE_COPY_DATA (or DEFAULT): *values is copied at the call; the caller may reuse it at once.
 *   WRITE_USE_DATA_BY_POINTER: values is read when the write executes; the caller keeps it valid
 *     until a psdb_queue_read_statistics or psdb_queue_wait_idle call made after this one has
 *     returned (or psdb_queue_release), which proves the write has executed; changes made before
 *     then may or may not be seen.
 * PSDB_COUNTER_COMPUTE is accepted and has no effect: TOP is common to both classes.
 * Statuses: PSDB_E_INVALIDARG on NULL q or values, unknown flags, read flags, both write flags;
 * PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_queue_write_statistics(psdb_queue *q, uint32_t flags,
                                             const psdb_statistics *values);
/* Blocks until every packet submitted before the call has been processed and every creation among
 * them has ended (its callback returned). Packets submitted meanwhile by other threads are not
 * waited for. PSDB_E_INVALIDARG on NULL q or a call from a completion callback of q. Thread-safe.
 */
PSDB_API psdb_hr psdb_queue_wait_idle(psdb_queue *q);
/* Drains the queue (every submitted packet is processed and every callback called, including
 * creations submitted by callbacks meanwhile), stops its workers and frees it, dropping its device
 * reference. NULL is a no-op. Must not run concurrently with other calls on q nor from one of its
 * callbacks. */
PSDB_API void psdb_queue_release(psdb_queue *q);

#ifdef __cplusplus
}
#endif
#endif
