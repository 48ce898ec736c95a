/* compile_sodb.h - psdb_sodb_compile (psdb/sodb.h, what `psdb compile` runs) with its error line
 * in a caller's buffer: the form the unit tests and the benchmarks call it in. */
#ifndef PSDB_BUILD_COMPILE_SODB_H
#define PSDB_BUILD_COMPILE_SODB_H

#include <stddef.h>
#include <stdint.h>

#include "psdb/psdb.h"

typedef psdb_sodb_compile_stats psdb__compile_stats;

/* psdb_sodb_compile of sodb_path for *t with the simulated cost ns_per_kib into out_path. On
 * failure `err` (may be NULL) receives psdb_error_last()'s line, which names the entry, the path
 * or the step. Statuses those of psdb_sodb_compile; stats may be NULL. */
psdb_hr psdb__compile_sodb(const char *sodb_path, const psdb_target *t, uint64_t ns_per_kib,
                           const char *out_path, psdb__compile_stats *stats, char *err,
                           size_t err_size);

#endif
