/* driver.h - the driver interface: the seam a compiler backend plugs into.
 *
 * DESIGN
 * The runtime never calls a compiler directly: it plans a creation into units (what must be
 * compiled, each with its 32-byte value key) and compiles the units a PSDB does not hold, through
 * the struct of function pointers its device holds (psdb_device.driver). psdb ships one driver,
 * the reference compiler (driver/planner.c, codegen.c, reference.c; schema/COMPILER.md):
 * deterministic simulated object code and metadata, so PSDBs built by `psdb compile` hit exactly. A
 * real backend (a Vulkan driver's pipeline compiler, say) provides its own psdb__driver: it must
 * plan exactly as the backend whose PSDBs the device reads (value keys are the contract between a
 * PSDB and the driver), keep every function thread-safe (a device is shared by threads), and return
 * the statuses documented on psdb__compile_unit and the planners in driver/compiler.h. Plans are
 * driver-neutral data (psdb__plan) and are freed with psdb__plan_free whichever driver made them.
 * The model's D3D semantics that do not depend on a compiler (export types, pipeline-state
 * streams) stay plain functions of compiler.h. */
#ifndef PSDB_DRIVER_H
#define PSDB_DRIVER_H

#include "driver/compiler.h"

typedef struct psdb__driver {
    const char *name; /* for messages: "reference" */
    psdb_hr (*plan_compute)(const psdb_compute_pipeline_desc *d, psdb__plan *out);
    psdb_hr (*plan_graphics)(const psdb_graphics_pipeline_desc *d, psdb__plan *out);
    psdb_hr (*plan_state_object)(const psdb_state_object_desc *d,
                                 int (*collection_key)(psdb_state_object *so, uint8_t key[32]),
                                 psdb__plan *out);
    psdb_hr (*plan_encoded)(uint32_t kind, const void *data, size_t size, psdb__plan *out);
    psdb_hr (*compile_unit)(const psdb__unit *u, const psdb_target *t, uint64_t ns_per_kib,
                            psdb__buf *object_code, psdb__buf *metadata);
} psdb__driver;

/* The reference compiler as a driver; every device uses it today. */
extern const psdb__driver psdb__reference_driver;

#endif
