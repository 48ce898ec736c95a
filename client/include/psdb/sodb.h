/* psdb/sodb.h - SODBs, the pipeline descriptions an application creates (schema/SODB.md): record
 * them (an engine during development, a capture, a generator), read them back, compile them into
 * a PSDB with the reference compiler.
 *
 * Recording, in short:
 *
 *     psdb_sodb_writer *w = NULL;
 *     psdb_hr hr = psdb_sodb_writer_open("game.sodb", &identity, &w);
 *     if (PSDB_SUCCEEDED(hr))
 *         hr = psdb_sodb_writer_add_graphics(w, 1, &pso_desc);   (S_FALSE: already recorded)
 *     psdb_sodb_writer_release(w);
 *
 * Thread safety: a psdb_sodb_writer may be shared by any number of threads; a psdb_sodb (reader)
 * is used by one thread at a time; the functions without a handle keep no shared state. */
#ifndef PSDB_SODB_H
#define PSDB_SODB_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct psdb_sodb psdb_sodb;
typedef struct psdb_sodb_writer psdb_sodb_writer;

/* Entry kinds (the `kind` column of schema/SODB.md section 1). */
#define PSDB_SODB_COMPUTE 1u
#define PSDB_SODB_GRAPHICS 2u
#define PSDB_SODB_STATE_OBJECT 3u
/* Vulkan pipelines recorded by the VK_LAYER_PSDB_delivery layer (schema/SODB.md section 3); the
 * reference compiler does not compile them. */
#define PSDB_SODB_VK_COMPUTE 4u
#define PSDB_SODB_VK_GRAPHICS 5u

/* ---- Recording ------------------------------------------------------------------------------- */

/* Opens (creating if absent, schema/sodb.sql) an SODB for appending. identity is copied into the
 * header of a new SODB; an existing SODB must carry the same application name.
 *   PSDB_E_INVALIDARG    path, identity or out NULL; identity without name or version, or with an
 *                        engine version but no engine name; an existing SODB of another
 *                        application;
 *   PSDB_E_CACHE_CORRUPT the file exists and is not an SODB (not SQLite, other application_id or
 *                        user_version, malformed header);
 *   PSDB_E_IO, PSDB_E_ACCESS, PSDB_E_BUSY (locked past 10 s), PSDB_E_OUTOFMEMORY.
 * On success *out is the caller's (psdb_sodb_writer_release), else NULL. The file stays in WAL mode
 * while the writer is open, so readers may open it meanwhile. Each add is durable when it returns.
 * Thread safety: a writer may be shared by any number of threads (adds are serialised); several
 * writers, also in other processes, may append to one file. */
PSDB_API psdb_hr psdb_sodb_writer_open(const char *path, const psdb_app_identity *identity,
                                       psdb_sodb_writer **out);

/* Flags of psdb_sodb_writer_open_ex. */
#define PSDB_SODB_WRITER_DURABLE 0x0u /* psdb_sodb_writer_open: every add its own transaction */
/* One transaction for every add until psdb_sodb_writer_commit, with a rollback journal (no WAL):
 * for a program that writes a whole SODB at once (`psdb synth`); the same adds then give the
 * same bytes. Nothing added is visible to other connections before the commit, and releasing
 * the writer without committing discards the adds (the header of a new SODB stays). */
#define PSDB_SODB_WRITER_BULK 0x1u

/* psdb_sodb_writer_open with flags (PSDB_SODB_WRITER_*): statuses, ownership and threads as there;
 * PSDB_E_INVALIDARG also for an unknown flag. A bulk writer holds the file's write lock from open
 * to commit (or release): other writers wait (PSDB_E_BUSY after 10 s). */
PSDB_API psdb_hr psdb_sodb_writer_open_ex(const char *path, const psdb_app_identity *identity,
                                          uint32_t flags, psdb_sodb_writer **out);

