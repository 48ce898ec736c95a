/* compile_sodb.h - compiling a whole SODB into a PSDB with the reference compiler (`psdb compile`,
 * the tests and the benchmarks). Tool-side: libpsdb only compiles one unit at a time. */
#ifndef PSDB_BUILD_COMPILE_SODB_H
#define PSDB_BUILD_COMPILE_SODB_H

#include "driver/compiler.h"

/* ---- Compiling a whole SODB (`psdb compile`, benchmarks) ------------------------------------- */

typedef struct psdb__compile_stats {
    uint64_t pipelines; /* entries compiled into groups */
    uint64_t compute, graphics, state_objects;
    uint64_t skipped;        /* entries whose object key was already compiled at another version */
    uint64_t units;          /* units over all entries (with repeats) */
    uint64_t units_compiled; /* distinct units compiled (each gives two values) */
    uint64_t code_bytes;     /* input bytes of the units compiled */
    double seconds;          /* wall time of the whole compile, file written */
} psdb__compile_stats;

/* Compiles every entry of the SODB at sodb_path into a new PSDB at out_path whose identity is the
 * SODB's and whose target is *t. Each distinct unit is compiled once and put as two values
 * (OBJECT_CODE, METADATA); each entry becomes one group (object key, entry version, its units'
 * keys in plan order). An object key recorded at several versions is compiled at the first one
 * (a PSDB holds one version per group key); the others are counted in `skipped`. ns_per_kib as
 * psdb__compile_unit. On failure, out_path is left as it was and `err` (may be NULL) receives one
 * line naming the entry. Statuses: PSDB_E_INVALIDARG (NULL paths or target, invalid target), the
 * SODB's (psdb_sodb_open / foreach: PSDB_E_IO, PSDB_E_CACHE_CORRUPT), PSDB_E_CACHE_CORRUPT for an
 * entry that does not decode or whose key does not match, PSDB_E_INVALIDARG for an entry the
 * planner rejects, the writer's. stats may be NULL. */
psdb_hr psdb__compile_sodb(const char *sodb_path, const psdb_target *t, uint64_t ns_per_kib,
                           const char *out_path, psdb__compile_stats *stats, char *err,
                           size_t err_size);

#endif
