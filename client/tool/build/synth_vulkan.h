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
    /* A patch of the corpus (version N+1 of the same game), as psdb__synth_params defines it: 0
     * writes the corpus itself. With patch K >= 1, each pipeline the corpus would write is touched
     * with probability changed_permille / 1000, drawn from a stream seeded by (seed, app name,
     * K): half of the touched ones keep their place with an edited shader (a constant of the
     * compute or fragment shader's GLSL changed, so its SPIR-V is new), half are removed and
     * replaced by a new pipeline of the same kind appended after the others. Every other entry
     * is the corpus's bytes in the corpus's order; no edited or new entry equals a corpus
     * entry. */
    uint64_t patch;
    uint32_t changed_permille; /* 0..1000; only with patch */
} psdb__synth_vulkan_params;

typedef struct psdb__synth_vulkan_stats {
    uint64_t compute, graphics; /* entries written of each kind */
    size_t modules;             /* distinct SPIR-V modules compiled */
    uint64_t edited, replaced;  /* a patch: entries edited in place, removed and replaced */
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
