/* baseset.h - base-set packaging (seed 003, "serialized + derived together"): the PSOs of an SODB
 * reduced to bases stored in a pipeline library, plus derivation records from which a game derives
 * every other PSO (schema/PIPELINE_LIBRARY.md, "Derivation records"). */
#ifndef PSDB_BASESET_H
#define PSDB_BASESET_H

#include "psdb/psdb.h"
#include "common/buf.h"
#include "common/hash.h"

#include "format/derivation.h"

typedef struct psdb__baseset_stats {
    uint64_t entries;  /* SODB entries read */
    uint64_t compute;  /* compute PSOs (each stored as its own base) */
    uint64_t graphics; /* graphics PSOs */
    uint64_t bases;    /* graphics bases stored */
    uint64_t derived;  /* graphics PSOs recorded as derivations */
    uint64_t skipped;  /* state objects (not pipelines) and repeated keys */
} psdb__baseset_stats;

/* The base key of a graphics description: SHA-256 of its encoding with depth-stencil, rasterizer,
 * blend, sample mask and shader limits zeroed (what a derived PSO cannot change, V1), followed by
 * its 8 exports (V3), so that a PSO derives from its base without an export mismatch (V4). */
psdb_hr psdb__baseset_key(const psdb_graphics_pipeline_desc *d, uint8_t key[32]);

/* Builds a base set from the SODB at sodb_path on dev (a device with library support; its
 * compile cost applies to the bases, which are created with local compilation): every compute
 * PSO and the first graphics PSO of each base key are created and stored in a new pipeline library
 * under the lowercase hex of their SODB object key; every other graphics PSO becomes a derivation
 * record. library and records receive the serialized library and the records (zeroed buffers in;
 * the caller frees them). stats may be NULL. Statuses: PSDB_E_INVALIDARG (NULL arguments), the
 * SODB's (PSDB_E_IO, PSDB_E_CACHE_CORRUPT, including an entry that does not decode), creation
 * and library statuses, PSDB_E_OUTOFMEMORY. */
psdb_hr psdb__baseset_build(psdb_device *dev, const char *sodb_path, psdb__buf *library,
                            psdb__buf *records, psdb__baseset_stats *stats);

#endif
