/* desc.h - the byte encoding of pipeline descriptions (schema/SODB.md): encode for capture and
 * keys, decode for `psdb compile`. The PSDB subobject is never encoded (sessions are run-time
 * handles). */
#ifndef PSDB_DESC_H
#define PSDB_DESC_H

#include "psdb/psdb.h"
#include "util.h"

psdb_hr psdb__desc_encode_compute(const psdb_compute_pipeline_desc *d, psdb__buf *out);
psdb_hr psdb__desc_encode_graphics(const psdb_graphics_pipeline_desc *d, psdb__buf *out);
/* Existing collections are encoded by their object key; the callback gives it. */
psdb_hr psdb__desc_encode_state_object(const psdb_state_object_desc *d,
                                       int (*collection_key)(psdb_state_object *so,
                                                             uint8_t key[32]),
                                       psdb__buf *out);

/* Decoding returns one malloc'd block holding the description and everything it points to; free()
 * releases it. PSDB_E_CACHE_CORRUPT on malformed bytes (every length bounds-checked). */
psdb_hr psdb__desc_decode_compute(const void *data, size_t size, psdb_compute_pipeline_desc **out);
psdb_hr psdb__desc_decode_graphics(const void *data, size_t size,
                                   psdb_graphics_pipeline_desc **out);

#endif
