/* delta.h - value-level delta updates (delta.c; the value map they read: format/valuemap.h,
 * schema/VALUEMAP.md).
 *
 * DESIGN
 * A PSDB's values are content-addressed, so a launcher that holds an older PSDB of the game (or
 * another game's PSDB for the same adapter family) already holds most values of the newer one.
 * The server serves, beside each blob, its value map: every value's SHA-256 and where its bytes
 * lie in the file, then the skeleton (all other bytes). The client rebuilds <dest>.delta from the
 * skeleton, the values it finds in its sources and the ranges of the new blob it fetches for the
 * rest, hashing the file as it writes it, and accepts it only when it matches the manifest, whose
 * signature was checked first: the trust chain is the full download's. Anything unexpected (no
 * map, a map that does not fit, a local file that changed, a mismatch) falls back to the full
 * download. Memory stays bounded: the map is streamed from a file, values are copied through one
 * buffer, and only per-value tables (tens of bytes a value) and the range list are held. */
#ifndef PSDB_DELTA_H
#define PSDB_DELTA_H

#include "delivery/client_int.h"
#include "format/valuemap.h"

/* What a delta attempt did (also for psdb_install_result). */
typedef struct psdb__delta_outcome {
    int used;            /* 1: the file was rebuilt from the delta */
    uint64_t downloaded; /* bytes fetched for the delta (map and ranges), 0 when unused */
    uint32_t sources;    /* sources that held at least one value of the new file */
    uint64_t resumed;    /* bytes of the new file kept from an interrupted attempt */
    int map_reused;      /* the map came from an interrupted attempt, not the server */
    char why_not[160];   /* when not used: why the full download was chosen */
} psdb__delta_outcome;

/* Tries to produce dest_path from the sources (installed PSDBs of the same family, the one of the
 * same application first) and the blob's value map. PSDB_S_OK: dest_path is the manifest's
 * verified file. PSDB_E_CANCELLED: the progress callback stopped it; <dest>.delta and
 * <dest>.valuemap are kept, and the next call takes them up (the output from its last recipe
 * entry, re-hashed; the map when it is whole and describes this PSDB). Any other status: nothing
 * changed at dest_path and nothing is kept, out->why_not says why, and the caller downloads in
 * full. */
psdb_hr psdb__client_delta(psdb_client *c, const psdb_manifest *m, const char *const *sources,
                           size_t nsources, const char *dest_path, psdb__delta_outcome *out);

/* Checks a whole version 2 map in fd (map_size bytes) for a PSDB of file_size bytes and this
 * SHA-256, as an update does before it fetches anything: header, value table, recipe, skeleton.
 * PSDB_S_OK, PSDB_E_INTEGRITY (why says what is wrong) or PSDB_E_OUTOFMEMORY. For the fuzzer. */
psdb_hr psdb__delta_check_map(int fd, uint64_t map_size, uint64_t file_size,
                              const uint8_t sha256[32], char why[160]);

#endif