/* Records one description: `desc` holds the encoding of schema/SODB.md whose magic matches `kind`
 * (PSDB_SODB_*), e.g. the Vulkan create-info encodings the layer records (section 3). The object
 * key is the SHA-256 of those bytes. Durable (committed and synced) when it returns, except in a
 * bulk writer (committed by psdb_sodb_writer_commit). S_OK added; S_FALSE the same (key, version)
 * is already recorded (nothing changes); PSDB_E_INVALIDARG w or desc NULL, size 0 or >= 2^31,
 * unknown kind or a magic of another kind; PSDB_E_IO, PSDB_E_DISK_FULL, PSDB_E_BUSY,
 * PSDB_E_OUTOFMEMORY. The bytes are copied. Thread-safe. */
PSDB_API psdb_hr psdb_sodb_writer_add(psdb_sodb_writer *w, uint32_t kind, uint64_t version,
                                      const void *desc, size_t desc_size);

/* Records one D3D12-shaped description, encoded by the library (schema/SODB.md section 2), under
 * its object key (psdb_sodb_*_key) and `version` (it becomes the PSDB group version). The PSDB
 * subobject is not recorded (sessions are run-time handles). The description is recorded as
 * given: psdb compile later refuses one that a device would refuse to create (a graphics pipeline
 * without a vertex shader, ...), which a capture (psdb_device_desc.capture_sodb_path) never
 * records. Statuses those of psdb_sodb_writer_add (S_OK added, S_FALSE already recorded), and
 * PSDB_E_INVALIDARG for NULL w or desc and for a description the encoding cannot hold: a pointer
 * NULL with a non-zero count or size, a byte string of 2^32-1 bytes or more, an unknown state
 * subobject type, and (state objects) a PSDB_SUBOBJECT_EXISTING_COLLECTION (a collection is a
 * run-time object: record the collection's own description). desc is only read. Thread-safe. */
PSDB_API psdb_hr psdb_sodb_writer_add_compute(psdb_sodb_writer *w, uint64_t version,
                                              const psdb_compute_pipeline_desc *desc);
PSDB_API psdb_hr psdb_sodb_writer_add_graphics(psdb_sodb_writer *w, uint64_t version,
                                               const psdb_graphics_pipeline_desc *desc);
PSDB_API psdb_hr psdb_sodb_writer_add_state_object(psdb_sodb_writer *w, uint64_t version,
                                                   const psdb_state_object_desc *desc);

/* Commits a bulk writer's transaction (PSDB_SODB_WRITER_BULK), synced to disk; later adds are each
 * their own transaction. PSDB_S_OK; PSDB_E_INVALIDARG w NULL, or a writer that has no bulk
 * transaction (opened without the flag, or already committed); PSDB_E_BUSY (a reader held the
 * file past 10 s), PSDB_E_IO, PSDB_E_DISK_FULL, PSDB_E_OUTOFMEMORY: the transaction then stays
 * open (commit again, or release the writer to discard it). Thread-safe. */
PSDB_API psdb_hr psdb_sodb_writer_commit(psdb_sodb_writer *w);

/* Closes the writer (the file is switched back to a rollback journal when no other connection has
 * it open, so it reads alone); an uncommitted bulk transaction is discarded. NULL is a no-op. No
 * add may be running. */
PSDB_API void psdb_sodb_writer_release(psdb_sodb_writer *w);

/* The object key a description is recorded under: the SHA-256 of its encoding (schema/SODB.md
 * section 2), which is also the group key of its compiled code in a PSDB (psdb_file_foreach_group)
 * and the name psdb baseset stores it under. Writes 32 bytes to out. PSDB_S_OK; PSDB_E_INVALIDARG
 * as psdb_sodb_writer_add_* (desc or out NULL, a description the encoding cannot hold);
 * PSDB_E_OUTOFMEMORY. desc is only read; thread-safe. */
PSDB_API psdb_hr psdb_sodb_compute_key(const psdb_compute_pipeline_desc *desc, uint8_t out[32]);
PSDB_API psdb_hr psdb_sodb_graphics_key(const psdb_graphics_pipeline_desc *desc, uint8_t out[32]);
PSDB_API psdb_hr psdb_sodb_state_object_key(const psdb_state_object_desc *desc, uint8_t out[32]);

/* ---- Reading --------------------------------------------------------------------------------- */

