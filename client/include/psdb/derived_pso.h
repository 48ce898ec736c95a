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

/* ---- Building a base set --------------------------------------------------------------------- */

/* The base key of a graphics description: equal for two descriptions exactly when one can be
 * derived from the other (V1-V4), i.e. they differ only in the derivable states (depth-stencil,
 * rasterizer, blend, sample mask, shader limits) and export the same type and components on every
 * render target (V3). It is the SHA-256 of the description's SODB encoding with those states
 * zeroed, followed by its eight exports (schema/PIPELINE_LIBRARY.md, "Derivation records"). Writes
 * 32 bytes to out. PSDB_S_OK; PSDB_E_INVALIDARG desc or out NULL, or a description the SODB
 * encoding cannot hold (psdb_sodb_graphics_key); PSDB_E_OUTOFMEMORY. desc is only read;
 * thread-safe. */
PSDB_API psdb_hr psdb_derivation_base_key(const psdb_graphics_pipeline_desc *desc, uint8_t out[32]);

/* The derivation of desc from base: out->count and out->descs receive the derivable states of desc
 * that differ from base's, in PSDB_DERIVED_STATE_* order, compared by the words derivation records
 * store them as (schema/PIPELINE_LIBRARY.md: floats by their bits); out->key and out->base_key are
 * not written (the caller names the two PSOs). Deriving base with out->descs gives desc when the
 * two share a base key (psdb_derivation_base_key). PSDB_S_OK; PSDB_E_INVALIDARG base, desc or out
 * NULL. Only reads the descriptions; thread-safe. */
PSDB_API psdb_hr psdb_derivation_diff(const psdb_graphics_pipeline_desc *base,
                                      const psdb_graphics_pipeline_desc *desc,
                                      psdb_derivation *out);

/* Writes derivation records (the blob psdb_derivation_records_validate and _next read): the base
 * keys in the order added, then the records in the order added. */
typedef struct psdb_derivation_writer psdb_derivation_writer;

/* Creates an empty writer. PSDB_S_OK; PSDB_E_INVALIDARG out NULL; PSDB_E_OUTOFMEMORY. *out is the
 * caller's (psdb_derivation_writer_release), NULL on failure. A writer is used by one thread at a
 * time. */
PSDB_API psdb_hr psdb_derivation_writer_create(psdb_derivation_writer **out);
/* Adds a base: the SODB object key of a PSO the game loads from its pipeline library. Bases are
 * numbered in the order added. PSDB_S_OK; PSDB_E_ALREADY_EXISTS the key is a base already;
 * PSDB_E_INVALIDARG w or key NULL, 2^32-1 bases already; PSDB_E_OUTOFMEMORY. */
PSDB_API psdb_hr psdb_derivation_writer_add_base(psdb_derivation_writer *w, const uint8_t key[32]);
/* Adds one record: d->key derives from the base d->base_key with the d->count states of d->descs,
 * whose types are distinct PSDB_DERIVED_STATE_* values in increasing order (as
 * psdb_derivation_diff gives them). PSDB_S_OK; PSDB_E_NOT_FOUND d->base_key is not a base added
 * before; PSDB_E_INVALIDARG w or d NULL, count above 5, a type unknown, repeated or out of
 * order, 2^32-1 records already; PSDB_E_OUTOFMEMORY. d is copied. */
PSDB_API psdb_hr psdb_derivation_writer_add(psdb_derivation_writer *w, const psdb_derivation *d);
/* The bytes psdb_derivation_writer_serialize writes now (0 for NULL). */
PSDB_API size_t psdb_derivation_writer_get_serialized_size(psdb_derivation_writer *w);
/* Writes the records blob (header with its CRC-32, base keys, records; schema/PIPELINE_LIBRARY.md,
 * "Derivation records") to data, which holds size bytes: the same bases and records added in the
 * same order give the same bytes. PSDB_S_OK; PSDB_E_INVALIDARG w or data NULL, or size smaller
 * than psdb_derivation_writer_get_serialized_size. The writer stays usable. */
PSDB_API psdb_hr psdb_derivation_writer_serialize(psdb_derivation_writer *w, void *data,
                                                  size_t size);
/* Frees the writer. NULL is a no-op; cannot fail. */
PSDB_API void psdb_derivation_writer_release(psdb_derivation_writer *w);

#ifdef __cplusplus
}
#endif
#endif
