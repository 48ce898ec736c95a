/* pipeline.h - the pipeline and state-object handles, for the modules that create or reuse them
 * (pipeline.c, state_object.c, and the pipeline library, serialized and derived PSOs). */
#ifndef PSDB_PIPELINE_INTERNAL_H
#define PSDB_PIPELINE_INTERNAL_H

#include "device.h"

struct psdb_pipeline {
    atomic_uint refs;
    psdb_device *dev; /* referenced */
    int is_compute;
    uint8_t group_key[32];   /* SHA-256 of the encoded description (the SODB object key) */
    psdb_creation_info info; /* fixed at creation */
    psdb__association assoc; /* what later object-associated lookups search (I3-I5) */
};

struct psdb_state_object {
    atomic_uint refs;
    psdb_device *dev; /* referenced */
    uint32_t type;    /* psdb_state_object_type */
    uint8_t group_key[32];
    psdb_creation_info info;
    psdb__association assoc;
    psdb_state_object *base; /* AddToStateObject: the generation grown from (referenced) */
    psdb_state_object **collections; /* existing collections referenced (G4) */
    uint32_t num_collections;
};

#endif
