/* psdb/file.h - PSDB and SODB files: open, validate, look up, write (formats in schema/). */
#ifndef PSDB_FILE_H
#define PSDB_FILE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct psdb_file psdb_file;
typedef struct psdb_writer psdb_writer;
typedef struct psdb_sodb psdb_sodb;
typedef struct psdb_sodb_writer psdb_sodb_writer;

/* ---- Reading a PSDB (MODEL C1-C3) -------------------------------------------------------------- */

/* Everything a PSDB records about itself. Strings are borrowed from the psdb_file and live until
 * psdb_file_release(). */
typedef struct psdb_file_info {
    psdb_app_identity identity;
    psdb_target target;
    uint64_t num_values;  /* (key, type) pairs */
    uint64_t num_groups;
    uint64_t num_blobs;   /* distinct blobs after deduplication */
    uint64_t blob_bytes;  /* bytes of distinct blobs */
    uint8_t content_digest[32]; /* SHA-256 over the logical content (schema/PSDB.md), MODEL C4 */
} psdb_file_info;

/* Opens a PSDB read-only (no locks taken, no journal written) and validates it (MODEL C2).
 * `adapter` NULL: no compatibility check (tools, the server). Otherwise checked in this order:
 *   PSDB_E_CACHE_CORRUPT          not a SQLite file, not a PSDB, unknown schema version, truncated,
 *                                 missing table or malformed header row;
 *   PSDB_E_ADAPTER_NOT_FOUND      adapter family differs;
 *   PSDB_E_DRIVER_VERSION_MISMATCH ABI outside [abi_min, abi_max] or top 32 bits of the
 *                                 application profile version differ;
 *   PSDB_E_INVALIDARG             path or out NULL;   PSDB_E_IO  the file cannot be opened;
 *   PSDB_E_OUTOFMEMORY.
 * On success *out is the caller's, released with psdb_file_release(). A psdb_file may be used from
 * many threads at once: lookups from different threads do not wait for one another. */
PSDB_API psdb_hr psdb_file_open(const char *path, const psdb_adapter_desc *adapter, psdb_file **out);
PSDB_API void psdb_file_release(psdb_file *f);

/* Fills *out (never fails on an open file; PSDB_E_INVALIDARG on NULL). */
PSDB_API psdb_hr psdb_file_get_info(psdb_file *f, psdb_file_info *out);

/* Looks up one value type of one key (MODEL C3). With value NULL, *value_size receives the size
 * (S_OK). With a buffer, *value_size in is its capacity: too small -> PSDB_E_MORE_DATA with the
 * needed size written back; else the bytes are copied and *value_size set. Absent ->
 * PSDB_E_NOT_FOUND. A blob whose stored digest does not match its bytes -> PSDB_E_CACHE_CORRUPT.
 * Thread-safe. */
PSDB_API psdb_hr psdb_file_find_value(psdb_file *f, const void *key, size_t key_size,
                                      uint32_t value_type, void *value, size_t *value_size);

/* Visits every group in key order: fn(group_key, key_size, version, num_values, ctx). A non-zero
 * return from fn stops the walk (S_FALSE). */
PSDB_API psdb_hr psdb_file_foreach_group(psdb_file *f,
                                         int (*fn)(const void *key, size_t key_size,
                                                   uint64_t version, uint32_t num_values,
                                                   void *ctx),
                                         void *ctx);

/* Deep check: SQLite integrity, every blob's digest, every group's references, and the content
 * digest recomputed. S_OK or PSDB_E_CACHE_CORRUPT with a one-line reason in msg (may be NULL). */
PSDB_API psdb_hr psdb_file_verify(psdb_file *f, char *msg, size_t msg_size);

/* ---- Writing a PSDB ---------------------------------------------------------------------------- */

/* Starts a new PSDB at `path` (written to path + ".tmp", renamed by psdb_writer_finish, so a crash
 * never leaves a half-written PSDB under `path`). identity and target are copied.
 * PSDB_E_INVALIDARG (NULL, empty family, family too long, reserved ABI 0 / UINT64_MAX),
 * PSDB_E_IO, PSDB_E_OUTOFMEMORY. */
PSDB_API psdb_hr psdb_writer_create(const char *path, const psdb_app_identity *identity,
                                    const psdb_target *target, psdb_writer **out);

/* Adds one value. The same (key, type) with identical bytes again -> S_FALSE; with other bytes ->
 * PSDB_E_CACHE_HASH_COLLISION. Identical blobs under different keys are stored once. */
PSDB_API psdb_hr psdb_writer_put_value(psdb_writer *w, const void *key, size_t key_size,
                                       uint32_t value_type, const void *value, size_t value_size);

/* One value key of a group. */
typedef struct psdb_value_ref {
    const void *key;
    size_t key_size;
} psdb_value_ref;

/* Adds a group (one compiled object): group key + version -> value keys. The values must have
 * been put before. Same key + version again -> PSDB_E_ALREADY_EXISTS. */
PSDB_API psdb_hr psdb_writer_put_group(psdb_writer *w, const void *group_key, size_t key_size,
                                       uint64_t version, uint32_t num_values,
                                       const psdb_value_ref *values);

/* Writes the file deterministically (the same content gives the same bytes), fsyncs and renames it
 * into place. The writer stays valid only for psdb_writer_release(). */
PSDB_API psdb_hr psdb_writer_finish(psdb_writer *w);

/* Discards an unfinished writer (its temporary file is removed). NULL is a no-op. */
PSDB_API void psdb_writer_release(psdb_writer *w);

/* ---- SODB: the descriptions an application creates (schema/SODB.md) ------------------------- */
#define PSDB_SODB_COMPUTE 1u
#define PSDB_SODB_GRAPHICS 2u
#define PSDB_SODB_STATE_OBJECT 3u

/* Opens (creating if absent) an SODB for appending. An existing SODB must carry the same
 * application name, else PSDB_E_INVALIDARG. Each add is durable when it returns. Thread-safe. */
PSDB_API psdb_hr psdb_sodb_writer_open(const char *path, const psdb_app_identity *identity,
                                       psdb_sodb_writer **out);
/* Records one description (encoded as schema/SODB.md says). The object key is the SHA-256 of the
 * encoded description; adding the same description again is S_FALSE. */
PSDB_API psdb_hr psdb_sodb_writer_add(psdb_sodb_writer *w, uint32_t kind, uint64_t version,
                                      const void *desc, size_t desc_size);
PSDB_API void psdb_sodb_writer_release(psdb_sodb_writer *w);

/* Opens an SODB read-only. PSDB_E_CACHE_CORRUPT when it is not one. */
PSDB_API psdb_hr psdb_sodb_open(const char *path, psdb_sodb **out);
/* Identity strings are borrowed from the psdb_sodb. */
PSDB_API psdb_hr psdb_sodb_get_identity(psdb_sodb *s, psdb_app_identity *out);
/* Visits every entry in insertion order; non-zero from fn stops the walk (S_FALSE). */
PSDB_API psdb_hr psdb_sodb_foreach(psdb_sodb *s,
                                   int (*fn)(uint32_t kind, const uint8_t key[32], uint64_t version,
                                             const void *desc, size_t desc_size, void *ctx),
                                   void *ctx);
PSDB_API void psdb_sodb_release(psdb_sodb *s);

#ifdef __cplusplus
}
#endif
#endif
