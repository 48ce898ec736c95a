/* derivation.h - the derivation-record format (schema/PIPELINE_LIBRARY.md, "Derivation records"):
 * its constants and state encodings, shared by the reader in libpsdb and the tool's writer. */
#ifndef PSDB_FORMAT_DERIVATION_H
#define PSDB_FORMAT_DERIVATION_H

#include <stdint.h>

#include "psdb/psdb.h"

#define PSDB__DRV_MAGIC "PSDBDRVR"
#define PSDB__DRV_VERSION 1u
#define PSDB__DRV_HEADER_SIZE 32u
/* The largest state encoding (blend), in 32-bit words. */
#define PSDB__DRV_MAX_STATE_WORDS 82u

/* Words of each derivable state type's encoding (depth-stencil, rasterizer, blend, sample mask,
 * shader limits). */
extern const uint32_t psdb__derivation_state_word_count[5];

/* Encodes state `type` of d as psdb__derivation_state_word_count[type] words into w. */
void psdb__derivation_state_words(const psdb_graphics_pipeline_desc *d, uint32_t type, uint32_t *w);

#endif
