/* desc.h - the byte encoding of pipeline descriptions (schema/SODB.md): encode for capture and
 * keys, decode for `psdb compile`. The PSDB subobject is never encoded (sessions are run-time
 * handles). */
#ifndef PSDB_DESC_H
#define PSDB_DESC_H

#include "psdb/psdb.h"
#include "common/buf.h"
#include "common/hash.h"

/* Encoding version written after each description's magic; decoders reject every other one. */
#define PSDB__DESC_VERSION 1u

/* Encoders: *out is overwritten with a new buffer (pass a zeroed psdb__buf; the caller frees it
 * with psdb__buf_free). The same description always gives the same bytes: booleans are written as
 * 0/1, floats as their IEEE-754 bits.
 *   PSDB_E_INVALIDARG   d or out NULL; a byte string longer than 0xFFFFFFFE bytes; a pointer NULL
 *                       with a non-zero count (bytecode, elements, strides, exports); an unknown
 *                       state subobject type; an existing collection whose key is unavailable;
 *   PSDB_E_OUTOFMEMORY.
 * Encoders only read the description; they are thread-safe on distinct outputs. */
psdb_hr psdb__desc_encode_compute(const psdb_compute_pipeline_desc *d, psdb__buf *out);
psdb_hr psdb__desc_encode_graphics(const psdb_graphics_pipeline_desc *d, psdb__buf *out);
/* Existing collections are encoded by their object key; the callback gives it (non-zero return:
 * unavailable -> PSDB_E_INVALIDARG). collection_key may be NULL when no collection is present. */
psdb_hr psdb__desc_encode_state_object(const psdb_state_object_desc *d,
                                       int (*collection_key)(psdb_state_object *so,
                                                             uint8_t key[32]),
                                       psdb__buf *out);

/* The encoding of d, a description of `kind` (PSDB_SODB_COMPUTE, _GRAPHICS, or _STATE_OBJECT
 * without existing collections), into b's storage: b's bytes are replaced and its capacity is kept,
 * so one buffer serves every encoding of a loop (pass a zeroed buffer the first time; the caller
 * frees it). Statuses as the encoders above, and PSDB_E_INVALIDARG for another kind; on failure
 * b holds no bytes (and keeps its storage). */
psdb_hr psdb__desc_encode_into(uint32_t kind, const void *d, psdb__buf *b);

/* Encodes with every shader / library bytecode replaced by its size and SHA-256 (schema/SODB.md,
 * "state blobs"). Not decodable: it is the pipeline-state input of the reference compiler's
 * PIPELINE / STATE_OBJECT units, whose cost must not grow with the bytecode. */
psdb_hr psdb__desc_encode_graphics_state(const psdb_graphics_pipeline_desc *d, psdb__buf *out);
psdb_hr psdb__desc_encode_compute_state(const psdb_compute_pipeline_desc *d, psdb__buf *out);
psdb_hr psdb__desc_encode_state_object_state(const psdb_state_object_desc *d,
                                             int (*collection_key)(psdb_state_object *so,
                                                                   uint8_t key[32]),
                                             psdb__buf *out);

/* Decoding returns one malloc'd block holding the description and everything it points to; free()
 * releases it. PSDB_E_CACHE_CORRUPT on malformed bytes (wrong magic or version, non-zero reserved
 * field, boolean other than 0/1, string with an embedded NUL, a length or count past the end,
 * trailing bytes); PSDB_E_INVALIDARG when data (with size > 0) or out is NULL;
 * PSDB_E_OUTOFMEMORY. The PSDB subobject of a decoded description is NULL (omitted). */
psdb_hr psdb__desc_decode_compute(const void *data, size_t size, psdb_compute_pipeline_desc **out);
psdb_hr psdb__desc_decode_graphics(const void *data, size_t size,
                                   psdb_graphics_pipeline_desc **out);
/* A decoded state object has no live collections: each existing collection's `collection` handle
 * points at its 32-byte object key inside the block. Pass psdb__desc_decoded_collection_key as the
 * collection_key callback to re-encode or plan it; never call psdb_state_object_* on it. */
psdb_hr psdb__desc_decode_state_object(const void *data, size_t size, psdb_state_object_desc **out);
int psdb__desc_decoded_collection_key(psdb_state_object *so, uint8_t key[32]);

/* Append the SODB encoding of one part (schema/SODB.md) to b: the value-key derivation of the
 * reference compiler covers exactly these bytes. PSDB_E_INVALIDARG on a NULL array with a count or
 * a string too long; PSDB_E_OUTOFMEMORY. */
psdb_hr psdb__desc_append_input_layout(psdb__buf *b, const psdb_input_layout_desc *il);
psdb_hr psdb__desc_append_stream_output(psdb__buf *b, const psdb_stream_output_desc *so);

/* The SODB kind (PSDB_SODB_COMPUTE / _GRAPHICS / _STATE_OBJECT) named by an encoding's magic, or 0
 * when the bytes carry none of the three. */
uint32_t psdb__desc_kind(const void *data, size_t size);

#endif
