/* vk_backend.h - the Vulkan driver backend of the tool: replays SODB §3 pipelines on a real
 * Vulkan device (`psdb compile --backend vulkan`, `psdb replay --backend vulkan`). Tool-side: it
 * links the Vulkan loader, which libpsdb never does (`psdb install --target auto` asks libpsdb's
 * psdb_client_local_targets, which opens the loader at run time). */
#ifndef PSDB_BUILD_VK_BACKEND_H
#define PSDB_BUILD_VK_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "psdb/psdb.h"

/* Whether this build has the Vulkan backend (PSDB_VULKAN=ON and the loader found). */
int psdb__vk_available(void);

typedef struct psdb__vk_compile_stats {
    uint64_t pipelines, compute, graphics;
    uint64_t failed;     /* pipelines the driver did not create (counted, not fatal) */
    uint64_t code_bytes; /* bytes of compiled code stored */
    double seconds;
} psdb__vk_compile_stats;

/* Replays every Vulkan entry of the SODB on device `device_index` and writes what the driver
 * compiled into a PSDB at out_path whose target is the device's identity (schema/COMPILER.md §5).
 * progress: when non-NULL, a line every few seconds on it. Statuses: PSDB_E_NOTIMPL without the
 * backend; PSDB_E_ADAPTER_NOT_FOUND no such device; the SODB's and the writer's; PSDB_E_FAIL when
 * no pipeline at all could be created. err gets one line. */
psdb_hr psdb__vk_compile(const char *sodb_path, uint32_t device_index, const char *out_path,
                         FILE *progress, psdb__vk_compile_stats *stats, char *err, size_t err_size);

typedef struct psdb__vk_replay_stats {
    uint64_t pipelines, failed, hits, misses;
    /* Time-to-usable of all pipelines: setup + lookups + creations + first uses; median and
     * p95 of one pipeline's (lookup + creation + first use). */
    double total_s, median_ms, p95_ms;
    double setup_s;               /* the merged cache made once for the device */
    /* Proving the PSDB as the layer proves an installed one (the whole file's SHA-256 against the
     * digest its install recorded): started before the device is created and waited for once the
     * device exists; proof_s is that wait, in total_s. device_s, apart: the device's creation,
     * which the proof runs beside. file_sha256_s, apart: the same hash run on its own. */
    double proof_s, device_s, file_sha256_s;
    double lookup_s;              /* the PSDB lookups (encode, hash, key probe, blob checks) */
    double create_s, first_use_s; /* vkCreate*Pipelines, and the first uses */
    double objects_s; /* not in total_s: the shader modules, layouts and render passes */
    double wall_s;    /* the whole pass: all of the above, and decoding the SODB */
    int merged_cache; /* the pass used the PSDB's merged VkPipelineCache */
} psdb__vk_replay_stats;

/* Creates and first-uses every Vulkan pipeline of the SODB on the device, cold (Mesa's disk cache
 * and the NVIDIA driver's disk cache off, no PSDB) into *cold, then with the PSDB at psdb_path
 * (may be NULL: cold only) into *warm. Each pass runs in a child process so that the driver opens
 * its caches afresh. Statuses as psdb__vk_compile. */
psdb_hr psdb__vk_replay(const char *sodb_path, const char *psdb_path, uint32_t device_index,
                        psdb__vk_replay_stats *cold, psdb__vk_replay_stats *warm, char *err,
                        size_t err_size);

#endif