/* Opens an SODB read-only and reads its header; a file left in WAL mode (its writer killed) is
 * read with its -wal. PSDB_E_INVALIDARG path or out NULL; PSDB_E_IO cannot open; PSDB_E_ACCESS
 * its -wal cannot be read (left in WAL mode, its -shm missing and not creatable in its folder);
 * PSDB_E_CACHE_CORRUPT not an SODB (not SQLite, application_id other than 'PSOD',
 * user_version other than 1, missing tables, no or several header rows, header of another
 * encoding version); PSDB_E_OUTOFMEMORY. On success *out is the caller's (psdb_sodb_release).
 * A psdb_sodb is used by one thread at a time. */
PSDB_API psdb_hr psdb_sodb_open(const char *path, psdb_sodb **out);
/* Copies the identity into *out; its strings are borrowed from the psdb_sodb and live until
 * psdb_sodb_release. PSDB_E_INVALIDARG on NULL. */
PSDB_API psdb_hr psdb_sodb_get_identity(psdb_sodb *s, psdb_app_identity *out);
/* Visits every entry in insertion order: fn(kind, object key, version, desc bytes, ctx); the bytes
 * are valid during the call only. A non-zero return from fn stops the walk (S_FALSE). S_OK after
 * the last entry; PSDB_E_INVALIDARG s or fn NULL; PSDB_E_CACHE_CORRUPT a row with an unknown
 * kind, a key that is not 32 bytes or not the SHA-256 of its description, or a missing
 * description (entries before it were visited). Descriptions are not decoded here
 * (psdb_sodb_decode). */
PSDB_API psdb_hr psdb_sodb_foreach(psdb_sodb *s,
                                   int (*fn)(uint32_t kind, const uint8_t key[32], uint64_t version,
                                             const void *desc, size_t desc_size, void *ctx),
                                   void *ctx);
/* psdb_sodb_foreach in the order of the object keys (bytewise), then versions, instead of insertion
 * order: a walk that does not depend on the order of capture (a compiler that groups entries by
 * key range). Same returns. */
PSDB_API psdb_hr psdb_sodb_foreach_by_key(psdb_sodb *s,
                                          int (*fn)(uint32_t kind, const uint8_t key[32],
                                                    uint64_t version, const void *desc,
                                                    size_t desc_size, void *ctx),
                                          void *ctx);
/* Closes the SODB. NULL is a no-op. */
PSDB_API void psdb_sodb_release(psdb_sodb *s);

/* One decoded SODB entry (psdb_sodb_decode): `kind` says which member is filled; the other two are
 * NULL. The entry owns the description and everything it points to; psdb_sodb_entry_release
 * frees them together. A decoded description has no PSDB subobject (sessions are run-time
 * handles). A decoded state object has no live collections: each existing collection's
 * `collection` handle points at its recorded 32-byte object key, so never pass it to
 * psdb_state_object_* calls; objects that build on collections cannot be recreated from an SODB. */
typedef struct psdb_sodb_entry {
    uint32_t kind; /* PSDB_SODB_COMPUTE, _GRAPHICS or _STATE_OBJECT */
    psdb_compute_pipeline_desc *compute;
    psdb_graphics_pipeline_desc *graphics;
    psdb_state_object_desc *state_object;
} psdb_sodb_entry;

/* Decodes the description bytes of one SODB entry of `kind` (as psdb_sodb_foreach gives them;
 * schema/SODB.md) into a filled description, e.g. to recreate the pipeline on a device.
 *   PSDB_E_INVALIDARG    out NULL; desc NULL with a non-zero size; kind not PSDB_SODB_COMPUTE,
 *                        _GRAPHICS or _STATE_OBJECT (the Vulkan kinds are not D3D descriptions);
 *   PSDB_E_CACHE_CORRUPT malformed bytes: a magic of another kind, wrong encoding version, a
 *                        non-zero reserved field, a boolean other than 0/1, a string with an
 *                        embedded NUL, a length or count past the end, trailing bytes;
 *   PSDB_E_OUTOFMEMORY.
 * On success *out is the caller's (psdb_sodb_entry_release); on failure *out is NULL (when out is
 * not NULL). Only reads desc; thread-safe (no shared state). */
PSDB_API psdb_hr psdb_sodb_decode(uint32_t kind, const void *desc, size_t size,
                                  psdb_sodb_entry **out);
