/* compiler.h - the reference compiler (driver model): plans and compiles pipelines into PSDB
 * values.
 *
 * DESIGN
 * A creation is split into compile units: one per present shader stage and one for the pipeline
 * state itself (for state objects: one per DXIL library and one for the object). Each unit has a
 * 32-byte value key derived from its bytecode and the state that changes its code (so units shared
 * by many pipelines share keys, as real drivers' shader keys do), and yields exactly two values
 * under that key: PSDB_VALUE_OBJECT_CODE and PSDB_VALUE_METADATA. Planning is cheap (hashing only);
 * compiling costs time proportional to the bytecode size (the simulated local compile that a PSDB
 * hit saves) and is deterministic: the same unit and target give the same bytes.
 *
 * The keys are a format: `psdb compile` derives them from an SODB at build time and the device
 * derives them again at creation time; a PSDB compiled from a capture is a full hit when the same
 * creations are replayed only because both sides call these functions. schema/COMPILER.md is the
 * normative description; in short, key = SHA-256 of:
 *   "psdb.unit.v1" (12 ASCII bytes) | u32 kind | per kind:
 *   VS, PS, DS, HS, GS, CS: u32 len + bytecode | u32 len + root signature | stage state:
 *     VS   input layout (SODB encoding: u32 count, elements);
 *     the last pre-rasterization stage (GS, else DS, else VS): u32 1 + the stream output (SODB
 *     encoding); the other VS / DS / GS: u32 0;
 *     PS   8 x (u32 export type, u32 component mask) from psdb__export_types (MODEL V3),
 *          u32 alpha-to-coverage (0/1), u32 sample count (0 read as 1);
 *   LIBRARY: u32 len + library bytecode | u32 len + global root signature (0 when none) |
 *            u32 number of exports | each export name as u32 len + bytes;
 *   PIPELINE, STATE_OBJECT: the 32-byte group key (so they cover the whole encoded description).
 * Integers are little-endian. The group key of a creation is the SHA-256 of its SODB encoding
 * (desc.h, schema/SODB.md), which is also the SODB object key. */
#ifndef PSDB_COMPILER_H
#define PSDB_COMPILER_H

#include "psdb/psdb.h"
#include "common/buf.h"
#include "common/hash.h"

/* The simulated compile cost, PSDB_COMPILE_NS_PER_KIB_DEFAULT and PSDB_COMPILE_COST_FREE, is
 * public (psdb/types.h). */

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

/* Component mask bits of an export. */
#define PSDB__COMP_R 1u
#define PSDB__COMP_G 2u
#define PSDB__COMP_B 4u
#define PSDB__COMP_A 8u

typedef struct psdb__export {
    uint32_t type;       /* psdb__export_type */
    uint32_t components; /* bit mask of exported components, R=1 G=2 B=4 A=8; 0 with NONE */
} psdb__export;

typedef struct psdb__unit {
    uint32_t kind; /* psdb__unit_kind */
    uint8_t key[PSDB__KEY_SIZE];
    const uint8_t *code; /* borrowed from the description (bytecode; the state blob for PIPELINE) */
    size_t code_size;
    psdb__export exports[PSDB_MAX_RENDER_TARGETS]; /* PS units: what the export patch writes */
} psdb__unit;

typedef struct psdb__plan {
    uint8_t group_key[PSDB__KEY_SIZE]; /* the object key: SHA-256 of the encoded description */
    uint32_t num_units;
    psdb__unit *units; /* owned */
    psdb__buf state;   /* owned bytes that PIPELINE / STATE_OBJECT units point into */
    void *decoded;     /* owned decoded description (psdb__plan_encoded), freed with the plan */
    psdb__buf desc;    /* owned: the encoded description the group key hashes (SODB encoding) */
} psdb__plan;

/* Plans a creation: validates the description, derives the group key and every unit's key.
 * Units are listed stages first (VS PS DS HS GS order, or CS, or libraries in subobject order),
 * the PIPELINE / STATE_OBJECT unit last. *out is overwritten; on failure it is left empty (safe to
 * pass to psdb__plan_free). The plan borrows the description's bytecode: keep the description
 * alive while the plan is used.
 *   PSDB_E_INVALIDARG   d or out NULL; root signature missing or empty; compute without CS;
 *                       graphics without VS; a stage with a NULL code pointer and a size or with a
 *                       pointer and size 0; HS without DS or DS without HS; num_render_targets > 8;
 *                       an RTV format at index >= num_render_targets, or a depth / unknown format
 *                       in an RTV slot; ps_outputs components > 4 or an unknown component type;
 *                       an input element or SO entry without a semantic name or a NULL array with a
 *                       count; state objects: unknown object or subobject type, a library without
 *                       bytecode or with a NULL export name, a hit group without name, more than
 *                       one global root signature, an existing collection whose key is unknown;
 *   PSDB_E_OUTOFMEMORY.
 * Thread-safe (reads only the description). */
