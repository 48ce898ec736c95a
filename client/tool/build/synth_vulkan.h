/* synth_vulkan.h - a deterministic SODB of Vulkan pipelines built from GLSL shader families
 * (`psdb synth --api vulkan`, schema/SODB.md section 3). */
#ifndef PSDB_SYNTH_VULKAN_H
#define PSDB_SYNTH_VULKAN_H

#include <stddef.h>

#include "psdb/psdb.h"

typedef struct psdb__synth_vulkan_params {
    const char *app_name;    /* required, non-empty */
    uint64_t app_version;    /* 4x16-bit version */
    const char *engine_name; /* NULL: none (engine_version must be 0) */
    uint64_t engine_version;
    uint64_t pipelines; /* 1..psdb__synth_vulkan_max() */
    uint64_t seed;
} psdb__synth_vulkan_params;

typedef struct psdb__synth_vulkan_stats {
    uint64_t compute, graphics; /* entries written of each kind */
    size_t modules;             /* distinct SPIR-V modules compiled */
} psdb__synth_vulkan_stats;

/* The most distinct pipelines the corpus holds. */
uint64_t psdb__synth_vulkan_max(void);

/* Writes the corpus to `path` (through path + ".tmp", renamed: a failure leaves no file). The
 * same parameters give a byte-identical file. Returns PSDB_S_OK; PSDB_E_INVALIDARG a NULL
 * argument or a parameter out of range; PSDB_E_NOTIMPL this build has no glslang; PSDB_E_FAIL a
 * shader did not compile; PSDB_E_IO, PSDB_E_DISK_FULL, PSDB_E_ACCESS, PSDB_E_OUTOFMEMORY (a
 * failed system call's errno, as common/status_map.h maps it). On failure `err` (err_size bytes,
 * may be NULL) holds one line naming what failed. */
psdb_hr psdb__synth_vulkan(const char *path, const psdb__synth_vulkan_params *p,
                           psdb__synth_vulkan_stats *stats, char *err, size_t err_size);

#endif
