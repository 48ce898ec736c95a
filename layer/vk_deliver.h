/* vk_deliver.h - handing a PSDB's driver code to a Vulkan driver (schema/COMPILER.md §5), shared
 * by the layer and `psdb replay --backend vulkan` so both deliver one way.
 *
 * DESIGN: no byte reaches a driver that is not proven to be one the PSDB's trusted digest covers.
 * vkdl_open proves the file: an installed PSDB by the SHA-256 its install recorded (the digest the
 * publisher's signed statement names), checked over the very file every later read uses
 * (psdb_file_check); a PSDB named directly (PSDB_DELIVERY, a replay's argument) by its own content
 * digest, recomputed from its tables. Then each blob is hashed against its digest before its first
 * use (psdb_file_find_value). Beyond the bytes: psdb_file_open with the device's identity as the
 * adapter (family and ABI, which hashes the driver build); for VkPipelineCache data the cache
 * header (vendorID, deviceID, pipelineCacheUUID); for Mesa's single-file cache a structural check
 * of both files (vkdl_foz_check) before they are written where Mesa reads them, and the folder
 * named by the disk-cache identity recorded at compile time (Mesa computes that folder from its
 * own build and CPU, so on any other driver build the files are never opened). */
#ifndef PSDB_LAYER_VK_DELIVER_H
#define PSDB_LAYER_VK_DELIVER_H

#include <stddef.h>
#include <stdint.h>

#include <psdb/psdb.h>

#include "vk_identity.h"

/* What vouches for a PSDB: the SHA-256 of the whole file recorded when it was installed (from the
 * registry), or nothing (a file named directly: its own content digest then vouches for its
 * values). */
typedef struct vkdl_trust {
    int have_sha256;
    uint8_t sha256[32];
} vkdl_trust;

/* Opens path for the device and proves it (see DESIGN): NULL identity opens without the adapter
 * check (used before a device exists, for Mesa's cache, which carries its own identity check);
 * NULL trust is a file named directly. Statuses of psdb_file_open and psdb_file_check
 * (PSDB_E_CACHE_CORRUPT: the file is not the one its digest names); psdb_error_last says why. */
psdb_hr vkdl_open(const char *path, const vkid *id, const vkdl_trust *trust, psdb_file **out);

/* A proof running on a thread of its own (vkdl_open's, split in two): the layer starts it when the
 * first instance is created, so that hashing an installed PSDB overlaps the driver's instance and
 * device creation instead of delaying the first pipeline. */
typedef struct vkdl_proof vkdl_proof;

/* Opens path (no adapter check yet) and starts proving it as vkdl_open does. PSDB_S_OK with *out
 * the caller's (vkdl_proof_finish frees it); a failure to open or to start (no thread: then the
 * proof runs at finish) is kept for vkdl_proof_finish, which reports it, so *out is set unless
 * memory ran out (PSDB_E_OUTOFMEMORY, *out NULL). */
psdb_hr vkdl_proof_start(const char *path, const vkdl_trust *trust, vkdl_proof **out);

/* The file being proven, for a look that hands nothing on (whether it carries Mesa's cache);
 * NULL when it did not open. Borrowed until vkdl_proof_finish. */
psdb_file *vkdl_proof_peek(vkdl_proof *p);

/* The path p proves (borrowed until vkdl_proof_finish). */
const char *vkdl_proof_path(const vkdl_proof *p);

/* Waits for the proof and frees p (NULL: PSDB_E_INVALIDARG). On success *out is the proven file,
 * the caller's, checked against id as psdb_file_open checks an adapter (family, ABI, the top 32
 * bits of the profile version 0), when id is non-NULL. On failure *out is NULL and why (may be
 * NULL) gets one line: statuses as vkdl_open. */
psdb_hr vkdl_proof_finish(vkdl_proof *p, const vkid *id, psdb_file **out, char *why,
                          size_t why_size);