psdb_hr psdb__plan_compute(const psdb_compute_pipeline_desc *d, psdb__plan *out);
psdb_hr psdb__plan_graphics(const psdb_graphics_pipeline_desc *d, psdb__plan *out);
/* Existing collections are named by their object key (collection_key as in desc.h). Without the
 * callback a state object holding an existing collection is PSDB_E_INVALIDARG. */
psdb_hr psdb__plan_state_object_ex(const psdb_state_object_desc *d,
                                   int (*collection_key)(psdb_state_object *so, uint8_t key[32]),
                                   psdb__plan *out);
psdb_hr psdb__plan_state_object(const psdb_state_object_desc *d, psdb__plan *out);
/* Plans an SODB entry from its encoded bytes (kind: PSDB_SODB_*). The plan keeps its own copy of
 * what it borrows, so `data` may go away. PSDB_E_CACHE_CORRUPT when the bytes do not decode as
 * `kind`; otherwise as the planners above. */
psdb_hr psdb__plan_encoded(uint32_t kind, const void *data, size_t size, psdb__plan *out);
/* Releases what a plan owns and empties it. NULL is a no-op. */
void psdb__plan_free(psdb__plan *p);

/* Compiles one unit for a target: object code and metadata (schema/COMPILER.md). Both buffers are
 * overwritten (pass zeroed ones; the caller frees them). Busy-works for ns_per_kib * code_size /
 * 1024 nanoseconds on the monotonic clock (0: PSDB_COMPILE_NS_PER_KIB_DEFAULT,
 * PSDB_COMPILE_COST_FREE: no cost). Deterministic: the same unit and target (family, ABI,
 * compiler version) give the same bytes.
 *   PSDB_E_INVALIDARG  a NULL argument, a target without family or a family of
 *                      PSDB_ADAPTER_FAMILY_MAX bytes or more, unknown unit kind;
 *   PSDB_E_OUTOFMEMORY. Thread-safe. */
psdb_hr psdb__compile_unit(const psdb__unit *u, const psdb_target *t, uint64_t ns_per_kib,
                           psdb__buf *object_code, psdb__buf *metadata);
/* Number of psdb__compile_unit calls made on the calling thread so far. A creation compiles on
 * the thread that calls it, so the difference across one creation call says whether that creation
 * compiled locally, whatever other threads compile meanwhile (the queue's K1 counters). */
uint64_t psdb__compile_count_on_thread(void);

/* Computes the export of each render target (MODEL V3) from the render-target formats, what the
 * shader writes (ps_outputs), write masks, alpha-to-coverage and blend state:
 *  - target i is NONE when i >= num_render_targets, its format is UNKNOWN or not a colour format,
 *    the PS is absent or writes nothing to it, or no component survives the rules below;
 *  - type: the smallest of the 16/32-bit uint/sint/unorm/snorm/float exports whose precision is
 *    at least the format's: unorm formats -> UNORM16, snorm -> SNORM16, uint/sint of <= 16 bits ->
 *    UINT16/SINT16, 32 bits -> UINT32/SINT32, float of <= 16 bits (R11G11B10 included) ->
 *    FLOAT16, 32 bits -> FLOAT32. Blending enabled on a unorm/snorm/float target forces FLOAT16
 *    (formats of <= 16 bits per channel) or FLOAT32; blending on an integer target is ignored
 *    (D3D12 does not blend integer targets). With independent blend off, render_target[0]'s
 *    blend and write mask apply to every target;
 *  - components = written (ps_outputs[i].components first channels) & the format's channels &
 *    the write mask (0 reads as ALL); plus alpha, when the shader writes it, if the target's
 *    blending uses source alpha (SRC_ALPHA, INV_SRC_ALPHA or SRC_ALPHA_SAT in any of the four
 *    factors) or, for target 0, alpha-to-coverage is on.
 * d NULL: every export NONE. Thread-safe. */
void psdb__export_types(const psdb_graphics_pipeline_desc *d,
                        psdb__export out[PSDB_MAX_RENDER_TARGETS]);

/* Converts a pipeline-state stream into a compute or graphics description (is_compute set
 * accordingly; the other description is zeroed). The output points into the stream's memory.
 * Subobjects that are absent take these values: sample mask 0xFFFFFFFF, sample count 1, every
 * other field zero (blend off, write mask 0 = ALL, solid fill, back culling). A compute stream
 * ignores graphics fixed-function subobjects, as D3D12 does.
 *   PSDB_E_INVALIDARG  an argument NULL, subobjects NULL with a count, a subobject with NULL data,
 *                      an unknown subobject type, a type present twice, CS together with a
 *                      graphics stage (VS PS DS HS GS).
 * The descriptions are not validated further: plan them. Thread-safe. */
psdb_hr psdb__stream_to_desc(const psdb_pipeline_stream_desc *s, int *is_compute,
                             psdb_compute_pipeline_desc *cd, psdb_graphics_pipeline_desc *gd);

#endif
