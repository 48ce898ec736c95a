/* pipeline_library.h - helpers the pipeline library shares with serialized and derived PSOs:
 * a pipeline's plan and compiled values, and the library's internal counters. */
#ifndef PSDB_PIPELINE_LIBRARY_INTERNAL_H
#define PSDB_PIPELINE_LIBRARY_INTERNAL_H

#include "common/hash.h"
#include "runtime/pipeline.h"

/* The format constants of schema/PIPELINE_LIBRARY.md. */
#define PSDB__PLIB_MAGIC "PSDBPLIB"
#define PSDB__PLIB_VERSION 1u
#define PSDB__PLIB_HEADER_SIZE 96u
#define PSDB__PLIB_ENTRY_SIZE 56u
#define PSDB__PLIB_BLOB_SIZE 64u
#define PSDB__PLIB_KIND_COMPUTE 1u
#define PSDB__PLIB_KIND_GRAPHICS 2u

/* Internal counters of a library, for tests and benchmarks: named PSOs and distinct compiled
 * units (each unit's values are held once, L8). */
void psdb__pipeline_library_counts(psdb_pipeline_library *lib, size_t *entries, size_t *blobs);

#endif
