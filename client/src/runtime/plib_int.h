/* plib_int.h - what the pipeline library's two files share (pipeline_library.c: the library,
 * store and load; plib_blob.c: parsing and writing its blob). The pipeline library (MODEL L, G2):
 * named PSOs whose compiled units are held once, serialized into one blob
 * (schema/PIPELINE_LIBRARY.md) and loaded back by name.
 *
 * DESIGN
 * A library entry is a name, a kind, the group key of the PSO's description (what a load's
 * description must match, L7) and the list of its compile units, each an index into one table of
 * blobs keyed by unit key: PSOs with identical sub-components share the blob (L8). A library
 * parsed from a blob points into the caller's bytes (L2: validated, not copied); a stored PSO adds
 * owned blobs. The reference driver's PSO does not retain its compiled values; the reference
 * compiler is deterministic, so a store regenerates the identical bytes at no simulated cost.
 * A load that creates a PSO is a creation like any other (G2): it selects a PSDB with the load
 * description's subobject and looks every unit up there; a unit the PSDB misses is taken from the
 * library's blobs instead of being compiled. The created PSO stays in the entry: later loads return
 * it (with its original selection), as they return a stored PSO.
 * One mutex guards the tables. Creation runs outside it; two loads of the same name racing (which
 * the seed leaves to the caller) still end with one PSO in the entry, the loser's being dropped. */
#ifndef PSDB_PLIB_INT_H
#define PSDB_PLIB_INT_H

#include <pthread.h>

#include "runtime/pipeline_library.h"

typedef struct plib_blob {
    uint8_t key[PSDB__KEY_SIZE];
    const uint8_t *code, *meta; /* into the caller's blob, or into `owned` */
    size_t code_size, meta_size;
    uint8_t *owned;
} plib_blob;

typedef struct plib_entry {
    const char *name; /* into the caller's blob (not NUL-terminated), or owned_name */
    size_t name_len;
    char *owned_name;
    uint32_t kind; /* PSDB__PLIB_KIND_* */
    uint8_t group_key[PSDB__KEY_SIZE];
    uint32_t *units; /* blob indices */
    uint32_t num_units;
    psdb_pipeline *pso; /* stored or created by a load; referenced */
} plib_entry;

/* An open-addressing index: slots hold an array index + 1 (0: empty); capacity a power of two at
 * least twice the count, so probes stay short and always end. */
typedef struct plib_index {
    uint32_t *slots;
    size_t cap;
} plib_index;

struct psdb_pipeline_library {
    psdb_device *dev; /* referenced */
    pthread_mutex_t lock;
    plib_entry *entries;
    size_t num_entries, cap_entries;
    plib_blob *blobs;
    size_t num_blobs, cap_blobs;
    plib_index names, keys; /* entries by name, blobs by unit key */
};

int psdb__plib_find_entry(const psdb_pipeline_library *lib, const char *name, size_t len,
                          size_t *at);
int psdb__plib_find_blob(const psdb_pipeline_library *lib, const uint8_t key[PSDB__KEY_SIZE],
                         uint32_t *at);
psdb_hr psdb__plib_index_entry(psdb_pipeline_library *lib);
psdb_hr psdb__plib_index_blob(psdb_pipeline_library *lib);

#endif
