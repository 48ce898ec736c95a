/* psdb/session.h - PSDB sessions and application cache sessions (MODEL D): opening, lookups,
 * stores, references. Part of psdb/device.h (which includes it); may be included alone. */
#ifndef PSDB_SESSION_H
#define PSDB_SESSION_H

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
