/* compiler.h - the reference compiler (driver model): plans and compiles pipelines into PSDB values.
 *
 * DESIGN
 * A creation is split into compile units: one per present shader stage and one for the pipeline
 * state itself (for state objects: one per DXIL library and one for the object). Each unit has a
 * 32-byte value key derived from its bytecode and the state that changes its code (so units shared
 * by many pipelines share keys, as real drivers' shader keys do), and yields exactly two values
 * under that key: PSDB_VALUE_OBJECT_CODE and PSDB_VALUE_METADATA. Planning is cheap (hashing only);
 * compiling costs time proportional to the bytecode size (the simulated local compile that a PSDB
 * hit saves) and is deterministic: the same unit and target give the same bytes. */
#ifndef PSDB_COMPILER_H
#define PSDB_COMPILER_H

#include "psdb/psdb.h"
#include "util.h"

/* Default simulated compile cost per KiB of bytecode. */
#define PSDB_COMPILE_NS_PER_KIB_DEFAULT 200000ull /* 0.2 ms per KiB */

#define PSDB__KEY_SIZE 32

typedef enum psdb__unit_kind {
    PSDB__UNIT_VS = 0,
    PSDB__UNIT_PS = 1,
    PSDB__UNIT_DS = 2,
    PSDB__UNIT_HS = 3,
    PSDB__UNIT_GS = 4,
    PSDB__UNIT_CS = 5,
    PSDB__UNIT_PIPELINE = 6, /* graphics / compute pipeline state */
    PSDB__UNIT_LIBRARY = 7,  /* DXIL library of a state object */
    PSDB__UNIT_STATE_OBJECT = 8
} psdb__unit_kind;

typedef struct psdb__unit {
    uint32_t kind; /* psdb__unit_kind */
    uint8_t key[PSDB__KEY_SIZE];
    const uint8_t *code; /* borrowed from the description (bytecode; the state blob for PIPELINE) */
    size_t code_size;
} psdb__unit;

typedef struct psdb__plan {
    uint8_t group_key[PSDB__KEY_SIZE]; /* the object key: SHA-256 of the encoded description */
    uint32_t num_units;
    psdb__unit *units; /* owned */
    psdb__buf state;   /* owned bytes that PIPELINE / STATE_OBJECT units point into */
} psdb__plan;

/* Plans a creation. Validates the description (E_INVALIDARG: missing root signature or required
 * stage, empty bytecode, bad render-target count or format, unknown stream subobject). */
psdb_hr psdb__plan_compute(const psdb_compute_pipeline_desc *d, psdb__plan *out);
psdb_hr psdb__plan_graphics(const psdb_graphics_pipeline_desc *d, psdb__plan *out);
psdb_hr psdb__plan_state_object(const psdb_state_object_desc *d, psdb__plan *out);
void psdb__plan_free(psdb__plan *p);

/* Compiles one unit for a target: object code and metadata (malloc'd, the caller frees). Busy-works
 * for ns_per_kib * code_size / 1024 nanoseconds (UINT64_MAX: no cost, 0: the default). */
psdb_hr psdb__compile_unit(const psdb__unit *u, const psdb_target *t, uint64_t ns_per_kib,
                           psdb__buf *object_code, psdb__buf *metadata);

/* Export types chosen per render target (MODEL V3). */
typedef enum psdb__export_type {
    PSDB__EXPORT_NONE = 0,
    PSDB__EXPORT_UNORM16,
    PSDB__EXPORT_SNORM16,
    PSDB__EXPORT_UINT16,
    PSDB__EXPORT_SINT16,
    PSDB__EXPORT_FLOAT16,
    PSDB__EXPORT_UINT32,
    PSDB__EXPORT_SINT32,
    PSDB__EXPORT_FLOAT32
} psdb__export_type;

typedef struct psdb__export {
    uint32_t type;       /* psdb__export_type */
    uint32_t components; /* bit mask of exported components, R=1 G=2 B=4 A=8 */
} psdb__export;

/* Computes the export of each render target from the render-target formats, what the shader
 * writes (ps_outputs), write masks, alpha-to-coverage and blend state. */
void psdb__export_types(const psdb_graphics_pipeline_desc *d,
                        psdb__export out[PSDB_MAX_RENDER_TARGETS]);

/* Converts a pipeline-state stream into a compute or graphics description (is_compute set
 * accordingly). The output points into the stream's memory. */
psdb_hr psdb__stream_to_desc(const psdb_pipeline_stream_desc *s, int *is_compute,
                             psdb_compute_pipeline_desc *cd, psdb_graphics_pipeline_desc *gd);

#endif
