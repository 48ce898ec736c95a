/* pipeline.h - the pipeline and state-object handles, for the modules that create or reuse them
 * (pipeline.c, state_object.c, and the pipeline library, serialized and derived PSOs). */
#ifndef PSDB_PIPELINE_INTERNAL_H
#define PSDB_PIPELINE_INTERNAL_H

#include "runtime/runtime.h"

struct psdb_pipeline {
    atomic_uint refs;
    psdb_device *dev; /* referenced */
    int is_compute;
    uint8_t group_key[32];   /* SHA-256 of the encoded description (the SODB object key) */
    psdb_creation_info info; /* fixed at creation */
    psdb__association assoc; /* what later object-associated lookups search (I3-I5) */
    /* The description's encoding (desc.h), kept for the pipeline library, serialization and
     * derivation; with origin DESERIALIZED (and what derives from it) the compact form of
     * serialized_pso.c, whose bytecode is replaced by digests. */
    psdb__buf desc;
    uint32_t origin;     /* PSDB__ORIGIN_* */
    psdb_pipeline *base; /* derived PSOs: the base whose compiled code they share (referenced) */
};

#define PSDB__ORIGIN_CREATED 0u
#define PSDB__ORIGIN_DESERIALIZED 1u
#define PSDB__ORIGIN_DERIVED 2u
#define PSDB__ORIGIN_DERIVED_COMPACT 3u /* derived from a deserialized PSO: compact description */

/* A pipeline handle with one reference and a device reference, everything else zero. */
psdb_hr psdb__pipeline_new(psdb_device *dev, psdb_pipeline **out);

/* Plans a pipeline again from its full description (origin CREATED or DERIVED), with its device's
 * driver. PSDB_E_INVALIDARG for a pipeline that only has a compact description (deserialized, or
 * derived from a deserialized one); the planner's statuses otherwise. */
psdb_hr psdb__pipeline_plan(const psdb_pipeline *p, psdb__plan *out);

struct psdb_state_object {
    atomic_uint refs;
    psdb_device *dev; /* referenced */
    uint32_t type;    /* psdb_state_object_type */
    uint8_t group_key[32];
    psdb_creation_info info;
    psdb__association assoc;
    psdb_state_object *base;         /* AddToStateObject: the generation grown from (referenced) */
    psdb_state_object **collections; /* existing collections referenced (G4) */
    uint32_t num_collections;
};

#endif