/* Whether foz and idx are a Mesa single-file cache Mesa can read safely: both start with the
 * Fossilize magic and version 6; the cache is a run of entries (40 lowercase hex digits, a 16-byte
 * header, the payload) that ends exactly at the end, each payload uncompressed, non-empty and
 * matching its CRC; the index is a run of 64-byte entries, each naming by offset an entry of the
 * cache with the same hash, no hash twice. 0, or -1 with a one-line reason in why. */
int vkdl_foz_check(const uint8_t *foz, size_t foz_size, const uint8_t *idx, size_t idx_size,
                   char *why, size_t why_size);

/* When f (opened with vkdl_open) carries Mesa's single-file cache, checks it (vkdl_foz_check),
 * writes it read-only under the Mesa cache root (MESA_SHADER_CACHE_DIR when set, else
 * $XDG_CACHE_HOME/psdb/mesa, else $HOME/.cache/psdb/mesa; an existing file is kept only when its
 * bytes are these) and sets the Mesa environment variables that make the driver read it when it
 * opens its cache. Returns PSDB_S_OK (set up), PSDB_S_FALSE (f has no Mesa cache), or a failure
 * (nothing set: PSDB_E_CACHE_CORRUPT for data that fails the check, PSDB_E_IO when the files
 * cannot be written, PSDB_E_NOT_CURRENTLY_AVAILABLE when Mesa's cache is disabled by
 * MESA_SHADER_CACHE_DISABLE); msg gets one line. Not thread-safe (the environment). */
psdb_hr vkdl_mesa_setup(psdb_file *f, char *msg, size_t msg_size);

/* Whether MESA_SHADER_CACHE_DISABLE turns Mesa's disk cache off (any value but 0, n, no, f,
 * false, as Mesa reads it): Mesa then reads no shipped cache. */
int vkdl_mesa_cache_disabled(void);

/* The PSDB's group keys in memory (an open-addressing set), loaded once per device so that a
 * creation's lookup costs a hash probe, not a database query, on a miss and on a Mesa hit. */
typedef struct vkdl_keys {
    uint8_t (*slot)[32];
    uint8_t *used;
    size_t cap, count;
} vkdl_keys;

/* PSDB_S_OK, or the walk's failure (PSDB_E_OUTOFMEMORY, PSDB_E_CACHE_CORRUPT, PSDB_E_IO). */
psdb_hr vkdl_keys_load(psdb_file *f, vkdl_keys *out);
int vkdl_keys_has(const vkdl_keys *k, const uint8_t key[32]);
void vkdl_keys_free(vkdl_keys *k);

/* Whether the PSDB holds the pipeline with this SODB object key (keys: the PSDB's, or NULL to
 * ask the file). For VkPipelineCache data with data non-NULL, *data (malloc'd, the caller's) and
 * *size get the pipeline's own blob when it passes the header check; with data NULL (the merged
 * cache serves the hit) only the key is looked up. Returns 1 hit (data, if any, valid), 0 miss
 * (absent, or data that failed a check: *bad set), -1 out of memory. */
int vkdl_lookup(psdb_file *f, const vkdl_keys *keys, const vkid *id, const uint8_t key[32],
                void **data, size_t *size, int *bad);

/* The merged VkPipelineCache data of a PSDB compiled for the VkPipelineCache strategy (every
 * pipeline's cache in one, vkid_merged_key): a driver creates each pipeline from one cache made
 * once per device far sooner than from a fresh one-pipeline cache per creation. *data (malloc'd,
 * the caller's) and *size get it when it passes the header check against id. Returns PSDB_S_OK,
 * PSDB_S_FALSE (the PSDB has none: compiled before merged caches, or for Mesa),
 * PSDB_E_CACHE_CORRUPT (the header does not name this device), or the fetch's failure; msg
 * gets one line on a failure. */
psdb_hr vkdl_merged_cache(psdb_file *f, const vkid *id, void **data, size_t *size, char *msg,
                          size_t msg_size);

#endif
