/* synth.h - a deterministic synthetic SODB that looks like a real game's captured creations
 * (`psdb synth`, tests and benchmarks). */
#ifndef PSDB_SYNTH_H
#define PSDB_SYNTH_H

#include "psdb/psdb.h"

#define PSDB_SYNTH_MAX_VARIANTS 256u

typedef struct psdb__synth_params {
    const char *app_name;     /* required */
    uint64_t app_version;     /* required (non-zero) */
    const char *exe_filename; /* NULL: "<app_name>.exe" */
    const char *engine_name;  /* NULL: "psdb-synth" 1.0.0.0 */
    uint64_t engine_version;
    const uint8_t *app_id; /* 16 bytes; NULL: the first 16 bytes of SHA-256 of the name */
    uint64_t pipelines;    /* entries to write, >= 1 */
    uint64_t seed;
    uint32_t variants;         /* graphics state variants per base pipeline, 1..256 */
    uint32_t compute_permille; /* share of compute pipelines, 0..1000 */
    uint64_t state_objects;    /* raytracing state objects written after the pipelines */
    /* A patch of the corpus (version N+1 of the same game): 0 writes the corpus itself. With
     * patch K >= 1, changed_permille of the pipelines the corpus would write are touched, chosen
     * by a stream seeded from (seed, app name, K): half keep their state and get an edited shader
     * (the pixel shader, the vertex shader of a pipeline without one, the compute shader), half
     * are removed and replaced by a new pipeline appended after the others. Every other pipeline,
     * and the state objects, are the corpus's bytes. */
    uint64_t patch;
    uint32_t changed_permille; /* 0..1000; only with patch */
    /* Called every 1000 entries and at the end; may be NULL. */
    void (*progress)(uint64_t done, uint64_t total, void *ctx);
    void *progress_ctx;
} psdb__synth_params;

/* Writes the corpus to `path` (replacing it; written to path + ".tmp" and renamed, so a failure
 * leaves no partial SODB). The same parameters give a byte-identical file.
 *   PSDB_E_INVALIDARG  a NULL argument or a parameter out of range;
 *   PSDB_E_IO, PSDB_E_DISK_FULL, PSDB_E_OUTOFMEMORY.
 * The corpus: compute pipelines (compute_permille of the entries) and graphics pipelines, the
 * latter as base pipelines each followed by up to `variants` state variants that differ only in
 * blend, depth-stencil, rasterizer and sample mask (what a derived PSO may override), so the base
 * set can be recovered; shader bytecode of realistic sizes (1.5 to ~32 KiB, pseudo-random bytes)
 * reused across pipelines with a Zipf-like skew; a few root signatures; common input layouts and
 * render-target setups (G-buffer, forward HDR, shadow depth-only, post, UI, velocity). Then
 * `state_objects` raytracing pipelines (a global root signature, one to three DXIL libraries drawn
 * with the same skew, so libraries are shared between state objects, and a hit group); the
 * pipelines before them are the same bytes whatever this count. */
psdb_hr psdb__synth_write(const psdb__synth_params *p, const char *path);

/* The identity the corpus is written with (strings borrowed from p or static). */
psdb_hr psdb__synth_identity(const psdb__synth_params *p, char *exe_buf, size_t exe_size,
                             psdb_app_identity *out);

#endif