/* Frees an entry of psdb_sodb_decode and the description it holds. NULL is a no-op; cannot fail. */
PSDB_API void psdb_sodb_entry_release(psdb_sodb_entry *e);

/* ---- Compiling with the reference compiler --------------------------------------------------- */

typedef struct psdb_sodb_compile_desc {
    /* The PSDB's target: family 1 to PSDB_ADAPTER_FAMILY_MAX - 1 bytes, ABI neither 0 nor
     * UINT64_MAX (psdb_writer_create). The strings are read during the call only. */
    psdb_target target;
    /* Simulated compile cost (psdb_device_desc.compile_ns_per_kib): 0 the default,
     * PSDB_COMPILE_COST_FREE none. */
    uint64_t compile_ns_per_kib;
    /* Called on the calling thread after every 1000 entries and after the last one (an SODB
     * without entries: once, 0 of 0), with the entries read so far and the SODB's number of
     * entries; a non-zero return stops the compile (PSDB_E_CANCELLED). NULL: none. */
    int (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
    /* The PSDB of the previous version (`psdb compile --base`), or NULL: a unit whose values it
     * holds is taken from it byte for byte instead of compiled. It serves only when it is a
     * valid PSDB of the same application name and executable and exactly desc->target (family,
     * ABI, compiler and profile versions); otherwise it is not used (stats.base_used 0) and
     * every unit is compiled. A value of it that fails its blob's digest is compiled instead. */
    const char *base_path;
} psdb_sodb_compile_desc;

typedef struct psdb_sodb_compile_stats {
    uint64_t pipelines; /* entries compiled into groups */
    uint64_t compute, graphics, state_objects;
    uint64_t skipped;        /* entries whose object key was already compiled at another version */
    uint64_t units;          /* compile units over all entries (with repeats) */
    uint64_t units_compiled; /* distinct units compiled (each gives two values) */
    uint64_t code_bytes;     /* input bytes of the units compiled */
    double seconds;          /* wall time of the whole compile, file written */
    uint64_t units_reused;   /* distinct units taken from desc->base_path, not compiled */
    int base_used;           /* 1: desc->base_path served this target */
} psdb_sodb_compile_stats;

/* Compiles every entry of the SODB at sodb_path with the reference compiler (schema/COMPILER.md)
 * into a new PSDB at psdb_path whose identity is the SODB's and whose target is desc->target:
 * what `psdb compile` does. Each distinct compile unit is compiled once and put as two values
 * (OBJECT_CODE, METADATA); each entry becomes one group (its object key, its version, its units'
 * keys in plan order), so a device replaying the recorded creations finds every value. An object
 * key recorded at several versions is compiled at the first one (a PSDB holds one version per
 * group key); the others are counted as skipped. The output is deterministic: the same SODB and
 * target give the same bytes (psdb_writer_finish). On failure psdb_path is left as it was.
 * Statuses (psdb_error_last names the path, or the entry by number and key, and the step):
 *   PSDB_E_INVALIDARG    a NULL path or desc; a target psdb_writer_create refuses; an entry the
 *                        reference compiler refuses (see the planner's rules in
 *                        schema/COMPILER.md), or a Vulkan entry (PSDB_SODB_VK_*: compiled on a
 *                        Vulkan driver instead, `psdb compile --backend vulkan`);
 *   PSDB_E_CACHE_CORRUPT an entry that does not decode, or the SODB's statuses (psdb_sodb_open,
 *                        psdb_sodb_foreach);
 *   PSDB_E_CANCELLED     the progress callback asked to stop;
 *   PSDB_E_IO, PSDB_E_ACCESS, PSDB_E_DISK_FULL, PSDB_E_OUTOFMEMORY (reading the SODB, writing the
 *                        PSDB).
 * out (may be NULL) receives the counts on success. Compiles on the calling thread, which the
 * simulated cost keeps busy; thread-safe (calls on different outputs may run at once). */
PSDB_API psdb_hr psdb_sodb_compile(const char *sodb_path, const psdb_sodb_compile_desc *desc,
                                   const char *psdb_path, psdb_sodb_compile_stats *out);

#ifdef __cplusplus
}
#endif
#endif
