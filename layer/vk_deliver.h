/* vk_deliver.h - handing a PSDB's driver code to a Vulkan driver (schema/COMPILER.md §5), shared
 * by the layer and `psdb replay --backend vulkan` so both deliver one way.
 *
 * DESIGN: data reaches the driver only after three checks: psdb_file_open with the device's
 * identity as the adapter (family and ABI, which hashes the driver build), the value's own
 * checks (SHA-256 of every blob at first fetch), and for VkPipelineCache data the cache header
 * (vendorID, deviceID, pipelineCacheUUID). Mesa's single-file cache is placed in the folder named
 * by the disk-cache identity recorded at compile time; Mesa computes that folder from its own
 * build and CPU, so on any other driver build the files are never opened. */
#ifndef PSDB_LAYER_VK_DELIVER_H
#define PSDB_LAYER_VK_DELIVER_H

#include <stddef.h>
#include <stdint.h>

#include <psdb/psdb.h>

#include "vk_identity.h"

/* Opens path for the device: NULL identity opens without the adapter check (used before a
 * device exists, for Mesa's cache, which carries its own identity check). */
psdb_hr vkdl_open(const char *path, const vkid *id, psdb_file **out);

/* When f carries Mesa's single-file cache, writes it read-only under the Mesa cache root
 * (MESA_SHADER_CACHE_DIR when set, else $XDG_CACHE_HOME/psdb/mesa, else
 * $HOME/.cache/psdb/mesa) and sets the Mesa environment variables that make the driver read it
 * when it opens its cache. Returns PSDB_S_OK (set up), PSDB_S_FALSE (f has no Mesa cache),
 * or a failure (nothing set); msg gets one line. Not thread-safe (the environment). */
psdb_hr vkdl_mesa_setup(psdb_file *f, char *msg, size_t msg_size);

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
