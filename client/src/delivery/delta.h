/* delta.h - value-level delta updates (delta.c) and the value map file they read
 * (valuemap_file.c; the format: schema/VALUEMAP.md).
 *
 * DESIGN
 * A PSDB's values are content-addressed, so a launcher that holds an older PSDB of the game
 * already holds most values of the newer one. The server serves, beside each blob, its value map:
 * for every value its SHA-256 and the byte ranges of the file that hold it, then the skeleton (all
 * other bytes). The client rebuilds <dest>.part from the skeleton, the values it finds in its old
 * PSDBs and the ranges of the new blob it fetches for the rest, then hashes the whole file and
 * accepts it only when it matches the manifest, whose signature was checked first: the trust chain
 * is the full download's. Anything unexpected (no map, a map that does not fit, a local file that
 * changed, a mismatch) falls back to the full download. Memory stays bounded: the map is streamed
 * from a file, values are copied through one buffer, only the table of local values (56 bytes
 * each) and the range list are held. */
#ifndef PSDB_DELTA_H
#define PSDB_DELTA_H

#include "delivery/client_int.h"

#define PSDB__VMAP_MAGIC "PSDBVMAP"
#define PSDB__VMAP_VERSION 1u
#define PSDB__VMAP_HEADER_SIZE 96
#define PSDB__VMAP_VALUE_SIZE 56
#define PSDB__VMAP_RANGE_SIZE 16

/* Version 2 (schema/VALUEMAP.md): the keys in a table of their own, the file as a recipe of
 * skeleton runs, keys and value parts, three zlib streams. What psdb_client_install reads. */
#define PSDB__VMAP2_VERSION 2u
#define PSDB__VMAP2_HEADER_SIZE 128
#define PSDB__VMAP2_TAG_SKELETON 0u /* arg: run length */
#define PSDB__VMAP2_TAG_KEY 1u      /* arg: 0 the next new key, else an earlier key's id + 1 */
#define PSDB__VMAP2_TAG_VALUE 2u    /* arg: zigzag value index delta; then offset, length */

/* Writes the version 2 map of psdb_path to out_path (valuemap_v2_file.c). */
psdb_hr psdb__value_map_write_v2(const char *psdb_path, const char *out_path);

/* What a delta attempt did (also for psdb_install_result). */
typedef struct psdb__delta_outcome {
    int used;            /* 1: the file was rebuilt from the delta */
    uint64_t downloaded; /* bytes fetched for the delta (map and ranges), 0 when unused */
    char why_not[160];   /* when not used: why the full download was chosen */
} psdb__delta_outcome;

/* Tries to produce dest_path from old_path (an installed PSDB of the same application and
 * family) and the blob's value map. PSDB_S_OK: dest_path is the manifest's verified file. Any
 * other status: nothing changed at dest_path, out->why_not says why, and the caller downloads in
 * full (PSDB_E_CANCELLED is the one status to pass on as it is). */
psdb_hr psdb__client_delta(psdb_client *c, const psdb_manifest *m, const char *old_path,
                           const char *dest_path, psdb__delta_outcome *out);

#endif
