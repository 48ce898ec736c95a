/* psdb/derived_pso.h - derived graphics PSOs and the derivation records of a base set (MODEL V).
 * Part of psdb/device.h (which includes it); may be included alone. */
#ifndef PSDB_DERIVED_PSO_H
#define PSDB_DERIVED_PSO_H

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
