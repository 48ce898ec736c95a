/* baseset.h - base-set packaging (seed 003, "serialized + derived together"): the PSOs of an SODB
 * reduced to bases stored in a pipeline library, plus derivation records from which a game derives
 * every other PSO (schema/PIPELINE_LIBRARY.md, "Derivation records"). */
#ifndef PSDB_BASESET_H
#define PSDB_BASESET_H

#include "psdb/psdb.h"
#include "common/buf.h"
#include "common/hash.h"

typedef struct psdb__baseset_stats {
    uint64_t entries;  /* SODB entries read */
    uint64_t compute;  /* compute PSOs (each stored as its own base) */
    uint64_t graphics; /* graphics PSOs */
    uint64_t bases;    /* graphics bases stored */
    uint64_t derived;  /* graphics PSOs recorded as derivations */
    uint64_t skipped;  /* state objects (not pipelines) and repeated keys */
} psdb__baseset_stats;

/* Builds a base set from the SODB at sodb_path on dev (a device with library support; its
 * compile cost applies to the bases, which are created with local compilation): every compute
 * PSO and the first graphics PSO of each base key (psdb_derivation_base_key) are created and stored
 * in a new pipeline library under the lowercase hex of their SODB object key; every other graphics
 * PSO becomes a derivation record. library and records receive the serialized library and the
 * records (zeroed buffers in; the caller frees them). stats may be NULL. Statuses:
 * PSDB_E_INVALIDARG (NULL arguments), the SODB's (PSDB_E_IO, PSDB_E_CACHE_CORRUPT, including an
 * entry that does not decode), creation and library statuses, PSDB_E_OUTOFMEMORY. */
psdb_hr psdb__baseset_build(psdb_device *dev, const char *sodb_path, psdb__buf *library,
                            psdb__buf *records, psdb__baseset_stats *stats);

#endif
